"""`std.quant`'s linears on PyTorch: native kernels on the packed bytes, else dequantised once.

Stage: kernels behind the `natives` finders for `std.quant::linear_int8` and
`std.quant::linear_int4_groups`, `linear_fp8` and `linear_mxfp4` (generated
code calls them as `natives.linear_int8` ...).

int8 rows and int4 groups, on the CPU, f32, without a gradient to record and
with at most `NATIVE_ROWS` rows of `x`: `linnet.native`'s kernels read the
packed weight itself (1 byte a weight plus a scale per row; half a byte plus
5 bytes per group), compute the std body's function within f32 reordering,
and keep no f32 copy of the weight. Batch-1 decoding reads every weight once
per token, so the bytes read set its speed (figures in `linnet/native`'s
`kernels.c` and bench/quant_kernels.py).

With `int8_activations` (`linnet.torch.load(..., int8_activations=True)`, which
sets `INT8_ACTIVATIONS` around each entry call) the same native path rounds each
row of `x` to int8 per block (the int4 group; for int8 rows the first of
`linnet.native.activations.INT8_BLOCKS` dividing `In`, none: the exact kernel)
and multiplies integers (`kernels.c`, "int8 activations"): llama.cpp's trade and
the function of ONNX Runtime's `MatMulNBits` at `accuracy_level=4`, which
`load_model(int8_activations=True)` runs. Where the native path does not run
(see below), the option changes nothing: the exact function runs.

`native_linear_f32` is the same plumbing for plain f32 weights
(`natives.linear_cpu` calls it for decode steps).

Otherwise (no compiler, a CPU without AVX2, `LINNET_NATIVE=0`, bf16, autograd, more rows, FP8,
MXFP4) each weight is dequantised once, exactly as the std body does it
(`f32(q) * scale`, or `(f32(q) - f32(zero)) * f32(scale)`, cast to `T`; FP8
and MXFP4 decoded with the body's integer arithmetic, so E4M3's NaN bytes read
+-480 as there), kept, and every call is `F.linear`. PyTorch's own CPU
weight-only kernels compute these functions (`aten._weight_int8pack_mm`:
`(x @ q^T) * scale`; `_weight_int4pack_mm_for_cpu` after a repack to its
`(q - 8) * s + z` form), but measured at batch 1 on a 5632 x 2048 weight here
they took 49-58 ms (int8) and 67-80 ms (int4) against 11-13 ms for
`F.linear` on the f32 weight.

The dequantised weight is cached per packed tensor (it goes with the model)
and recomputed when the packed tensor, its scale or zero points are replaced
or changed in place (their `_version`). Under autograd, with a scale
that requires a gradient, nothing is cached.
"""

from __future__ import annotations

import weakref
from contextvars import ContextVar

import torch
import torch.nn.functional as F

from linnet.native import Kernels, kernels
from linnet.native.activations import int8_block
from linnet.native.kernels import MANY

NATIVE_ROWS = 32
"""Most rows of `x` (the product of its leading dimensions) run by `linnet.native`.

Measured on a 5632 x 2048 weight, one thread (bench/quant_kernels.py --rows): the int4
kernel took 0.39 / 1.3 / 4.9 / 20 ms at 1 / 4 / 16 / 64 rows against 2.7 / 6.0 / 9.0 /
23 ms for `F.linear` on the dequantised f32 weight, the int8 kernel 0.91 / 2.1 / 6.9 /
26 ms: both ahead up to 16 rows and level near 64, so a longer prefill keeps `F.linear`
(and builds the dequantised copy)."""

F32_NATIVE_ROWS = 32
"""Most rows of `x` for the f32 kernel (`native_linear_f32`), whose contender is oneDNN on
the same f32 weight, not a dequantised copy. The kernel runs register tiles of up to
4 rows of x by 6 weight rows (each weight vector loaded once for the tile's rows), and a
row's result is bitwise the same alone or in a batch (same summation order), so a request's
greedy tokens do not depend on what else the engine is decoding. Measured
(an A/B of the library against oneDNN's `_linear_pointwise` in one process, two
threads, best of 5, load 1.2 with other work on the machine), kernel against oneDNN in ms:
5632 x 2048 at 1 / 4 / 8 / 16 / 32 rows 1.55 / 1.92 / 2.54 / 3.41 / 5.21 against 1.72 /
2.81 / 3.16 / 4.01 / 5.57; 2048 x 5632 1.37 / 1.92 / 2.20 / 3.31 / 4.79 against 1.87 /
2.94 / 2.82 / 3.92 / 5.53. One thread, 8 rows of 5632 x 2048: 4.18 ms against 4.57 (the
row-at-a-time loop before the tiles: 6.09, which is why the limit was 4 rows)."""

