"""ONNX linear quantization -> index notation over integer tensors.

Stage: ONNX import, translation. `QuantizeLinear` is
`clip(rint(x / scale) + zero_point)` in the zero point's integer dtype,
`DequantizeLinear` is `(x - zero_point) * scale`, with a scale (and zero
point) that is one value, one value per position of `axis`, or one value per
block of `block_size` positions along `axis` (opset 21), as the operator
spec says. Rounding is half to even (`unary.rounded`). `DynamicQuantizeLinear`
computes its scale and zero point from the data's range; `QLinearMatMul` and
`QLinearConv` multiply in i32 and requantize. Integer element types Linnet
lacks (4-bit, 2-bit) and 8-bit floats refuse the node.
"""

from __future__ import annotations

from linnet.onnx.importer.graph import translator
from linnet.onnx.importer.ops._common import FLOAT_DTYPES, INT_DTYPES, cast, norm_axis
from linnet.onnx.importer.ops.basic import linnet_dtype
from linnet.onnx.importer.ops.conv import general_conv, geometry
from linnet.onnx.importer.ops.linalg import matmul_value
from linnet.onnx.importer.ops.reduce import access
from linnet.onnx.importer.ops.unary import rounded
from linnet.sourcegen import build
from linnet.sourcegen.translate import Context, Unsupported
from linnet.sourcegen.values import Value
from linnet.syntax import ast

_RANGES = {
    "u8": (0, 255),
    "i8": (-128, 127),
    "u16": (0, 65535),
    "i16": (-32768, 32767),
    "i32": (-(1 << 31), (1 << 31) - 1),
}


def param_at(ctx: Context, p: Value, x: Value, names: list[str], axis: int, block: int) -> ast.Expr:
    """The scale or zero point that applies at `x[names]` (per tensor, per axis, per block)."""
    if p.is_scalar:
        return ctx.ref(p)
    if all(d.as_int() == 1 for d in p.shape):
        return access(ctx, p, [build.int_lit(0)] * p.rank)
    if axis < 0:
        raise Unsupported("the axis of a per-axis scale is out of range")
    if block > 0:
        if p.rank != x.rank:
            raise Unsupported("a blocked scale must have the input's rank")
        extent = x.shape[axis]
        table = ctx.let(
            build.binary(
                "/",
                build.call("iota", ctx.dim(extent), generics=[build.named_type("i64")]),
                build.int_lit(block),
            ),
            (extent,),
            "i64",
            "block",
        )
        comps: list[str | ast.Expr] = list(names)
        comps[axis] = access(ctx, table, [names[axis]])
        return access(ctx, p, comps)
    if p.rank != 1 or not ctx.equal(p.shape[0], x.shape[axis]):
        raise Unsupported("a per-axis scale must be 1-D with the axis' extent")
    return access(ctx, p, [names[axis]])


def _target(ctx: Context, zero: Value | None) -> str:
    if zero is not None:
        dtype = zero.dtype
    else:
        code = int(ctx.attr("output_dtype", 0))
        dtype = linnet_dtype(code) if code else "u8"
    if dtype not in _RANGES:
        raise Unsupported(f"quantizing to {dtype}")
    return dtype


def quantize(
    ctx: Context, x: Value, scale: Value, zero: Value | None, dtype: str, axis: int, block: int
) -> Value:
    """`clip(rint(x / scale) + zero_point, range)` as `dtype`."""
    names = ctx.indices(x.rank) if x.rank else []
    wide = "f64" if x.dtype == "f64" else "f32"
    xe = access(ctx, x, names)
    se = param_at(ctx, scale, x, names, axis, block)
    if x.dtype != wide:
        xe = cast(xe, wide)
    if scale.dtype != wide:
        se = cast(se, wide)
    ratio_expr = build.binary("/", xe, se)
    ratio = (
        ctx.comprehension(names, ratio_expr, x.shape, wide, "ratio")
        if names
        else ctx.let(ratio_expr, (), wide, "ratio")
    )
    whole = rounded(ctx, ratio)
    low, high = _RANGES[dtype]
    names2 = ctx.indices(x.rank) if x.rank else []
    q: ast.Expr = access(ctx, whole, names2)
    if zero is not None:
        q = build.binary("+", q, cast(param_at(ctx, zero, x, names2, axis, block), wide))
    clipped = cast(
        build.call(
            "min", build.call("max", q, build.float_lit(float(low))), build.float_lit(float(high))
        ),
        dtype,
    )
    if names2:
        return ctx.comprehension(names2, clipped, x.shape, dtype, "quantized")
    return ctx.let(clipped, (), dtype, "quantized")


