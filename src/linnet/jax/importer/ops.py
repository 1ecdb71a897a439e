"""Each StableHLO op as ONNX-vocabulary nodes of the importer graph.

Stage: the StableHLO importer's second step (`walk` calls `OPS[name](b, op)`
per op; each handler returns what the op's results map to). Elementwise ops
read lazy broadcasts' sources (see `builder`); `dot_general` becomes
`MatMul` in NumPy's layout and an `Einsum` otherwise (index notation);
`reduce` with one monoid body becomes `ReduceSum` / `ReduceMax` /
`ReduceMin` / `ReduceProd`; a gather of whole slices along one axis becomes
`Gather` (a lookup); `reduce_window` that is a running sum becomes `CumSum`.
A handler that cannot translate its op raises `Skip` with the reason.
"""

from __future__ import annotations

import math
import string
from collections.abc import Callable
from typing import Any

import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo as shlo

from linnet.jax.importer.builder import Builder, Lazy, Ref, RowWrite, Shape, broadcast_shape
from linnet.jax.importer.mlir import DYNAMIC, dense_array, elements, int_array, tensor_type
from linnet.sourcegen.builder import Skip

Handler = Callable[[Builder, Any], list[Ref]]


def result_type(op: Any, i: int = 0) -> tuple[str | None, Shape]:
    t = tensor_type(op.results[i].type)
    if t is None:
        raise Skip("a result that is not a ranked tensor")
    dtype, shape = t
    if DYNAMIC in shape:
        raise Skip("a dynamic shape")
    if dtype is None:
        raise Skip(f"an element type Linnet lacks ({op.results[i].type})")
    return dtype, shape


def arg(b: Builder, op: Any, i: int) -> Ref:
    return b.env[op.operands[i]]


def onnx_dtype(dtype: str) -> int:
    from linnet.onnx.importer.graph import DTYPES

    for code, name in DTYPES.items():
        if name == dtype:
            return int(code)
    raise Skip(f"no element type for {dtype}")


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


def _scalar(b: Builder, value: float, dtype: str) -> str:
    from linnet.jax.importer.mlir import numpy_type

    return b.const(np.array(value, dtype=numpy_type(dtype)))


def _rsqrt(b: Builder, op: Any) -> list[Ref]:
    dtype, shape = result_type(op)
    root = elementwise(b, "Sqrt", [arg(b, op, 0)], dtype, shape)
    return [b.emit("Reciprocal", [b.broadcastable(root)], dtype, shape)]


def _expm1(b: Builder, op: Any) -> list[Ref]:
    dtype = _float_only(b, op)
    _, shape = result_type(op)
    e = elementwise(b, "Exp", [arg(b, op, 0)], dtype, shape)
    return [elementwise(b, "Sub", [e, _scalar(b, 1.0, dtype)], dtype, shape)]


def _log1p(b: Builder, op: Any) -> list[Ref]:
    dtype = _float_only(b, op)
    _, shape = result_type(op)
    s = elementwise(b, "Add", [arg(b, op, 0), _scalar(b, 1.0, dtype)], dtype, shape)
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


# ---------------------------------------------------------------- shapes


def _broadcast_in_dim(b: Builder, op: Any) -> list[Ref]:
    dtype, shape = result_type(op)
    x = arg(b, op, 0)
    dims = int_array(op.attributes["broadcast_dimensions"])
    if dims != sorted(dims):
        raise Skip("a broadcast that also transposes")
    src = b.broadcastable(x)
    have = b.shape(src)
    rank = len(b.shape(x))
    padded = (1,) * (rank - len(have)) + have  # what `src` is, at `x`'s rank
    keep = [1] * len(shape)
    for i, d in enumerate(dims):
        keep[d] = padded[i]
    keep_t = tuple(keep)
    lead = len(keep_t) - len(have)
    red = b.reductions.get(src)
    if red is not None and not red.keepdims:
        src = _keep_dims(b, src, keep_t)  # NumPy reads it either way; patterns want keepdims
    elif keep_t[lead:] != have or any(d != 1 for d in keep_t[:lead]):
        src = _keep_dims(b, src, keep_t)
    if b.shape(src) == shape:
        return [src]
    return [Lazy(src, shape, dtype)]


