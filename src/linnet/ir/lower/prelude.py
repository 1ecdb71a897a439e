"""Prelude calls to Core IR ops (language.md section 10).

Stage: lowering. In: a `Call` of a prelude function with its `CallInfo`
(`dtype_arg` for `cast`/`iota`/`fill`; `concat`'s axis is its last argument).
Out: an LV. Compile-time arguments fold in Python with the checker's rules
(`min`/`max` of two dimensions build a dimension, float functions of float
literals stay literals, `shl`/`shr` of constants fold as 10.3 says);
everything else becomes ops:

| prelude | ops |
| --- | --- |
| `cast<T>` | `cast` (a literal becomes a constant of `T`, converted per 10.3) |
| `exp log sqrt rsqrt sin cos tanh abs` | the unary op of the same name |
| `min max shl shr select` | the elementwise op (broadcasting, 7.6) |
| `reshape permute concat` | the op of the same name (`concat`'s negative axis counted from the end) |
| `cumsum(x, axis = k)` | `cumsum` with the axis the checker resolved (language-extensions 5) |
| `broadcast_to` | `broadcast` |
| `iota<T>(n)` | `iota` |
| `fill<T>(shape, v)` | `broadcast` of the scalar `v` (a runtime scalar is allowed) |

Inside index notation the elementwise functions take `IxVal` operands.
"""

from __future__ import annotations

import math

from linnet.check.prelude import FLOAT_FUNCTIONS
from linnet.check.program import CallInfo
from linnet.errors import InternalError
from linnet.ir.core import Value
from linnet.ir.lower.context import Frame, Lowerer, not_supported
from linnet.ir.lower.values import LV, IxVal, ShapeLV, is_number
from linnet.ir.size_decisions import at, note
from linnet.syntax import ast


def lower_prelude(lw: Lowerer, fr: Frame, call: ast.Call, info: CallInfo) -> LV:
    from linnet.ir.lower.exprs import lower_expr

    name = info.callee.name
    args = [lower_expr(lw, fr, a) for a in info.args if a is not None]
    if name == "cast":
        assert info.dtype_arg is not None
        return cast(lw, fr, args[0], fr.env.dtype(info.dtype_arg))
    if name in FLOAT_FUNCTIONS or name == "abs":
        return _unary(lw, fr, name, args[0])
    if name in ("min", "max"):
        a, b = args
        if is_number(a) and is_number(b):
            folded = min(a, b) if name == "min" else max(a, b)  # type: ignore[type-var]
            note(name, name, a, b, folded, at(call.span))
            return folded
        return elementwise(lw, fr, name, [a, b])
    if name in ("shl", "shr"):
        a, b = args
        if is_number(a) and is_number(b):
            return _fold_shift(name, a, b)  # type: ignore[arg-type]
        return elementwise(lw, fr, name, [a, b])
    if name == "select":
        c, a, b = args
        dtype = _typed_dtype([a, b])
        return elementwise(lw, fr, "select", [c, a, b], dtype)
    return _shape_op(lw, fr, name, args, info)


def cast(lw: Lowerer, fr: Frame, x: LV, dtype: str) -> LV:
    """`cast<T>(x)` (10.3): numbers convert at compile time, values get a `cast` op."""
    if is_number(x):
        assert isinstance(x, (int, float))
        return lw.const(x, dtype)  # converted as 10.3 says
    if isinstance(x, IxVal):
        from linnet.ir.lower.index import cast_ix

        return cast_ix(lw, x, dtype)
    v = lw.value(x)
    return v if v.type.dtype == dtype else lw.b.cast(v, dtype)


def _unary(lw: Lowerer, fr: Frame, name: str, x: LV) -> LV:
    if is_number(x):
        assert isinstance(x, (int, float))
        if name == "abs":
            return abs(x)
        try:
            return FLOAT_FUNCTIONS[name](float(x))
        except (ValueError, OverflowError, ZeroDivisionError):
            return _ieee(name, float(x))
    if isinstance(x, IxVal) or fr.ix is not None:
        from linnet.ir.lower.index import as_ix

        ixv = as_ix(lw, x, None)
        return IxVal(lw.b.unary(name, ixv.value), ixv.axes)
    return lw.b.unary(name, lw.value(x))


