"""ONNX `Conv` and `ConvTranspose` -> `std.nn.conv` or index notation over position tables.

Stage: ONNX import, translation. A 1-D or 2-D convolution that the standard
library covers (one group, no dilation, symmetric padding) calls
`conv1d` / `conv2d` / `conv2d_rect` with its geometry spelled in the generic
arguments (stdlib.md 11: backends read it from there). Every other geometry
(groups, dilations, asymmetric or `auto_pad` padding, 3-D) is written the way
the standard library's bodies are: zero padding by `concat`, then a sum over
input channels and kernel taps that reads the padded input through position
tables (`let rows[i, kh] = out_rows[i] * stride + taps[kh] * dilation`).
"""

from __future__ import annotations

from collections.abc import Sequence

from linnet.check.dims import Dim
from linnet.onnx.importer.graph import translator
from linnet.onnx.importer.ops._common import FLOAT_DTYPES, int_dim
from linnet.onnx.importer.ops.reduce import access
from linnet.onnx.importer.ops.shapes import reshaped
from linnet.sourcegen import build
from linnet.sourcegen.translate import Context, Unsupported
from linnet.sourcegen.values import Value
from linnet.syntax import ast


def geometry(
    ctx: Context, spatial: Sequence[Dim], kernel: Sequence[int], *, transposed: bool = False
) -> tuple[list[int], list[int], list[int], list[int]]:
    """strides, dilations, pads before, pads after (ONNX conv/pool attributes, auto_pad).

    `SAME_UPPER`/`SAME_LOWER` pad `(k - 1) * dilation` in all at stride 1, whatever
    the extent, so a symbolic extent is fine there; at a larger stride the padding
    depends on the extent modulo the stride and needs a constant extent."""
    n = len(kernel)
    strides = [int(s) for s in ctx.attr("strides", [1] * n)]
    dilations = [int(d) for d in ctx.attr("dilations", [1] * n)]
    pads = [int(p) for p in ctx.attr("pads", [0] * (2 * n))]
    auto = ctx.attr("auto_pad", "NOTSET")
    if len(strides) != n or len(dilations) != n or len(pads) != 2 * n:
        raise Unsupported("strides, dilations or pads of the wrong length")
    before, after = pads[:n], pads[n:]
    if auto in ("SAME_UPPER", "SAME_LOWER") and not transposed:
        before, after = [], []
        for i in range(n):
            span = (kernel[i] - 1) * dilations[i]
            if spatial[i].as_int() is None and (strides[i] == 1 or span == 0):
                # The padding does not depend on the extent: all of the window less one.
                need = span if strides[i] == 1 else 0
            else:
                size = int_dim(
                    spatial[i],
                    "a SAME-padded extent with a stride above 1 (its padding "
                    "depends on the extent modulo the stride)",
                )
                out = -(-size // strides[i])
                need = max((out - 1) * strides[i] + span + 1 - size, 0)
            small, big = need // 2, need - need // 2
            before.append(big if auto == "SAME_LOWER" else small)
            after.append(small if auto == "SAME_LOWER" else big)
    elif auto == "VALID":
        before, after = [0] * n, [0] * n
    elif auto not in ("NOTSET", "SAME_UPPER", "SAME_LOWER"):
        raise Unsupported(f"auto_pad {auto!r}")
    if any(s <= 0 for s in strides) or any(d <= 0 for d in dilations):
        raise Unsupported("non-positive strides or dilations")
    return strides, dilations, before, after


def zero_padded(
    ctx: Context,
    x: Value,
    first_axis: int,
    before: Sequence[int],
    after: Sequence[int],
    value: ast.Expr,
) -> Value:
    """`x` with `before`/`after` elements of `value` added on the axes from `first_axis` on."""
    out = x
    for i, (b, a) in enumerate(zip(before, after, strict=True)):
        if b < 0 or a < 0:
            raise Unsupported("negative pads")
        if b == 0 and a == 0:
            continue
        axis = first_axis + i
        parts: list[ast.Expr] = []
        for count in (b,):
            if count:
                parts.append(_block(ctx, out, axis, count, value))
        parts.append(ctx.ref(out))
        if a:
            parts.append(_block(ctx, out, axis, a, value))
        dims = list(out.shape)
        dims[axis] = ctx.simplify(out.shape[axis] + b + a)
        expr = build.call("concat", *parts, named=[("axis", build.int_lit(axis))])
        out = ctx.let(expr, dims, x.dtype, "padded")
    return out


def _block(ctx: Context, x: Value, axis: int, count: int, value: ast.Expr) -> ast.Expr:
    dims = list(x.shape)
    dims[axis] = Dim.const(count)
    return build.call("fill", ctx.shape_lit(dims), value, generics=[build.named_type(x.dtype)])


def out_extent(
    ctx: Context,
    size: Dim,
    k: int,
    stride: int,
    dilation: int,
    pads: int,
    ceil: bool = False,
    pad_before: int = 0,
) -> Dim:
    """floor((size + pads - dilation * (k - 1) - 1) / stride) + 1, or with `ceil` the
    ceiling, less one when the last window would start past the input and the
    leading padding (ONNX pooling, as PyTorch)."""
    span = ctx.simplify(size + (pads - dilation * (k - 1) - 1))
    n = span.as_int()
    if ceil:
        extent = size.as_int()
        if n is None or extent is None:
            raise Unsupported("ceil_mode on a symbolic extent")
        count = -(-n // stride) + 1
        if (count - 1) * stride >= extent + pad_before:
            count -= 1
        return Dim.const(count)
    if n is not None:
        if n < 0:
            raise Unsupported("the window is larger than the padded input")
        return Dim.const(n // stride + 1)
    if not ctx.prove(span, ">=", Dim.const(0)):
        ctx.require(span, ">=", Dim.const(0))
    return ctx.simplify(span // Dim.const(stride) + 1)


def tap_table(ctx: Context, out: Dim, k: int, stride: int, dilation: int, hint: str) -> Value:
    """`let rows[i, t] = out_rows[i] * stride + taps[t] * dilation` (i64 positions)."""
    outs = ctx.let(
        build.call("iota", ctx.dim(out), generics=[build.named_type("i64")]),
        (out,),
        "i64",
        "out_pos",
    )
    taps = ctx.let(
        build.call("iota", build.int_lit(k), generics=[build.named_type("i64")]),
        (Dim.const(k),),
        "i64",
        "taps",
    )
    i, t = ctx.indices(2)
    start: ast.Expr = access(ctx, outs, [i])
    if stride != 1:
        start = build.binary("*", start, build.int_lit(stride))
    tap: ast.Expr = access(ctx, taps, [t])
    if dilation != 1:
        tap = build.binary("*", tap, build.int_lit(dilation))
    return ctx.comprehension(
        [i, t], build.binary("+", start, tap), (out, Dim.const(k)), "i64", hint
    )


@translator("Conv")
def conv(ctx: Context) -> None:
    x, w, b = ctx.need(0), ctx.need(1), ctx.input(2)
    if x.dtype not in FLOAT_DTYPES or w.dtype != x.dtype:
        raise Unsupported(f"Conv of {x.dtype}")
    if x.rank < 3 or w.rank != x.rank:
        raise Unsupported("input and weight must be [N, C, ...] and [M, C/group, ...]")
    x.rank - 2
    kernel = [int_dim(d, "a kernel extent") for d in w.shape[2:]]
    given = ctx.attr("kernel_shape", None)
    if given is not None and [int(k) for k in given] != kernel:
        raise Unsupported("kernel_shape disagrees with the weight")
    strides, dilations, before, after = geometry(ctx, x.shape[2:], kernel)
    group = int(ctx.attr("group", 1))
    std = _std_conv(ctx, x, w, b, kernel, strides, dilations, before, after, group)
    if std is not None:
        ctx.output(0, std)
        return
    ctx.output(0, general_conv(ctx, x, w, b, kernel, strides, dilations, before, after, group))


def _std_conv(
    ctx: Context,
    x: Value,
    w: Value,
    b: Value | None,
    kernel: list[int],
    strides: list[int],
    dilations: list[int],
    before: list[int],
    after: list[int],
    group: int,
) -> Value | None:
    """`std.nn.conv` when it covers the geometry (one group, no dilation, symmetric pads)."""
    if group != 1 or any(d != 1 for d in dilations) or before != after or x.rank not in (3, 4):
        return None
    batch, cin = x.shape[0], x.shape[1]
    cout = w.shape[0]
    if not ctx.equal(w.shape[1], cin):
        return None
    spatial = x.shape[2:]
    outs = [
        out_extent(ctx, s, k, st, 1, 2 * p)
        for s, k, st, p in zip(spatial, kernel, strides, before, strict=True)
    ]
    T = build.named_type(x.dtype)
    dims = [ctx.dim(d) for d in (batch, cin, cout)]
    if x.rank == 3:
        fn = ctx.std("nn.conv", "conv1d")
        gens: list[ast.Expr | ast.NamedType] = [
            *dims,
            ctx.dim(spatial[0]),
            build.int_lit(kernel[0]),
            build.int_lit(strides[0]),
            build.int_lit(before[0]),
            T,
        ]
    elif kernel[0] == kernel[1] and strides[0] == strides[1] and before[0] == before[1]:
        fn = ctx.std("nn.conv", "conv2d")
        gens = [
            *dims,
            ctx.dim(spatial[0]),
            ctx.dim(spatial[1]),
            build.int_lit(kernel[0]),
            build.int_lit(strides[0]),
            build.int_lit(before[0]),
            T,
        ]
    else:
        fn = ctx.std("nn.conv", "conv2d_rect")
        gens = [
            *dims,
            ctx.dim(spatial[0]),
            ctx.dim(spatial[1]),
            build.int_lit(kernel[0]),
            build.int_lit(kernel[1]),
            build.int_lit(strides[0]),
            build.int_lit(strides[1]),
            build.int_lit(before[0]),
            build.int_lit(before[1]),
            T,
        ]
    bias = build.some(ctx.ref(b)) if b is not None else build.none()
    expr = build.call(fn, ctx.ref(x), ctx.ref(w), bias, generics=gens)
    return ctx.let(expr, [batch, cout, *outs], x.dtype, "conv")


def general_conv(
    ctx: Context,
    x: Value,
    w: Value,
    b: Value | None,
    kernel: list[int],
    strides: list[int],
    dilations: list[int],
    before: list[int],
    after: list[int],
    group: int,
) -> Value:
    """Any N-D convolution with groups and dilations, in index notation."""
    n_sp = x.rank - 2
    batch, cin = x.shape[0], x.shape[1]
    cout = w.shape[0]
    G = Dim.const(group)
    cin_g = ctx.simplify(cin // G)
    cout_g = ctx.simplify(cout // G)
    if group > 1:
        for d in (cin, cout):
            if not ctx.equal(d % G, Dim.const(0)):
                if d.as_int() is not None:
                    raise Unsupported(f"{d} channels do not split into {group} groups")
                ctx.require(d % G, "==", Dim.const(0))
    if not ctx.equal(w.shape[1], cin_g):
        ctx.require(w.shape[1], "==", cin_g)
    zero = ctx.literal(0, x.dtype)
    padded = zero_padded(ctx, x, 2, before, after, zero)
    spatial = x.shape[2:]
    outs = [
        out_extent(ctx, s, k, st, d, p0 + p1)
        for s, k, st, d, p0, p1 in zip(
            spatial, kernel, strides, dilations, before, after, strict=True
        )
    ]
    tables = [
        tap_table(ctx, o, k, st, d, f"at{i}")
        for i, (o, k, st, d) in enumerate(zip(outs, kernel, strides, dilations, strict=True))
    ]
    if group > 1:
        xg = reshaped(ctx, padded, [batch, G, cin_g, *padded.shape[2:]], "grouped")
        wg = reshaped(ctx, w, [G, cout_g, cin_g, *w.shape[2:]], "kernels")
    else:
        xg, wg = padded, w
    names = ctx.indices(3 + 2 * n_sp + (1 if group > 1 else 0))
    it = iter(names)
    nb = next(it)
    g = next(it) if group > 1 else None
    co, ci = next(it), next(it)
    sp = [next(it) for _ in range(n_sp)]
    taps = [next(it) for _ in range(n_sp)]
    positions = [access(ctx, t, [o, k]) for t, o, k in zip(tables, sp, taps, strict=True)]
    if g is not None:
        x_at: list[str | ast.Expr] = [nb, g, ci, *positions]
        w_at: list[str | ast.Expr] = [g, co, ci, *taps]
        outs_idx = [nb, g, co, *sp]
        out_dims = [batch, G, cout_g, *outs]
    else:
        x_at = [nb, ci, *positions]
        w_at = [co, ci, *taps]
        outs_idx = [nb, co, *sp]
        out_dims = [batch, cout, *outs]
    body = build.reduction(
        "sum", [ci, *taps], build.binary("*", access(ctx, xg, x_at), access(ctx, wg, w_at))
    )
    y = ctx.comprehension(outs_idx, body, out_dims, x.dtype, "conv")
    if g is not None:
        y = reshaped(ctx, y, [batch, cout, *outs], "conv")
    if b is not None:
        y = add_channel_bias(ctx, y, b)
    return y


def add_channel_bias(ctx: Context, y: Value, b: Value) -> Value:
    """`y[n, c, ...] + b[c]`."""
    names = ctx.indices(y.rank)
    body = build.binary("+", access(ctx, y, names), access(ctx, b, [names[1]]))
    return ctx.comprehension(names, body, y.shape, y.dtype, "biased")


@translator("ConvInteger")
def conv_integer(ctx: Context) -> None:
    x, w = ctx.need(0), ctx.need(1)
    if x.dtype not in ("i8", "u8") or w.dtype not in ("i8", "u8"):
        raise Unsupported("operands must be 8-bit integers")
    if x.rank < 3 or w.rank != x.rank:
        raise Unsupported("input and weight must be [N, C, ...] and [M, C/group, ...]")
    wide: list[Value] = []
    for v, zero in ((x, ctx.input(2)), (w, ctx.input(3))):
        expr: ast.Expr = build.call("cast", ctx.ref(v), generics=[build.named_type("i32")])
        if zero is not None:
            if zero.rank > 1 or (zero.rank == 1 and zero.shape[0].as_int() != 1):
                raise Unsupported("per-channel zero points")
            z = access(ctx, zero, [build.int_lit(0)] * zero.rank)
            expr = build.binary(
                "-", expr, build.call("cast", z, generics=[build.named_type("i32")])
            )
        wide.append(ctx.let(expr, v.shape, "i32", "wide"))
    kernel = [int_dim(d, "a kernel extent") for d in w.shape[2:]]
    strides, dilations, before, after = geometry(ctx, x.shape[2:], kernel)
    group = int(ctx.attr("group", 1))
    ctx.output(
        0,
        general_conv(ctx, wide[0], wide[1], None, kernel, strides, dilations, before, after, group),
    )


@translator("ConvTranspose")
def conv_transpose(ctx: Context) -> None:
    x, w, b = ctx.need(0), ctx.need(1), ctx.input(2)
    if x.dtype not in FLOAT_DTYPES or w.dtype != x.dtype:
        raise Unsupported(f"ConvTranspose of {x.dtype}")
    if x.rank < 3 or w.rank != x.rank:
        raise Unsupported("input and weight must be [N, C, ...] and [C, M/group, ...]")
    n_sp = x.rank - 2
    kernel = [int_dim(d, "a kernel extent") for d in w.shape[2:]]
    group = int(ctx.attr("group", 1))
    strides = [int(s) for s in ctx.attr("strides", [1] * n_sp)]
    dilations = [int(d) for d in ctx.attr("dilations", [1] * n_sp)]
    out_pad = [int(p) for p in ctx.attr("output_padding", [0] * n_sp)]
    spatial = [int_dim(d, "a transposed-conv input extent") for d in x.shape[2:]]
    pads = ctx.attr("pads", None)
    out_shape = ctx.attr("output_shape", None)
    auto = ctx.attr("auto_pad", "NOTSET")
    full = [
        (s - 1) * st + op + (k - 1) * d + 1
        for s, st, op, k, d in zip(spatial, strides, out_pad, kernel, dilations, strict=True)
    ]
    if out_shape is not None:
        target = [int(o) for o in out_shape][-n_sp:]
        total = [f - t for f, t in zip(full, target, strict=True)]
        if auto == "SAME_UPPER":
            before = [t // 2 for t in total]
        else:
            before = [t - t // 2 for t in total]
        after = [t - b for t, b in zip(total, before, strict=True)]
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        target = [s * st for s, st in zip(spatial, strides, strict=True)]
        total = [f - t for f, t in zip(full, target, strict=True)]
        before = [t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in total]
        after = [t - b for t, b in zip(total, before, strict=True)]
    else:
        p = [int(v) for v in pads] if pads is not None else [0] * (2 * n_sp)
        before, after = p[:n_sp], p[n_sp:]
    # A transposed convolution is a convolution of the input dilated by `stride`
    # (zeros between elements), padded by dilation * (k - 1) - pads, with the kernel
    # flipped and its channel axes swapped.
    G = group
    cin = int_dim(x.shape[1], "input channels")
    cout_g = int_dim(w.shape[1], "output channels per group")
    spread = _dilate_input(ctx, x, strides)
    inner_before = [d * (k - 1) - p for d, k, p in zip(dilations, kernel, before, strict=True)]
    inner_after = [
        d * (k - 1) - p + op for d, k, p, op in zip(dilations, kernel, after, out_pad, strict=True)
    ]
    cropped = spread
    for i in range(n_sp):
        if inner_before[i] < 0 or inner_after[i] < 0:
            from linnet.onnx.importer.ops.shapes import slice_axis

            axis = 2 + i
            start = Dim.const(max(-inner_before[i], 0))
            stop = ctx.simplify(cropped.shape[axis] - max(-inner_after[i], 0))
            cropped = slice_axis(ctx, cropped, axis, start, stop, "cropped")
            inner_before[i], inner_after[i] = max(inner_before[i], 0), max(inner_after[i], 0)
    flipped = _flip_kernel(ctx, w, G, cin // G, cout_g, kernel)
    ctx.output(
        0,
        general_conv(
            ctx, cropped, flipped, b, kernel, [1] * n_sp, dilations, inner_before, inner_after, G
        ),
    )


def _dilate_input(ctx: Context, x: Value, strides: list[int]) -> Value:
    """Insert `stride - 1` zeros between neighbouring elements of each spatial axis."""
    out = x
    for i, s in enumerate(strides):
        if s == 1:
            continue
        axis = 2 + i
        n = int_dim(out.shape[axis], "an extent")
        size = (n - 1) * s + 1
        pos = ctx.let(
            build.call("iota", build.int_lit(size), generics=[build.named_type("i64")]),
            (Dim.const(size),),
            "i64",
            "pos",
        )
        names = ctx.indices(out.rank)
        p = access(ctx, pos, [names[axis]])
        src = list[str | ast.Expr](names)
        src[axis] = build.binary("/", p, build.int_lit(s))
        hit = build.binary("==", build.binary("%", p, build.int_lit(s)), build.int_lit(0))
        body = build.call("select", hit, access(ctx, out, src), build.float_lit(0.0))
        dims = list(out.shape)
        dims[axis] = Dim.const(size)
        out = ctx.comprehension(names, body, dims, x.dtype, "spread")
    return out


def _flip_kernel(
    ctx: Context, w: Value, group: int, cin_g: int, cout_g: int, kernel: list[int]
) -> Value:
    """`[Cin, Cout/G, k...]` -> `[Cout, Cin/G, k...]` with every spatial axis reversed."""
    n_sp = len(kernel)
    names = ctx.indices(2 + n_sp)
    co, ci, taps = names[0], names[1], names[2:]
    tables = []
    for k in kernel:
        t = ctx.let(
            build.binary(
                "-",
                build.int_lit(k - 1),
                build.call("iota", build.int_lit(k), generics=[build.named_type("i64")]),
            ),
            (Dim.const(k),),
            "i64",
            "flip",
        )
        tables.append(t)
    flipped_taps = [access(ctx, t, [n]) for t, n in zip(tables, taps, strict=True)]
    if group == 1:
        body = access(ctx, w, [ci, co, *flipped_taps])
        dims = [Dim.const(cout_g), Dim.const(cin_g), *[Dim.const(k) for k in kernel]]
        return ctx.comprehension([co, ci, *taps], body, dims, w.dtype, "flipped")
    # Output channel co = g * cout_g + j reads w[g * cin_g + ci, j].
    grouped = reshaped(
        ctx, w, [Dim.const(group), Dim.const(cin_g), Dim.const(cout_g), *w.shape[2:]], "kernels"
    )
    g = ctx.indices(1, hints="g")[0]
    while g in names:
        g = g + "g"
    body = access(ctx, grouped, [g, ci, co, *flipped_taps])
    dims = [Dim.const(group), Dim.const(cout_g), Dim.const(cin_g), *[Dim.const(k) for k in kernel]]
    out = ctx.comprehension([g, co, ci, *taps], body, dims, w.dtype, "flipped")
    return reshaped(
        ctx,
        out,
        [Dim.const(group * cout_g), Dim.const(cin_g), *[Dim.const(k) for k in kernel]],
        "flipped",
    )