def _keep_dims(b: Builder, src: str, keep: Shape) -> str:
    """`src` reshaped to `keep` (the same elements, unit axes where broadcast adds them);
    a reduction's result becomes the same reduction with `keepdims`."""
    kept = _rekeep(b, src, keep, 0)
    if kept is not None:
        return kept
    return b.emit("Reshape", [src, b.ints(keep)], b.dtype(src), keep)


_POINTWISE = {
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Max",
    "Min",
    "Sqrt",
    "Reciprocal",
    "Neg",
    "Exp",
    "Log",
    "Abs",
    "Tanh",
    "Sigmoid",
    "Cast",
}


def _rekeep(b: Builder, name: str, keep: Shape, depth: int) -> str | None:
    """`name` computed with its reductions' axes kept (`keep`), when it is a reduction or
    a pointwise chain over one (`1 / sqrt(mean(x * x) + eps)`), else None: the form the
    norm and softmax patterns know, rather than the chain and a reshape after it."""
    red = b.reductions.get(name)
    if red is not None:
        kept = tuple(1 if i in red.axes else d for i, d in enumerate(b.shape(red.x)))
        return (
            b.reduce(red.op, red.x, red.axes, True) if kept == keep and not red.keepdims else None
        )
    node = b.producers.get(name)
    if node is None or node.op not in _POINTWISE or depth > 16 or b.shape(name) == keep:
        return None
    inputs: list[str] = []
    for i in node.inputs:
        c = b.graph.constants.get(i)
        if c is not None and c.size == 1:
            inputs.append(i)
            continue
        kept_input = _rekeep(b, i, keep, depth + 1)
        if kept_input is None:
            return None
        inputs.append(kept_input)
    attrs = {k: v for k, v in node.attrs.items() if k != "_where"}
    return b.emit(node.op, inputs, b.dtype(name), keep, attrs or None)


def _reshape(b: Builder, op: Any) -> list[Ref]:
    dtype, shape = result_type(op)
    ref = arg(b, op, 0)
    src = b.broadcastable(ref)
    have = b.shape(src)
    if math.prod(have) == math.prod(shape) and (1,) * (len(shape) - len(have)) + have == shape:
        # Leading unit axes only (`bias.reshape(1, -1)`): NumPy broadcasting reads it as is.
        return [src if have == shape else Lazy(src, shape, dtype)]
    x = b.full(ref)
    if [d for d in b.shape(x) if d != 1] == [d for d in shape if d != 1]:
        kept = _rekeep(b, x, shape, 0)  # unit axes put back where a reduction removed them
        if kept is not None:
            return [kept]
    return [b.emit("Reshape", [x, b.ints(shape)], dtype, shape)]


def _transpose(b: Builder, op: Any) -> list[Ref]:
    dtype, shape = result_type(op)
    perm = int_array(op.attributes["permutation"])
    x = b.full(arg(b, op, 0))
    if perm == list(range(len(perm))):
        return [x]
    return [b.emit("Transpose", [x], dtype, shape, {"perm": perm})]


def _concatenate(b: Builder, op: Any) -> list[Ref]:
    dtype, shape = result_type(op)
    axis = int(ir.IntegerAttr(op.attributes["dimension"]).value)
    parts = [b.full(b.env[v]) for v in op.operands]
    parts = [p for p in parts if b.shape(p)[axis] != 0]
    if len(parts) == 1:
        return [parts[0]]
    return [b.emit("Concat", parts, dtype, shape, {"axis": axis})]


def _slice(b: Builder, op: Any) -> list[Ref]:
    dtype, shape = result_type(op)
    x = b.full(arg(b, op, 0))
    starts = int_array(op.attributes["start_indices"])
    limits = int_array(op.attributes["limit_indices"])
    strides = int_array(op.attributes["strides"])
    if b.shape(x) == shape:
        return [x]
    axes = [
        i
        for i, (s, e, d) in enumerate(zip(starts, limits, b.shape(x), strict=True))
        if s != 0 or e != d or strides[i] != 1
    ]
    inputs = [
        x,
        b.ints([starts[a] for a in axes]),
        b.ints([limits[a] for a in axes]),
        b.ints(axes),
        b.ints([strides[a] for a in axes]),
    ]
    return [b.emit("Slice", inputs, dtype, shape)]


