"""ATen tensor operators (arithmetic, comparisons, casts, shapes, indexing) -> graph nodes.

Stage: the torch importer's second step. Each mapping takes the `Builder` and
one FX node and emits ONNX-vocabulary nodes (`Add`, `Reshape`, `Slice`,
`CumSum`, ...) or `linnet` domain ones (`linnet::index` for advanced
indexing); `TENSOR_OPS` maps ATen overload names (no `aten.` prefix) to them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from torch import fx

from linnet.sourcegen.builder import OPSET, Skip
from linnet.sourcegen.graph import DimLike, Node, TensorInfo
from linnet.torch.dtypes import linnet_dtype
from linnet.torch.importer.builder import (
    NUMPY,
    Builder,
    alias,
    args_of,
    axis_of,
    binary,
    cast_to,
    common_dtype,
    kwargs_of,
    linnet_node,
    linnet_unary,
    onnx_dtype,
    operand,
    operand_like,
    out_type,
    result,
    static,
    unary,
)

# ---------------------------------------------------------------- operators


def _rsqrt(b: Builder, node: fx.Node) -> None:
    dtype, shape = out_type(b, node)
    root = b.emit("Sqrt", [b.value(args_of(node)[0])], dtype, shape)
    result(b, node, "Reciprocal", [root])


def _pow(b: Builder, node: fx.Node) -> None:
    x, y = args_of(node)[0], args_of(node)[1]
    if not isinstance(x, fx.Node):
        raise Skip("a number raised to a tensor power")
    result(b, node, "Pow", [b.value(x), operand(b, node, y, None)])


def _div(b: Builder, node: fx.Node) -> None:
    mode = kwargs_of(node).get("rounding_mode")
    if mode is not None:
        raise Skip(f"division with rounding_mode={mode!r}")
    binary("Div")(b, node)


def _reduce(op: str) -> Callable[[Builder, fx.Node], None]:
    def fn(b: Builder, node: fx.Node) -> None:
        x = args_of(node)[0]
        rank = len(b.info(x).shape or ())
        dims = args_of(node)[1] if len(args_of(node)) > 1 else kwargs_of(node).get("dim")
        keep = args_of(node)[2] if len(args_of(node)) > 2 else kwargs_of(node).get("keepdim", False)
        if kwargs_of(node).get("dtype") is not None:
            raise Skip("a reduction with a dtype")
        axes = (
            list(range(rank))
            if dims in (None, [])
            else [
                axis_of(int(d), rank) for d in (dims if isinstance(dims, list | tuple) else [dims])
            ]
        )
        result(b, node, op, [b.value(x), b.ints(axes)], keepdims=int(bool(keep)))

    return fn


def _amax(b: Builder, node: fx.Node) -> None:
    _reduce("ReduceMax")(b, node)


def _cast(b: Builder, node: fx.Node) -> None:
    x = args_of(node)[0]
    dtype, _ = out_type(b, node)
    if dtype is None:
        raise Skip("a dtype Linnet lacks")
    src = b.value(x)
    if b.info(x).dtype == dtype:
        b.names[node] = src
        return
    result(b, node, "Cast", [src], to=onnx_dtype(dtype))


def _identity(b: Builder, node: fx.Node) -> None:
    alias(b, node, args_of(node)[0])


def _reshape(b: Builder, node: fx.Node) -> None:
    x = args_of(node)[0]
    _, shape = out_type(b, node)
    if b.info(x).shape == shape and None not in shape:
        alias(b, node, x)
        return
    if not all(isinstance(d, int) for d in shape):
        target = _shape_value(b, node, shape)
    else:
        target = b.ints(static(shape))
    result(b, node, "Reshape", [b.value(x), target])


def _shape_value(b: Builder, node: fx.Node, shape: Sequence[DimLike]) -> str:
    """A 1-D i64 value holding the result's shape, symbolic extents (and expressions
    of them) read from the inputs' shapes."""
    val = node.meta.get("val")
    sizes = list(getattr(val, "shape", ()))
    if len(sizes) != len(shape):
        raise Skip("a result shape the capture did not record")
    parts = [b.size_value(d) for d in sizes]
    if len(parts) == 1:
        return parts[0]
    return b.emit("Concat", parts, "i64", (len(parts),), {"axis": 0})


