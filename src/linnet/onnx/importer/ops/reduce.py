"""ONNX reductions, arg-extrema, softmax family and cumulative sums -> index notation.

Stage: ONNX import, translation. A reduction over some axes is a
comprehension whose output indices are the kept axes and whose reduction
indices are the reduced ones (section 8): `ReduceSum(x, axes=[1])` on a
`[A, B, C]` input is `let total[i, k] = sum[j] x[i, j, k]`, reshaped when
`keepdims` keeps the reduced axes as 1s. Reducing every axis gives a scalar.

`Softmax` over the last axis calls `std.nn.softmax::softmax`; over another
axis the axis is moved last and back (`permute`). Before opset 13, `Softmax`,
`LogSoftmax` and `Hardmax` flatten the input to 2-D at `axis` first, as the
operator spec of those versions says.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from linnet.check.dims import Dim
from linnet.onnx.importer.graph import translator
from linnet.onnx.importer.ops._common import (
    FLOAT_DTYPES,
    axes_list,
    cast,
    norm_axis,
    numel,
)
from linnet.onnx.importer.ops.shapes import permuted, reshaped
from linnet.sourcegen import build
from linnet.sourcegen.translate import Context, Unsupported
from linnet.sourcegen.values import Value
from linnet.syntax import ast

Body = Callable[[ast.Expr], ast.Expr]


def access(ctx: Context, x: Value, indices: Sequence[str | ast.Expr]) -> ast.Expr:
    """`x[i, j, k]` (a scalar `x` is read as it is)."""
    if x.is_scalar:
        return ctx.ref(x)
    comps = [build.name(i) if isinstance(i, str) else i for i in indices]
    return build.index(ctx.ref(x), comps)


def reduce_axes(
    ctx: Context,
    x: Value,
    axes: Sequence[int],
    kind: str,
    body: Body,
    dtype: str,
    hint: str,
    keepdims: bool = False,
    accumulator: str | None = None,
) -> Value:
    """`kind[reduced] body(x[...])` per kept position; see the module docstring."""
    axes = sorted(set(axes))
    names = ctx.indices(x.rank)
    element = body(access(ctx, x, names))
    reduced = [names[a] for a in axes]
    kept = [n for i, n in enumerate(names) if i not in axes]
    kept_dims = [d for i, d in enumerate(x.shape) if i not in axes]
    value = build.reduction(kind, reduced, element, accumulator) if reduced else element
    if kept:
        out = ctx.comprehension(kept, value, kept_dims, dtype, hint)
    else:
        out = ctx.let(value, (), dtype, hint)
    if keepdims:
        dims = [Dim.const(1) if i in axes else d for i, d in enumerate(x.shape)]
        out = reshaped(ctx, out, dims, hint)
    return out


def _axes(ctx: Context, x: Value, input_version: int) -> list[int] | None:
    """The reduced axes: attribute before `input_version`, the second input from it on."""
    if ctx.node.opset < input_version:
        raw = ctx.attr("axes", None)
        axes = None if raw is None else [int(a) for a in raw]
    else:
        axes = axes_list(ctx, "axes", 1)
    if axes is not None:
        axes = [norm_axis(a, x.rank) for a in axes]
    return axes


_REDUCE_INPUT_VERSION = {"ReduceSum": 13}
"""ReduceSum takes axes as an input from opset 13, the others from opset 18."""


def _reduce(ctx: Context, make: Callable[[Context, Value, list[int], bool], Value]) -> None:
    x = ctx.need(0)
    keepdims = bool(ctx.attr("keepdims", 1))
    axes = _axes(ctx, x, _REDUCE_INPUT_VERSION.get(ctx.node.op, 18))
    if not axes:
        if axes is not None and ctx.attr("noop_with_empty_axes", 0):
            ctx.output(0, x)
            return
        axes = list(range(x.rank))
    if x.is_scalar:
        ctx.output(0, x)
        return
    ctx.output(0, make(ctx, x, axes, keepdims))


def _numeric(x: Value, op: str) -> None:
    if x.dtype == "bool":
        raise Unsupported(f"{op} of bool")


def _count(ctx: Context, x: Value, axes: list[int]) -> Dim:
    return ctx.simplify(numel([x.shape[a] for a in axes]))


def _divide_by(ctx: Context, v: Value, count: Dim, hint: str) -> Value:
    n = count.as_int()
    divisor = build.float_lit(float(n)) if n is not None else cast(ctx.dim(count), v.dtype)
    return ctx.let(build.binary("/", ctx.ref(v), divisor), v.shape, v.dtype, hint)


@translator("ReduceSum")
def reduce_sum(ctx: Context) -> None:
    def make(c: Context, x: Value, axes: list[int], keep: bool) -> Value:
        _numeric(x, "ReduceSum")
        return reduce_axes(c, x, axes, "sum", lambda e: e, x.dtype, "total", keep)

    _reduce(ctx, make)


@translator("ReduceMean")
def reduce_mean(ctx: Context) -> None:
    def make(c: Context, x: Value, axes: list[int], keep: bool) -> Value:
        if x.dtype not in FLOAT_DTYPES:
            raise Unsupported(f"ReduceMean of {x.dtype}")
        total = reduce_axes(c, x, axes, "sum", lambda e: e, x.dtype, "total", keep)
        return _divide_by(c, total, _count(c, x, axes), "mean")

    _reduce(ctx, make)


@translator("ReduceMax", "ReduceMin")
def reduce_extreme(ctx: Context) -> None:
    def make(c: Context, x: Value, axes: list[int], keep: bool) -> Value:
        is_max = c.node.op == "ReduceMax"
        if x.dtype == "bool":
            kind = "any" if is_max else "all"
        else:
            kind = "max" if is_max else "min"
        return reduce_axes(
            c, x, axes, kind, lambda e: e, x.dtype, "peak" if is_max else "least", keep
        )

    _reduce(ctx, make)


@translator("ReduceProd")
def reduce_prod(ctx: Context) -> None:
    def make(c: Context, x: Value, axes: list[int], keep: bool) -> Value:
        _numeric(x, "ReduceProd")
        return reduce_axes(c, x, axes, "prod", lambda e: e, x.dtype, "product", keep)

    _reduce(ctx, make)


@translator("ReduceL1")
def reduce_l1(ctx: Context) -> None:
    def make(c: Context, x: Value, axes: list[int], keep: bool) -> Value:
        _numeric(x, "ReduceL1")
        return reduce_axes(c, x, axes, "sum", lambda e: build.call("abs", e), x.dtype, "l1", keep)

    _reduce(ctx, make)


def _square(e: ast.Expr) -> ast.Expr:
    return build.binary("*", e, e)


@translator("ReduceSumSquare")
def reduce_sum_square(ctx: Context) -> None:
    def make(c: Context, x: Value, axes: list[int], keep: bool) -> Value:
        _numeric(x, "ReduceSumSquare")
        return reduce_axes(c, x, axes, "sum", _square, x.dtype, "squares", keep)

    _reduce(ctx, make)


@translator("ReduceL2")
def reduce_l2(ctx: Context) -> None:
    def make(c: Context, x: Value, axes: list[int], keep: bool) -> Value:
        if x.dtype not in FLOAT_DTYPES:
            raise Unsupported(f"ReduceL2 of {x.dtype}")
        total = reduce_axes(c, x, axes, "sum", _square, x.dtype, "squares", keep)
        return c.let(build.call("sqrt", c.ref(total)), total.shape, x.dtype, "l2")

    _reduce(ctx, make)


@translator("ReduceLogSum")
def reduce_log_sum(ctx: Context) -> None:
    def make(c: Context, x: Value, axes: list[int], keep: bool) -> Value:
        if x.dtype not in FLOAT_DTYPES:
            raise Unsupported(f"ReduceLogSum of {x.dtype}")
        total = reduce_axes(c, x, axes, "sum", lambda e: e, x.dtype, "total", keep)
        return c.let(build.call("log", c.ref(total)), total.shape, x.dtype, "log_sum")

    _reduce(ctx, make)


@translator("ReduceLogSumExp")
def reduce_log_sum_exp(ctx: Context) -> None:
    def make(c: Context, x: Value, axes: list[int], keep: bool) -> Value:
        if x.dtype not in FLOAT_DTYPES:
            raise Unsupported(f"ReduceLogSumExp of {x.dtype}")
        # log(sum(exp(x - m))) + m with m the maximum (stable for large inputs).
        peak = reduce_axes(c, x, axes, "max", lambda e: e, x.dtype, "peak", keepdims=True)
        names = c.indices(x.rank)
        at = [build.name(n) for n in names]
        centre = [build.int_lit(0) if i in axes else at[i] for i in range(x.rank)]
        shifted = build.call(
            "exp", build.binary("-", access(c, x, at), build.index(c.ref(peak), centre))
        )
        kept = [n for i, n in enumerate(names) if i not in axes]
        reduced = [names[a] for a in axes]
        total_expr = build.reduction("sum", reduced, shifted)
        kept_dims = [d for i, d in enumerate(x.shape) if i not in axes]
        if kept:
            total = c.comprehension(kept, total_expr, kept_dims, x.dtype, "total")
        else:
            total = c.let(total_expr, (), x.dtype, "total")
        dims = [Dim.const(1) if i in axes else d for i, d in enumerate(x.shape)]
        peak_kept = reshaped(c, peak, kept_dims, "peak")
        expr = build.binary("+", build.call("log", c.ref(total)), c.ref(peak_kept))
        out = c.let(expr, kept_dims, x.dtype, "log_sum_exp")
        return reshaped(c, out, dims, "log_sum_exp") if keep else out

    _reduce(ctx, make)


# ---------------------------------------------------------------- arg-extrema


@translator("ArgMax", "ArgMin")
def arg_extreme(ctx: Context) -> None:
    x = ctx.need(0)
    _numeric(x, ctx.node.op)
    if x.is_scalar:
        raise Unsupported("of a scalar")
    axis = norm_axis(int(ctx.attr("axis", 0)), x.rank)
    keepdims = bool(ctx.attr("keepdims", 1))
    last = bool(ctx.attr("select_last_index", 0))
    is_max = ctx.node.op == "ArgMax"
    ctx.output(0, arg_index(ctx, x, axis, is_max, last, keepdims))


def arg_index(ctx: Context, x: Value, axis: int, is_max: bool, last: bool, keepdims: bool) -> Value:
    """The position of the first (or last) extreme value along `axis`, as i64."""
    peak = reduce_axes(ctx, x, [axis], "max" if is_max else "min", lambda e: e, x.dtype, "peak")
    extent = x.shape[axis]
    pos = ctx.let(
        build.call("iota", ctx.dim(extent), generics=[build.named_type("i64")]),
        (extent,),
        "i64",
        "pos",
    )
    names = ctx.indices(x.rank)
    kept = [n for i, n in enumerate(names) if i != axis]
    hit = build.binary("==", access(ctx, x, names), access(ctx, peak, kept))
    if last:
        body = build.call("select", hit, access(ctx, pos, [names[axis]]), build.int_lit(-1))
        kind = "max"
    else:
        body = build.call("select", hit, access(ctx, pos, [names[axis]]), ctx.dim(extent))
        kind = "min"
    kept_dims = [d for i, d in enumerate(x.shape) if i != axis]
    value = build.reduction(kind, [names[axis]], body)
    if kept:
        out = ctx.comprehension(kept, value, kept_dims, "i64", "arg")
    else:
        out = ctx.let(value, (), "i64", "arg")
    if keepdims:
        out = reshaped(
            ctx, out, [Dim.const(1) if i == axis else d for i, d in enumerate(x.shape)], "arg"
        )
    return out


# ---------------------------------------------------------------- softmax family


def _softmax_axis(ctx: Context, x: Value) -> tuple[Value, int, Callable[[Value], Value]]:
    """The input viewed so the softmax axis is `axis`, and how to restore the result.

    Before opset 13 the input is flattened to `[prod(before), prod(after)]` at `axis`.
    """
    default = -1 if ctx.node.opset >= 13 else 1
    axis = norm_axis(int(ctx.attr("axis", default)), x.rank)
    if ctx.node.opset >= 13 or axis == x.rank - 1:
        return x, axis, lambda v: v
    flat = reshaped(ctx, x, [numel(x.shape[:axis]), numel(x.shape[axis:])], "flat")
    original = x.shape
    return flat, 1, lambda v: reshaped(ctx, v, original, "restored")


def _last_axis(ctx: Context, x: Value, axis: int, fn: Callable[[Value], Value]) -> Value:
    """`fn` applied over the last axis, moving `axis` there and back."""
    if axis == x.rank - 1:
        return fn(x)
    order = [i for i in range(x.rank) if i != axis] + [axis]
    moved = permuted(ctx, x, order, "moved")
    result = fn(moved)
    back = [0] * x.rank
    for i, p in enumerate(order):
        back[p] = i
    return permuted(ctx, result, back, "restored")


@translator("Softmax")
def softmax(ctx: Context) -> None:
    x = ctx.need(0)
    if x.dtype not in FLOAT_DTYPES:
        raise Unsupported(f"Softmax of {x.dtype}")
    if x.is_scalar:
        raise Unsupported("Softmax of a scalar")
    view, axis, restore = _softmax_axis(ctx, x)
    fn = ctx.std("nn.softmax", "softmax")

    def last(v: Value) -> Value:
        return ctx.let(build.call(fn, ctx.ref(v)), v.shape, v.dtype, "probs")

    ctx.output(0, restore(_last_axis(ctx, view, axis, last)))


@translator("LogSoftmax")
def log_softmax(ctx: Context) -> None:
    x = ctx.need(0)
    if x.dtype not in FLOAT_DTYPES:
        raise Unsupported(f"LogSoftmax of {x.dtype}")
    if x.is_scalar:
        raise Unsupported("LogSoftmax of a scalar")
    view, axis, restore = _softmax_axis(ctx, x)
    ctx.output(0, restore(log_softmax_value(ctx, view, axis)))


def log_softmax_value(ctx: Context, x: Value, axis: int) -> Value:
    """`x - max - log(sum(exp(x - max)))` along `axis`."""
    peak = reduce_axes(ctx, x, [axis], "max", lambda e: e, x.dtype, "peak")
    names = ctx.indices(x.rank)
    kept = [n for i, n in enumerate(names) if i != axis]
    shifted_expr = build.binary("-", access(ctx, x, names), access(ctx, peak, kept))
    shifted = ctx.comprehension(names, shifted_expr, x.shape, x.dtype, "shifted")
    total = reduce_axes(
        ctx, shifted, [axis], "sum", lambda e: build.call("exp", e), x.dtype, "total"
    )
    body = build.binary(
        "-", access(ctx, shifted, names), build.call("log", access(ctx, total, kept))
    )
    return ctx.comprehension(names, body, x.shape, x.dtype, "log_probs")


@translator("Hardmax")
def hardmax(ctx: Context) -> None:
    x = ctx.need(0)
    if x.dtype not in FLOAT_DTYPES:
        raise Unsupported(f"Hardmax of {x.dtype}")
    view, axis, restore = _softmax_axis(ctx, x)
    arg = arg_index(ctx, view, axis, True, False, False)
    extent = view.shape[axis]
    pos = ctx.let(
        build.call("iota", ctx.dim(extent), generics=[build.named_type("i64")]),
        (extent,),
        "i64",
        "pos",
    )
    names = ctx.indices(view.rank)
    kept = [n for i, n in enumerate(names) if i != axis]
    body = cast(
        build.binary("==", access(ctx, pos, [names[axis]]), access(ctx, arg, kept)), x.dtype
    )
    ctx.output(0, restore(ctx.comprehension(names, body, view.shape, x.dtype, "hard")))


# ---------------------------------------------------------------- cumulative


@translator("CumSum", "CumProd")
def cumulative(ctx: Context) -> None:
    x = ctx.need(0)
    _numeric(x, ctx.node.op)
    if x.is_scalar:
        raise Unsupported("of a scalar")
    axis_in = ctx.ints(1)
    if axis_in is None or len(axis_in) != 1:
        raise Unsupported("axis must be one constant")
    axis = norm_axis(axis_in[0], x.rank)
    exclusive = bool(ctx.attr("exclusive", 0))
    reverse = bool(ctx.attr("reverse", 0))
    if ctx.node.op == "CumSum" and not exclusive and not reverse:
        # The plain running sum is the prelude's `cumsum` (language-extensions 5).
        running = build.call("cumsum", ctx.ref(x), named=[("axis", build.int_lit(axis))])
        ctx.output(0, ctx.let(running, x.shape, x.dtype, "running"))
        return
    extent = x.shape[axis]
    pos = ctx.let(
        build.call("iota", ctx.dim(extent), generics=[build.named_type("i64")]),
        (extent,),
        "i64",
        "pos",
    )
    names = ctx.indices(x.rank + 1)
    outs, j = names[: x.rank], names[x.rank]
    source = list(outs)
    source[axis] = j
    rel = {(False, False): "<=", (True, False): "<", (False, True): ">=", (True, True): ">"}
    inside = build.binary(
        rel[(exclusive, reverse)], access(ctx, pos, [j]), access(ctx, pos, [outs[axis]])
    )
    is_sum = ctx.node.op == "CumSum"
    neutral = (
        build.float_lit(0.0 if is_sum else 1.0)
        if x.dtype in FLOAT_DTYPES
        else build.int_lit(0 if is_sum else 1)
    )
    body = build.call("select", inside, access(ctx, x, source), neutral)
    value = build.reduction("sum" if is_sum else "prod", [j], body)
    ctx.output(0, ctx.comprehension(outs, value, x.shape, x.dtype, "running"))


# ---------------------------------------------------------------- normalisations by reduction


@translator("LpNormalization")
def lp_normalization(ctx: Context) -> None:
    x = ctx.need(0)
    if x.dtype not in FLOAT_DTYPES:
        raise Unsupported(f"LpNormalization of {x.dtype}")
    axis = norm_axis(int(ctx.attr("axis", -1)), x.rank)
    p = int(ctx.attr("p", 2))
    if p == 1:
        norm = reduce_axes(ctx, x, [axis], "sum", lambda e: build.call("abs", e), x.dtype, "norm")
    elif p == 2:
        sq = reduce_axes(ctx, x, [axis], "sum", _square, x.dtype, "squares")
        norm = ctx.let(build.call("sqrt", ctx.ref(sq)), sq.shape, x.dtype, "norm")
    else:
        raise Unsupported(f"p = {p}")
    names = ctx.indices(x.rank)
    kept = [n for i, n in enumerate(names) if i != axis]
    n = access(ctx, norm, kept)
    # ONNX's reference gives 0 where the norm is 0.
    body = build.call(
        "select",
        build.binary("==", n, build.float_lit(0.0)),
        build.float_lit(0.0),
        build.binary("/", access(ctx, x, names), n),
    )
    ctx.output(0, ctx.comprehension(names, body, x.shape, x.dtype, "normalized"))


@translator("MeanVarianceNormalization")
def mean_variance_normalization(ctx: Context) -> None:
    x = ctx.need(0)
    if x.dtype not in FLOAT_DTYPES:
        raise Unsupported(f"MeanVarianceNormalization of {x.dtype}")
    axes = [norm_axis(int(a), x.rank) for a in ctx.attr("axes", [0, 2, 3])]
    count = _count(ctx, x, axes)
    mean = _divide_by(
        ctx, reduce_axes(ctx, x, axes, "sum", lambda e: e, x.dtype, "total", True), count, "mean"
    )
    names = ctx.indices(x.rank)
    at_mean = [build.int_lit(0) if i in axes else build.name(n) for i, n in enumerate(names)]
    centred_expr = build.binary("-", access(ctx, x, names), build.index(ctx.ref(mean), at_mean))
    centred = ctx.comprehension(names, centred_expr, x.shape, x.dtype, "centred")
    var = _divide_by(
        ctx,
        reduce_axes(ctx, centred, axes, "sum", _square, x.dtype, "squares", True),
        count,
        "variance",
    )
    # ONNX's function body: (x - mean) / (sqrt(var) + 1e-9).
    denom = build.binary(
        "+", build.call("sqrt", build.index(ctx.ref(var), at_mean)), build.float_lit(1e-9)
    )
    body = build.binary("/", access(ctx, centred, names), build.paren(denom))
    ctx.output(0, ctx.comprehension(names, body, x.shape, x.dtype, "normalized"))
