"""NumPy kernels of the reference interpreter: the exact semantics of every region-free op.

Stage: used by `linnet.ir.interp` (the oracle every backend is compared with)
and by constant folding. Input: an `Op` and NumPy arrays of its operands' exact
dtypes; output: one array of the op's result type. `KERNELS` is a table keyed
by op kind; a backend mirrors it with its own spelling of each op.

Numeric choices (each one the contract backends are tested against):
- Integer arithmetic wraps at the dtype's width (language.md 7.5). `div` and
  `rem` truncate toward zero, C-style (`rem` takes the dividend's sign), unlike
  NumPy's and PyTorch's floor `//` and `%`. Integer division or remainder by
  zero is undefined in the language; this reference returns 0 (NumPy's result).
  Float `rem` is C `fmod`; float `div` is IEEE.
- Shifts (language.md 10.3): an amount outside `0 .. width-1` (negative
  included) gives 0 for `shl`; for `shr` it gives the sign fill (0 for unsigned
  or non-negative values, -1 for negative signed values), i.e. the amount is
  clamped to `width - 1`. The language leaves this backend-defined; these are
  the values the constant folder of 10.3 produces for in-range dtypes.
- Casts (language.md 10.3): float -> int truncates toward zero (out of range
  and NaN are undefined), int -> int wraps, bool -> 0/1, number -> bool is
  `!= 0`, float -> float rounds to nearest even (into bf16 by `ir.convert`, our
  own rounding, never a library's). NOTE: f64 and integer values convert to
  bf16 through f32, as PyTorch does;
  that double rounding can differ from one direct rounding by one bf16 ulp on
  near-ties, within the bf16 tolerance of the numeric contract.
- f16 and bf16 arithmetic computes in f32 and rounds once per op; the float
  functions (`exp`, `log`, `sqrt`, `rsqrt`, `sin`, `cos`, `tanh`) of every
  float dtype below f64 compute in f64 and round once. Sums,
  products and contractions of every float dtype below f64 accumulate in f64
  and round once, so the oracle is as close to the exact result as its dtype
  allows; backends may accumulate in their own order within the tolerance.
- Empty reductions (language.md 8.6): sum 0, prod 1, any false, all true,
  max the lowest value (-inf for floats, the identity XLA uses), min the highest.
- `max`/`min` propagate NaN. Out-of-range runtime indices of `gather`/`take` are
  backend-defined (language.md 9.2); this reference raises a `LinnetError`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from linnet.errors import InternalError, LinnetError
from linnet.ir.convert import convert
from linnet.ir.core import FLOAT_DTYPES, SIGNED_DTYPES, Op, TensorType, dtype_bits, numpy_dtype
from linnet.ir.ops import FLOAT_UNARY

Array = npt.NDArray[Any]
Kernel = Callable[[Op, Sequence[Array]], Array]

_LOW_FLOATS = frozenset({"f16", "bf16"})


def result_type(op: Op) -> TensorType:
    return op.results[0].type


def finish(op: Op, value: object) -> Array:
    """Coerce a kernel's output to the exact result type (wrapping ints, rounding floats)."""
    t = result_type(op)
    array = np.asarray(value)
    target = numpy_dtype(t.dtype)
    if array.dtype != target:
        array = convert(array, target)
    if array.shape != t.shape:
        raise InternalError(f"kernel {op.kind} produced shape {array.shape}, expected {t}")
    return array


def _widen(args: Sequence[Array], dtype: str) -> list[Array]:
    """f16/bf16 arithmetic runs in f32 (exact or rounded once), other dtypes natively."""
    if dtype in _LOW_FLOATS:
        return [a.astype(np.float32) for a in args]
    return list(args)


# -- sources and casts ----------------------------------------------------------------------


def kernel_const(op: Op, args: Sequence[Array]) -> Array:
    value = op.attrs["value"]
    assert isinstance(value, np.ndarray)
    return finish(op, value)


def kernel_iota(op: Op, args: Sequence[Array]) -> Array:
    t = result_type(op)
    return finish(op, np.arange(t.shape[0], dtype=np.int64).astype(numpy_dtype(t.dtype)))