def _reverse(b: Builder, op: Any) -> list[Ref]:
    """`lax.rev` (`jnp.flip`, a descending sort): a `Slice` stepping back over each axis."""
    dtype, shape = result_type(op)
    axes = int_array(op.attributes["dimensions"])
    x = b.full(arg(b, op, 0))
    if not axes:
        return [x]
    starts = b.ints([-1] * len(axes))
    ends = b.ints([-(2**63)] * len(axes))
    steps = b.ints([-1] * len(axes))
    return [b.emit("Slice", [x, starts, ends, b.ints(axes), steps], dtype, shape)]


def _pad(b: Builder, op: Any) -> list[Ref]:
    dtype, shape = result_type(op)
    low = int_array(op.attributes["edge_padding_low"])
    high = int_array(op.attributes["edge_padding_high"])
    interior = int_array(op.attributes["interior_padding"])
    if any(interior) or min(low + high, default=0) < 0:
        raise Skip("interior or negative padding")
    x, value = b.full(arg(b, op, 0)), b.full(arg(b, op, 1))
    return [b.emit("Pad", [x, b.ints(low + high), value], dtype, shape, {"mode": "constant"})]


def _starts(b: Builder, op: Any, first: int, rank: int) -> str:
    """The scalar start operands `first`.. of a dynamic slice as one 1-D i64 tensor."""
    parts = []
    for i in range(first, first + rank):
        index = b.full(arg(b, op, i))
        if b.dtype(index) != "i64":
            index = b.emit("Cast", [index], "i64", (), {"to": onnx_dtype("i64")})
        parts.append(b.emit("Reshape", [index, b.ints([1])], "i64", (1,)))
    if len(parts) == 1:
        return parts[0]
    return b.emit("Concat", parts, "i64", (rank,), {"axis": 0})


def _dynamic_slice(b: Builder, op: Any) -> list[Ref]:
    """`x[i]` inside a loop (`lax.dynamic_slice`): a `Slice` at computed starts, which
    a loop unrolled at import folds to constants; with runtime starts only on axes it
    takes one element of, a `Gather` per such axis (`x[i]` in a runtime `for`). JAX
    clamps the starts into range; the counters of `scan` and `fori_loop` are in range."""
    dtype, shape = result_type(op)
    x = b.full(arg(b, op, 0))
    rank = len(b.shape(x))
    picked = _picked_rows(b, op, x, shape)
    if picked is not None:
        return [picked]
    starts = _starts(b, op, 1, rank)
    ends = b.emit("Add", [starts, b.ints(shape)], "i64", (rank,))
    return [b.emit("Slice", [x, starts, ends, b.ints(range(rank))], dtype, shape)]


def _picked_rows(b: Builder, op: Any, x: str, shape: Shape) -> Ref | None:
    """A dynamic slice whose runtime starts are all on axes of extent 1 in the result:
    the constant starts as a `Slice`, then a `Gather` of one element per runtime axis
    (last first, so the axes before it keep their numbers), reshaped to the result."""
    rank = len(shape)
    starts = [arg(b, op, 1 + a) for a in range(rank)]
    known = [b.constant_of(r) for r in starts]
    runtime = [a for a in range(rank) if known[a] is None]
    if not runtime or any(shape[a] != 1 for a in runtime):
        return None
    dims = b.shape(x)
    dtype = b.dtype(x)
    lo = [0 if k is None else min(max(int(k.reshape(-1)[0]), 0), d - s) for k, d, s in zip(
        known, dims, shape, strict=True)]  # fmt: skip
    sliced_shape = tuple(shape[a] if known[a] is not None else dims[a] for a in range(rank))
    value = x
    if sliced_shape != dims:
        axes = [a for a in range(rank) if known[a] is not None]
        value = b.emit(
            "Slice",
            [x, b.ints([lo[a] for a in axes]), b.ints([lo[a] + shape[a] for a in axes]),
             b.ints(axes)],
            dtype, sliced_shape,
        )  # fmt: skip
    current = list(sliced_shape)
    for a in reversed(runtime):
        index = b.full(starts[a])
        widened = b.producers.get(index)
        if widened is not None and widened.op == "Cast" and b.dtype(widened.inputs[0]) == "i64":
            index = widened.inputs[0]  # a loop counter narrowed to i32: read it as is
        if b.dtype(index) != "i64":
            index = b.emit("Cast", [index], "i64", (), {"to": onnx_dtype("i64")})
        del current[a]
        value = b.emit("Gather", [value, index], dtype, tuple(current), {"axis": a})
    if runtime == list(range(len(runtime))):
        return Lazy(value, shape, dtype)  # leading unit axes: `x[i]` broadcasts as is
    return b.emit("Reshape", [value, b.ints(shape)], dtype, shape)


