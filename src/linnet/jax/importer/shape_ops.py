"""StableHLO shape and indexing ops: broadcasts, reshapes, transposes, slices, pads,
dynamic slices and updates, gathers.

Stage: the StableHLO importer's second step (`ops.OPS` merges this family's
table). Broadcasts stay lazy (`builder.Lazy`); reshapes that only add unit
axes read the source as is; a dynamic slice at a runtime start of one element
(`x[i]` in a loop body) is a `Gather`, and a dynamic update that writes one
whole row is recorded (`Builder.row_writes`) for the loop import (`loops`); a
gather of whole slices along one axis becomes `Gather` (a lookup).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo as shlo

from linnet.jax.importer.builder import Builder, Lazy, Ref, RowWrite, Shape
from linnet.jax.importer.mlir import int_array
from linnet.jax.importer.op_support import Handler, arg, onnx_dtype, result_type, scalar
from linnet.sourcegen.builder import Skip

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
        "Pad", [update, pads, scalar(b, 0.0, dtype)], dtype, shape, {"mode": "constant"}
    )
    ones = b.const(np.ones(sizes, dtype=np.float32))
    where = b.emit("Pad", [ones, pads, scalar(b, 0.0, "f32")], "f32", shape, {"mode": "constant"})
    mask = b.emit("Greater", [where, scalar(b, 0.5, "f32")], "bool", shape)
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


SHAPES: dict[str, Handler] = {
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
    "stablehlo.gather": _gather,
}