def kernel_cast(op: Op, args: Sequence[Array]) -> Array:
    (x,) = args
    source = op.operands[0].type.dtype
    target = result_type(op).dtype
    if source in FLOAT_DTYPES and target not in FLOAT_DTYPES and target != "bool":
        # float -> int truncates toward zero (language.md 10.3); go through f64 so
        # that every integer the float holds survives, then wrap to the width.
        truncated = np.trunc(x.astype(np.float64))
        if target in SIGNED_DTYPES or dtype_bits(target) < 64:
            return finish(op, truncated.astype(np.int64).astype(numpy_dtype(target)))
        return finish(op, truncated.astype(np.uint64))
    return finish(op, convert(x, numpy_dtype(target)))


# -- elementwise ------------------------------------------------------------------------------


def _unary(fn: Callable[[Array], Array], transcendental: bool) -> Kernel:
    def kernel(op: Op, args: Sequence[Array]) -> Array:
        (x,) = args
        if transcendental:
            x = x.astype(np.float64)
        return finish(op, fn(x))

    return kernel


def _rsqrt(x: Array) -> Array:
    one = np.ones((), dtype=x.dtype)
    result: Array = one / np.sqrt(x)
    return result


def _abs(x: Array) -> Array:
    if x.dtype.kind == "u":
        return x
    result: Array = np.abs(x)
    return result


def _neg(x: Array) -> Array:
    if x.dtype.kind == "u":
        # Two's-complement negation of an unsigned value wraps (0 - x).
        return np.subtract(np.zeros((), x.dtype), x)
    result: Array = np.negative(x)
    return result


def _trunc_div(a: Array, b: Array) -> Array:
    if a.dtype.kind == "f":
        result: Array = np.true_divide(a, b)
        return result
    if a.dtype.kind == "u":
        return np.floor_divide(a, b)
    safe_b = np.where(b == 0, np.ones((), b.dtype), b)
    # a - fmod(a, b) is an exact multiple of b and cannot overflow; the quotient
    # of that multiple is exact, so floor and truncation agree on it.
    quotient: Array = np.floor_divide(a - np.fmod(a, safe_b), safe_b)
    return np.where(b == 0, np.zeros((), a.dtype), quotient)


def _trunc_rem(a: Array, b: Array) -> Array:
    result: Array = np.fmod(a, b)
    return result


def _shift_left(x: Array, amount: Array) -> Array:
    width = x.dtype.itemsize * 8
    in_range = (amount >= 0) & (amount < width)
    clamped = np.where(in_range, amount, np.zeros((), amount.dtype))
    return np.where(in_range, np.left_shift(x, clamped), np.zeros((), x.dtype))


def _shift_right(x: Array, amount: Array) -> Array:
    width = x.dtype.itemsize * 8
    in_range = (amount >= 0) & (amount < width)
    clamped = np.where(in_range, amount, np.asarray(width - 1, amount.dtype))
    # NumPy's right_shift is arithmetic on signed and logical on unsigned dtypes,
    # as the language requires; shifting by width-1 leaves the sign fill for
    # signed values, and 0 for unsigned ones needs one more step.
    shifted: Array = np.right_shift(x, clamped)
    if x.dtype.kind == "u":
        shifted = np.where(in_range, shifted, np.zeros((), x.dtype))
    return shifted


_UNARY: dict[str, Callable[[Array], Array]] = {
    "neg": _neg,
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": _rsqrt,
    "sin": np.sin,
    "cos": np.cos,
    "tanh": np.tanh,
    "abs": _abs,
    "not": np.invert,  # bitwise on integers, logical on bool
}

_BINARY: dict[str, Callable[[Array, Array], Array]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": _trunc_div,
    "rem": _trunc_rem,
    "max": np.maximum,
    "min": np.minimum,
    "and": np.bitwise_and,
    "or": np.bitwise_or,
    "xor": np.bitwise_xor,
    "shl": _shift_left,
    "shr": _shift_right,
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
}


