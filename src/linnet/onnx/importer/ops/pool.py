"""ONNX pooling -> `std.nn.pool` or a reduction over a window read through position tables.

Stage: ONNX import, translation. A square 2-D `MaxPool` without dilation or
`ceil_mode` calls `std.nn.pool::max_pool2d`; `GlobalAveragePool` on
`[N, C, H, W]` calls `global_average_pool2d`. Every other window (any rank,
dilations, asymmetric padding, `ceil_mode`, `AveragePool` with or without
`count_include_pad`, `LpPool`) pads the input (with the lowest value for max,
zero otherwise) and reduces over the kernel taps, as the standard library's
`max_pool2d` body does. Average divisors are counted per axis (a window is a
product of per-axis ranges), so they follow ONNX's rule: padding counts only
with `count_include_pad`, and positions past the padded input never count.
"""

from __future__ import annotations

import math

from linnet.check.dims import Dim
from linnet.onnx.importer.graph import translator
from linnet.onnx.importer.ops._common import FLOAT_DTYPES, INT_DTYPES, SIGNED, cast, int_dim
from linnet.onnx.importer.ops.conv import geometry, out_extent, tap_table, zero_padded
from linnet.onnx.importer.ops.reduce import access, reduce_axes
from linnet.onnx.importer.ops.shapes import reshaped
from linnet.sourcegen import build
from linnet.sourcegen.translate import Context, Unsupported
from linnet.sourcegen.values import Value
from linnet.syntax import ast


def _window(
    ctx: Context, x: Value
) -> tuple[list[int], list[int], list[int], list[int], list[int], bool]:
    kernel = [int(k) for k in ctx.attr("kernel_shape")]
    if len(kernel) != x.rank - 2:
        raise Unsupported("kernel_shape does not match the spatial rank")
    strides, dilations, before, after = geometry(ctx, x.shape[2:], kernel)
    ceil = bool(ctx.attr("ceil_mode", 0))
    return kernel, strides, dilations, before, after, ceil


def _lowest(ctx: Context, dtype: str) -> ast.Expr:
    if dtype in FLOAT_DTYPES:
        return ctx.literal(-math.inf, dtype)
    bits = int(dtype[1:])
    low = -(1 << (bits - 1)) if dtype in SIGNED else 0
    return ctx.literal(low, dtype)


def _extents(
    ctx: Context,
    x: Value,
    kernel: list[int],
    strides: list[int],
    dilations: list[int],
    before: list[int],
    after: list[int],
    ceil: bool,
) -> tuple[list[Dim], list[int]]:
    """Output extents and the extra padding after each axis that `ceil_mode` windows need."""
    outs: list[Dim] = []
    extra: list[int] = []
    for s, k, st, d, b, a in zip(
        x.shape[2:], kernel, strides, dilations, before, after, strict=True
    ):
        o = out_extent(ctx, s, k, st, d, b + a, ceil, b)
        outs.append(o)
        if ceil:
            reach = (int_dim(o, "an output extent") - 1) * st + (k - 1) * d + 1
            extra.append(max(reach - (int_dim(s, "an extent") + b + a), 0))
        else:
            extra.append(0)
    return outs, extra


def _window_reduce(
    ctx: Context,
    padded: Value,
    outs: list[Dim],
    kernel: list[int],
    strides: list[int],
    dilations: list[int],
    kind: str,
    element: object,
    hint: str,
) -> Value:
    n_sp = len(kernel)
    tables = [
        tap_table(ctx, o, k, st, d, f"at{i}")
        for i, (o, k, st, d) in enumerate(zip(outs, kernel, strides, dilations, strict=True))
    ]
    names = ctx.indices(2 + 2 * n_sp)
    nb, c = names[0], names[1]
    sp, taps = names[2 : 2 + n_sp], names[2 + n_sp :]
    at = [access(ctx, t, [o, k]) for t, o, k in zip(tables, sp, taps, strict=True)]
    read = access(ctx, padded, [nb, c, *at])
    body = element(read) if callable(element) else read
    value = build.reduction(kind, taps, body)
    dims = [padded.shape[0], padded.shape[1], *outs]
    return ctx.comprehension([nb, c, *sp], value, dims, padded.dtype, hint)