def _permute(b: Builder, node: fx.Node) -> None:
    x = args_of(node)[0]
    rank = len(b.info(x).shape or ())
    perm = [axis_of(int(p), rank) for p in args_of(node)[1]]
    if perm == list(range(rank)):
        alias(b, node, x)
        return
    result(b, node, "Transpose", [b.value(x)], perm=perm)


def _transpose(b: Builder, node: fx.Node) -> None:
    x = args_of(node)[0]
    rank = len(b.info(x).shape or ())
    a, c = axis_of(int(args_of(node)[1]), rank), axis_of(int(args_of(node)[2]), rank)
    perm = list(range(rank))
    perm[a], perm[c] = perm[c], perm[a]
    if a == c:
        alias(b, node, x)
        return
    result(b, node, "Transpose", [b.value(x)], perm=perm)


def _t(b: Builder, node: fx.Node) -> None:
    x = args_of(node)[0]
    if len(b.info(x).shape or ()) < 2:
        alias(b, node, x)
        return
    result(b, node, "Transpose", [b.value(x)], perm=[1, 0])


def _unsqueeze(b: Builder, node: fx.Node) -> None:
    _, shape = out_type(b, node)
    axis = axis_of(int(args_of(node)[1]), len(shape))
    result(b, node, "Unsqueeze", [b.value(args_of(node)[0]), b.ints([axis])])


def _squeeze(b: Builder, node: fx.Node) -> None:
    x = args_of(node)[0]
    shape = b.info(x).shape or ()
    dims = args_of(node)[1] if len(args_of(node)) > 1 else None
    if dims is None:
        axes = [i for i, d in enumerate(shape) if d == 1]
    else:
        listed = dims if isinstance(dims, list | tuple) else [dims]
        axes = [axis_of(int(d), len(shape)) for d in listed]
        axes = [a for a in axes if shape[a] == 1]
    if not axes:
        alias(b, node, x)
        return
    result(b, node, "Squeeze", [b.value(x), b.ints(axes)])


def _expand(b: Builder, node: fx.Node) -> None:
    x = args_of(node)[0]
    _, shape = out_type(b, node)
    if b.info(x).shape == shape and None not in shape:
        alias(b, node, x)
        return
    target = (
        b.ints(static(shape))
        if all(isinstance(d, int) for d in shape)
        else _shape_value(b, node, shape)
    )
    result(b, node, "Expand", [b.value(x), target])


def _slice(b: Builder, node: fx.Node) -> None:
    x = args_of(node)[0]
    shape = b.info(x).shape or ()
    args = list(args_of(node)) + [None] * 5
    dim = int(args[1] or 0)
    start = args[2] if args[2] is not None else 0
    end = args[3] if args[3] is not None else 2**63 - 1
    step = int(args[4] or 1)
    axis = axis_of(dim, len(shape))
    extent = shape[axis]
    bounds = [_bound(b, start), _bound(b, end)]
    whole = isinstance(end, int) and (end >= 2**62 or (isinstance(extent, int) and end >= extent))
    if start == 0 and step == 1 and whole:
        alias(b, node, x)
        return
    result(b, node, "Slice", [b.value(x), *bounds, b.ints([axis]), b.ints([step])])


def _bound(b: Builder, bound: object) -> str:
    """A slice bound: a number, or a size computed from dynamic dims (`S - 1`)."""
    if isinstance(bound, int):
        return b.ints([min(bound, 2**63 - 1)])
    if isinstance(bound, fx.Node):
        return b.size_value(bound.meta.get("val"))
    raise Skip(f"a slice bound {bound!r}")