def _binary(fn: Callable[[Array, Array], Array]) -> Kernel:
    def kernel(op: Op, args: Sequence[Array]) -> Array:
        a, b = _widen(args, op.operands[0].type.dtype)
        return finish(op, fn(a, b))

    return kernel


def kernel_select(op: Op, args: Sequence[Array]) -> Array:
    cond, a, b = args
    return finish(op, np.where(cond, a, b))


# -- shape ops --------------------------------------------------------------------------------


def kernel_broadcast(op: Op, args: Sequence[Array]) -> Array:
    return finish(op, np.broadcast_to(args[0], result_type(op).shape))


def kernel_reshape(op: Op, args: Sequence[Array]) -> Array:
    return finish(op, np.reshape(args[0], result_type(op).shape))


def kernel_permute(op: Op, args: Sequence[Array]) -> Array:
    perm = op.attrs["perm"]
    assert isinstance(perm, tuple)
    return finish(op, np.transpose(args[0], perm))


def kernel_slice(op: Op, args: Sequence[Array]) -> Array:
    start, stop, step = (op.attrs[k] for k in ("start", "stop", "step"))
    assert isinstance(start, tuple) and isinstance(stop, tuple) and isinstance(step, tuple)
    index = tuple(slice(a, b, c) for a, b, c in zip(start, stop, step, strict=True))
    return finish(op, args[0][index])


def kernel_cumsum(op: Op, args: Sequence[Array]) -> Array:
    """Running sums in the operand's own dtype (language-extensions 5.2): integers wrap,
    f32/f64 add in their dtype, f16/bf16 add in f32 and round to the dtype at every step."""
    (x,) = args
    axis = op.attrs["axis"]
    assert isinstance(axis, int)
    dtype = op.operands[0].type.dtype
    if dtype not in _LOW_FLOATS:
        with np.errstate(over="ignore"):
            return finish(op, np.cumsum(x, axis=axis, dtype=x.dtype))
    target = numpy_dtype(dtype)
    steps = np.moveaxis(x, axis, 0)
    out = np.empty(steps.shape, dtype=target)
    f32 = np.dtype(np.float32)
    running: Array = np.zeros(steps.shape[1:], dtype=f32)
    for i in range(steps.shape[0]):
        total: Array = np.add(running, convert(steps[i], f32))
        rounded = convert(total, target)
        out[i] = rounded
        running = convert(rounded, f32)
    return finish(op, np.moveaxis(out, 0, axis))


def kernel_concat(op: Op, args: Sequence[Array]) -> Array:
    axis = op.attrs["axis"]
    assert isinstance(axis, int)
    return finish(op, np.concatenate(list(args), axis=axis))


# -- indexing ---------------------------------------------------------------------------------


def _checked_index(op: Op, index: Array, extent: int) -> Array:
    bad = (index < 0) | (index >= extent) if index.dtype.kind == "i" else index >= extent
    if np.any(bad):
        first = index[bad].flat[0]
        raise LinnetError(f"op {op.kind}: index {first} is out of range for an axis of {extent}")
    return index.astype(np.int64)


def kernel_gather(op: Op, args: Sequence[Array]) -> Array:
    x, indices = args
    axis = op.attrs["axis"]
    assert isinstance(axis, int)
    return finish(op, np.take(x, _checked_index(op, indices, x.shape[axis]), axis=axis))


def kernel_take(op: Op, args: Sequence[Array]) -> Array:
    x, *indices = args
    checked = [_checked_index(op, i, d) for i, d in zip(indices, x.shape, strict=True)]
    if not checked:
        return finish(op, x)
    shape = np.broadcast_shapes(*(i.shape for i in checked))
    return finish(op, x[tuple(np.broadcast_to(i, shape) for i in checked)])


# -- reductions and contraction ---------------------------------------------------------------


def _accumulator(x: Array, dtype: str) -> Array:
    """Floats below f64 accumulate in f64; integers keep their dtype (sums wrap mod 2^w)."""
    return x.astype(np.float64) if dtype in FLOAT_DTYPES else x