def _dynamic_update_slice(b: Builder, op: Any) -> list[Ref]:
    """`ys.at[i].set(y)` inside a loop: the update padded into place, chosen by a mask.
    What it writes is recorded (`Builder.row_writes`): a loop whose body writes row
    `i` of a carried buffer each step is imported as a scan (`walk`)."""
    dtype, shape = result_type(op)
    x, update = b.full(arg(b, op, 0)), b.full(arg(b, op, 1))
    rank = len(shape)
    sizes = b.shape(update)
    row = _row_index(b, op, update, shape)
    starts = _starts(b, op, 2, rank)
    after = b.emit(
        "Sub", [b.ints([d - s for d, s in zip(shape, sizes, strict=True)]), starts], "i64", (rank,)
    )
    pads = b.emit("Concat", [starts, after], "i64", (2 * rank,), {"axis": 0})
    assert dtype is not None
    placed = b.emit(
        "Pad", [update, pads, _scalar(b, 0.0, dtype)], dtype, shape, {"mode": "constant"}
    )
    ones = b.const(np.ones(sizes, dtype=np.float32))
    where = b.emit("Pad", [ones, pads, _scalar(b, 0.0, "f32")], "f32", shape, {"mode": "constant"})
    mask = b.emit("Greater", [where, _scalar(b, 0.5, "f32")], "bool", shape)
    out = b.emit("Where", [mask, placed, x], dtype, shape)
    if row is not None:
        b.row_writes[out] = RowWrite(x, update, row)
    return [out]


def _row_index(b: Builder, op: Any, update: str, shape: Shape) -> Ref | None:
    """The runtime row a dynamic update writes whole (an `update` of shape
    `[1, *rest]` at `(i, 0, ..., 0)`): `i`; None for any other update."""
    rank = len(shape)
    if rank == 0 or b.shape(update) != (1, *shape[1:]):
        return None
    first = arg(b, op, 2)
    if b.constant_of(first) is not None:
        return None
    for a in range(1, rank):
        k = b.constant_of(arg(b, op, 2 + a))
        if k is None or int(k.reshape(-1)[0]) != 0:
            return None
    return first


def _identity(b: Builder, op: Any) -> list[Ref]:
    return [b.env[v] for v in op.operands]


# ---------------------------------------------------------------- contractions