def _select(b: Builder, node: fx.Node) -> None:
    x = args_of(node)[0]
    rank = len(b.info(x).shape or ())
    axis = axis_of(int(args_of(node)[1]), rank)
    index = int(args_of(node)[2])
    result(b, node, "Gather", [b.value(x), b.const(np.array(index, dtype=np.int64))], axis=axis)


def _cat(b: Builder, node: fx.Node) -> None:
    parts = [p for p in args_of(node)[0] if isinstance(p, fx.Node)]
    _, shape = out_type(b, node)
    dim = int(args_of(node)[1]) if len(args_of(node)) > 1 else int(kwargs_of(node).get("dim", 0))
    axis = axis_of(dim, len(shape))
    names = [b.value(p) for p in parts if 0 not in (b.info(p).shape or ())]
    if len(names) == 1:
        b.names[node] = names[0]
        return
    result(b, node, "Concat", names, axis=axis)


def _split(b: Builder, node: fx.Node) -> None:
    x = args_of(node)[0]
    shape = b.info(x).shape or ()
    vals = node.meta.get("val")
    if not isinstance(vals, list | tuple):
        raise Skip("a split without known pieces")
    dim = int(args_of(node)[2]) if len(args_of(node)) > 2 else int(kwargs_of(node).get("dim", 0))
    axis = axis_of(dim, len(shape))
    sizes = [int(v.shape[axis]) for v in vals]
    outs = []
    for i, v in enumerate(vals):
        outs.append(f"{node.name}__{i}")
        b.graph.value_info[outs[-1]] = TensorInfo(outs[-1], linnet_dtype(v.dtype), b.shape_of(v))
    b.graph.nodes.append(
        Node(
            "Split",
            "",
            node.name,
            (b.value(x), b.ints(sizes)),
            tuple(outs),
            {"axis": axis},
            OPSET,
            b.scope,
        )
    )
    b.names[node] = outs


def _getitem(b: Builder, node: fx.Node) -> None:
    src, index = args_of(node)[0], args_of(node)[1]
    names = b.names.get(src)
    if not isinstance(names, list) or not isinstance(index, int):
        raise Skip("an item of a value that is not a list of tensors")
    b.names[node] = names[index]


def _where(b: Builder, node: fx.Node) -> None:
    cond, x, y = args_of(node)[0], args_of(node)[1], args_of(node)[2]
    dtype, _ = out_type(b, node)
    result(b, node, "Where", [b.value(cond), cast_to(b, operand_like(b, node, x, dtype), dtype),
            cast_to(b, operand_like(b, node, y, dtype), dtype)])  # fmt: skip


def _masked_fill(b: Builder, node: fx.Node) -> None:
    x, mask, value = args_of(node)[0], args_of(node)[1], args_of(node)[2]
    dtype, _ = out_type(b, node)
    fill = operand_like(b, node, value, dtype)
    result(b, node, "Where", [b.value(mask), fill, b.value(x)])


def _flatten(b: Builder, node: fx.Node) -> None:
    _reshape(b, node)


def _clamp(b: Builder, node: fx.Node) -> None:
    args = list(args_of(node)) + [None] * 3
    x, lo, hi = args[0], args[1], args[2]
    dtype, _ = out_type(b, node)
    result(b, node, "Clip", [b.value(x), "" if lo is None else operand_like(b, node, lo, dtype),
            "" if hi is None else operand_like(b, node, hi, dtype)])  # fmt: skip


def _hardtanh(b: Builder, node: fx.Node) -> None:
    args = list(args_of(node)) + [None] * 3
    lo = -1.0 if args[1] is None else args[1]
    hi = 1.0 if args[2] is None else args[2]
    dtype, _ = out_type(b, node)
    result(b, node, "Clip", [b.value(args[0]), operand_like(b, node, lo, dtype),
            operand_like(b, node, hi, dtype)])  # fmt: skip