@translator("MaxPool")
def max_pool(ctx: Context) -> None:
    x = ctx.need(0)
    if x.dtype not in FLOAT_DTYPES and x.dtype not in INT_DTYPES:
        raise Unsupported(f"MaxPool of {x.dtype}")
    if x.rank < 3:
        raise Unsupported("input must be [N, C, ...]")
    if ctx.n_outputs > 1 and ctx.node.outputs[1]:
        raise Unsupported("the Indices output")
    kernel, strides, dilations, before, after, ceil = _window(ctx, x)
    if int(ctx.attr("storage_order", 0)) != 0:
        raise Unsupported("storage_order only affects Indices")
    outs, extra = _extents(ctx, x, kernel, strides, dilations, before, after, ceil)
    if (
        x.rank == 4
        and x.dtype in FLOAT_DTYPES
        and not ceil
        and len(set(kernel)) == 1
        and len(set(strides)) == 1
        and dilations == [1, 1]
        and before == after
        and len(set(before)) == 1
        and before[0] <= kernel[0] // 2
    ):
        fn = ctx.std("nn.pool", "max_pool2d")
        gens: list[ast.Expr | ast.NamedType] = [ctx.dim(d) for d in x.shape]
        gens += [
            build.int_lit(kernel[0]),
            build.int_lit(strides[0]),
            build.int_lit(before[0]),
            build.named_type(x.dtype),
        ]
        expr = build.call(fn, ctx.ref(x), generics=gens)
        ctx.output(0, ctx.let(expr, [x.shape[0], x.shape[1], *outs], x.dtype, "pooled"))
        return
    padded = zero_padded(
        ctx, x, 2, before, [a + e for a, e in zip(after, extra, strict=True)], _lowest(ctx, x.dtype)
    )
    ctx.output(
        0, _window_reduce(ctx, padded, outs, kernel, strides, dilations, "max", None, "pooled")
    )


@translator("AveragePool")
def average_pool(ctx: Context) -> None:
    x = ctx.need(0)
    if x.dtype not in FLOAT_DTYPES:
        raise Unsupported(f"AveragePool of {x.dtype}")
    if x.rank < 3:
        raise Unsupported("input must be [N, C, ...]")
    kernel, strides, dilations, before, after, ceil = _window(ctx, x)
    include = bool(ctx.attr("count_include_pad", 0))
    outs, extra = _extents(ctx, x, kernel, strides, dilations, before, after, ceil)
    zero = build.float_lit(0.0)
    padded = zero_padded(
        ctx, x, 2, before, [a + e for a, e in zip(after, extra, strict=True)], zero
    )
    total = _window_reduce(ctx, padded, outs, kernel, strides, dilations, "sum", None, "total")
    counts = [
        _axis_count(
            ctx,
            x.shape[2 + i],
            outs[i],
            kernel[i],
            strides[i],
            dilations[i],
            before[i],
            after[i],
            extra[i],
            include,
            x.dtype,
        )
        for i in range(len(kernel))
    ]
    names = ctx.indices(x.rank)
    divisor: ast.Expr | None = None
    for i, cnt in enumerate(counts):
        term = access(ctx, cnt, [names[2 + i]])
        divisor = term if divisor is None else build.binary("*", divisor, term)
    assert divisor is not None
    body = build.binary(
        "/", access(ctx, total, names), build.paren(divisor) if len(counts) > 1 else divisor
    )
    ctx.output(0, ctx.comprehension(names, body, total.shape, x.dtype, "pooled"))


