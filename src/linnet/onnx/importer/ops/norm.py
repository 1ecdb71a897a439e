"""ONNX normalisations -> `std.nn.norm` (`layer_norm`, `rms_norm`, `batch_norm`, `group_norm`).

Stage: ONNX import, translation. The standard library normalises over the
last axis with a `[H]` weight; ONNX normalises from `axis` to the end with a
weight of that trailing shape, so several trailing axes are flattened into
one around the call. Where the library does not fit (the optional `Mean` and
`InvStdDev` outputs, broadcast weights, f64 statistics, per-group weights of
`GroupNormalization` before opset 21) the statistics are written out in
index notation, in the operator's `stash_type` (f32 by default), as the ONNX
function bodies compute them.
"""

from __future__ import annotations

from collections.abc import Sequence

from linnet.check.dims import Dim
from linnet.onnx.importer.graph import translator
from linnet.onnx.importer.ops._common import FLOAT_DTYPES, cast, norm_axis, numel
from linnet.onnx.importer.ops.reduce import access, reduce_axes
from linnet.onnx.importer.ops.shapes import reshaped
from linnet.sourcegen import build
from linnet.sourcegen.translate import Context, Unsupported
from linnet.sourcegen.values import Value
from linnet.syntax import ast

ONE = Dim.const(1)


def _float(x: Value, op: str) -> None:
    if x.dtype not in FLOAT_DTYPES:
        raise Unsupported(f"{op} of {x.dtype}")


def _stash(ctx: Context, x: Value) -> str:
    code = int(ctx.attr("stash_type", 1))
    if code == 1:
        return "f32"
    if code == 11:
        return "f64"
    from linnet.onnx.importer.ops.basic import linnet_dtype

    return linnet_dtype(code)


def _same_shape(ctx: Context, v: Value | None, dims: Sequence[Dim]) -> bool:
    return v is None or (
        v.rank == len(dims) and all(ctx.equal(a, b) for a, b in zip(v.shape, dims, strict=True))
    )


def _wants(ctx: Context, i: int) -> bool:
    return ctx.n_outputs > i and bool(ctx.node.outputs[i])


def statistics(
    ctx: Context, x: Value, axes: list[int], dtype: str, eps: float, rms: bool = False
) -> tuple[Value, Value, Value]:
    """(values in `dtype`, mean with the reduced axes kept as 1, 1 / sqrt(var + eps) likewise).

    With `rms`, the mean is not subtracted and the "variance" is the mean square.
    """
    xs = x if x.dtype == dtype else ctx.let(cast(ctx.ref(x), dtype), x.shape, dtype, "wide")
    count = ctx.simplify(numel([x.shape[a] for a in axes]))
    n = count.as_int()
    divisor = build.float_lit(float(n)) if n is not None else cast(ctx.dim(count), dtype)
    names = ctx.indices(x.rank)
    kept_at = [build.int_lit(0) if i in axes else build.name(nm) for i, nm in enumerate(names)]
    if rms:
        centred = mean = xs  # no mean is subtracted; callers of `rms` do not read `mean`
    else:
        total = reduce_axes(ctx, xs, axes, "sum", lambda e: e, dtype, "total", keepdims=True)
        mean = ctx.let(build.binary("/", ctx.ref(total), divisor), total.shape, dtype, "mean")
        body = build.binary("-", access(ctx, xs, names), build.index(ctx.ref(mean), kept_at))
        centred = ctx.comprehension(names, body, x.shape, dtype, "centred")
    squares = reduce_axes(
        ctx,
        centred,
        axes,
        "sum",
        lambda e: build.binary("*", e, e),
        dtype,
        "squares",
        keepdims=True,
    )
    inv = ctx.let(
        build.call(
            "rsqrt",
            build.binary(
                "+", build.binary("/", ctx.ref(squares), divisor), ctx.literal(eps, dtype)
            ),
        ),
        squares.shape,
        dtype,
        "inv_std",
    )
    names = ctx.indices(x.rank)
    kept_at = [build.int_lit(0) if i in axes else build.name(nm) for i, nm in enumerate(names)]
    normed = ctx.comprehension(
        names,
        build.binary("*", access(ctx, centred, names), build.index(ctx.ref(inv), kept_at)),
        x.shape,
        dtype,
        "normalized",
    )
    return normed, mean, inv