def _axis_block(ctx: Context, x: Value) -> tuple[int, int]:
    block = int(ctx.attr("block_size", 0))
    axis = int(ctx.attr("axis", 1))
    if not -x.rank <= axis < x.rank:
        return -1, block  # only a per-axis or blocked scale reads the axis (`param_at`)
    return norm_axis(axis, x.rank), block


@translator("QuantizeLinear")
def quantize_linear(ctx: Context) -> None:
    x, scale, zero = ctx.need(0), ctx.need(1), ctx.input(2)
    if x.dtype not in FLOAT_DTYPES and x.dtype != "i32":
        raise Unsupported(f"QuantizeLinear of {x.dtype}")
    if int(ctx.attr("precision", 0)):
        raise Unsupported("the precision attribute")
    axis, block = _axis_block(ctx, x)
    ctx.output(0, quantize(ctx, x, scale, zero, _target(ctx, zero), axis, block))


@translator("DequantizeLinear")
def dequantize_linear(ctx: Context) -> None:
    x, scale, zero = ctx.need(0), ctx.need(1), ctx.input(2)
    if x.dtype not in INT_DTYPES:
        raise Unsupported(f"DequantizeLinear of {x.dtype}")
    code = int(ctx.attr("output_dtype", 0))
    out = linnet_dtype(code) if code else scale.dtype
    if out not in FLOAT_DTYPES:
        raise Unsupported(f"dequantizing to {out}")
    axis, block = _axis_block(ctx, x)
    names = ctx.indices(x.rank) if x.rank else []
    v: ast.Expr = cast(access(ctx, x, names), "f32")
    if zero is not None:
        v = build.binary("-", v, cast(param_at(ctx, zero, x, names, axis, block), "f32"))
    s = param_at(ctx, scale, x, names, axis, block)
    if scale.dtype != "f32":
        s = cast(s, "f32")
    body = build.binary("*", build.paren(v) if zero is not None else v, s)
    if out != "f32":
        body = cast(body, out)
    if names:
        ctx.output(0, ctx.comprehension(names, body, x.shape, out, "dequantized"))
    else:
        ctx.output(0, ctx.let(body, (), out, "dequantized"))


@translator("DynamicQuantizeLinear")
def dynamic_quantize_linear(ctx: Context) -> None:
    x = ctx.need(0)
    if x.dtype != "f32" or x.is_scalar:
        raise Unsupported(f"DynamicQuantizeLinear of {x.dtype}")
    names = ctx.indices(x.rank)
    peak = ctx.let(
        build.call(
            "max", build.reduction("max", names, access(ctx, x, names)), build.float_lit(0.0)
        ),
        (),
        "f32",
        "peak",
    )
    low = ctx.let(
        build.call(
            "min", build.reduction("min", names, access(ctx, x, names)), build.float_lit(0.0)
        ),
        (),
        "f32",
        "low",
    )
    p, lo = ctx.ref(peak), ctx.ref(low)
    span = build.call(
        "select", build.binary("==", p, lo), build.float_lit(1.0), build.binary("-", p, lo)
    )
    scale = ctx.let(build.binary("/", span, build.float_lit(255.0)), (), "f32", "scale")
    start = build.binary("-", build.float_lit(0.0), build.binary("/", lo, ctx.ref(scale)))
    clamped = build.call(
        "min", build.call("max", start, build.float_lit(0.0)), build.float_lit(255.0)
    )
    zero_f = rounded(ctx, ctx.let(clamped, (), "f32", "zero_float"))
    zero = ctx.let(cast(ctx.ref(zero_f), "u8"), (), "u8", "zero_point")
    ctx.output(0, quantize(ctx, x, scale, zero, "u8", 0, 0))
    ctx.output(1, scale)
    ctx.output(2, zero)