def _dot_general(b: Builder, op: Any) -> list[Ref]:
    dtype, shape = result_type(op)
    nums = shlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])
    lb, rb = list(nums.lhs_batching_dimensions), list(nums.rhs_batching_dimensions)
    lc, rc = list(nums.lhs_contracting_dimensions), list(nums.rhs_contracting_dimensions)
    x, y = b.full(arg(b, op, 0)), b.full(arg(b, op, 1))
    xs, ys = b.shape(x), b.shape(y)
    if b.dtype(x) != dtype or b.dtype(y) != dtype:
        raise Skip("a product whose operands and result differ in dtype")
    if _sum_of_squares(op, lb, rb, lc, rc, len(xs)):
        # `sum[c] x[.., c] * x[.., c]`, how a norm's mean square lowers: a reduction,
        # so `/ n` reads as a mean and the RMS / layer norm patterns see it.
        square = b.emit("Mul", [x, x], dtype, xs)
        return [b.reduce("ReduceSum", square, lc, False)]
    k = len(lb)
    numpy_layout = (
        lb == list(range(k))
        and rb == list(range(k))
        and lc == [len(xs) - 1]
        and rc == [k]
        and len(ys) == k + 2
        and len(xs) >= k + 2 - (1 if k == 0 else 0)
        and (k == 0 or len(xs) == k + 2)
    )
    if numpy_layout and len(xs) >= 2:
        return [b.emit("MatMul", [x, y], dtype, shape)]
    letters = iter(string.ascii_lowercase)
    xl = [next(letters) for _ in xs]
    yl: list[str] = [""] * len(ys)
    for i, j in zip(lb, rb, strict=True):
        yl[j] = xl[i]
    for i, j in zip(lc, rc, strict=True):
        yl[j] = xl[i]
    for j in range(len(ys)):
        if not yl[j]:
            yl[j] = next(letters)
    out = [xl[i] for i in lb]
    out += [xl[i] for i in range(len(xs)) if i not in lb and i not in lc]
    out += [yl[j] for j in range(len(ys)) if j not in rb and j not in rc]
    equation = f"{''.join(xl)},{''.join(yl)}->{''.join(out)}"
    return [b.emit("Einsum", [x, y], dtype, shape, {"equation": equation})]


def _sum_of_squares(
    op: Any, lb: list[int], rb: list[int], lc: list[int], rc: list[int], rank: int
) -> bool:
    """A product of a tensor with itself over the same axes, batched over all others."""
    if op.operands[0] != op.operands[1] or lb != rb or lc != rc:
        return False
    return lb == [i for i in range(rank) if i not in lc]


def _convolution(b: Builder, op: Any) -> list[Ref]:
    """`lax.conv_general_dilated` (any layout: Flax's NHWC / HWIO too) as ONNX `Conv`
    in NC+spatial / OI+spatial, with the transposes a layout other than that needs."""
    dtype, shape = result_type(op)
    nums = shlo.ConvDimensionNumbers(op.attributes["dimension_numbers"])
    attrs = op.attributes
    x, w = b.full(arg(b, op, 0)), b.full(arg(b, op, 1))
    spatial = len(b.shape(x)) - 2

    def ints_or(name: str, default: int) -> list[int]:
        return int_array(attrs[name]) if name in attrs else [default] * spatial

    if any(v != 1 for v in ints_or("lhs_dilation", 1)):
        raise Skip("a transposed convolution (input dilation)")
    if "batch_group_count" in attrs and int(ir.IntegerAttr(attrs["batch_group_count"]).value) != 1:
        raise Skip("a convolution with batch groups")
    if "window_reversal" in attrs and "true" in str(attrs["window_reversal"]):
        raise Skip("a convolution with a reversed window")
    groups = (
        int(ir.IntegerAttr(attrs["feature_group_count"]).value)
        if "feature_group_count" in attrs
        else 1
    )
    pads = (
        dense_array(attrs["padding"]).reshape(-1, 2).tolist()
        if "padding" in attrs
        else [[0, 0]] * spatial
    )
    if min((v for pair in pads for v in pair), default=0) < 0:
        raise Skip("a convolution with negative padding")
    x_perm = [
        int(nums.input_batch_dimension),
        int(nums.input_feature_dimension),
        *(int(d) for d in nums.input_spatial_dimensions),
    ]
    w_perm = [
        int(nums.kernel_output_feature_dimension),
        int(nums.kernel_input_feature_dimension),
        *(int(d) for d in nums.kernel_spatial_dimensions),
    ]
    out_perm = [
        int(nums.output_batch_dimension),
        int(nums.output_feature_dimension),
        *(int(d) for d in nums.output_spatial_dimensions),
    ]
    x = _permuted(b, x, x_perm)
    w = _permuted(b, w, w_perm)
    standard = tuple(shape[a] for a in out_perm)
    conv = b.emit(
        "Conv",
        [x, w],
        dtype,
        standard,
        {
            "strides": ints_or("window_strides", 1),
            "dilations": ints_or("rhs_dilation", 1),
            "pads": [p[0] for p in pads] + [p[1] for p in pads],
            "group": groups,
        },
    )
    if out_perm == list(range(len(shape))):
        return [conv]
    inverse = [out_perm.index(i) for i in range(len(shape))]
    return [b.emit("Transpose", [conv], dtype, shape, {"perm": inverse})]


