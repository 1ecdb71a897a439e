"""The PyTorch op table: one kernel maker per Core IR op kind.

Stage: backend (architecture.md, "Backends"). Input: one `Op` whose shapes are
static. Output: a `Kernel`, a function over storage tensors (see
`linnet.torch.dtypes`) that computes the op exactly as the NumPy reference
interpreter does (`linnet.ir.interp`): integers bit for bit, floats within the
shared tolerance. Both the interpreted runner and the generated source use
these kernels; the code generator spells the common cases inline and calls the
helpers here for the rest, so the two paths share one set of semantics.

Where torch and the Linnet semantics part ways the kernel says so:
- integer `div` truncates (`rounding_mode="trunc"`) and `rem` is `torch.fmod`,
  not torch's floor `%` (language.md 7.5);
- `reduce` with no axes is the identity (torch reads `dim=()` as "all axes"),
  reduces in the operand dtype (torch sums small ints into i64), and gives the
  8.6 identities over empty axes (`torch.amax` refuses them);
- `u16`/`u32` live in a wider signed dtype and are masked after every op that
  can leave their range; `u64` lives in `int64` with unsigned comparisons,
  division, `shr`, `max`/`min` and conversions written out below;
- integer `contract` on a non-CPU device (CUDA has no integer matmul) falls
  back to a broadcast product and sum.

Control flow (`while`, `if`), `call` and the path reads (`param`, `buffer`,
`state`) need the runner's environment and are not in this table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from linnet.errors import InternalError
from linnet.ir.core import Op, TensorType, Value
from linnet.ir.ops import BINARY_KINDS, UNARY_KINDS
from linnet.torch.dtypes import FLOATS, MASKED, highest, lowest, storage, to_torch

Kernel = Callable[..., torch.Tensor]


class Context:
    """What a kernel maker may know beyond the op: the device, constant operands, producers."""

    def __init__(
        self,
        device: torch.device,
        constants: Mapping[Value, np.ndarray[Any, Any]] | None = None,
        producers: Mapping[Value, Op] | None = None,
    ) -> None:
        self.device = device
        self.constants: Mapping[Value, np.ndarray[Any, Any]] = constants or {}
        self.producers: Mapping[Value, Op] = producers or {}
        # State reads a cache write may update in place (`linnet.torch.codegen.donated_states`)
        self.donated: frozenset[Value] = frozenset()

    @classmethod
    def of(cls, ops: Iterable[Op], device: torch.device) -> Context:
        """The context of a function whose ops (nested ones included) are `ops`."""
        constants: dict[Value, np.ndarray[Any, Any]] = {}
        producers: dict[Value, Op] = {}
        for op in ops:
            for result in op.results:
                producers[result] = op
            if op.kind == "const":
                value = op.attrs["value"]
                assert isinstance(value, np.ndarray)
                constants[op.results[0]] = value
        return cls(device, constants, producers)

    def known(self, value: Value) -> np.ndarray[Any, Any] | None:
        """The value of `value` when it is a compile-time constant, else None."""
        return self.constants.get(value)

    def producer(self, value: Value) -> Op | None:
        """The op defining `value` (None for region arguments)."""
        return self.producers.get(value)


Maker = Callable[[Op, Context], Kernel]

_SIGN = -(2**63)  # the int64 sign bit: XOR with it maps u64 order onto i64 order
_LOW63 = 2**63 - 1


def ints(op: Op, key: str) -> tuple[int, ...]:
    """A tuple-of-ints attr (shapes, axes, permutations)."""
    value = op.attrs[key]
    if not isinstance(value, tuple):
        raise InternalError(f"op {op.kind}: attr {key} is not a tuple")
    return tuple(int(v) for v in value)


def int_attr(op: Op, key: str) -> int:
    value = op.attrs[key]
    if not isinstance(value, int):
        raise InternalError(f"op {op.kind}: attr {key} is not an int")
    return value


def _dtype_of(op: Op) -> str:
    """The operand dtype an elementwise op works in."""
    return op.operands[0].type.dtype if op.operands else op.results[0].type.dtype


def _masked(kernel: Kernel, mask: int) -> Kernel:
    def run(*args: torch.Tensor) -> torch.Tensor:
        return torch.bitwise_and(kernel(*args), mask)

    return run


# -- u64 helpers (int64 storage, unsigned meaning) -------------------------------------------


def u64_key(x: torch.Tensor) -> torch.Tensor:
    """An int64 tensor ordered as the u64 values of `x` (flip the sign bit)."""
    return torch.bitwise_xor(x, _SIGN)


def u64_shr(x: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    """Logical right shift of u64 bit patterns."""
    bits = torch.as_tensor(bits, device=x.device)
    halved = torch.bitwise_and(torch.bitwise_right_shift(x, 1), _LOW63)
    shifted = torch.bitwise_right_shift(halved, torch.clamp(bits - 1, min=0))
    # Amounts outside 0..63 give 0, as in the reference (language.md 10.3 leaves them open).
    shifted = torch.where(bits < 0, torch.zeros_like(shifted), shifted)
    return torch.where(bits == 0, x, shifted)


def u64_divmod(n: torch.Tensor, d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Unsigned 64-bit quotient and remainder from signed int64 arithmetic.

    For a divisor below 2^63: `q = 2 * ((n >>> 1) // d)` leaves `n - q*d` in
    `[0, 2d)`, so one unsigned comparison corrects it (Hacker's Delight 9-3).
    A divisor with the top bit set goes into `n` at most once.
    """
    big = d < 0
    safe_d = torch.where(big, torch.ones_like(d), d)
    half = torch.bitwise_and(torch.bitwise_right_shift(n, 1), _LOW63)
    q = torch.bitwise_left_shift(torch.div(half, safe_d, rounding_mode="floor"), 1)
    r = n - q * safe_d
    fix = u64_key(r) >= u64_key(safe_d)
    q = torch.where(fix, q + 1, q)
    r = torch.where(fix, r - safe_d, r)
    ge = u64_key(n) >= u64_key(d)
    q = torch.where(big, ge.to(torch.int64), q)
    r = torch.where(big, torch.where(ge, n - d, n), r)
    return q, r