def _axis_count(
    ctx: Context,
    size: Dim,
    out: Dim,
    k: int,
    stride: int,
    dilation: int,
    before: int,
    after: int,
    extra: int,
    include_pad: bool,
    dtype: str,
) -> Value:
    """How many positions of each window along one axis count for the average."""
    span = ctx.simplify(size + (before + after + extra))
    pos = ctx.let(
        build.call("iota", ctx.dim(span), generics=[build.named_type("i64")]),
        (span,),
        "i64",
        "pos",
    )
    p = ctx.ref(pos)
    if include_pad:
        valid = build.binary("<", p, ctx.dim(ctx.simplify(size + (before + after))))
    else:
        valid = build.binary(
            "&",
            build.paren(build.binary(">=", p, build.int_lit(before))),
            build.paren(build.binary("<", p, ctx.dim(ctx.simplify(size + before)))),
        )
    counted = ctx.let(cast(valid, dtype), (span,), dtype, "counted")
    table = tap_table(ctx, out, k, stride, dilation, "at")
    o, t = ctx.indices(2)
    body = build.reduction("sum", [t], access(ctx, counted, [access(ctx, table, [o, t])]))
    return ctx.comprehension([o], body, (out,), dtype, "count")


@translator("LpPool")
def lp_pool(ctx: Context) -> None:
    x = ctx.need(0)
    if x.dtype not in FLOAT_DTYPES:
        raise Unsupported(f"LpPool of {x.dtype}")
    p = int(ctx.attr("p", 2))
    if p <= 0:
        raise Unsupported(f"p = {p}")
    kernel, strides, dilations, before, after, ceil = _window(ctx, x)
    outs, extra = _extents(ctx, x, kernel, strides, dilations, before, after, ceil)
    padded = zero_padded(
        ctx, x, 2, before, [a + e for a, e in zip(after, extra, strict=True)], build.float_lit(0.0)
    )

    def power(e: ast.Expr) -> ast.Expr:
        a = build.call("abs", e)
        out = a
        for _ in range(p - 1):
            out = build.binary("*", out, a)
        return out

    total = _window_reduce(ctx, padded, outs, kernel, strides, dilations, "sum", power, "total")
    ctx.output(0, _root(ctx, total, p))


def _root(ctx: Context, total: Value, p: int) -> Value:
    t = ctx.ref(total)
    if p == 1:
        return total
    if p == 2:
        expr = build.call("sqrt", t)
    else:
        expr = build.call("exp", build.binary("/", build.call("log", t), build.float_lit(float(p))))
    return ctx.let(expr, total.shape, total.dtype, "norm")


@translator("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
def global_pool(ctx: Context) -> None:
    x = ctx.need(0)
    if x.dtype not in FLOAT_DTYPES:
        raise Unsupported(f"{ctx.node.op} of {x.dtype}")
    if x.rank < 3:
        raise Unsupported("input must be [N, C, ...]")
    spatial = list(range(2, x.rank))
    keep = [x.shape[0], x.shape[1]] + [Dim.const(1)] * len(spatial)
    op = ctx.node.op
    if op == "GlobalAveragePool" and x.rank == 4:
        fn = ctx.std("nn.pool", "global_average_pool2d")
        mean = ctx.let(build.call(fn, ctx.ref(x)), (x.shape[0], x.shape[1]), x.dtype, "mean")
        ctx.output(0, reshaped(ctx, mean, keep, "pooled"))
        return
    if op == "GlobalMaxPool":
        out = reduce_axes(ctx, x, spatial, "max", lambda e: e, x.dtype, "peak", keepdims=True)
    elif op == "GlobalLpPool":
        p = int(ctx.attr("p", 2))
        total = reduce_axes(
            ctx,
            x,
            spatial,
            "sum",
            lambda e: (
                build.binary("*", build.call("abs", e), build.call("abs", e))
                if p == 2
                else build.call("abs", e)
            ),
            x.dtype,
            "total",
            keepdims=True,
        )
        if p not in (1, 2):
            raise Unsupported(f"p = {p}")
        out = _root(ctx, total, p)
    else:
        total = reduce_axes(ctx, x, spatial, "sum", lambda e: e, x.dtype, "total", keepdims=True)
        count = Dim.const(1)
        for a in spatial:
            count = count * x.shape[a]
        count = ctx.simplify(count)
        n = count.as_int()
        divisor = build.float_lit(float(n)) if n is not None else cast(ctx.dim(count), x.dtype)
        out = ctx.let(build.binary("/", ctx.ref(total), divisor), total.shape, x.dtype, "mean")
    ctx.output(0, out)