def _permuted(b: Builder, x: str, perm: list[int]) -> str:
    if perm == list(range(len(perm))):
        return x
    shape = tuple(b.shape(x)[a] for a in perm)
    return b.emit("Transpose", [x], b.dtype(x), shape, {"perm": perm})


_MONOIDS = {
    "stablehlo.add": ("ReduceSum", "Add", 0.0),
    "stablehlo.maximum": ("ReduceMax", "Max", -math.inf),
    "stablehlo.minimum": ("ReduceMin", "Min", math.inf),
    "stablehlo.multiply": ("ReduceProd", "Mul", 1.0),
}


def _monoid(body: Any) -> str:
    """The one op a reduction body applies to its two arguments, or ``""``."""
    ops = list(body.operations)
    if len(ops) != 2 or ops[1].operation.name != "stablehlo.return":
        return ""
    inner = ops[0].operation
    args = list(body.arguments)
    if len(args) != 2 or [*inner.operands] != args:
        return ""
    return str(inner.name)


_ARG_BODY = [
    "stablehlo.compare",
    "stablehlo.compare",
    "stablehlo.or",
    "stablehlo.compare",
    "stablehlo.compare",
    "stablehlo.and",
    "stablehlo.or",
    "stablehlo.select",
    "stablehlo.select",
    "stablehlo.return",
]
"""The body `jnp.argmax` / `argmin` reduce with: (value, index) pairs, first index wins."""


def _arg_reduce(b: Builder, op: Any) -> list[Ref]:
    """`jnp.argmax` / `jnp.argmin`: a reduction of (x, iota) with the comparator JAX
    writes, as `ArgMax` / `ArgMin` (the first extreme's index) and the extreme itself."""
    body = op.regions[0].blocks[0]
    ops = [o.operation for o in body.operations]
    if [str(o.name) for o in ops] != _ARG_BODY:
        raise Skip("a reduction of several tensors whose body is no argmax or argmin")
    direction = shlo.ComparisonDirectionAttr(ops[0].attributes["comparison_direction"]).value
    if direction not in ("GT", "LT") or len(op.operands) != 4:
        raise Skip("a reduction of several tensors whose body is no argmax or argmin")
    axes = int_array(op.attributes["dimensions"])
    x, index = b.full(arg(b, op, 0)), arg(b, op, 1)
    start = b.constant_of(arg(b, op, 3))
    # The indices must count along the reduced axis from 0 (an iota), from an index of 0.
    iota = b.constant_of(index)
    rank = len(b.shape(x))
    if len(axes) != 1 or iota is None or start is None or float(start.reshape(())) != 0:
        raise Skip("an argmax whose indices are not positions along one axis")
    axis = axes[0]
    want = np.arange(b.shape(x)[axis]).reshape([-1 if i == axis else 1 for i in range(rank)])
    if iota.shape != want.shape or not np.array_equal(iota, want):
        raise Skip("an argmax whose indices are not positions along one axis")
    peak_dtype, peak_shape = result_type(op, 0)
    index_dtype, index_shape = result_type(op, 1)
    onnx = "ArgMax" if direction == "GT" else "ArgMin"
    reduce_op = "ReduceMax" if direction == "GT" else "ReduceMin"
    peak = b.reduce(reduce_op, x, axes, False)
    found = b.emit(onnx, [x], "i64", index_shape, {"axis": axis, "keepdims": 0})
    if index_dtype != "i64":
        assert index_dtype is not None
        found = b.emit("Cast", [found], index_dtype, index_shape, {"to": onnx_dtype(index_dtype)})
    b.notes.append(
        f"recovered `{onnx.lower()}` from its reduction" + (f" at {b.where}" if b.where else "")
    )
    assert peak_dtype is not None and b.shape(peak) == peak_shape
    return [peak, found]


