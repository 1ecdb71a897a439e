"""Native PyTorch kernels for `call` ops of known standard-library ops.

Stage: backend. A `call` op keeps an `op`'s canonical body as a region
(architecture.md "Core IR"); a backend may replace it with a native kernel
computing the same function within the numeric contract (language.md 1.2,
"Canonical bodies"; stdlib.md "Numerics policy": the candidates used here are
the ones stdlib.md lists as equivalent). Input: the `call` op and what is known
about its operands (constants, producers). Output: a `Native` (a kernel for
the runner and a Python expression for the code generator), or None, in which
case the backend runs the canonical body. A native is chosen only when every
operand has the expected type and the attributes it needs (an `eps`, a
`scale`) are compile-time constants; otherwise the body runs.

| callee | native |
| --- | --- |
| `std.nn.linear::linear` | `F.linear`; on the CPU in f32/bf16 without autograd, oneDNN's linear (`linear_cpu`), or for f32 with up to 4 rows `linnet.native`'s f32 kernel |
| `std.nn.norm::rms_norm` | `F.rms_norm` on f32, cast to `T`, times the weight (the spec's order); f32 rows of a decode step (up to 32, CPU, no autograd) in one call of `linnet.native`'s C loop |
| `std.nn.softmax::softmax` | `torch.softmax` on f32, cast to `T` |
| `std.nn.activations::silu`, `sigmoid` | `F.silu`, `torch.sigmoid` |
| `std.nn.activations::gelu_erf` | `0.5 x erfc(-x / sqrt 2)` in f32 (native erfc), cast to `T` |
| `std.nn.activations::relu` | `torch.relu` |
| `std.nn.norm::layer_norm` | `F.layer_norm` on f32 (no affine), cast to `T`, times the weight, plus the bias |
| `std.nn.norm::batch_norm` | `F.batch_norm(training=False)` on f32, cast to `T` |
| `std.nn.norm::group_norm` | `F.group_norm` on f32 (no affine), cast to `T`, then the per-channel affine in `T` |
| `std.nn.rope::rope` | `x * cos + roll(x) * sin'` (`sin'`: the sin table's first half negated, made once per table); a decode step's contiguous f32 rows in one C pass of `linnet.native` (the same bits) |
| `std.nn.attention::attention`, `grouped_attention` | `F.scaled_dot_product_attention` on f32 (a boolean mask turned additive once per mask); a decode step's f32 rows (not causal, up to 32768 scores) in one C loop of `linnet.native` (`natives_cpu`) |
| `std.quant::linear_int8`, `linear_int4_groups` | on the CPU in f32 without autograd, up to 32 rows: `linnet.native`'s kernels on the packed bytes (batch-1 decoding reads 1 or 0.54 byte a weight, not 4); with `int8_activations`, x rounded to int8 per block and integer products (another function, `natives_quant`); otherwise the weight dequantised once (as the body does), then `F.linear` (`natives_quant`) |
| `std.quant::linear_fp8`, `linear_mxfp4` | the weight dequantised once (as the body does), then `F.linear` (`natives_quant`) |
| `std.nn.loss::linear_token_log_probs`, `linear_cross_entropy` | row blocks that never hold the `[N, V]` logits (`linnet.torch.chunked_loss`) |
| `std.nn.cache::write_at` | `index_copy` of the one row (out of place) |
| `std.nn.cache::write_span` at a constant position, or any on the CPU | the cache slices and the span, concatenated (the position read on the host); into a donated cache, a slice assignment (one C loop of `memcpy`s for a decode step's contiguous CPU tensors) |
| `std.nn.cache::write_rows` | one copy of the cache, each row's position assigned by index |
| `std.nn.cache::write_slots` at a constant position | one copy of the cache, the listed rows assigned by index |
| `std.nn.parallel::{all_reduce, all_gather, shared}`, when a tensor-parallel load marked them | collectives over the ranks (`linnet.torch.parallel`) |

`linnet.native`'s f32 kernel serves f32 linears of up to 4 rows on the CPU (inside
`linear_cpu`): alone, on the TinyLlama shapes (bench/quant_kernels.py), it is level with
oneDNN's within this shared machine's noise, but in a decode step it was faster, and
much faster while another process held a core (`linear_cpu` has the figures).

A cache write whose cache is a state read that nothing uses afterwards
(`Context.donated`, found by the code generator) writes into the state's
tensor in place instead of copying it: a decode step then moves only the rows
and positions it writes. Without autograd only; otherwise, and in the
interpreter, the copy stays.

`std.nn.activations::gelu` (the tanh form) keeps its canonical body: stdlib.md
names `F.gelu(approximate="tanh")`, but its CPU kernel is not within one
rounding of the f32 formula in the tails (measured: 1.5e-7 absolute where the
value is about 1e-7, tests/stdlib/test_std_activations.py), which the
contract for `gelu` asks.

Attention masks: a mask made by `causal_mask<Q, Q>` becomes `is_causal=True`;
under a mask made by `packed_mask` each packed sequence attends alone, batched
through the causal path (`packed_attention`); any other mask is passed as a boolean mask, and rows whose keys are all
masked, which the canonical body averages (a masked score is -1e30, not
-inf) and SDPA does not, get the mean of the values. Grouped heads without a
causal mask are folded into the query axis instead of repeating keys. Each substitution is
tested against the canonical body (tests/torch/test_torch_natives.py).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

import torch
import torch.nn.functional as F

from linnet.ir.core import FLOAT_DTYPES, Op, TensorType
from linnet.records import record
from linnet.torch import chunked_loss
from linnet.torch.dtypes import storage
from linnet.torch.natives_cpu import (
    native_attention,
    native_rms_norm,
    native_rope,
    native_write_span,
)
from linnet.torch.natives_quant import (
    linear_fp8,
    linear_int4_groups,
    linear_int4_groups_many,
    linear_int8,
    linear_int8_many,
    linear_mxfp4,
    native_linear_f32,
    native_linear_f32_many,
)
from linnet.torch.ops import Context, Kernel

MASKED_SCORE = -1e30
D = TypeVar("D")


def kernel_launcher(key: str) -> Kernel:
    """The Triton launch of a kernel instantiation, for generated code (`triton_kernels`)."""
    from linnet.torch.triton_kernels import launcher

    run: Kernel = launcher(key)
    return run


@record
class Native:
    """A native replacement of one `call` op.

    `kernel` maps the operand tensors to the single result; `source` spells
    the same computation as a Python expression over operand names, using the
    names `torch`, `F` and `natives` (this module) that generated code imports.
    """

    callee: str
    kernel: Kernel
    source: Callable[[Sequence[str]], str]
    many: str = ""
    """The function of this module that runs several such calls on one `x`, or "": called as
    `natives.<many>(x, (operands but x, bias or None), ...)`, it returns their results in
    order (`linnet.torch.codegen` joins calls on one `x` into one such call)."""
    arity: int = 0
    """With `many`: the operands of a member but `x`, bias included (None when absent)."""


Finder = Callable[[Op, Context], Native | None]


def _dtype_name(dtype: str) -> str:
    return f"torch.{str(storage(dtype)).removeprefix('torch.')}"


def _float_scalar(op: Op, context: Context, index: int) -> float | None:
    """The value of operand `index` when it is a constant f32 scalar."""
    if index >= len(op.operands):
        return None
    value = op.operands[index]
    known = context.known(value)
    if value.type != TensorType((), "f32") or known is None:
        return None
    return float(known)


# -- linear ------------------------------------------------------------------------------


def find_linear(op: Op, context: Context) -> Native | None:
    types = [v.type for v in op.operands]
    if len(types) not in (2, 3):
        return None
    x, w = types[0], types[1]
    if x.dtype not in FLOAT_DTYPES or w.dtype != x.dtype or w.rank != 2 or x.rank < 1:
        return None
    if x.shape[-1] != w.shape[1] or op.results[0].type.shape != (*x.shape[:-1], w.shape[0]):
        return None
    if len(types) == 3 and types[2] != TensorType((w.shape[0],), x.dtype):
        return None
    if x.rank == 1:
        return Native(
            "std.nn.linear::linear",
            _linear_vector,
            lambda a: f"natives.linear_vector({', '.join(a)})",
        )
    if context.device.type == "cpu" and x.dtype in ONEDNN_DTYPES and onednn_linear_available():
        return Native(
            "std.nn.linear::linear",
            linear_cpu,
            lambda a: f"natives.linear_cpu({', '.join(a)})",
            many="linear_cpu_many",
            arity=2,
        )
    return Native("std.nn.linear::linear", F.linear, lambda a: f"F.linear({', '.join(a)})")


ONEDNN_DTYPES = frozenset({"f32", "bf16"})


def onednn_linear_available() -> bool:
    """Whether this torch build has oneDNN's linear (`mkldnn::_linear_pointwise`)."""
    return bool(torch._C._has_mkldnn) and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def linear_cpu(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """`F.linear` through oneDNN on the CPU under `torch.no_grad()` (serving, decoding).

    `F.linear` on the CPU is MKL's GEMM, which on AMD CPUs takes its generic code
    path: measured on an AMD EPYC (bench/serve.py's shapes, one thread), oneDNN's
    linear on the same row-major weight (no copy, no reordered duplicate) is as fast
    for one row and 1.5-3x faster for 8-32 rows (a batched decode step), and ONNX
    Runtime's MLAS sits near it. Same sums in another order: within f32 rounding.
    f32 with up to `natives_quant.F32_NATIVE_ROWS` rows (a decode step) runs on
    `linnet.native`'s f32 kernel instead (`native_linear_f32`): measured in a 4-layer
    TinyLlama-shaped f32 decode, two threads, rounds alternated, 40 ms a step against
    47-50 for oneDNN on a quiet moment and 95-123 against 194-227 while another process
    held a core (its threads take pieces of the rows in turn; oneDNN splits them in fixed
    halves and waits for the slow half).
    So wherever gradients are on, `F.linear` stays: oneDNN's op has no backward, and
    a training run (LoRA, DPO, PEFT and TRL comparisons) must compute exactly what
    PyTorch eager does whether or not a given call is recorded. Tensor subclasses
    (`linnet.train.lora.LoraWeight`) keep `F.linear`, which their
    `__torch_function__` serves.
    """
    if (
        torch.is_grad_enabled()
        or type(x) is not torch.Tensor
        or type(weight) is not torch.Tensor
        or (bias is not None and type(bias) is not torch.Tensor)
    ):
        return F.linear(x, weight, bias)
    rows = native_linear_f32(x, weight, bias)
    if rows is not None:
        return rows
    result: torch.Tensor = torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
    return result


def linear_cpu_many(
    x: torch.Tensor, *members: tuple[torch.Tensor, torch.Tensor | None]
) -> tuple[torch.Tensor, ...]:
    """`linear_cpu(x, *member)` for each member: one native call for all of them where each
    would take `linnet.native`'s f32 kernel alone (bitwise the same results)."""
    if not torch.is_grad_enabled() and type(x) is torch.Tensor:
        rows = native_linear_f32_many(x, members)
        if rows is not None:
            return rows
    return tuple(linear_cpu(x, *member) for member in members)


def _linear_vector(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    return F.linear(x.unsqueeze(0), weight, bias).squeeze(0)


linear_vector = _linear_vector


MANY_QUANTISED = {"linear_int8_many": linear_int8_many,
                  "linear_int4_groups_many": linear_int4_groups_many}  # fmt: skip
"""The `Native.many` functions of the quantised linears, which generated code calls as
`natives.<name>` (bound here from `natives_quant`)."""


def _find_quantised_linear(
    callee: str, kernel: Kernel, operands: tuple[int, int], many: str = ""
) -> Finder:
    """`std.quant` linears (`natives_quant`): a float `x` and `operands` operand counts
    (without and with the bias); `many` as `Native.many`."""
    name = callee.split("::")[1]

    assert not many or many in MANY_QUANTISED

    def find(op: Op, context: Context) -> Native | None:
        x = op.operands[0].type
        if len(op.operands) not in operands or x.dtype not in FLOAT_DTYPES or x.rank < 1:
            return None
        spell = lambda a: f"natives.{name}({', '.join(a)})"  # noqa: E731
        return Native(callee, kernel, spell, many=many, arity=operands[1] - 1)

    return find


# -- normalisation and elementwise ---------------------------------------------------------


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, dtype: torch.dtype) -> torch.Tensor:
    """stdlib.md 6: normalise in f32, cast to `T`, then multiply by the weight. f32 rows of a
    decode step run on `linnet.native`'s kernel (`native_rms_norm`)."""
    if dtype is torch.float32:
        normed = native_rms_norm(x, weight, eps)
        if normed is not None:
            return normed
    normed = F.rms_norm(x.to(torch.float32), (x.shape[-1],), eps=eps)
    return normed.to(dtype) * weight


def find_rms_norm(op: Op, context: Context) -> Native | None:
    if len(op.operands) != 3:
        return None
    x, w = op.operands[0].type, op.operands[1].type
    eps = _float_scalar(op, context, 2)
    if eps is None or x.dtype not in FLOAT_DTYPES or x.rank < 1:
        return None
    if w != TensorType((x.shape[-1],), x.dtype):
        return None
    held = storage(x.dtype)
    spelled = _dtype_name(x.dtype)
    return Native(
        "std.nn.norm::rms_norm",
        lambda x, weight, _eps: rms_norm(x, weight, eps, held),
        lambda a: f"natives.rms_norm({a[0]}, {a[1]}, {eps!r}, {spelled})",
    )


def softmax(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """stdlib.md 4: softmax over the last axis in f32, cast back to `T`."""
    return torch.softmax(x.to(torch.float32), dim=-1).to(dtype)


def find_softmax(op: Op, context: Context) -> Native | None:
    if len(op.operands) != 1:
        return None
    x = op.operands[0].type
    if x.dtype not in FLOAT_DTYPES or x.rank < 1:
        return None
    held = storage(x.dtype)
    spelled = _dtype_name(x.dtype)
    return Native(
        "std.nn.softmax::softmax",
        lambda a: softmax(a, held),
        lambda a: f"natives.softmax({a[0]}, {spelled})",
    )


def _find_elementwise(callee: str, kernel: Kernel, spelled: str) -> Finder:
    def find(op: Op, context: Context) -> Native | None:
        if len(op.operands) != 1 or op.operands[0].type.dtype not in FLOAT_DTYPES:
            return None
        return Native(callee, kernel, lambda a: f"{spelled}({a[0]})")

    return find


def gelu_erf(x: torch.Tensor) -> torch.Tensor:
    """stdlib.md 5 `gelu_erf`: exact GELU `x * Phi(x)` in f32 with the native erfc, cast to `T`.

    NOTE: written with erfc rather than `F.gelu`, whose `1 + erf(x / sqrt(2))`
    cancels to 0 in f32 below x = -5.4 where the true value is ~1e-7; erfc
    keeps the tail, as the canonical body's `pdf * poly` does.
    """
    xf = x.to(torch.float32)
    tail: torch.Tensor = torch.special.erfc(xf * -0.7071067811865476)
    return (0.5 * xf * tail).to(x.dtype)


def layer_norm(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    eps: float,
    dtype: torch.dtype,
) -> torch.Tensor:
    """stdlib.md 6 `layer_norm`: statistics in f32, cast to `T`, then the affine in `T`."""
    normed = F.layer_norm(x.to(torch.float32), (x.shape[-1],), eps=eps)
    y = normed.to(dtype) * weight
    return y if bias is None else y + bias


def find_layer_norm(op: Op, context: Context) -> Native | None:
    if len(op.operands) not in (3, 4):
        return None
    x, w = op.operands[0].type, op.operands[1].type
    has_bias = len(op.operands) == 4
    eps = _float_scalar(op, context, len(op.operands) - 1)
    if eps is None or x.dtype not in FLOAT_DTYPES or x.rank < 1:
        return None
    row = TensorType((x.shape[-1],), x.dtype)
    if w != row or (has_bias and op.operands[2].type != row):
        return None
    held = storage(x.dtype)
    spelled = _dtype_name(x.dtype)

    def kernel(x: torch.Tensor, weight: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
        return layer_norm(x, weight, rest[0] if has_bias else None, eps, held)

    def source(a: Sequence[str]) -> str:
        bias = a[2] if has_bias else "None"
        return f"natives.layer_norm({a[0]}, {a[1]}, {bias}, {eps!r}, {spelled})"

    return Native("std.nn.norm::layer_norm", kernel, source)


def batch_norm(
    x: torch.Tensor,
    mean: torch.Tensor,
    variance: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    eps: float,
) -> torch.Tensor:
    """stdlib.md 6 `batch_norm`: inference mode from stored statistics, all in f32."""
    f32 = torch.float32
    stats = [t.to(f32) for t in (mean, variance, weight, bias)]
    out = F.batch_norm(x.to(f32), stats[0], stats[1], stats[2], stats[3], False, 0.0, eps)
    return out.to(x.dtype)


def find_batch_norm(op: Op, context: Context) -> Native | None:
    if len(op.operands) != 6:
        return None
    x = op.operands[0].type
    eps = _float_scalar(op, context, 5)
    if eps is None or x.dtype not in FLOAT_DTYPES or x.rank != 4:
        return None
    channel = TensorType((x.shape[1],), x.dtype)
    if any(v.type != channel for v in op.operands[1:5]):
        return None
    return Native(
        "std.nn.norm::batch_norm",
        lambda x, m, v, w, b, _eps: batch_norm(x, m, v, w, b, eps),
        lambda a: f"natives.batch_norm({', '.join(a[:5])}, {eps!r})",
    )


def group_norm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, groups: int, eps: float
) -> torch.Tensor:
    """stdlib.md 6 `group_norm`: statistics in f32, cast to `T`, the per-channel affine in `T`."""
    normed = F.group_norm(x.to(torch.float32), groups, eps=eps).to(x.dtype)
    return normed * weight[:, None, None] + bias[:, None, None]


def find_group_norm(op: Op, context: Context) -> Native | None:
    if len(op.operands) != 4:
        return None
    x = op.operands[0].type
    eps = _float_scalar(op, context, 3)
    generics = op.attrs.get("generics")
    groups = generics.get("Groups") if isinstance(generics, dict) else None
    if eps is None or not isinstance(groups, int) or x.dtype not in FLOAT_DTYPES or x.rank != 4:
        return None
    channel = TensorType((x.shape[1],), x.dtype)
    if groups <= 0 or x.shape[1] % groups or any(v.type != channel for v in op.operands[1:3]):
        return None
    return Native(
        "std.nn.norm::group_norm",
        lambda x, w, b, _eps: group_norm(x, w, b, groups, eps),
        lambda a: f"natives.group_norm({a[0]}, {a[1]}, {a[2]}, {groups}, {eps!r})",
    )


# -- per-step tensors derived once ----------------------------------------------------------


_calls = threading.local()
"""This thread's entry-call count (`begin_call`): what `Derived` keeps lasts one call."""


def begin_call() -> None:
    """A new entry call on this thread: `Derived` values of the last one are not reused."""
    _calls.count = getattr(_calls, "count", 0) + 1


class Derived(Generic[D]):
    """A value derived from one tensor, kept while that tensor lives unchanged.

    A decode step builds its mask and rotary tables once and hands the same tensor
    objects to every layer; what a native derives from them (an additive mask, a
    sign-flipped table, whether a mask row is empty) is the same for each layer, so it
    is computed for the first and reused by the others. The tensor is recognised by
    identity (a weak reference, so a freed tensor's id is never mistaken for it) and
    its version counter, which every in-place write to it or a view of it bumps. One
    entry per thread (the serving engine runs on its own): a new tensor replaces it.
    Tensors made under `torch.inference_mode()` have no version counter, so nothing is
    kept for them.

    Nothing is reused across entry calls (`begin_call`, which the runner and the
    generated code call first): an input tensor written through a NumPy view
    (`torch.from_numpy`, `Tensor.numpy()`) changes without a version bump, and a caller
    that updates a mask buffer that way between decode steps must not get the last
    step's mask back.
    """

    def __init__(self, make: Callable[[torch.Tensor], D]) -> None:
        self._make = make
        self._local = threading.local()

    def __call__(self, tensor: torch.Tensor) -> D:
        if tensor.is_inference():  # no version counter: a change could not be seen
            return self._make(tensor)
        held = getattr(self._local, "held", None)
        call = getattr(_calls, "count", 0)
        if (
            held is not None
            and held[0]() is tensor
            and held[1] == tensor._version
            and held[2] == call
        ):
            value: D = held[3]
            return value
        value = self._make(tensor)
        self._local.held = (weakref.ref(tensor), tensor._version, call, value)
        return value


def _attention_mask(mask: torch.Tensor) -> tuple[torch.Tensor, bool, int]:
    """A boolean mask `[..., K]` as SDPA applies it (0 where kept, -inf where masked:
    the conversion `F.scaled_dot_product_attention` makes of a boolean mask, in f32),
    whether some row has no key, and the keys that matter: up to the last one any row
    keeps. The last two are read on the CPU, where that is free (a decode step's mask
    keeps the positions written so far, often far fewer than the cache holds: the keys
    after them only add zero weights); elsewhere every row may be empty and all `K`
    keys are used, so nothing waits on the device."""
    additive = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    additive.masked_fill_(mask.logical_not(), float("-inf"))
    width = mask.shape[-1]
    if mask.device.type != "cpu":
        return additive, True, width
    empty = not bool(mask.any(dim=-1).all())
    kept = mask.reshape(-1, width).any(dim=0).nonzero()
    keys = int(kept[-1]) + 1 if len(kept) else width
    return additive[..., :keys], empty, keys


attention_mask = Derived(_attention_mask)


# -- rotary positions ----------------------------------------------------------------------


def _signed_sin(table: torch.Tensor) -> torch.Tensor:
    """The sin table with its first half negated (`rope`'s rotation folds the sign in)."""
    half = table.shape[-1] // 2
    return torch.cat((-table[..., :half], table[..., half:]), dim=-1)


signed_sin = Derived(_signed_sin)


def rope(x: torch.Tensor, cos_table: torch.Tensor, sin_table: torch.Tensor) -> torch.Tensor:
    """stdlib.md 7 `rope`: `x * cos + rotate_half(x) * sin` in `T`, the same values.

    `rotate_half(x) * sin` is `concat(-x2, x1) * sin`; here it is `roll(x) * sin'`,
    `roll(x) = concat(x2, x1)` and `sin'` the table with its first half negated:
    a sign moved from one factor to the other gives the same product bit for bit.
    `sin'` is made once per table (`Derived`: a decode step's layers share it), so a
    call is four kernels instead of seven.
    """
    native = native_rope(x, cos_table, sin_table)  # decode rows: the same in one C pass
    if native is not None:
        return native
    rolled = torch.roll(x, x.shape[-1] // 2, -1)
    return x * cos_table + rolled * signed_sin(sin_table)


def find_rope(op: Op, context: Context) -> Native | None:
    if len(op.operands) != 3:
        return None
    x, cos_table, sin_table = (v.type for v in op.operands)
    if x.dtype not in FLOAT_DTYPES or x.rank != 4 or x.shape[3] % 2:
        return None
    table = TensorType(x.shape[2:], x.dtype)
    if cos_table != table or sin_table != table or op.results[0].type != x:
        return None
    return Native("std.nn.rope::rope", rope, lambda a: f"natives.rope({', '.join(a)})")


# -- attention ---------------------------------------------------------------------------


def attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    scale: float | torch.Tensor,
    mask: torch.Tensor | None,
    causal: bool,
    dtype: torch.dtype,
) -> torch.Tensor:
    """stdlib.md 9 `attention`/`grouped_attention` through SDPA, all in f32.

    Key/value head `j` serves the consecutive query heads `j*g .. j*g + g - 1`
    (`repeat_kv` order). With a causal mask the keys and values are repeated
    to every query head (SDPA's causal path); otherwise the `g` query heads of
    each key/value head are folded into its query axis, `[B, Hk, g*Q, D]`,
    with the mask tiled to match, which reads each key once instead of `g`
    times (a decode step's attention, three times faster on the CPU). A row
    whose keys are all masked gets the mean of the values, as the canonical
    body's -1e30 scores give.
    """
    f32 = torch.float32
    if dtype is f32:  # a decode step's few rows: one C loop (`natives_cpu`)
        native = native_attention(query, key, value, scale, mask, causal)
        if native is not None:
            return native
    q = query if query.dtype == f32 else query.to(f32)
    k = key if key.dtype == f32 else key.to(f32)
    v = value if value.dtype == f32 else value.to(f32)
    if isinstance(scale, torch.Tensor):
        q = q * scale
        scale = 1.0
    batch, heads, length, width = q.shape
    groups = heads // k.shape[1]
    folded = groups != 1 and not causal
    additive, empty, keys = None, False, k.shape[2]
    if mask is not None:
        # Derived once per mask: a decode step's layers share it (`Derived`).
        additive, empty, keys = attention_mask(mask)
    if folded:
        q = q.reshape(batch, k.shape[1], groups * length, width)
        if additive is not None and length != 1:
            additive = additive.repeat(groups, 1)
    elif groups != 1:
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
    out = F.scaled_dot_product_attention(
        q, k[:, :, :keys], v[:, :, :keys], attn_mask=additive, is_causal=causal, scale=scale
    )
    if mask is not None and empty:
        without = ~torch.any(mask, dim=-1, keepdim=True)  # [..., Q, 1]
        if folded and length != 1:
            without = without.repeat(groups, 1)
        out = torch.where(without, torch.mean(v, dim=-2, keepdim=True), out)
    if folded:
        out = out.reshape(batch, heads, length, width)
    return out if out.dtype == dtype else out.to(dtype)


def packed_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    scale: float | torch.Tensor,
    mask: torch.Tensor,
    dtype: torch.dtype,
) -> torch.Tensor:
    """`attention` under a `packed_mask`: each sequence attends within itself alone.

    The runs of the sequences are read off the mask (a run ends where
    `mask[p, p - 1]` is false). When the mask is exactly causal within those runs
    (`packed_mask` of contiguous segments: the count of its true entries says so)
    the runs are gathered into a batch `[B * runs, H, longest, D]`, padded at
    their ends, and go through SDPA's causal path; a padded query is dropped and
    a padded key sits after every real query of its run, so no real token sees
    it. The work is `runs * longest^2` instead of `P^2`; when that is not
    smaller (or the segments are not contiguous) the mask is applied as it is.
    """
    batch, heads, length, width = query.shape
    starts = [0]
    if length > 1:
        breaks = ~torch.diagonal(mask, offset=-1)
        starts += (torch.nonzero(breaks).flatten() + 1).tolist()
    spans = [b - a for a, b in zip(starts, [*starts[1:], length], strict=True)]
    longest = max(spans)
    runs = len(spans)
    exact = int(mask.sum()) == sum(n * (n + 1) // 2 for n in spans)
    if not exact or runs == 1 or runs * longest * longest >= length * length:
        causal = exact and runs == 1
        return attention(query, key, value, scale, None if causal else mask, causal, dtype)
    device = query.device
    offsets = torch.arange(longest, device=device)
    first = torch.tensor(starts, device=device)
    size = torch.tensor(spans, device=device)
    # position of row r, slot j: its run's start + j (clamped into the run's last token)
    gather = (first[:, None] + torch.minimum(offsets[None, :], size[:, None] - 1)).flatten()
    back = torch.repeat_interleave(torch.arange(runs, device=device) * longest, size)
    back += torch.arange(length, device=device) - torch.repeat_interleave(first, size)

    def split(x: torch.Tensor) -> torch.Tensor:
        taken = x.index_select(2, gather).reshape(batch, x.shape[1], runs, longest, width)
        return taken.transpose(1, 2).reshape(batch * runs, x.shape[1], longest, width)

    out = attention(split(query), split(key), split(value), scale, None, True, dtype)
    out = out.reshape(batch, runs, heads, longest, width).transpose(1, 2)
    return out.reshape(batch, heads, runs * longest, width).index_select(2, back)


def _is_packed(op: Op, context: Context) -> bool:
    """Whether the mask operand is made by `packed_mask`."""
    producer = context.producer(op.operands[4])
    return bool(
        producer is not None
        and producer.kind == "call"
        and producer.attrs.get("callee") == "std.nn.attention::packed_mask"
    )


def _is_causal(op: Op, context: Context) -> bool:
    """Whether the mask operand is `causal_mask<Q, Q>` (SDPA's square `is_causal`)."""
    producer = context.producer(op.operands[4])
    if producer is None or producer.kind != "call":
        return False
    if producer.attrs.get("callee") != "std.nn.attention::causal_mask":
        return False
    q, k = producer.results[0].type.shape
    return bool(q == k)


def find_attention(op: Op, context: Context) -> Native | None:
    if len(op.operands) not in (4, 5):
        return None
    q, k, v = (o.type for o in op.operands[:3])
    if q.dtype not in FLOAT_DTYPES or q.rank != 4 or k.rank != 4 or k != v:
        return None
    if k.dtype != q.dtype or q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        return None
    if k.shape[1] == 0 or q.shape[1] % k.shape[1] != 0:
        return None
    if op.operands[3].type != TensorType((), "f32"):
        return None
    masked = len(op.operands) == 5
    if masked and op.operands[4].type != TensorType((q.shape[2], k.shape[2]), "bool"):
        return None
    if op.results[0].type != q:
        return None
    known = _float_scalar(op, context, 3)
    causal = masked and _is_causal(op, context)
    held = storage(q.dtype)
    spelled = _dtype_name(q.dtype)
    callee = str(op.attrs["callee"])
    if masked and q.shape[2] == k.shape[2] and _is_packed(op, context):

        def packed(
            query: torch.Tensor,
            key: torch.Tensor,
            value: torch.Tensor,
            scale: torch.Tensor,
            mask: torch.Tensor,
        ) -> torch.Tensor:
            return packed_attention(
                query, key, value, scale if known is None else known, mask, held
            )

        def packed_source(a: Sequence[str]) -> str:
            scale = a[3] if known is None else repr(known)
            return f"natives.packed_attention({a[0]}, {a[1]}, {a[2]}, {scale}, {a[4]}, {spelled})"

        return Native(callee, packed, packed_source)

    def kernel(
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        scale: torch.Tensor,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        used_mask = None if causal else mask
        return attention(
            query, key, value, scale if known is None else known, used_mask, causal, held
        )

    def source(a: Sequence[str]) -> str:
        scale = a[3] if known is None else repr(known)
        mask = a[4] if masked and not causal else "None"
        return (
            f"natives.attention({a[0]}, {a[1]}, {a[2]}, {scale}, {mask}, "
            f"causal={causal}, dtype={spelled})"
        )

    return Native(callee, kernel, source)


# -- losses over a vocabulary -----------------------------------------------------------


def find_linear_loss(op: Op, context: Context) -> Native | None:
    """`linear_token_log_probs` (3 operands) or `linear_cross_entropy` (4), chunked."""
    callee = str(op.attrs["callee"])
    weighted = callee.endswith("::linear_cross_entropy")
    if len(op.operands) != (4 if weighted else 3):
        return None
    hidden, weight, targets = (v.type for v in op.operands[:3])
    if hidden.dtype not in FLOAT_DTYPES or hidden.rank != 2 or weight.rank != 2:
        return None
    if weight.dtype != hidden.dtype or weight.shape[1] != hidden.shape[1]:
        return None
    rows = hidden.shape[0]
    if targets != TensorType((rows,), "i64"):
        return None
    if weighted:
        if op.operands[3].type != TensorType((rows,), "f32"):
            return None
        if op.results[0].type != TensorType((), "f32"):
            return None
        return Native(
            callee,
            chunked_loss.linear_cross_entropy,
            lambda a: f"natives.chunked_loss.linear_cross_entropy({', '.join(a)})",
        )
    if op.results[0].type != TensorType((rows,), "f32"):
        return None
    return Native(
        callee,
        chunked_loss.linear_log_probs,
        lambda a: f"natives.chunked_loss.linear_log_probs({', '.join(a)})",
    )


# -- cache writes ----------------------------------------------------------------------


def write_span(cache: torch.Tensor, value: torch.Tensor, start: int) -> torch.Tensor:
    """stdlib.md 10 `write_span` at a known position: the span joined between cache slices.

    Positions `start .. start + N` clipped to the cache take `value`; the rest
    keeps the cache, as the canonical select does.
    """
    size, count = cache.shape[2], value.shape[2]
    low, high = max(start, 0), min(start + count, size)
    if low >= high:
        return cache
    pieces = [cache[:, :, :low], value[:, :, low - start : high - start], cache[:, :, high:]]
    return torch.cat([p for p in pieces if p.shape[2]], dim=2)


def write_at(cache: torch.Tensor, value: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
    """stdlib.md 10 `write_at`: a copy of the cache with position `at` replaced.

    An `at` outside the cache writes nothing, as the canonical select does. On
    the CPU the range check is free; elsewhere the old row is written back for
    an out-of-range `at`, so no host sync is needed.
    """
    size = cache.shape[2]
    if at.device.type == "cpu":
        if not 0 <= int(at) < size:
            return cache
        return cache.index_copy(2, at.reshape(1).to(torch.int64), value)
    index = torch.clamp(at, 0, size - 1).reshape(1).to(torch.int64)
    inside = (at >= 0) & (at < size)
    row = torch.where(inside, value, torch.index_select(cache, 2, index))
    return cache.index_copy(2, index, row)


def write_rows(cache: torch.Tensor, value: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
    """stdlib.md 10 `write_rows`: a copy of the cache with row `b`'s position `at[b]`
    replaced; a position outside the cache writes nothing (its old value is written
    back, so no host sync is needed)."""
    size = cache.shape[2]
    index = torch.clamp(at, 0, size - 1).to(torch.int64)
    inside = ((at >= 0) & (at < size)).reshape(-1, 1, 1)
    rows = torch.arange(cache.shape[0], device=cache.device)
    out = cache.clone()
    out[rows, :, index] = torch.where(inside, value[:, :, 0], cache[rows, :, index])
    return out


def write_slots(
    cache: torch.Tensor, value: torch.Tensor, slots: torch.Tensor, start: int
) -> torch.Tensor:
    """stdlib.md 10 `write_slots` at a known position: a copy of the cache whose rows
    `slots[m]` get `value[m]` at positions `start .. start + N` (clipped to the cache).
    A slot outside the rows writes nothing: it is routed to one extra row past the
    end, dropped afterwards, so no host sync is needed. Slots must be distinct, as
    the spec requires (duplicates are undefined there)."""
    rows, size, count = cache.shape[0], cache.shape[2], value.shape[2]
    low, high = max(start, 0), min(start + count, size)
    if low >= high:
        return cache
    inside = (slots >= 0) & (slots < rows)
    index = torch.where(inside, slots, rows).to(torch.int64)
    out = torch.cat((cache, cache[:1]), dim=0)
    out[index, :, low:high] = value[:, :, low - start : high - start]
    return out[:rows]


def _in_place(cache: torch.Tensor, value: torch.Tensor) -> bool:
    """Whether a donated cache may be written in place: no autograd graph involved."""
    return not (torch.is_grad_enabled() and (cache.requires_grad or value.requires_grad))


def _rows_inside(at: torch.Tensor) -> Callable[[int], tuple[torch.Tensor, torch.Tensor]]:
    """For a cache of `size` positions: the rows `b` whose `at[b]` is inside it and
    those positions (int64), each size worked out once."""
    found: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def inside(size: int) -> tuple[torch.Tensor, torch.Tensor]:
        if size not in found:
            rows = ((at >= 0) & (at < size)).nonzero().reshape(-1)
            found[size] = (rows, at[rows].to(torch.int64))
        return found[size]

    return inside


rows_inside = Derived(_rows_inside)
"""Per positions tensor: a decode step's every layer writes its keys and values at the
same positions."""


def write_rows_in_place(cache: torch.Tensor, value: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
    """`write_rows` into `cache` itself (a donated state); see `write_rows`. On the CPU,
    where finding the rows whose position is inside the cache costs no device sync, only
    those are written: a `decode_slots` step of one member among `Batch` rows (its
    `write_members` routes the others past the cache) writes one row instead of
    rewriting every row's old value (about half the time at 32 rows)."""
    if not _in_place(cache, value):
        return write_rows(cache, value, at)
    size = cache.shape[2]
    if cache.device.type == "cpu":
        rows, positions = rows_inside(at)(size)
        cache[rows, :, positions] = value[rows, :, 0]
        return cache
    index = torch.clamp(at, 0, size - 1).to(torch.int64)
    inside = ((at >= 0) & (at < size)).reshape(-1, 1, 1)
    rows = torch.arange(cache.shape[0], device=cache.device)
    cache[rows, :, index] = torch.where(inside, value[:, :, 0], cache[rows, :, index])
    return cache


def write_slots_in_place(
    cache: torch.Tensor, value: torch.Tensor, slots: torch.Tensor, start: int
) -> torch.Tensor:
    """`write_slots` into `cache` itself (a donated state) on the CPU, where picking the
    slots inside the rows costs no device sync; see `write_slots`."""
    if cache.device.type != "cpu" or not _in_place(cache, value):
        return write_slots(cache, value, slots, start)
    rows, size, count = cache.shape[0], cache.shape[2], value.shape[2]
    low, high = max(start, 0), min(start + count, size)
    if low >= high:
        return cache
    inside = (slots >= 0) & (slots < rows)
    cache[slots[inside].to(torch.int64), :, low:high] = value[inside][
        :, :, low - start : high - start
    ]
    return cache


def find_write_rows(op: Op, context: Context) -> Native | None:
    if len(op.operands) != 3:
        return None
    cache, value, at = (v.type for v in op.operands)
    if cache.rank != 4 or op.results[0].type != cache:
        return None
    if at != TensorType((cache.shape[0],), "i32"):
        return None
    if value != TensorType((cache.shape[0], cache.shape[1], 1, cache.shape[3]), cache.dtype):
        return None
    kernel = "write_rows_in_place" if op.operands[0] in context.donated else "write_rows"
    return Native(
        "std.nn.cache::write_rows",
        globals()[kernel],
        lambda a: f"natives.{kernel}({a[0]}, {a[1]}, {a[2]})",
    )


def find_write_slots(op: Op, context: Context) -> Native | None:
    if len(op.operands) != 4:
        return None
    cache, value, slots, at = (v.type for v in op.operands)
    known = context.known(op.operands[3])
    if known is None or at != TensorType((), "i32") or cache.rank != 4 or value.rank != 4:
        return None
    if cache.dtype != value.dtype or op.results[0].type != cache:
        return None
    if slots != TensorType((value.shape[0],), "i32"):
        return None
    if (cache.shape[1], cache.shape[3]) != (value.shape[1], value.shape[3]):
        return None
    start = int(known)
    donated = op.operands[0] in context.donated
    write = write_slots_in_place if donated else write_slots
    kernel = "write_slots_in_place" if donated else "write_slots"
    return Native(
        "std.nn.cache::write_slots",
        lambda c, v, s, _at: write(c, v, s, start),
        lambda a: f"natives.{kernel}({a[0]}, {a[1]}, {a[2]}, {start})",
    )


def find_write_at(op: Op, context: Context) -> Native | None:
    if len(op.operands) != 3:
        return None
    cache, value, at = (v.type for v in op.operands)
    if at != TensorType((), "i32") or cache.rank != 4 or op.results[0].type != cache:
        return None
    if value != TensorType((cache.shape[0], cache.shape[1], 1, cache.shape[3]), cache.dtype):
        return None
    return Native(
        "std.nn.cache::write_at", write_at, lambda a: f"natives.write_at({a[0]}, {a[1]}, {a[2]})"
    )


def write_span_in_place(cache: torch.Tensor, value: torch.Tensor, start: int) -> torch.Tensor:
    """`write_span` into `cache` itself (a donated state); see `write_span`."""
    if not _in_place(cache, value):
        return write_span(cache, value, start)
    size, count = cache.shape[2], value.shape[2]
    low, high = max(start, 0), min(start + count, size)
    if low < high and not native_write_span(cache, value, low, high, start):
        cache[:, :, low:high] = value[:, :, low - start : high - start]
    return cache


def write_span_at(cache: torch.Tensor, value: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
    """`write_span` at a position known only at run time, on the CPU (reading it is free)."""
    return write_span(cache, value, int(at))


def write_span_at_in_place(
    cache: torch.Tensor, value: torch.Tensor, at: torch.Tensor
) -> torch.Tensor:
    """`write_span_in_place` at a position known only at run time, on the CPU."""
    return write_span_in_place(cache, value, int(at))


def find_write_span(op: Op, context: Context) -> Native | None:
    """`write_span` at a known position, or on the CPU at any position (a decode step's
    `position` is an input: read on the host, it saves the canonical body's select over
    the whole cache); into the cache itself when it is donated."""
    if len(op.operands) != 3:
        return None
    cache, value, at = (v.type for v in op.operands)
    known = context.known(op.operands[2])
    if at != TensorType((), "i32") or cache.rank != 4 or value.rank != 4:
        return None
    if known is None and context.device.type != "cpu":
        return None
    if cache.dtype != value.dtype or op.results[0].type != cache:
        return None
    if (cache.shape[0], cache.shape[1], cache.shape[3]) != (
        value.shape[0],
        value.shape[1],
        value.shape[3],
    ):
        return None
    donated = op.operands[0] in context.donated
    if known is None:
        kernel = "write_span_at_in_place" if donated else "write_span_at"
        return Native(
            "std.nn.cache::write_span",
            globals()[kernel],
            lambda a: f"natives.{kernel}({a[0]}, {a[1]}, {a[2]})",
        )
    start = int(known)
    write = write_span_in_place if donated else write_span
    spelled = "write_span_in_place" if donated else "write_span"
    return Native(
        "std.nn.cache::write_span",
        lambda c, v, _at: write(c, v, start),
        lambda a: f"natives.{spelled}({a[0]}, {a[1]}, {start})",
    )


FINDERS: dict[str, Finder] = {
    "std.nn.linear::linear": find_linear,
    "std.nn.norm::rms_norm": find_rms_norm,
    "std.nn.softmax::softmax": find_softmax,
    "std.nn.activations::silu": _find_elementwise("std.nn.activations::silu", F.silu, "F.silu"),
    "std.nn.activations::sigmoid": _find_elementwise(
        "std.nn.activations::sigmoid", torch.sigmoid, "torch.sigmoid"
    ),
    "std.nn.activations::gelu_erf": _find_elementwise(
        "std.nn.activations::gelu_erf", gelu_erf, "natives.gelu_erf"
    ),
    "std.nn.activations::relu": _find_elementwise(
        "std.nn.activations::relu", torch.relu, "torch.relu"
    ),
    "std.nn.norm::layer_norm": find_layer_norm,
    "std.nn.norm::batch_norm": find_batch_norm,
    "std.nn.norm::group_norm": find_group_norm,
    "std.nn.rope::rope": find_rope,
    "std.nn.attention::attention": find_attention,
    "std.nn.attention::grouped_attention": find_attention,
    "std.nn.cache::write_at": find_write_at,
    "std.nn.cache::write_span": find_write_span,
    "std.quant::linear_int8": _find_quantised_linear(
        "std.quant::linear_int8", linear_int8, (3, 4), "linear_int8_many"
    ),
    "std.quant::linear_int4_groups": _find_quantised_linear(
        "std.quant::linear_int4_groups", linear_int4_groups, (4, 5), "linear_int4_groups_many"
    ),
    "std.quant::linear_fp8": _find_quantised_linear("std.quant::linear_fp8", linear_fp8, (3, 4)),
    "std.quant::linear_mxfp4": _find_quantised_linear(
        "std.quant::linear_mxfp4", linear_mxfp4, (3, 4)
    ),
    "std.nn.cache::write_rows": find_write_rows,
    "std.nn.cache::write_slots": find_write_slots,
    "std.nn.loss::linear_token_log_probs": find_linear_loss,
    "std.nn.loss::linear_cross_entropy": find_linear_loss,
}


def _find_collective(op: Op, context: Context) -> Native | None:
    """`std.nn.parallel` calls marked by a tensor-parallel load (`linnet.torch.parallel`)."""
    from linnet.torch import parallel

    found = parallel.find_collective(op)
    if found is None:
        return None
    kernel, spelled = found
    return Native(str(op.attrs["callee"]), kernel, lambda names: spelled.format(*names))


for _callee in ("all_reduce", "all_gather", "shared"):
    FINDERS[f"std.nn.parallel::{_callee}"] = _find_collective


def tp_all_reduce(x: torch.Tensor) -> torch.Tensor:
    """Generated code's name for `linnet.torch.parallel.all_reduce`."""
    from linnet.torch import parallel

    return parallel.all_reduce(x)


def tp_shared(x: torch.Tensor) -> torch.Tensor:
    from linnet.torch import parallel

    return parallel.shared(x)


def tp_all_gather(x: torch.Tensor, shards: int) -> torch.Tensor:
    from linnet.torch import parallel

    return parallel.all_gather(x, shards)


def find_native(op: Op, context: Context) -> Native | None:
    """A native kernel for the `call` op `op`, or None to run its canonical body."""
    if "kernel_instance" in op.attrs:  # an op naming a kernel (language-extensions 4.5)
        from linnet.torch.triton_kernels import kernel_native

        launched: Native | None = kernel_native(op, context)
        if launched is not None:
            return launched
    finder = FINDERS.get(str(op.attrs.get("callee", "")))
    return None if finder is None else finder(op, context)