def _ieee(name: str, x: float) -> float:
    """IEEE results where Python raises (10.3: log of 0 is -inf, sqrt of a negative is NaN)."""
    if name == "log":
        return -math.inf if x == 0 else math.nan
    if name in ("sqrt",):
        return math.nan
    if name == "rsqrt":
        return math.inf if x == 0 else math.nan
    if name == "exp":
        return math.inf
    return math.nan


def _fold_shift(name: str, x: int, y: int) -> int:
    """Shifts of two constants, as the checker folds them (10.3)."""
    if name == "shl":
        value = (x << y) if 0 <= y <= 63 else 0
        value &= (1 << 64) - 1
        return value - (1 << 64) if value >= 1 << 63 else value
    return x >> y if 0 <= y <= 63 else (-1 if x < 0 else 0)


def _typed_dtype(operands: list[LV]) -> str | None:
    for o in operands:
        if isinstance(o, Value):
            return o.type.dtype
        if isinstance(o, IxVal):
            return o.value.type.dtype
    return None


def elementwise(
    lw: Lowerer, fr: Frame, kind: str, operands: list[LV], dtype: str | None = None
) -> LV:
    """An elementwise op (7.6 broadcasting); literals adopt the typed operands' dtype (7.3)."""
    if fr.ix is not None or any(isinstance(o, IxVal) for o in operands):
        if fr.ix is None:
            raise InternalError("index value outside index notation")
        from linnet.ir.lower import index

        return index.elementwise(lw, fr, kind, operands, dtype)
    if dtype is None:
        dtype = _typed_dtype(operands)
    values: list[Value] = []
    for i, o in enumerate(operands):
        want = "bool" if kind == "select" and i == 0 else dtype
        values.append(lw.value(o, want))
    return lw.b.emit(kind, values)


def _shape_op(lw: Lowerer, fr: Frame, name: str, args: list[LV], info: CallInfo) -> LV:
    if any(isinstance(a, IxVal) and a.axes for a in args):
        raise not_supported(f"`{name}` inside index notation", fr)
    if name == "iota":
        (n,) = args
        dtype = fr.env.dtype(info.dtype_arg) if info.dtype_arg is not None else "i64"
        assert isinstance(n, int)
        return lw.b.iota(n, dtype)
    if name == "fill":
        shape, v = args
        assert isinstance(shape, ShapeLV)
        fill_dtype = fr.env.dtype(info.dtype_arg) if info.dtype_arg is not None else None
        scalar = lw.value(v, fill_dtype)
        if fill_dtype is not None and scalar.type.dtype != fill_dtype:
            scalar = lw.b.cast(scalar, fill_dtype)
        return lw.b.broadcast(scalar, shape.dims)
    if name == "reshape":
        x, shape = args
        assert isinstance(shape, ShapeLV)
        return lw.b.reshape(lw.value(x), shape.dims)
    if name == "broadcast_to":
        x, shape = args
        assert isinstance(shape, ShapeLV)
        v = lw.value(x)
        return v if v.type.shape == shape.dims else lw.b.broadcast(v, shape.dims)
    if name == "permute":
        x, axes = args
        assert isinstance(axes, ShapeLV)
        v = lw.value(x)
        if list(axes.dims) == list(range(v.type.rank)):
            return v
        return lw.b.permute(v, axes.dims)
    if name == "cumsum":
        assert info.axis is not None
        return lw.b.cumsum(lw.value(args[0]), info.axis)
    if name == "concat":
        *tensors, axis = args
        values = [lw.value(t) for t in tensors]
        assert isinstance(axis, int)
        k = axis if axis >= 0 else values[0].type.rank + axis
        return lw.b.concat(values, k)
    raise InternalError(f"unknown prelude function `{name}`")
