"""Helpers shared by the ONNX operator translators: axes, dtypes, folding, small builders.

Stage: ONNX import, translation (`linnet.sourcegen.translate` drives it). The
translators in this package turn one ONNX node into Linnet statements through
a `Context`; what several operator families need lives here, so each family
module reads as a table of operators and their meaning.

Folding: when every input of a node is known at import time, a translator
computes its result with NumPy (`fold`) instead of emitting code, which is how
shape computations become compile-time values. Stored float tensors (weights)
are never folded: a `Transpose` of a weight stays code over the parameter, so
the parameter keeps its path and its bytes.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from linnet.check.dims import Dim
from linnet.ir.core import numpy_dtype
from linnet.sourcegen import build
from linnet.sourcegen.translate import Context, Translation, Unsupported
from linnet.sourcegen.values import FLOAT_DTYPES, INT_DTYPES, Value
from linnet.syntax import ast

__all__ = [
    "FLOAT_DTYPES",
    "INT_DTYPES",
    "SIGNED",
    "UNSIGNED",
    "axes_list",
    "cast",
    "dims_expr",
    "fold",
    "fold_ok",
    "int_dim",
    "norm_axis",
    "np_dtype",
    "operand",
    "require_float",
    "static_shape",
    "typed_literal",
]

SIGNED = frozenset({"i8", "i16", "i32", "i64"})
UNSIGNED = frozenset({"u8", "u16", "u32", "u64"})

# ONNX integer limits used as "to the end" markers (Slice ends, Clip bounds).
INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)


def np_dtype(dtype: str) -> np.dtype[Any]:
    """The NumPy dtype of a Linnet dtype name."""
    return numpy_dtype(dtype)


def cast(expr: ast.Expr, dtype: str) -> ast.Expr:
    """`cast<dtype>(expr)`."""
    return build.call("cast", expr, generics=[build.named_type(dtype)])


def typed_literal(ctx: Context, value: float | int | bool, dtype: str) -> ast.Expr:
    """A scalar of `dtype` that stands on its own (no other operand gives it a dtype)."""
    return ctx.typed(value, dtype)


def fold_ok(*values: Value | None) -> bool:
    """Whether a node over `values` may be computed at import time.

    Every present value must be known, and stored float tensors (weights)
    are never folded into new tensors: code keeps reading the parameter.
    """
    present = [v for v in values if v is not None]
    if not present:
        return False
    for v in present:
        if v.const is None:
            return False
        if v.source is not None and v.dtype in FLOAT_DTYPES:
            return False
    return True


def fold(ctx: Context, array: Any, dtype: str) -> Value:
    """A compile-time result: `array` converted to `dtype`."""
    arr = np.asarray(array)
    target = np_dtype(dtype)
    if arr.dtype != target:
        with np.errstate(all="ignore"):
            arr = arr.astype(target)
    # NOTE: not np.ascontiguousarray, which turns a 0-d array (a scalar) into 1-d.
    return ctx.constant(arr if arr.flags.c_contiguous else arr.copy(order="C"), dtype)


def operand(ctx: Context, v: Value, typed: bool) -> ast.Expr:
    """The expression reading `v`; a scalar constant is a typed `cast<T>(...)`
    when `typed` is set (no other operand lends it a dtype, 7.3)."""
    if typed and v.is_scalar and v.const is not None and v.expr is None:
        return ctx.typed(v.const.reshape(()).item(), v.dtype)
    return ctx.ref(v)


def norm_axis(axis: int, rank: int, *, what: str = "axis", extra: int = 0) -> int:
    """An ONNX axis (negative counts from the back) as a non-negative index.

    `extra` widens the valid range (Unsqueeze and Concat of rank-0 inputs
    address `rank + extra` axes).
    """
    size = rank + extra
    if not -size <= axis < size:
        raise Unsupported(f"{what} {axis} is out of range for rank {rank}")
    return axis + size if axis < 0 else axis


def axes_list(ctx: Context, attr: str, input_index: int) -> list[int] | None:
    """Axes from the `attr` attribute (older opsets) or the `input_index` input (newer).

    None when neither is given; refuses the node when the input is only known
    at run time.
    """
    if attr in ctx.node.attrs:
        return [int(a) for a in ctx.node.attrs[attr]]
    return ctx.ints(input_index)


def require_float(v: Value, op: str) -> None:
    if v.dtype not in FLOAT_DTYPES:
        raise Unsupported(f"{op} of dtype {v.dtype} is not supported")


def static_shape(v: Value, what: str = "input") -> tuple[int, ...]:
    """`v`'s shape as integers; refuses the node when an extent is symbolic."""
    shape = v.static_shape()
    if shape is None:
        raise Unsupported(f"{what} needs a static shape")
    return shape


