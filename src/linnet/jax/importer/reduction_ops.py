"""StableHLO contractions and reductions: `dot_general`, `convolution`, `reduce`,
argmax/argmin reductions and `reduce_window` (pooling, running sums).

Stage: the StableHLO importer's second step (`ops.OPS` merges this family's
table). `dot_general` becomes `MatMul` in NumPy's layout and an `Einsum`
otherwise (index notation); `reduce` with one monoid body becomes
`ReduceSum` / `ReduceMax` / `ReduceMin` / `ReduceProd`; `reduce_window` that is
a running sum becomes `CumSum`, max and sum windows pooling.
"""

from __future__ import annotations

import math
import string
from typing import Any

import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo as shlo

from linnet.jax.importer.builder import Builder, Ref, Shape
from linnet.jax.importer.elementwise_ops import elementwise
from linnet.jax.importer.mlir import dense_array, int_array
from linnet.jax.importer.op_support import Handler, arg, onnx_dtype, result_type, scalar
from linnet.sourcegen.builder import Skip

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

_BOOL_MONOIDS = {
    "stablehlo.or": ("ReduceMax", "Or", 0.0),
    "stablehlo.and": ("ReduceMin", "And", 1.0),
}
"""Over booleans only (over integers `or` and `and` are bitwise)."""


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
    monoid = _monoid(op.regions[0].blocks[0])
    kind = _MONOIDS.get(monoid)
    if monoid in _BOOL_MONOIDS and dtype == "bool":
        kind = _BOOL_MONOIDS[monoid]  # `jnp.any` / `jnp.all`: a max or min of booleans
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
        pooled = b.emit("Mul", [mean, scalar(b, float(size), dtype)], dtype, out)
    if perm == list(range(rank)):
        return pooled
    inverse = [perm.index(i) for i in range(rank)]
    return b.emit("Transpose", [pooled], dtype, shape, {"perm": inverse})


REDUCTIONS: dict[str, Handler] = {
    "stablehlo.dot_general": _dot_general,
    "stablehlo.convolution": _convolution,
    "stablehlo.reduce": _reduce,
    "stablehlo.reduce_window": _reduce_window,
}