def affine(
    ctx: Context, normed: Value, x: Value, scale: Value | None, bias: Value | None, hint: str
) -> Value:
    """`cast<T>(normed) * scale + bias` with ONNX broadcasting of scale and bias."""
    expr: ast.Expr = ctx.ref(normed) if normed.dtype == x.dtype else cast(ctx.ref(normed), x.dtype)
    shape = list(x.shape)
    for v in (scale, bias):
        if v is not None:
            shape = list(ctx.broadcast(shape, v.shape))
            if v.dtype != x.dtype:
                raise Unsupported("scale or bias of another dtype")
    if len(shape) != x.rank:
        raise Unsupported("scale or bias of a higher rank than the input")
    if scale is not None:
        expr = build.binary("*", expr, ctx.ref(scale))
    if bias is not None:
        expr = build.binary("+", expr, ctx.ref(bias))
    return ctx.let(expr, x.shape, x.dtype, hint)


@translator("LayerNormalization")
def layer_normalization(ctx: Context) -> None:
    x, scale, bias = ctx.need(0), ctx.input(1), ctx.input(2)
    _float(x, "LayerNormalization")
    axis = norm_axis(int(ctx.attr("axis", -1)), x.rank)
    eps = float(ctx.attr("epsilon", 1e-5))
    tail = x.shape[axis:]
    stash = _stash(ctx, x)
    simple = (
        not _wants(ctx, 1)
        and not _wants(ctx, 2)
        and stash == "f32"
        and x.dtype != "f64"
        and scale is not None
        and _same_shape(ctx, scale, tail)
        and _same_shape(ctx, bias, tail)
    )
    if simple:
        assert scale is not None
        ctx.output(0, _std_norm(ctx, "layer_norm", x, axis, scale, bias, eps))
        return
    axes = list(range(axis, x.rank))
    normed, mean, inv = statistics(ctx, x, axes, stash, eps)
    ctx.output(0, affine(ctx, normed, x, scale, bias, "normalized"))
    if _wants(ctx, 1):
        ctx.output(1, mean)
    if _wants(ctx, 2):
        ctx.output(2, inv)


def _std_norm(
    ctx: Context, op: str, x: Value, axis: int, scale: Value, bias: Value | None, eps: float
) -> Value:
    """`std.nn.norm.<op>` over the axes from `axis` on (flattened into one when several)."""
    fn = ctx.std("nn.norm", op)
    flat = axis < x.rank - 1
    width = ctx.simplify(numel(x.shape[axis:]))
    xv = reshaped(ctx, x, [*x.shape[:axis], width], "flat") if flat else x
    sv = reshaped(ctx, scale, [width], "weight") if scale.rank != 1 else scale
    args: list[ast.Expr] = [ctx.ref(xv), ctx.ref(sv)]
    if op == "layer_norm":
        if bias is not None:
            bv = reshaped(ctx, bias, [width], "bias") if bias.rank != 1 else bias
            args.append(build.some(ctx.ref(bv)))
        else:
            args.append(build.none())
    args.append(ctx.literal(eps, "f32"))  # `eps: f32`, shortest spelling
    out = ctx.let(build.call(fn, *args), xv.shape, x.dtype, "normalized")
    return reshaped(ctx, out, x.shape, "normalized") if flat else out


@translator("RMSNormalization")
def rms_normalization(ctx: Context) -> None:
    x, scale = ctx.need(0), ctx.need(1)
    _float(x, "RMSNormalization")
    axis = norm_axis(int(ctx.attr("axis", -1)), x.rank)
    eps = float(ctx.attr("epsilon", 1e-5))
    stash = _stash(ctx, x)
    if stash == "f32" and x.dtype != "f64" and _same_shape(ctx, scale, x.shape[axis:]):
        ctx.output(0, _std_norm(ctx, "rms_norm", x, axis, scale, None, eps))
        return
    normed, _, _ = statistics(ctx, x, list(range(axis, x.rank)), stash, eps, rms=True)
    ctx.output(0, affine(ctx, normed, x, scale, None, "normalized"))