def _identity(kind: str, dtype: str) -> Any:
    """Empty-domain value of max/min (language.md 8.6)."""
    if dtype in FLOAT_DTYPES:
        return -np.inf if kind == "max" else np.inf
    info = np.iinfo(numpy_dtype(dtype))
    return info.min if kind == "max" else info.max


def kernel_reduce(op: Op, args: Sequence[Array]) -> Array:
    (x,) = args
    kind = op.attrs["kind"]
    axes = op.attrs["axes"]
    assert isinstance(axes, tuple)
    dtype = op.operands[0].type.dtype
    if kind == "sum":
        return finish(op, np.sum(_accumulator(x, dtype), axis=axes, dtype=_sum_dtype(dtype)))
    if kind == "prod":
        return finish(op, np.prod(_accumulator(x, dtype), axis=axes, dtype=_sum_dtype(dtype)))
    if kind == "any":
        return finish(op, np.any(x, axis=axes))
    if kind == "all":
        return finish(op, np.all(x, axis=axes))
    values = _widen([x], dtype)[0]
    fn = np.max if kind == "max" else np.min
    return finish(op, fn(values, axis=axes, initial=_identity(str(kind), dtype)))


def _sum_dtype(dtype: str) -> np.dtype[Any]:
    # Integer sums/products keep the operand's width: wrapping per step and at
    # the end agree modulo 2^w, and NumPy would otherwise widen to 64 bits.
    return np.dtype(np.float64) if dtype in FLOAT_DTYPES else numpy_dtype(dtype)


_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def contract_subscripts(op: Op) -> str:
    """The `numpy.einsum` spec of a contract op: batch axes, lhs free, rhs free."""
    lb, rb, lc, rc = (
        op.attrs[k] for k in ("lhs_batch", "rhs_batch", "lhs_contract", "rhs_contract")
    )
    assert isinstance(lb, tuple) and isinstance(rb, tuple)
    assert isinstance(lc, tuple) and isinstance(rc, tuple)
    lhs_rank, rhs_rank = (v.type.rank for v in op.operands)
    letters = iter(_LETTERS)
    lhs = [""] * lhs_rank
    rhs = [""] * rhs_rank
    for a, b in zip(lb + lc, rb + rc, strict=True):
        lhs[a] = rhs[b] = next(letters)
    for axes in (lhs, rhs):
        for i, letter in enumerate(axes):
            if not letter:
                axes[i] = next(letters)
    batch = "".join(lhs[a] for a in lb)
    lhs_free = "".join(c for i, c in enumerate(lhs) if i not in lb + lc)
    rhs_free = "".join(c for i, c in enumerate(rhs) if i not in rb + rc)
    return f"{''.join(lhs)},{''.join(rhs)}->{batch}{lhs_free}{rhs_free}"


def kernel_contract(op: Op, args: Sequence[Array]) -> Array:
    dtype = op.operands[0].type.dtype
    lhs, rhs = (_accumulator(a, dtype) for a in args)
    return finish(op, np.einsum(contract_subscripts(op), lhs, rhs, optimize=True))


KERNELS: dict[str, Kernel] = {
    "const": kernel_const,
    "iota": kernel_iota,
    "cast": kernel_cast,
    **{kind: _unary(fn, kind in FLOAT_UNARY) for kind, fn in _UNARY.items()},
    **{kind: _binary(fn) for kind, fn in _BINARY.items()},
    "select": kernel_select,
    "broadcast": kernel_broadcast,
    "reshape": kernel_reshape,
    "permute": kernel_permute,
    "slice": kernel_slice,
    "concat": kernel_concat,
    "cumsum": kernel_cumsum,
    "gather": kernel_gather,
    "take": kernel_take,
    "reduce": kernel_reduce,
    "contract": kernel_contract,
}


def evaluate(op: Op, args: Sequence[Array]) -> Array:
    """Run one region-free, source-free op on NumPy operands (the constant folder's entry)."""
    kernel = KERNELS.get(op.kind)
    if kernel is None:
        raise InternalError(f"op {op.kind} has no NumPy kernel (it needs the interpreter)")
    with np.errstate(all="ignore"):  # wrapping, division by zero and NaN are defined above
        return kernel(op, args)