def _reduce(b: Builder, op: Any) -> list[Ref]:
    if len(op.operands) == 4:
        return _arg_reduce(b, op)
    if len(op.operands) != 2:
        raise Skip("a reduction of several tensors at once")
    dtype, shape = result_type(op)
    kind = _MONOIDS.get(_monoid(op.regions[0].blocks[0]))
    if kind is None:
        raise Skip("a reduction whose body is no sum, product, max or min")
    reduce_op, combine, identity = kind
    axes = sorted(int_array(op.attributes["dimensions"]))
    x = b.full(arg(b, op, 0))
    init = b.constant_of(arg(b, op, 1))
    if init is None:
        raise Skip("a reduction from a computed initial value")
    if np.issubdtype(init.dtype, np.integer) and reduce_op in ("ReduceMax", "ReduceMin"):
        limits = np.iinfo(init.dtype)
        identity = float(limits.min if reduce_op == "ReduceMax" else limits.max)
    if not axes:
        out: str = x
    else:
        out = b.reduce(reduce_op, x, axes, False)
    if float(init.reshape(())) != identity:
        out = elementwise(b, combine, [out, b.broadcastable(arg(b, op, 1))], dtype, shape)
    return [out]


def _gather(b: Builder, op: Any) -> list[Ref]:
    """A gather of whole slices along one axis at integer indices: ONNX `Gather`."""
    dtype, shape = result_type(op)
    nums = shlo.GatherDimensionNumbers(op.attributes["dimension_numbers"])
    x, idx = b.full(arg(b, op, 0)), b.full(arg(b, op, 1))
    xs, ids = b.shape(x), b.shape(idx)
    sizes = int_array(op.attributes["slice_sizes"])
    collapsed, starts = list(nums.collapsed_slice_dims), list(nums.start_index_map)
    batching = list(nums.operand_batching_dims)
    vector = int(nums.index_vector_dim)
    every_axis = list(range(len(xs)))
    # One element per index vector (advanced indexing on every axis): `GatherND`.
    elementwise_gather = collapsed == every_axis and starts == every_axis and set(sizes) <= {1}
    last_vector = vector == len(ids) - 1 and not list(nums.offset_dims)
    if elementwise_gather and not batching and last_vector and shape == ids[:-1]:
        return [b.emit("GatherND", [x, idx], dtype, shape, {"batch_dims": 0})]
    if batching or len(starts) != 1 or collapsed != starts:
        raise Skip("a gather that is no lookup along one axis")
    axis = starts[0]
    if vector == len(ids) - 1 and ids and ids[-1] == 1:
        batch = ids[:-1]
        idx = b.emit("Reshape", [idx, b.ints(batch)], b.dtype(idx), batch)
    elif vector == len(ids):
        batch = ids
    else:
        raise Skip("a gather whose index vector is not the last axis")
    whole = all(s == d for i, (s, d) in enumerate(zip(sizes, xs, strict=True)) if i != axis)
    want = (*xs[:axis], *batch, *xs[axis + 1 :])
    offsets = [*range(axis), *range(axis + len(batch), len(want))]
    if not whole or sizes[axis] != 1 or list(nums.offset_dims) != offsets or want != shape:
        raise Skip("a gather of partial slices")
    return [b.emit("Gather", [x, idx], dtype, shape, {"axis": axis})]