@translator("BatchNormalization")
def batch_normalization(ctx: Context) -> None:
    x, scale, bias, mean, var = (ctx.need(i) for i in range(5))
    _float(x, "BatchNormalization")
    if int(ctx.attr("training_mode", 0)):
        _batch_norm_training(ctx, x, scale, bias, mean, var)
        return
    if any(_wants(ctx, i) for i in range(1, 5)):
        raise Unsupported("statistics outputs outside training mode")
    if ctx.node.opset < 7 and not int(ctx.attr("is_test", 0)):
        raise Unsupported("training mode (is_test = 0)")
    if ctx.node.opset < 9 and not int(ctx.attr("spatial", 1)):
        raise Unsupported("spatial = 0")
    if x.rank < 2:
        raise Unsupported("input must be [N, C, ...]")
    eps = float(ctx.attr("epsilon", 1e-5))
    params = (scale, bias, mean, var)
    if any(p.rank != 1 or p.dtype != x.dtype for p in params):
        raise Unsupported("statistics must be per-channel vectors of the input's dtype")
    if x.rank == 4:
        fn = ctx.std("nn.norm", "batch_norm")
        args = [ctx.ref(v) for v in (x, mean, var, scale, bias)] + [ctx.literal(eps, "f32")]
        ctx.output(0, ctx.let(build.call(fn, *args), x.shape, x.dtype, "normalized"))
        return
    wide = "f64" if x.dtype == "f64" else "f32"
    names = ctx.indices(x.rank)
    c = names[1]

    def w(v: Value) -> ast.Expr:
        e = access(ctx, v, [c])
        return e if v.dtype == wide else cast(e, wide)

    xe = access(ctx, x, names)
    xe = xe if x.dtype == wide else cast(xe, wide)
    inv = build.call("rsqrt", build.binary("+", w(var), build.float_lit(eps)))
    body: ast.Expr = build.binary(
        "+",
        build.binary(
            "*", build.binary("*", build.paren(build.binary("-", xe, w(mean))), inv), w(scale)
        ),
        w(bias),
    )
    if wide != x.dtype:
        body = cast(body, x.dtype)
    ctx.output(0, ctx.comprehension(names, body, x.shape, x.dtype, "normalized"))


def _batch_norm_training(
    ctx: Context, x: Value, scale: Value, bias: Value, mean: Value, var: Value
) -> None:
    """Training mode (opset 14+): normalise with the batch's own statistics and
    return the updated running averages, `momentum * running + (1 - momentum) * batch`."""
    if ctx.node.opset < 14 or any(_wants(ctx, i) for i in (3, 4)):
        raise Unsupported("training mode before opset 14, or the saved statistics outputs")
    eps = float(ctx.attr("epsilon", 1e-5))
    momentum = float(ctx.attr("momentum", 0.9))
    axes = [a for a in range(x.rank) if a != 1]
    wide = "f64" if x.dtype == "f64" else "f32"
    normed, batch_mean, inv = statistics(ctx, x, axes, wide, eps)
    ctx.output(0, _channel_affine(ctx, normed, x, scale, bias))
    channels = [x.shape[1]]
    at = [build.int_lit(0) if i in axes else build.name("c") for i in range(x.rank)]
    c = ctx.indices(1, hints="c")[0]
    at = [build.int_lit(0) if i in axes else build.name(c) for i in range(x.rank)]
    if _wants(ctx, 1):
        m = build.index(ctx.ref(batch_mean), at)
        m = m if x.dtype == wide else cast(m, x.dtype)
        body = build.binary(
            "+",
            build.binary("*", build.float_lit(momentum), access(ctx, mean, [c])),
            build.binary("*", build.float_lit(1 - momentum), m),
        )
        ctx.output(1, ctx.comprehension([c], body, channels, x.dtype, "running_mean"))
    if _wants(ctx, 2):
        # The batch variance (biased) is 1 / inv^2 - eps.
        i = build.index(ctx.ref(inv), at)
        v = build.binary(
            "-",
            build.binary("/", build.float_lit(1.0), build.paren(build.binary("*", i, i))),
            build.float_lit(eps),
        )
        v = v if x.dtype == wide else cast(v, x.dtype)
        body = build.binary(
            "+",
            build.binary("*", build.float_lit(momentum), access(ctx, var, [c])),
            build.binary("*", build.float_lit(1 - momentum), v),
        )
        ctx.output(2, ctx.comprehension([c], body, channels, x.dtype, "running_var"))


@translator("InstanceNormalization")
def instance_normalization(ctx: Context) -> None:
    x, scale, bias = ctx.need(0), ctx.need(1), ctx.need(2)
    _float(x, "InstanceNormalization")
    if x.rank < 3:
        raise Unsupported("input must be [N, C, ...]")
    eps = float(ctx.attr("epsilon", 1e-5))
    wide = "f64" if x.dtype == "f64" else "f32"
    normed, _, _ = statistics(ctx, x, list(range(2, x.rank)), wide, eps)
    ctx.output(0, _channel_affine(ctx, normed, x, scale, bias))