def _leaky_relu(b: Builder, node: fx.Node) -> None:
    slope = args_of(node)[1] if len(args_of(node)) > 1 else 0.01
    result(b, node, "LeakyRelu", [b.value(args_of(node)[0])], alpha=float(slope))


def _fill_like(value: float | None) -> Callable[[Builder, fx.Node], None]:
    """A tensor of the result's shape filled with `value` (None: the `fill_value`
    argument, as `full` takes it); a symbolic shape becomes `ConstantOfShape`."""

    def fn(b: Builder, node: fx.Node) -> None:
        dtype, shape = out_type(b, node)
        np_type = NUMPY.get(dtype or "")
        fill = args_of(node)[1] if value is None else value
        if np_type is None or not isinstance(fill, bool | int | float):
            raise Skip(f"a fill of {fill!r} as {dtype}")
        if all(isinstance(d, int) for d in shape):
            result(b, node, "Identity", [b.const(np.full(static(shape), fill, dtype=np_type))])
            return
        target = _shape_value(b, node, shape)
        result(b, node, "ConstantOfShape", [target], value=np.array([fill], dtype=np_type))

    return fn


def _arange(b: Builder, node: fx.Node) -> None:
    """`torch.arange(start, end, step)` over a symbolic extent (a static one is folded):
    an i64 `Range`, cast to the result's dtype."""
    args = list(args_of(node))
    if len(args) == 1:
        args = [0, args[0], 1]
    elif len(args) == 2:
        args.append(1)
    start, end, step = args
    dtype, shape = out_type(b, node)
    bounds: list[str] = []
    for bound in (start, end, step):
        if isinstance(bound, fx.Node):
            bounds.append(b.value(bound))
        elif isinstance(bound, int) and not isinstance(bound, bool):
            bounds.append(b.const(np.array(bound, dtype=np.int64)))
        else:
            raise Skip(f"a range bound {bound!r} that is not an integer")
    if dtype == "i64":
        result(b, node, "Range", bounds)
        return
    positions = b.emit("Range", bounds, "i64", shape)
    result(b, node, "Cast", [positions], to=onnx_dtype(dtype or "f32"))


def _diff(b: Builder, node: fx.Node) -> None:
    """`torch.diff(x, 1, dim, prepend, append)`: `y[1:] - y[:-1]` of `y = cat(prepend, x,
    append)` along `dim`."""
    args = [*args_of(node), None, None, None, None][:5]
    x, n, dim, prepend, append = args
    if n not in (None, 1):
        raise Skip(f"a difference of order {n}")
    dtype, shape = out_type(b, node)
    if dtype == "bool":
        raise Skip("a difference of booleans (an exclusive or)")
    rank = len(shape)
    axis = axis_of(-1 if dim is None else int(dim), rank)
    parts = [p for p in (prepend, x, append) if p is not None]
    if any(not isinstance(p, fx.Node) for p in parts):
        raise Skip("a prepended or appended number")
    whole = b.value(x)
    if len(parts) > 1:
        wide = list(b.info(x).shape or ())
        extents = [(b.info(p).shape or ())[axis] for p in parts]
        wide[axis] = sum(e for e in extents if isinstance(e, int)) if all(
            isinstance(e, int) for e in extents) else None  # fmt: skip
        whole = b.emit("Concat", [b.value(p) for p in parts], dtype, wide, {"axis": axis})
    last = 2**63 - 1
    later = b.emit("Slice", [whole, b.ints([1]), b.ints([last]), b.ints([axis])], dtype, shape)
    earlier = b.emit("Slice", [whole, b.ints([0]), b.ints([-1]), b.ints([axis])], dtype, shape)
    result(b, node, "Sub", [later, earlier])


def _rsub(b: Builder, node: fx.Node) -> None:
    """`other - x` (`torch.rsub`, what `1 - mask` exports as)."""
    x, other = args_of(node)[0], args_of(node)[1]
    dtype, _ = out_type(b, node)
    result(b, node, "Sub", [operand_like(b, node, other, dtype), cast_to(b, b.value(x), dtype)])