def int_dim(d: Dim, what: str) -> int:
    value = d.as_int()
    if value is None:
        raise Unsupported(f"{what} must be a constant extent")
    return value


def dims_expr(ctx: Context, dims: Sequence[Dim | int]) -> ast.Expr:
    """A shape literal `[d1, d2]`."""
    return ctx.shape_lit(dims)


def numel(shape: Sequence[Dim]) -> Dim:
    total = Dim.const(1)
    for d in shape:
        total = total * d
    return total


def apply_unary_fold(
    ctx: Context, x: Value, fn: Callable[[np.ndarray], np.ndarray], dtype: str | None = None
) -> Value:
    """Fold a unary op on a known input."""
    assert x.const is not None
    with np.errstate(all="ignore"):
        return fold(ctx, fn(x.const), dtype or x.dtype)


def scalar_const(v: Value | None) -> float | int | bool | None:
    """The single value of a known input whose elements are all equal (a scalar, or a
    tensor filled with one value), else None."""
    if v is None or v.const is None or v.const.size == 0:
        return None
    flat = v.const.reshape(-1)
    first = flat[0]
    if flat.size > 1 and not bool(np.all(flat == first)):
        return None
    item: float | int | bool = first.item()
    return item


# ---------------------------------------------------------------- symbolic elements

SYMBOLIC_LIMIT = 64
"""Shape computations fold element by element up to this many elements."""


def elements_array(v: Value | None) -> np.ndarray | None:
    """`v`'s compile-time elements as an object array of `Dim`s shaped like `v`, or None.

    This is how shape subgraphs (`Shape`, `Gather`, `Concat`, arithmetic) fold
    into dimension expressions: the data movement is done by NumPy on `Dim`s.
    """
    if v is None or v.elements is None or v.dtype not in INT_DTYPES:
        return None
    shape = v.static_shape()
    if shape is None or int(np.prod(shape, dtype=np.int64)) != len(v.elements):
        return None
    arr = np.empty(len(v.elements), dtype=object)
    for i, e in enumerate(v.elements):
        arr[i] = e
    return arr.reshape(shape)


def symbolic_result(ctx: Context, arr: np.ndarray, dtype: str) -> Value | None:
    """A compile-time result from an object array of `Dim`s (None if it cannot be one)."""
    flat = [d if isinstance(d, Dim) else Dim.const(int(d)) for d in arr.reshape(-1)]
    ints = [d.as_int() for d in flat]
    if all(i is not None for i in ints):
        return fold(ctx, np.array(ints, dtype=np.int64).reshape(arr.shape), dtype)
    if arr.ndim > 1 or len(flat) > SYMBOLIC_LIMIT:
        return None
    return ctx.symbolic(flat, dtype, scalar=arr.ndim == 0)


def symbolic_inputs(*values: Value | None) -> list[np.ndarray] | None:
    """Every present value's elements (see `elements_array`), or None if one has none."""
    out: list[np.ndarray] = []
    for v in values:
        if v is None:
            continue
        arr = elements_array(v)
        if arr is None:
            return None
        out.append(arr)
    return out


# ---------------------------------------------------------------- known non-negative values

_NONNEG: weakref.WeakKeyDictionary[Translation, set[int]] = weakref.WeakKeyDictionary()
"""Per translation: values known to hold no negative element (positions from `Range`,
data movement of those), so gathers through them need no wrap of negative indices."""


def mark_nonneg(ctx: Context, v: Value) -> Value:
    _NONNEG.setdefault(ctx.t, set()).add(id(v))
    return v


def is_nonneg(ctx: Context, v: Value) -> bool:
    if v.dtype in UNSIGNED:
        return True
    if v.const is not None:
        return bool(np.all(v.const >= 0))
    if v.elements is not None:
        return all(ctx.prove(e, ">=", Dim.const(0)) for e in v.elements)
    return id(v) in _NONNEG.get(ctx.t, set())


def same_sign(ctx: Context, source: Value, out: Value) -> Value:
    """`out` moves `source`'s elements (reshape, permute, broadcast, slice): it keeps
    `source`'s non-negativity."""
    if is_nonneg(ctx, source):
        mark_nonneg(ctx, out)
    return out