def _reduce_window(b: Builder, op: Any) -> list[Ref]:
    """A running sum (`jnp.cumsum`: the window the axis's length, padded before by one
    less) as `CumSum`; a windowed max or sum over the spatial axes (`max_pool`,
    `avg_pool`) as `MaxPool` / `AveragePool` (times the window for a sum)."""
    monoid = _monoid(op.regions[0].blocks[0])
    if len(op.operands) != 2 or monoid not in ("stablehlo.add", "stablehlo.maximum"):
        raise Skip("a windowed reduction that is no running sum or pooling")
    dtype, shape = result_type(op)
    x = b.full(arg(b, op, 0))
    init = b.constant_of(arg(b, op, 1))
    rank = len(shape)
    window = int_array(op.attributes["window_dimensions"])

    def ints_or(name: str) -> list[int]:
        return int_array(op.attributes[name]) if name in op.attributes else [1] * rank

    strides = ints_or("window_strides")
    if any(v != 1 for v in ints_or("base_dilations") + ints_or("window_dilations")):
        raise Skip("a windowed reduction with dilations")
    pads = (
        dense_array(op.attributes["padding"]).reshape(-1, 2).tolist()
        if "padding" in op.attributes
        else [[0, 0]] * rank
    )
    identity = 0.0 if monoid == "stablehlo.add" else -math.inf
    if init is None or float(init.reshape(())) != identity:
        raise Skip("a windowed reduction from a value that is not its identity")
    axes = [i for i, w in enumerate(window) if w != 1]
    if monoid == "stablehlo.add" and len(axes) == 1 and strides == [1] * rank:
        a = axes[0]
        n = shape[a]
        expected = [[n - 1, 0] if i == a else [0, 0] for i in range(rank)]
        if window[a] == n and pads == expected and b.shape(x) == shape:
            return [b.emit("CumSum", [x, b.const(np.array(a, dtype=np.int64))], dtype, shape)]
    return [_pool(b, x, monoid, window, strides, pads, dtype, shape)]


def _pool(
    b: Builder,
    x: str,
    monoid: str,
    window: list[int],
    strides: list[int],
    pads: list[list[int]],
    dtype: str | None,
    shape: Shape,
) -> str:
    """Pooling over the axes the window spans; the first two it leaves alone are the
    batch and channel axes of ONNX's layout (transposed there and back)."""
    rank = len(shape)
    still = [i for i in range(rank) if window[i] == 1 and strides[i] == 1 and pads[i] == [0, 0]]
    if len(still) < 2 or rank < 3:
        raise Skip("a windowed reduction with no batch and channel axes to pool over")
    perm = still[:2] + [i for i in range(rank) if i not in still[:2]]
    spatial = perm[2:]
    if monoid == "stablehlo.add" and any(p != [0, 0] for p in pads):
        raise Skip("a padded windowed sum")
    xt = _permuted(b, x, perm)
    out = tuple(shape[a] for a in perm)
    attrs: dict[str, Any] = {
        "kernel_shape": [window[a] for a in spatial],
        "strides": [strides[a] for a in spatial],
        "pads": [pads[a][0] for a in spatial] + [pads[a][1] for a in spatial],
    }
    if monoid == "stablehlo.maximum":
        pooled = b.emit("MaxPool", [xt], dtype, out, attrs)
    else:
        mean = b.emit("AveragePool", [xt], dtype, out, attrs)
        size = math.prod(attrs["kernel_shape"])
        assert dtype is not None
        pooled = b.emit("Mul", [mean, _scalar(b, float(size), dtype)], dtype, out)
    if perm == list(range(rank)):
        return pooled
    inverse = [perm.index(i) for i in range(rank)]
    return b.emit("Transpose", [pooled], dtype, shape, {"perm": inverse})


OPS: dict[str, Handler] = {
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
    "stablehlo.broadcast_in_dim": _broadcast_in_dim,
    "stablehlo.reshape": _reshape,
    "stablehlo.transpose": _transpose,
    "stablehlo.concatenate": _concatenate,
    "stablehlo.slice": _slice,
    "stablehlo.pad": _pad,
    "stablehlo.reverse": _reverse,
    "stablehlo.optimization_barrier": _identity,
    "stablehlo.dynamic_slice": _dynamic_slice,
    "stablehlo.dynamic_update_slice": _dynamic_update_slice,
    "stablehlo.dot_general": _dot_general,
    "stablehlo.convolution": _convolution,
    "stablehlo.reduce": _reduce,
    "stablehlo.gather": _gather,
    "stablehlo.reduce_window": _reduce_window,
}
"""Every StableHLO op the importer maps (`func.call` is inlined by the walk)."""


def _register_sort_and_scatter() -> None:
    from linnet.jax.importer.sort_scatter import scatter, sort

    OPS["stablehlo.sort"] = sort
    OPS["stablehlo.scatter"] = scatter


_register_sort_and_scatter()