def _index(b: Builder, node: fx.Node) -> None:
    """`x[idx...]` with index tensors (None for a whole axis) -> `linnet::index`."""
    x, indices = args_of(node)[0], list(args_of(node)[1])
    while indices and indices[-1] is None:
        indices.pop()
    first = 0
    while first < len(indices) and indices[first] is None:
        first += 1
    tensors = indices[first:]
    if not tensors or any(not isinstance(t, fx.Node) for t in tensors):
        raise Skip("index tensors on axes that are not consecutive")
    if any(b.info(t).dtype == "bool" for t in tensors):
        raise Skip("a boolean mask index (a data-dependent shape)")
    linnet_node(b, node, "index", [b.value(x), *(b.value(t) for t in tensors)], first=first)


def _ne(b: Builder, node: fx.Node) -> None:
    """`x != y` as `Not(Equal(x, y))` (ONNX has no not-equal)."""
    x, y = args_of(node)[0], args_of(node)[1]
    want = common_dtype(b, node)
    xs = cast_to(b, operand_like(b, node, x, want), want)
    ys = cast_to(b, operand_like(b, node, y, want), want)
    _, shape = out_type(b, node)
    same = b.emit("Equal", [xs, ys], "bool", shape)
    result(b, node, "Not", [same])


def _cumsum(b: Builder, node: fx.Node) -> None:
    x = args_of(node)[0]
    if kwargs_of(node).get("dtype") is not None:
        raise Skip("a running sum with a dtype")
    rank = len(b.info(x).shape or ())
    axis = axis_of(int(args_of(node)[1]), rank)
    dtype, _ = out_type(b, node)
    src = cast_to(b, b.value(x), dtype)
    result(b, node, "CumSum", [src, b.const(np.array(axis, dtype=np.int64))])


def _gather(b: Builder, node: fx.Node) -> None:
    """`torch.gather(x, dim, index)`: ONNX `GatherElements`."""
    x, dim, index = args_of(node)[0], args_of(node)[1], args_of(node)[2]
    rank = len(b.info(x).shape or ())
    result(b, node, "GatherElements", [b.value(x), b.value(index)], axis=axis_of(int(dim), rank))


def _argmax(b: Builder, node: fx.Node) -> None:
    args = [*args_of(node), None, None]
    x, dim, keep = args[0], args[1], args[2]
    if dim is None:
        raise Skip("an argmax over the flattened tensor")
    rank = len(b.info(x).shape or ())
    axis = axis_of(int(dim), rank)
    result(b, node, "ArgMax", [b.value(x)], axis=axis, keepdims=int(bool(keep)))


def _sym_size(b: Builder, node: fx.Node) -> None:
    """An extent read as a number: nothing to emit; the nodes that take it (`view`,
    `expand`) read their result shapes from `meta["val"]`, where it is a generic.
    A node reading it as a tensor is refused (`Builder.value`)."""
    b.names[node] = ("extent", node.name)


Handler = Callable[[Builder, fx.Node], None]