def u64_div(n: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    return u64_divmod(n, d)[0]


def u64_rem(n: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    return u64_divmod(n, d)[1]


def u64_max(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.where(u64_key(a) >= u64_key(b), a, b)


def u64_min(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.where(u64_key(a) <= u64_key(b), a, b)


def u64_to_float(x: torch.Tensor, target: torch.dtype) -> torch.Tensor:
    """u64 bit patterns to a float dtype, rounding once (halve with a sticky bit, then double)."""
    halved = torch.bitwise_or(
        torch.bitwise_and(torch.bitwise_right_shift(x, 1), _LOW63), torch.bitwise_and(x, 1)
    )
    wide = torch.float64 if target == torch.float64 else torch.float32
    high = halved.to(wide) * 2.0
    return torch.where(x >= 0, x.to(wide), high).to(target)


def float_to_u64(x: torch.Tensor) -> torch.Tensor:
    """Floats to u64 bit patterns (truncating; values from 2^63 up wrap into the sign bit)."""
    wide = x.to(torch.float64)
    top = 2.0**63
    high = (wide - top).to(torch.int64) + _SIGN
    return torch.where(wide >= top, high, wide.to(torch.int64))


# -- sources and casts ---------------------------------------------------------------------


def make_const(op: Op, context: Context) -> Kernel:
    tensor = to_torch(op.attrs["value"], op.results[0].type.dtype, context.device)
    return lambda: tensor


def make_iota(op: Op, context: Context) -> Kernel:
    t = op.results[0].type
    tensor = torch.arange(t.shape[0], dtype=storage(t.dtype), device=context.device)
    return lambda: tensor


def cast_kernel(source: str, target: str) -> Kernel:
    """Value conversion of language.md 10.3 between storage tensors."""
    held = storage(target)
    if source == target:
        return lambda x: x
    if source == "u64" and target in FLOATS:
        return lambda x: u64_to_float(x, held)
    if target == "u64":
        if source in FLOATS:
            return float_to_u64
        return lambda x: x.to(torch.int64)
    if target in MASKED:
        mask = MASKED[target]
        return lambda x: torch.bitwise_and(x.to(torch.int64), mask).to(held)
    if source in FLOATS and target not in FLOATS and target not in ("bool", "i64"):
        # Truncate into i64 first, then wrap to the width, as the reference does
        # (out-of-range values are undefined in 10.3; this keeps the backends equal).
        return lambda x: x.to(torch.int64).to(held)
    return lambda x: x.to(held)


def make_cast(op: Op, context: Context) -> Kernel:
    return cast_kernel(op.operands[0].type.dtype, op.results[0].type.dtype)


# -- elementwise -------------------------------------------------------------------------------

_FLOAT_UNARY: dict[str, Kernel] = {
    "exp": torch.exp,
    "log": torch.log,
    "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt,
    "sin": torch.sin,
    "cos": torch.cos,
    "tanh": torch.tanh,
}


def make_unary(op: Op, context: Context) -> Kernel:
    kind, dtype = op.kind, _dtype_of(op)
    if kind in _FLOAT_UNARY:
        return _FLOAT_UNARY[kind]
    if kind == "abs":
        return (lambda x: x) if dtype.startswith("u") else torch.abs
    base: Kernel = torch.neg if kind == "neg" else torch.bitwise_not
    return _masked(base, MASKED[dtype]) if dtype in MASKED else base


def _trunc_div(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.div(a, b, rounding_mode="trunc")


def _guarded(kernel: Kernel, quotient: bool, signed_wide: bool) -> Kernel:
    """Integer `div`/`rem` that never traps, matching the reference interpreter.

    torch raises on an integer divisor 0 and the CPU traps (SIGFPE, killing the
    process) on `INT_MIN / -1` in i32/i64. The language leaves both undefined;
    the reference gives 0 for a zero divisor and the wrapped `-a` (remainder 0)
    for -1, so this kernel does too.
    """

    def run(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        bad = b == 0
        if signed_wide:
            minus_one = b == -1
            bad = bad | minus_one
        out = kernel(a, torch.where(bad, torch.ones_like(b), b))
        if signed_wide and quotient:
            out = torch.where(minus_one, torch.neg(a), out)
        return torch.where(b == 0, torch.zeros_like(out), out)

    return run


def _unsigned_compare(compare: Kernel) -> Kernel:
    return lambda a, b: compare(u64_key(a), u64_key(b))


_BINARY: dict[str, Kernel] = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "rem": torch.fmod,
    "max": torch.maximum,
    "min": torch.minimum,
    "and": torch.bitwise_and,
    "or": torch.bitwise_or,
    "xor": torch.bitwise_xor,
    "shl": torch.bitwise_left_shift,
    "shr": torch.bitwise_right_shift,
    "eq": torch.eq,
    "ne": torch.ne,
    "lt": torch.lt,
    "le": torch.le,
    "gt": torch.gt,
    "ge": torch.ge,
}
_U64_BINARY: dict[str, Kernel] = {
    "div": u64_div,
    "rem": u64_rem,
    "max": u64_max,
    "min": u64_min,
    "shr": u64_shr,
    **{k: _unsigned_compare(_BINARY[k]) for k in ("lt", "le", "gt", "ge")},
}
_LEAVES_RANGE = frozenset({"add", "sub", "mul", "shl"})


def binary_kernel(kind: str, dtype: str, divisor: np.ndarray[Any, Any] | None = None) -> Kernel:
    """The kernel of binary `kind` on operands of Linnet `dtype`.

    `divisor` is the right operand's value when it is a known constant: an
    integer `div`/`rem` by constants without 0 (or -1 in i32/i64) skips the
    guards of `_guarded`.
    """
    if dtype in FLOATS:
        return torch.div if kind == "div" else _BINARY[kind]
    if kind in ("div", "rem"):
        base = _U64_BINARY[kind] if dtype == "u64" else _trunc_div if kind == "div" else torch.fmod
        signed_wide = dtype in ("i32", "i64")
        if divisor is not None:
            stored = np.asarray(divisor)
            if not np.any(stored == 0) and not (signed_wide and np.any(stored == -1)):
                return base
        return _guarded(base, kind == "div", signed_wide)
    if dtype == "u64" and kind in _U64_BINARY:
        return _U64_BINARY[kind]
    base = _BINARY[kind]
    if dtype in MASKED and kind in _LEAVES_RANGE:
        return _masked(base, MASKED[dtype])
    return base


def make_binary(op: Op, context: Context) -> Kernel:
    divisor = context.known(op.operands[1]) if op.kind in ("div", "rem") else None
    return binary_kernel(op.kind, _dtype_of(op), divisor)


def make_select(op: Op, context: Context) -> Kernel:
    return torch.where


# -- shape ops -----------------------------------------------------------------------------


def make_broadcast(op: Op, context: Context) -> Kernel:
    shape = ints(op, "shape")
    return lambda x: x.expand(shape)


def make_reshape(op: Op, context: Context) -> Kernel:
    shape = ints(op, "shape")
    return lambda x: x.reshape(shape)


def make_permute(op: Op, context: Context) -> Kernel:
    perm = ints(op, "perm")
    return lambda x: x.permute(perm)


def slice_index(op: Op) -> tuple[slice, ...]:
    """The Python index of a `slice` op (stop clamped like language.md 9.3)."""
    bounds = zip(ints(op, "start"), ints(op, "stop"), ints(op, "step"), strict=True)
    return tuple(slice(s, e, k) for s, e, k in bounds)


def make_slice(op: Op, context: Context) -> Kernel:
    index = slice_index(op)
    return lambda x: x[index]


def make_concat(op: Op, context: Context) -> Kernel:
    axis = int_attr(op, "axis")
    return lambda *xs: torch.cat(xs, dim=axis)


def cumsum(x: torch.Tensor, axis: int) -> torch.Tensor:
    """Running sums in `x`'s own dtype: `torch.cumsum` widens integers to int64 unless told."""
    return torch.cumsum(x, dim=axis, dtype=x.dtype)


def make_cumsum(op: Op, context: Context) -> Kernel:
    axis = int_attr(op, "axis")
    return lambda x: cumsum(x, axis)


def gather(x: torch.Tensor, indices: torch.Tensor, axis: int) -> torch.Tensor:
    """`numpy.take(x, indices, axis)` (rank-0 indices remove the axis)."""
    picked = torch.index_select(x, axis, indices.reshape(-1).to(torch.int64))
    shape = x.shape[:axis] + indices.shape + x.shape[axis + 1 :]
    return picked.reshape(shape)


def make_gather(op: Op, context: Context) -> Kernel:
    axis = int_attr(op, "axis")
    return lambda x, i: gather(x, i, axis)


def take(x: torch.Tensor, *indices: torch.Tensor) -> torch.Tensor:
    """`x[i_0, ..., i_{r-1}]`, NumPy advanced indexing with one index tensor per axis."""
    if not indices:
        return x
    return x[tuple(i.to(torch.int64) for i in indices)]


def make_take(op: Op, context: Context) -> Kernel:
    return take


# -- reductions and contraction ---------------------------------------------------------------


def reduce_kernel(kind: str, dtype: str, shape: Sequence[int], axes: Sequence[int]) -> Kernel:
    """`reduce {kind, axes}` over a tensor of static `shape` and Linnet `dtype` (8.6)."""
    axes = tuple(axes)
    if not axes:
        return lambda x: x
    out_shape = tuple(d for i, d in enumerate(shape) if i not in axes)
    if any(shape[a] == 0 for a in axes):
        fill = _empty_value(kind, dtype)
        held = storage(dtype)
        return lambda x: torch.full(out_shape, fill, dtype=held, device=x.device)
    held = storage(dtype)
    mask = MASKED.get(dtype)
    if kind == "sum":
        base: Kernel = lambda x: torch.sum(x, dim=axes, dtype=held)  # noqa: E731
    elif kind == "prod":
        base = _prod_kernel(shape, axes, held)
    elif kind in ("max", "min"):
        pick = torch.amax if kind == "max" else torch.amin
        if dtype == "u64":
            return lambda x: u64_key(pick(u64_key(x), dim=axes))
        base = lambda x: pick(x, dim=axes)  # noqa: E731
    elif kind == "any":
        base = lambda x: torch.any(x, dim=axes)  # noqa: E731
    elif kind == "all":
        base = lambda x: torch.all(x, dim=axes)  # noqa: E731
    else:
        raise InternalError(f"unknown reduction {kind!r}")
    return _masked(base, mask) if mask is not None and kind in ("sum", "prod") else base


def _empty_value(kind: str, dtype: str) -> float | int | bool:
    return {
        "sum": 0,
        "prod": 1,
        "any": False,
        "all": True,
        "max": lowest(dtype),
        "min": highest(dtype),
    }[kind]


def _prod_kernel(shape: Sequence[int], axes: tuple[int, ...], held: torch.dtype) -> Kernel:
    """`torch.prod` takes one axis: move the reduced axes last, flatten them, reduce."""
    rank = len(shape)
    if len(axes) == 1:
        (axis,) = axes
        return lambda x: torch.prod(x, dim=axis, dtype=held)
    kept = [i for i in range(rank) if i not in axes]
    perm = (*kept, *axes)
    flat = (*(shape[i] for i in kept), -1)
    return lambda x: torch.prod(x.permute(perm).reshape(flat), dim=-1, dtype=held)


def make_reduce(op: Op, context: Context) -> Kernel:
    x = op.operands[0].type
    kind = str(op.attrs["kind"])
    axes = ints(op, "axes")
    return reduce_kernel(kind, x.dtype, x.shape, axes)


class ContractPlan:
    """`dot_general` as one batched matmul: lhs -> [B, M, K], rhs -> [B, K, N].

    Permutations and reshapes are decided once from the static shapes. The
    result axes are batch, lhs free, rhs free (the IR contract). With no batch
    axes the product is a plain 2-D `matmul`, which also serves autograd well.
    """

    def __init__(
        self,
        lhs_shape: Sequence[int],
        rhs_shape: Sequence[int],
        lhs_batch: Sequence[int],
        rhs_batch: Sequence[int],
        lhs_contract: Sequence[int],
        rhs_contract: Sequence[int],
    ) -> None:
        lhs_free = [i for i in range(len(lhs_shape)) if i not in (*lhs_batch, *lhs_contract)]
        rhs_free = [i for i in range(len(rhs_shape)) if i not in (*rhs_batch, *rhs_contract)]
        self.lhs_perm = (*lhs_batch, *lhs_free, *lhs_contract)
        self.rhs_perm = (*rhs_batch, *rhs_contract, *rhs_free)
        batch = _product(lhs_shape[i] for i in lhs_batch)
        m = _product(lhs_shape[i] for i in lhs_free)
        k = _product(lhs_shape[i] for i in lhs_contract)
        n = _product(rhs_shape[i] for i in rhs_free)
        self.batched = bool(lhs_batch)
        self.lhs_flat = (batch, m, k) if self.batched else (m, k)
        self.rhs_flat = (batch, k, n) if self.batched else (k, n)
        self.out_shape = (
            *(lhs_shape[i] for i in lhs_batch),
            *(lhs_shape[i] for i in lhs_free),
            *(rhs_shape[i] for i in rhs_free),
        )
        self.identity_lhs = self.lhs_perm == tuple(range(len(lhs_shape)))
        self.identity_rhs = self.rhs_perm == tuple(range(len(rhs_shape)))

    def lhs(self, x: torch.Tensor) -> torch.Tensor:
        if not self.identity_lhs:
            x = x.permute(self.lhs_perm)
        return x.reshape(self.lhs_flat)

    def rhs(self, y: torch.Tensor) -> torch.Tensor:
        if not self.identity_rhs:
            y = y.permute(self.rhs_perm)
        return y.reshape(self.rhs_flat)

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.matmul(self.lhs(x), self.rhs(y)).reshape(self.out_shape)

    def by_sum(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The same product as a broadcast multiply and sum (integer dtypes off the CPU)."""
        a = self.lhs(x).unsqueeze(-1)  # [B, M, K, 1]
        b = self.rhs(y).unsqueeze(-3)  # [B, 1, K, N]
        return torch.sum(a * b, dim=-2, dtype=x.dtype).reshape(self.out_shape)


def _product(dims: Any) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n


def contract_plan(op: Op) -> ContractPlan:
    return ContractPlan(
        op.operands[0].type.shape,
        op.operands[1].type.shape,
        *(ints(op, k) for k in ("lhs_batch", "rhs_batch", "lhs_contract", "rhs_contract")),
    )


def make_contract(op: Op, context: Context) -> Kernel:
    plan = contract_plan(op)
    dtype = _dtype_of(op)
    kernel: Kernel = plan
    if dtype not in FLOATS and context.device.type != "cpu":
        kernel = plan.by_sum
    if dtype in MASKED:
        kernel = _masked(kernel, MASKED[dtype])
    return kernel


MAKERS: dict[str, Maker] = {
    "const": make_const,
    "iota": make_iota,
    "cast": make_cast,
    **dict.fromkeys(UNARY_KINDS, make_unary),
    **dict.fromkeys(BINARY_KINDS, make_binary),
    "select": make_select,
    "broadcast": make_broadcast,
    "reshape": make_reshape,
    "permute": make_permute,
    "slice": make_slice,
    "concat": make_concat,
    "cumsum": make_cumsum,
    "gather": make_gather,
    "take": make_take,
    "reduce": make_reduce,
    "contract": make_contract,
}
"""Kernel makers for every op kind that needs no environment (all but control flow,
`call` and the path reads)."""


def kernel_for(
    kind: str,
    operands: Sequence[TensorType],
    results: Sequence[TensorType],
    attrs: Mapping[str, object],
    device: torch.device | None = None,
) -> Kernel:
    """The kernel of one op rebuilt from its description (the generated standalone source
    calls this for its fallback kernels; no operand is known, so guards stay in)."""
    op = Op(kind, tuple(Value(t) for t in operands), tuple(Value(t) for t in results), dict(attrs))
    return make_kernel(op, Context.of([op], device or torch.device("cpu")))


def make_kernel(op: Op, context: Context) -> Kernel:
    """The kernel computing `op` on storage tensors placed on `context.device`."""
    maker = MAKERS.get(op.kind)
    if maker is None:
        raise InternalError(f"the PyTorch backend has no kernel for op {op.kind!r}")
    return maker(op, context)