INT8_ACTIVATIONS: ContextVar[bool] = ContextVar("linnet_int8_activations", default=False)
"""Whether the native int8 and int4 linears round `x` to int8 (see the module docstring):
`LinnetModule` sets it to its `int8_activations` option for the length of each entry call,
so generated and interpreted entries read it without a new argument."""

_Key = tuple[int, ...]
_cache: dict[int, tuple[weakref.ref[torch.Tensor], _Key, torch.Tensor]] = {}
"""By `id` of the packed tensor (tensors compare elementwise, so they cannot be dict keys);
an entry goes when its tensor does."""


def _state(*tensors: torch.Tensor) -> _Key:
    return tuple(x for t in tensors for x in (id(t), t._version, t.data_ptr()))


def _cached(packed: torch.Tensor, parts: tuple[torch.Tensor, ...], make: object) -> torch.Tensor:
    assert callable(make)
    if torch.is_grad_enabled() and any(p.requires_grad for p in parts):
        weight: torch.Tensor = make()
        return weight
    key = _state(packed, *parts)
    found = _cache.get(id(packed))
    if found is not None and found[0]() is packed and found[1] == key:
        return found[2]
    with torch.no_grad():
        weight = make()
    if found is None or found[0]() is not packed:
        weakref.finalize(packed, _cache.pop, id(packed), None)
    _cache[id(packed)] = (weakref.ref(packed), key, weight)
    return weight