TENSOR_OPS: dict[str, Handler] = {
    "add.Tensor": binary("Add"),
    "add.Scalar": binary("Add"),
    "sub.Tensor": binary("Sub"),
    "sub.Scalar": binary("Sub"),
    "rsub.Scalar": _rsub,
    "mul.Tensor": binary("Mul"),
    "mul.Scalar": binary("Mul"),
    "div.Tensor": _div,
    "div.Scalar": _div,
    "div.Tensor_mode": _div,
    "pow.Tensor_Scalar": _pow,
    "pow.Tensor_Tensor": _pow,
    "maximum.default": binary("Max"),
    "remainder.Scalar": binary("Mod"),
    "remainder.Tensor": binary("Mod"),
    "minimum.default": binary("Min"),
    "eq.Tensor": binary("Equal"),
    "eq.Scalar": binary("Equal"),
    "lt.Tensor": binary("Less"),
    "lt.Scalar": binary("Less"),
    "le.Tensor": binary("LessOrEqual"),
    "le.Scalar": binary("LessOrEqual"),
    "gt.Tensor": binary("Greater"),
    "gt.Scalar": binary("Greater"),
    "ge.Tensor": binary("GreaterOrEqual"),
    "ge.Scalar": binary("GreaterOrEqual"),
    "__and__.Tensor": binary("And"),
    "logical_and.default": binary("And"),
    "bitwise_and.Tensor": binary("And"),
    "__or__.Tensor": binary("Or"),
    "logical_or.default": binary("Or"),
    "logical_not.default": unary("Not"),
    "bitwise_not.default": unary("Not"),
    "neg.default": unary("Neg"),
    "abs.default": unary("Abs"),
    "exp.default": unary("Exp"),
    "log.default": unary("Log"),
    "sqrt.default": unary("Sqrt"),
    "rsqrt.default": _rsqrt,
    "reciprocal.default": unary("Reciprocal"),
    "sin.default": unary("Sin"),
    "cos.default": unary("Cos"),
    "tanh.default": unary("Tanh"),
    "erf.default": unary("Erf"),
    "sigmoid.default": unary("Sigmoid"),
    "relu.default": unary("Relu"),
    "relu_.default": unary("Relu"),
    "silu.default": linnet_unary("silu"),
    "silu_.default": linnet_unary("silu"),
    "hardtanh.default": _hardtanh,
    "leaky_relu.default": _leaky_relu,
    "clamp.default": _clamp,
    "mean.dim": _reduce("ReduceMean"),
    "mean.default": _reduce("ReduceMean"),
    "sum.dim_IntList": _reduce("ReduceSum"),
    "sum.default": _reduce("ReduceSum"),
    "amax.default": _amax,
    "to.dtype": _cast,
    "to.dtype_layout": _cast,
    "to.device": _cast,
    "_to_copy.default": _cast,
    "type_as.default": _cast,
    "clone.default": _identity,
    "contiguous.default": _identity,
    "alias.default": _identity,
    "detach.default": _identity,
    "lift_fresh_copy.default": _identity,
    "dropout.default": _identity,
    "view.default": _reshape,
    "reshape.default": _reshape,
    "_unsafe_view.default": _reshape,
    "flatten.using_ints": _flatten,
    "unflatten.int": _reshape,
    "permute.default": _permute,
    "transpose.int": _transpose,
    "t.default": _t,
    "unsqueeze.default": _unsqueeze,
    "squeeze.dim": _squeeze,
    "squeeze.dims": _squeeze,
    "squeeze.default": _squeeze,
    "expand.default": _expand,
    "slice.Tensor": _slice,
    "select.int": _select,
    "cat.default": _cat,
    "split.Tensor": _split,
    "split_with_sizes.default": _split,
    "chunk.default": _split,
    "getitem": _getitem,
    "<built-in function getitem>": _getitem,
    "where.self": _where,
    "index.Tensor": _index,
    "ne.Scalar": _ne,
    "ne.Tensor": _ne,
    "cumsum.default": _cumsum,
    "gather.default": _gather,
    "argmax.default": _argmax,
    "masked_fill.Scalar": _masked_fill,
    "zeros_like.default": _fill_like(0.0),
    "ones_like.default": _fill_like(1.0),
    "new_zeros.default": _fill_like(0.0),
    "new_ones.default": _fill_like(1.0),
    "zeros.default": _fill_like(0.0),
    "ones.default": _fill_like(1.0),
    "full.default": _fill_like(None),
    "arange.default": _arange,
    "arange.start": _arange,
    "arange.start_step": _arange,
    "diff.default": _diff,
    "sym_size.int": _sym_size,
}
"""The tensor operators mapped, keyed by ATen overload name without `aten.`."""
