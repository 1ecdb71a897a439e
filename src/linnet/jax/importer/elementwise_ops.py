"""Elementwise StableHLO ops (arithmetic, comparisons, selects, conversions, constants).

Stage: the StableHLO importer's second step (`ops.OPS` merges this family's
table). Elementwise ops read lazy broadcasts' sources (see `builder`); a sum
divided by its element count becomes a mean, `1 / (1 + exp(-x))` a sigmoid,
the spellings the recovery patterns know. A handler that cannot translate its
op raises `Skip` with the reason.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo as shlo

from linnet.jax.importer.builder import Builder, Lazy, Ref, Shape, broadcast_shape
from linnet.jax.importer.mlir import elements
from linnet.jax.importer.op_support import Handler, arg, onnx_dtype, result_type, scalar
from linnet.sourcegen.builder import Skip

# ---------------------------------------------------------------- elementwise


def elementwise(
    b: Builder, op_name: str, refs: list[Ref], dtype: str | None, shape: Shape, **attrs: Any
) -> str:
    """`op_name` over `refs` (broadcast implicitly), a tensor of `shape`."""
    names = [b.broadcastable(r) for r in refs]
    have: Shape = ()
    for n in names:
        got = broadcast_shape(have, b.shape(n))
        have = got if got is not None else have
    if have != shape:
        # The operands' own shapes do not reach the result's: the first lazy one is full.
        names = [b.full(r) if isinstance(r, Lazy) else n for r, n in zip(refs, names, strict=True)]
    return b.emit(op_name, names, dtype, shape, attrs or None)


def _binary(onnx: str) -> Handler:
    def fn(b: Builder, op: Any) -> list[Ref]:
        dtype, shape = result_type(op)
        return [elementwise(b, onnx, [arg(b, op, 0), arg(b, op, 1)], dtype, shape)]

    return fn


def _unary(onnx: str) -> Handler:
    def fn(b: Builder, op: Any) -> list[Ref]:
        dtype, shape = result_type(op)
        return [elementwise(b, onnx, [arg(b, op, 0)], dtype, shape)]

    return fn


def _float_only(b: Builder, op: Any) -> str:
    dtype, _ = result_type(op)
    if dtype not in ("f16", "bf16", "f32", "f64"):
        raise Skip(f"{op.name} of {dtype}")
    return dtype


def _rsqrt(b: Builder, op: Any) -> list[Ref]:
    dtype, shape = result_type(op)
    root = elementwise(b, "Sqrt", [arg(b, op, 0)], dtype, shape)
    return [b.emit("Reciprocal", [b.broadcastable(root)], dtype, shape)]


def _expm1(b: Builder, op: Any) -> list[Ref]:
    dtype = _float_only(b, op)
    _, shape = result_type(op)
    e = elementwise(b, "Exp", [arg(b, op, 0)], dtype, shape)
    return [elementwise(b, "Sub", [e, scalar(b, 1.0, dtype)], dtype, shape)]


def _log1p(b: Builder, op: Any) -> list[Ref]:
    dtype = _float_only(b, op)
    _, shape = result_type(op)
    s = elementwise(b, "Add", [arg(b, op, 0), scalar(b, 1.0, dtype)], dtype, shape)
    return [b.emit("Log", [b.broadcastable(s)], dtype, shape)]


def _logic(onnx: str) -> Handler:
    def fn(b: Builder, op: Any) -> list[Ref]:
        dtype, shape = result_type(op)
        if dtype != "bool":
            raise Skip(f"bitwise {op.name} of {dtype}")
        refs = [arg(b, op, i) for i in range(len(op.operands))]
        return [elementwise(b, onnx, refs, dtype, shape)]

    return fn


def _remainder(b: Builder, op: Any) -> list[Ref]:
    dtype, shape = result_type(op)
    # StableHLO's remainder takes the dividend's sign, as C's fmod (ONNX Mod fmod=1).
    return [elementwise(b, "Mod", [arg(b, op, 0), arg(b, op, 1)], dtype, shape, fmod=1)]


def _maximum(onnx: str, identity: float) -> Handler:
    def fn(b: Builder, op: Any) -> list[Ref]:
        dtype, shape = result_type(op)
        x, y = arg(b, op, 0), arg(b, op, 1)
        # `max(-inf, m)`: JAX's guard on a softmax's peak; exactly `m`.
        for a, other in ((x, y), (y, x)):
            c = b.constant_of(a)
            exact = c is not None and c.size == 1 and float(c.reshape(())) == identity
            if exact and b.shape(other) == shape:
                return [other]
        return [elementwise(b, onnx, [x, y], dtype, shape)]

    return fn


def _divide(b: Builder, op: Any) -> list[Ref]:
    dtype, shape = result_type(op)
    x, y = arg(b, op, 0), arg(b, op, 1)
    mean = _as_mean(b, x, y)
    if mean is not None and b.shape(mean) == shape:
        return [mean]
    z = _logistic_of(b, x, y)
    if z is not None and b.shape(z) == shape:
        b.notes.append(
            "recovered `sigmoid` from `1 / (1 + exp(-x))`" + (f" at {b.where}" if b.where else "")
        )
        return [b.emit("Sigmoid", [z], dtype, shape)]
    return [elementwise(b, "Div", [x, y], dtype, shape)]


def _as_mean(b: Builder, x: Ref, y: Ref) -> str | None:
    """`ReduceSum(v) / n`, with `n` the number of elements summed: `ReduceMean(v)`."""
    if isinstance(x, Lazy):
        return None
    red = b.reductions.get(x)
    divisor = b.constant_of(y)
    if red is None or red.op != "ReduceSum" or divisor is None or divisor.size != 1:
        return None
    src = b.shape(red.x)
    count = math.prod(src[a] for a in red.axes)
    if float(divisor.reshape(())) != float(count) or b.dtype(red.x) not in (
        "f16",
        "bf16",
        "f32",
        "f64",
    ):
        return None
    return b.reduce("ReduceMean", red.x, red.axes, red.keepdims)


def _logistic_of(b: Builder, x: Ref, y: Ref) -> str | None:
    """`z` when `x / y` is `1 / (1 + exp(-z))` (how `jax.nn.sigmoid` exports), else None."""
    one = b.constant_of(x)
    if one is None or one.size != 1 or float(one.reshape(())) != 1.0 or isinstance(y, Lazy):
        return None
    add = b.producers.get(y)
    if add is None or add.op != "Add":
        return None
    for i in (0, 1):
        c = b.graph.constants.get(add.inputs[i])
        exp = b.producers.get(add.inputs[1 - i])
        if c is None or c.size != 1 or float(c.reshape(())) != 1.0 or exp is None:
            continue
        neg = b.producers.get(exp.inputs[0]) if exp.op == "Exp" else None
        if neg is not None and neg.op == "Neg":
            return neg.inputs[0]
    return None


def _compare(b: Builder, op: Any) -> list[Ref]:
    _, shape = result_type(op)
    direction = shlo.ComparisonDirectionAttr(op.attributes["comparison_direction"]).value
    refs = [arg(b, op, 0), arg(b, op, 1)]
    table = {
        "EQ": "Equal",
        "LT": "Less",
        "LE": "LessOrEqual",
        "GT": "Greater",
        "GE": "GreaterOrEqual",
        "NE": "Equal",
    }
    if direction not in table:
        raise Skip(f"comparison {direction}")
    out = elementwise(b, table[direction], refs, "bool", shape)
    if direction == "NE":
        out = b.emit("Not", [b.broadcastable(out)], "bool", shape)
    return [out]


def _select(b: Builder, op: Any) -> list[Ref]:
    dtype, shape = result_type(op)
    refs = [arg(b, op, 0), arg(b, op, 1), arg(b, op, 2)]
    return [elementwise(b, "Where", refs, dtype, shape)]


def _clamp(b: Builder, op: Any) -> list[Ref]:
    dtype, shape = result_type(op)
    lo, x, hi = arg(b, op, 0), arg(b, op, 1), arg(b, op, 2)
    below = elementwise(b, "Min", [x, hi], dtype, shape)
    return [elementwise(b, "Max", [below, lo], dtype, shape)]


def _convert(b: Builder, op: Any) -> list[Ref]:
    dtype, shape = result_type(op)
    x = arg(b, op, 0)
    if b.dtype(x) == dtype:
        return [x]
    assert dtype is not None
    src = b.broadcastable(x)
    cast = b.emit("Cast", [src], dtype, b.shape(src), {"to": onnx_dtype(dtype)})
    return [Lazy(cast, shape, dtype) if b.shape(cast) != shape else cast]


def _constant(b: Builder, op: Any) -> list[Ref]:
    dtype, shape = result_type(op)
    assert dtype is not None
    arr, splat = elements(op.attributes["value"], dtype)
    name = b.const(arr)
    if splat and shape != ():
        return [Lazy(name, shape, dtype)]
    return [name]


def _iota(b: Builder, op: Any) -> list[Ref]:
    from linnet.jax.importer.mlir import numpy_type

    dtype, shape = result_type(op)
    assert dtype is not None
    axis = int(ir.IntegerAttr(op.attributes["iota_dimension"]).value)
    keep = [1] * len(shape)
    keep[axis] = shape[axis]
    arr = np.arange(shape[axis], dtype=numpy_type(dtype)).reshape(keep)
    name = b.const(arr)
    return [Lazy(name, shape, dtype) if tuple(keep) != shape else name]


ELEMENTWISE: dict[str, Handler] = {
    "stablehlo.add": _binary("Add"),
    "stablehlo.subtract": _binary("Sub"),
    "stablehlo.multiply": _binary("Mul"),
    "stablehlo.divide": _divide,
    "stablehlo.power": _binary("Pow"),
    "stablehlo.maximum": _maximum("Max", -math.inf),
    "stablehlo.minimum": _maximum("Min", math.inf),
    "stablehlo.remainder": _remainder,
    "stablehlo.and": _logic("And"),
    "stablehlo.or": _logic("Or"),
    "stablehlo.xor": _logic("Xor"),
    "stablehlo.not": _logic("Not"),
    "stablehlo.abs": _unary("Abs"),
    "stablehlo.negate": _unary("Neg"),
    "stablehlo.exponential": _unary("Exp"),
    "stablehlo.exponential_minus_one": _expm1,
    "stablehlo.log": _unary("Log"),
    "stablehlo.log_plus_one": _log1p,
    "stablehlo.sqrt": _unary("Sqrt"),
    "stablehlo.rsqrt": _rsqrt,
    "stablehlo.tanh": _unary("Tanh"),
    "stablehlo.logistic": _unary("Sigmoid"),
    "stablehlo.sine": _unary("Sin"),
    "stablehlo.cosine": _unary("Cos"),
    "stablehlo.tan": _unary("Tan"),
    "stablehlo.floor": _unary("Floor"),
    "stablehlo.ceil": _unary("Ceil"),
    "stablehlo.sign": _unary("Sign"),
    "stablehlo.round_nearest_even": _unary("Round"),
    "stablehlo.compare": _compare,
    "stablehlo.select": _select,
    "stablehlo.clamp": _clamp,
    "stablehlo.convert": _convert,
    "stablehlo.constant": _constant,
    "stablehlo.iota": _iota,
}