def _channel_affine(ctx: Context, normed: Value, x: Value, scale: Value, bias: Value) -> Value:
    names = ctx.indices(x.rank)
    n = access(ctx, normed, names)
    n = n if normed.dtype == x.dtype else cast(n, x.dtype)
    body = build.binary(
        "+", build.binary("*", n, access(ctx, scale, [names[1]])), access(ctx, bias, [names[1]])
    )
    return ctx.comprehension(names, body, x.shape, x.dtype, "normalized")


@translator("GroupNormalization")
def group_normalization(ctx: Context) -> None:
    x, scale, bias = ctx.need(0), ctx.need(1), ctx.need(2)
    _float(x, "GroupNormalization")
    if x.rank < 3:
        raise Unsupported("input must be [N, C, ...]")
    groups = int(ctx.attr("num_groups"))
    eps = float(ctx.attr("epsilon", 1e-5))
    n, c = x.shape[0], x.shape[1]
    G = Dim.const(groups)
    if not ctx.equal(c % G, Dim.const(0)):
        if c.as_int() is not None:
            raise Unsupported(f"{c} channels do not split into {groups} groups")
        ctx.require(c % G, "==", Dim.const(0))
    per_channel = scale.rank == 1 and ctx.equal(scale.shape[0], c)
    if not per_channel and not (scale.rank == 1 and ctx.equal(scale.shape[0], G)):
        raise Unsupported("scale must have one entry per channel or per group")
    stash = _stash(ctx, x)
    grouped = reshaped(ctx, x, [n, G, ctx.simplify(c // G), *x.shape[2:]], "grouped")
    normed, _, _ = statistics(ctx, grouped, list(range(2, grouped.rank)), stash, eps)
    back = reshaped(ctx, normed, x.shape, "normalized")
    if per_channel:
        ctx.output(0, _channel_affine(ctx, back, x, scale, bias))
        return
    # Opset 18: one scale and bias per group.
    names = ctx.indices(grouped.rank)
    g = names[1]
    e = access(ctx, normed, names)
    e = e if normed.dtype == x.dtype else cast(e, x.dtype)
    body = build.binary("+", build.binary("*", e, access(ctx, scale, [g])), access(ctx, bias, [g]))
    out = ctx.comprehension(names, body, grouped.shape, x.dtype, "normalized")
    ctx.output(0, reshaped(ctx, out, x.shape, "normalized"))


@translator("LRN")
def lrn(ctx: Context) -> None:
    x = ctx.need(0)
    _float(x, "LRN")
    if x.rank < 3:
        raise Unsupported("input must be [N, C, ...]")
    size = int(ctx.attr("size"))
    alpha = float(ctx.attr("alpha", 1e-4))
    beta = float(ctx.attr("beta", 0.75))
    bias = float(ctx.attr("bias", 1.0))
    channels = x.shape[1].as_int()
    if channels is None:
        raise Unsupported("a symbolic channel count")
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    from linnet.onnx.importer.ops.conv import zero_padded

    padded = zero_padded(ctx, x, 1, [lo], [hi], build.float_lit(0.0))
    table = ctx.let(
        build.call("iota", build.int_lit(channels), generics=[build.named_type("i64")]),
        (Dim.const(channels),),
        "i64",
        "channel",
    )
    names = ctx.indices(x.rank + 1)
    outs, t = names[: x.rank], names[x.rank]
    taps = ctx.let(
        build.call("iota", build.int_lit(size), generics=[build.named_type("i64")]),
        (Dim.const(size),),
        "i64",
        "taps",
    )
    at = list[str | ast.Expr](outs)
    at[1] = build.binary("+", access(ctx, table, [outs[1]]), access(ctx, taps, [t]))
    read = access(ctx, padded, at)
    square_sum = ctx.comprehension(
        outs,
        build.reduction("sum", [t], build.binary("*", read, read)),
        x.shape,
        x.dtype,
        "square_sum",
    )
    base = build.binary(
        "+",
        build.float_lit(bias),
        build.binary("*", build.float_lit(alpha / size), ctx.ref(square_sum)),
    )
    denom = build.call("exp", build.binary("*", build.float_lit(beta), build.call("log", base)))
    ctx.output(0, ctx.let(build.binary("/", ctx.ref(x), denom), x.shape, x.dtype, "lrn"))