def dequantize_int8(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return (q.to(torch.float32) * scale.unsqueeze(-1)).to(dtype)


def dequantize_int4_groups(
    packed: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, dtype: torch.dtype
) -> torch.Tensor:
    rows, groups, half = packed.shape
    nibbles = torch.stack([packed & 15, packed >> 4], dim=-1).reshape(rows, groups, 2 * half)
    centred = nibbles.to(torch.float32) - zero.to(torch.float32).unsqueeze(-1)
    weight = centred * scale.to(torch.float32).unsqueeze(-1)
    return weight.reshape(rows, groups * 2 * half).to(dtype)


def _native_rows(x: torch.Tensor, *parts: torch.Tensor | None, limit: int | None = None) -> int:
    """Rows of `x` for the native kernels, or 0 where the dequantised path must run: not the
    CPU, not f32, a tensor subclass, a gradient to record, no rows or too many. (Written for
    speed: a decode step makes ~150 of these calls.)"""
    if type(x) is not torch.Tensor or not x.is_cpu or x.dtype is not torch.float32:
        return 0
    for t in parts:
        if t is not None and (type(t) is not torch.Tensor or not t.is_cpu):
            return 0
    if torch.is_grad_enabled() and (
        x.requires_grad or any(t is not None and t.requires_grad for t in parts)
    ):
        return 0
    into = x.shape[-1]
    rows = x.numel() // into if into else 0
    return rows if 0 < rows <= (NATIVE_ROWS if limit is None else limit) else 0


def _vector_kernels() -> Kernels | None:
    """The kernels when they were built with vector code (AVX-512 or AVX2): the portable
    scalar loops (another CPU family) were never measured against oneDNN and MKL, so there
    the dequantised path and oneDNN stay."""
    found = kernels()
    return found if found is not None and found.path != "scalar" else None


def _address(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def native_linear_f32(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor | None:
    """`F.linear` on `linnet.native`'s f32 kernel for up to `F32_NATIVE_ROWS` rows of `x` (f32,
    CPU, no gradient, a contiguous weight), else None: `natives.linear_cpu` uses it for
    decode steps (see there for the measurement)."""
    rows = _native_rows(x, weight, bias, limit=F32_NATIVE_ROWS)
    native = _vector_kernels() if rows else None
    if (
        native is None
        or weight.dtype is not torch.float32
        or not weight.is_contiguous()
        or (bias is not None and bias.dtype is not torch.float32)
    ):
        return None
    out, into = weight.shape
    x = x.contiguous()
    bias = None if bias is None else bias.contiguous()
    y = torch.empty((*x.shape[:-1], out), dtype=torch.float32)
    native.f32_linear(
        x.data_ptr(), rows, into, weight.data_ptr(), _address(bias), y.data_ptr(), out,
        torch.get_num_threads(),
    )  # fmt: skip
    return y


def linear_int8(
    x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    rows = _native_rows(x, q, scale, bias)
    native = _vector_kernels() if rows else None
    if (
        native is not None
        and scale.dtype == torch.float32
        and q.dtype == torch.int8
        and (bias is None or bias.dtype == torch.float32)
    ):
        out, into = q.shape
        x, q, scale = x.contiguous(), q.contiguous(), scale.contiguous()
        bias = None if bias is None else bias.contiguous()
        y = torch.empty((*x.shape[:-1], out), dtype=torch.float32)
        block = int8_block(into) if INT8_ACTIVATIONS.get() else 0
        if block:
            native.int8_linear_a8(
                x.data_ptr(), rows, into, q.data_ptr(), scale.data_ptr(), block, _address(bias),
                y.data_ptr(), out, torch.get_num_threads(),
            )  # fmt: skip
            return y
        native.int8_linear(
            x.data_ptr(), rows, into, q.data_ptr(), scale.data_ptr(), _address(bias),
            y.data_ptr(), out, torch.get_num_threads(),
        )  # fmt: skip
        return y
    weight = _cached(q, (scale,), lambda: dequantize_int8(q, scale, x.dtype))
    return F.linear(x, weight, bias)


def linear_int4_groups(
    x: torch.Tensor,
    packed: torch.Tensor,
    scale: torch.Tensor,
    zero: torch.Tensor,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    rows = _native_rows(x, packed, scale, zero, bias)
    native = _vector_kernels() if rows else None
    if (
        native is not None
        and scale.dtype == torch.float32
        and packed.dtype == zero.dtype == torch.uint8
        and (bias is None or bias.dtype == torch.float32)
    ):
        out, groups, half = packed.shape
        x, packed, scale, zero = (
            x.contiguous(),
            packed.contiguous(),
            scale.contiguous(),
            zero.contiguous(),
        )
        bias = None if bias is None else bias.contiguous()
        y = torch.empty((*x.shape[:-1], out), dtype=torch.float32)
        run = native.int4_linear_a8 if INT8_ACTIVATIONS.get() else native.int4_linear
        run(
            x.data_ptr(), rows, groups * 2 * half, packed.data_ptr(), scale.data_ptr(),
            zero.data_ptr(), 2 * half, _address(bias), y.data_ptr(), out, torch.get_num_threads(),
        )  # fmt: skip
        return y
    make = lambda: dequantize_int4_groups(packed, scale, zero, x.dtype)  # noqa: E731
    return F.linear(x, _cached(packed, (scale, zero), make), bias)


# -- linears sharing one x -------------------------------------------------------------------
#
# A layer's q, k and v projections (and its gate and up) read the same x. The code
# generator joins such calls into one `*_many` call (`linnet.torch.codegen`), which runs them
# as one native call and one OpenMP parallel region (`kernels.c`: each result bitwise as its
# own call gives) when every member would take the native kernel alone; otherwise it makes
# the members' own calls, one after another.

Int8Member = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]
Int4Member = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]
F32Member = tuple[torch.Tensor, torch.Tensor | None]


def _results(x: torch.Tensor, outs: list[int]) -> list[torch.Tensor]:
    lead = x.shape[:-1]
    return [torch.empty((*lead, out), dtype=torch.float32) for out in outs]


def linear_int8_many(x: torch.Tensor, *members: Int8Member) -> tuple[torch.Tensor, ...]:
    """`linear_int8(x, *member)` for each member, in one native call where each would take
    the native kernel (with `int8_activations`, x rounded once for all of them)."""
    native = _many_kernels(x, members)
    if native is not None and all(
        q.dtype is torch.int8
        and scale.dtype is torch.float32
        and (bias is None or bias.dtype is torch.float32)
        and q.is_contiguous()
        and scale.is_contiguous()
        and (bias is None or bias.is_contiguous())
        for q, scale, bias in members
    ):
        x = x.contiguous()
        rows, into = x.numel() // x.shape[-1], x.shape[-1]
        ys = _results(x, [q.shape[0] for q, _, _ in members])
        table = [
            (q.data_ptr(), s.data_ptr(), 0, _address(b), y.data_ptr(), y.shape[-1])
            for (q, s, b), y in zip(members, ys, strict=True)
        ]
        block = int8_block(into) if INT8_ACTIVATIONS.get() else 0
        threads = torch.get_num_threads()
        if block:
            native.int8_linear_a8_many(x.data_ptr(), rows, into, block, table, threads)
        else:
            native.int8_linear_many(x.data_ptr(), rows, into, table, threads)
        return tuple(ys)
    return tuple(linear_int8(x, *member) for member in members)


def linear_int4_groups_many(x: torch.Tensor, *members: Int4Member) -> tuple[torch.Tensor, ...]:
    """`linear_int4_groups(x, *member)` for each member, in one native call where each would
    take the native kernel (with `int8_activations`, x rounded once for all of them)."""
    native = _many_kernels(x, members)
    half = members[0][0].shape[-1]
    if native is not None and all(
        packed.dtype is torch.uint8
        and zero.dtype is torch.uint8
        and scale.dtype is torch.float32
        and (bias is None or bias.dtype is torch.float32)
        and packed.shape[-1] == half
        and packed.is_contiguous()
        and scale.is_contiguous()
        and zero.is_contiguous()
        and (bias is None or bias.is_contiguous())
        for packed, scale, zero, bias in members
    ):
        x = x.contiguous()
        ys = _results(x, [packed.shape[0] for packed, _, _, _ in members])
        run = native.int4_linear_a8_many if INT8_ACTIVATIONS.get() else native.int4_linear_many
        run(
            x.data_ptr(), x.numel() // x.shape[-1], x.shape[-1], 2 * half,
            [(p.data_ptr(), s.data_ptr(), z.data_ptr(), _address(b), y.data_ptr(), y.shape[-1])
             for (p, s, z, b), y in zip(members, ys, strict=True)],
            torch.get_num_threads(),
        )  # fmt: skip
        return tuple(ys)
    return tuple(linear_int4_groups(x, *member) for member in members)


def native_linear_f32_many(
    x: torch.Tensor, members: tuple[F32Member, ...]
) -> tuple[torch.Tensor, ...] | None:
    """`native_linear_f32(x, *member)` for each member in one native call, or None where any
    member would not take the native kernel (`natives.linear_cpu_many` then calls each)."""
    native = _many_kernels(x, members, limit=F32_NATIVE_ROWS)
    if native is None or not all(
        w.dtype is torch.float32
        and w.is_contiguous()
        and (bias is None or (bias.dtype is torch.float32 and bias.is_contiguous()))
        for w, bias in members
    ):
        return None
    x = x.contiguous()
    ys = _results(x, [w.shape[0] for w, _ in members])
    native.f32_linear_many(
        x.data_ptr(), x.numel() // x.shape[-1], x.shape[-1],
        [(w.data_ptr(), 0, 0, _address(b), y.data_ptr(), y.shape[-1])
         for (w, b), y in zip(members, ys, strict=True)],
        torch.get_num_threads(),
    )  # fmt: skip
    return tuple(ys)


def _many_kernels(
    x: torch.Tensor, members: tuple[tuple[torch.Tensor | None, ...], ...], limit: int | None = None
) -> Kernels | None:
    """The vector kernels when every member may run natively on `x` (see `_native_rows`),
    else None."""
    if not 0 < len(members) <= MANY:
        return None
    parts = [t for member in members for t in member]
    return _vector_kernels() if _native_rows(x, *parts, limit=limit) else None


def decode_fp8(bits: torch.Tensor) -> torch.Tensor:
    """E4M3FN bytes to f32 as `std.quant::decode_fp8` (integer arithmetic, no NaN)."""
    b = bits.to(torch.int32)
    e, m = (b >> 3) & 15, b & 7
    units = torch.where(e == 0, 2 * m, (8 + m) << e)
    magnitude = units.to(torch.float32) * 2.0**-10
    return torch.where((b >> 7) == 1, -magnitude, magnitude)


def dequantize_fp8(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return (decode_fp8(q) * scale).to(dtype)


_E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def dequantize_mxfp4(
    blocks: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype
) -> torch.Tensor:
    """`[Out, G, 16]` blocks and E8M0 bytes `[Out, G]` -> `[Out, G * 32]`, as the std body."""
    rows, groups, _ = blocks.shape
    codes = torch.stack([blocks & 15, blocks >> 4], dim=-1).reshape(rows, groups, 32)
    values = torch.tensor(_E2M1, dtype=torch.float32, device=blocks.device)[codes.long()]
    exponent = (scales.to(torch.int32) - 127).clamp(-62, 62)
    power = torch.ldexp(torch.ones_like(exponent, dtype=torch.float32), exponent)
    return (values * power.unsqueeze(-1)).reshape(rows, groups * 32).to(dtype)


def linear_fp8(
    x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    weight = _cached(q, (scale,), lambda: dequantize_fp8(q, scale, x.dtype))
    return F.linear(x, weight, bias)


def linear_mxfp4(
    x: torch.Tensor, blocks: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    weight = _cached(blocks, (scales,), lambda: dequantize_mxfp4(blocks, scales, x.dtype))
    return F.linear(x, weight, bias)