def _shifted(ctx: Context, v: Value, zero: Value | None, hint: str) -> Value:
    """`i32(v) - i32(zero_point)` (a per-tensor zero point)."""
    expr: ast.Expr = cast(ctx.ref(v), "i32")
    if zero is not None:
        if not all(d.as_int() == 1 for d in zero.shape):
            raise Unsupported("per-axis zero points")
        z = ctx.ref(zero) if zero.is_scalar else access(ctx, zero, [build.int_lit(0)] * zero.rank)
        expr = build.binary("-", expr, cast(z, "i32"))
    return ctx.let(expr, v.shape, "i32", hint)


def _requantize(ctx: Context, acc: Value, factor: ast.Expr, zero: Value, hint: str) -> Value:
    """`clip(rint(acc * factor) + zero_point)` in the zero point's dtype (QLinear*)."""
    dtype = zero.dtype
    if dtype not in _RANGES:
        raise Unsupported(f"requantizing to {dtype}")
    scaled = ctx.let(
        build.binary("*", cast(ctx.ref(acc), "f32"), factor), acc.shape, "f32", "scaled"
    )
    whole = rounded(ctx, scaled)
    z = ctx.ref(zero) if zero.is_scalar else access(ctx, zero, [build.int_lit(0)] * zero.rank)
    low, high = _RANGES[dtype]
    total = build.binary("+", ctx.ref(whole), cast(z, "f32"))
    expr = cast(
        build.call(
            "min",
            build.call("max", total, build.float_lit(float(low))),
            build.float_lit(float(high)),
        ),
        dtype,
    )
    return ctx.let(expr, acc.shape, dtype, hint)


def _scalar(ctx: Context, v: Value) -> ast.Expr:
    if not all(d.as_int() == 1 for d in v.shape):
        raise Unsupported("per-axis scales")
    e = ctx.ref(v) if v.is_scalar else access(ctx, v, [build.int_lit(0)] * v.rank)
    return e if v.dtype == "f32" else cast(e, "f32")


@translator("QLinearMatMul")
def qlinear_matmul(ctx: Context) -> None:
    a, a_scale, a_zero = ctx.need(0), ctx.need(1), ctx.input(2)
    b, b_scale, b_zero = ctx.need(3), ctx.need(4), ctx.input(5)
    y_scale, y_zero = ctx.need(6), ctx.input(7)
    if y_zero is None:
        raise Unsupported("y_zero_point is required to know the output dtype")
    acc = matmul_value(ctx, _shifted(ctx, a, a_zero, "a_wide"), _shifted(ctx, b, b_zero, "b_wide"))
    factor = build.paren(
        build.binary(
            "/",
            build.binary("*", _scalar(ctx, a_scale), _scalar(ctx, b_scale)),
            _scalar(ctx, y_scale),
        )
    )
    ctx.output(0, _requantize(ctx, acc, factor, y_zero, "quantized"))


@translator("QLinearConv")
def qlinear_conv(ctx: Context) -> None:
    x, x_scale, x_zero = ctx.need(0), ctx.need(1), ctx.need(2)
    w, w_scale, w_zero = ctx.need(3), ctx.need(4), ctx.need(5)
    y_scale, y_zero, bias = ctx.need(6), ctx.need(7), ctx.input(8)
    xw, ww = _shifted(ctx, x, x_zero, "x_wide"), _shifted(ctx, w, w_zero, "w_wide")
    kernel = [d.as_int() or 0 for d in w.shape[2:]]
    if any(k <= 0 for k in kernel):
        raise Unsupported("a symbolic kernel")
    strides, dilations, before, after = geometry(ctx, x.shape[2:], kernel)
    group = int(ctx.attr("group", 1))
    acc = general_conv(ctx, xw, ww, bias, kernel, strides, dilations, before, after, group)
    factor = build.paren(
        build.binary(
            "/",
            build.binary("*", _scalar(ctx, x_scale), _scalar(ctx, w_scale)),
            _scalar(ctx, y_scale),
        )
    )
    ctx.output(0, _requantize(ctx, acc, factor, y_zero, "quantized"))
