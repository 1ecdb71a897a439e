"""ONNX `Identity`, `Dropout` (inference), `Cast`, `CastLike`, `Clip`, `Constant`.

Stage: ONNX import, translation. `Cast` is Linnet's `cast` (10.3), whose value
mapping is the frameworks' (float to integer truncates, a number to bool is
`!= 0`); element types Linnet lacks (strings, 8-bit and 4-bit floats, 2- and
4-bit integers) refuse the node. `Dropout` is the identity at inference; in
training mode with a non-zero ratio it would draw random numbers, which an
import cannot reproduce, so it refuses.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from linnet.onnx.importer.graph import DTYPES, translator
from linnet.onnx.importer.ops._common import (
    FLOAT_DTYPES,
    INT_DTYPES,
    cast,
    fold,
    fold_ok,
    np_dtype,
    scalar_const,
)
from linnet.sourcegen import build
from linnet.sourcegen.translate import Context, Unsupported
from linnet.syntax import ast


@translator("Identity")
def identity(ctx: Context) -> None:
    ctx.output(0, ctx.need(0))


@translator("Dropout")
def dropout(ctx: Context) -> None:
    x = ctx.need(0)
    ratio = scalar_const(ctx.input(1)) if ctx.n_inputs > 1 else ctx.attr("ratio", 0.5)
    training = ctx.input(2)
    if training is not None:
        mode = scalar_const(training)
        if mode is None:
            raise Unsupported("training_mode must be a constant")
        if bool(mode) and ratio not in (0, 0.0):
            raise Unsupported("training mode draws random numbers")
    if ctx.node.opset < 7 and not ctx.attr("is_test", 0):
        raise Unsupported("training mode (is_test = 0) draws random numbers")
    ctx.output(0, x)
    if ctx.n_outputs > 1 and ctx.node.outputs[1]:
        mask = build.call(
            "fill",
            ctx.shape_lit(x.shape),
            build.bool_lit(True),
            generics=[build.named_type("bool")],
        )
        if x.is_scalar:
            mask = build.bool_lit(True)
        ctx.output(1, ctx.let(mask, x.shape, "bool", "mask"))


def linnet_dtype(code: int) -> str:
    """The Linnet dtype of an ONNX element type code; refuses types Linnet lacks."""
    dtype = DTYPES.get(code)
    if dtype is None:
        try:
            name = TensorProto.DataType.Name(code)
        except ValueError:
            name = str(code)
        raise Unsupported(f"element type {name} has no Linnet dtype")
    return dtype


def convert(ctx: Context, x_expr: ast.Expr, source: str, target: str) -> ast.Expr:
    """`x` converted from `source` to `target` dtype (ONNX Cast semantics)."""
    if source == target:
        return x_expr
    return cast(x_expr, target)


def _cast_to(ctx: Context, target: str) -> None:
    x = ctx.need(0)
    if fold_ok(x):
        assert x.const is not None
        with np.errstate(all="ignore"):
            if target == "bool":
                value = x.const != 0
            else:
                value = x.const.astype(np_dtype(target))
        ctx.output(0, fold(ctx, value, target))
        return
    if x.dtype == target:
        ctx.output(0, x)
        return
    if x.dtype in FLOAT_DTYPES and target in INT_DTYPES:
        ctx.note(
            f"Cast `{ctx.node.label}` from {x.dtype} to {target}: out-of-range and NaN values "
            "are undefined in ONNX and left to the backend"
        )
    ctx.output(0, ctx.let(convert(ctx, ctx.ref(x), x.dtype, target), x.shape, target, "cast_"))


@translator("Cast")
def cast_(ctx: Context) -> None:
    if int(ctx.attr("saturate", 1)) != 1:
        raise Unsupported("saturate = 0 applies to 8-bit floats only")
    if "round_mode" in ctx.node.attrs and ctx.attr("round_mode") != "up":
        raise Unsupported(f"round_mode = {ctx.attr('round_mode')!r}")
    x = ctx.input(0)
    if x is None:
        raise Unsupported("input 0 is missing")
    _cast_to(ctx, linnet_dtype(int(ctx.attr("to"))))


@translator("CastLike")
def cast_like(ctx: Context) -> None:
    if int(ctx.attr("saturate", 1)) != 1:
        raise Unsupported("saturate = 0 applies to 8-bit floats only")
    like = ctx.need(1)
    _cast_to(ctx, like.dtype)


@translator("Clip")
def clip(ctx: Context) -> None:
    x = ctx.need(0)
    if x.dtype == "bool":
        raise Unsupported("Clip of bool")
    if ctx.node.opset < 11:
        low = ctx.attr("min", None)
        high = ctx.attr("max", None)
        lo_v = None if low is None else ctx.constant(np.array(low, dtype=np_dtype(x.dtype)))
        hi_v = None if high is None else ctx.constant(np.array(high, dtype=np_dtype(x.dtype)))
    else:
        lo_v, hi_v = ctx.input(1), ctx.input(2)
    for bound in (lo_v, hi_v):
        if bound is None:
            continue
        if bound.dtype != x.dtype:
            raise Unsupported("bounds of another dtype")
        if bound.rank > 0 and not all(d.as_int() == 1 for d in bound.shape):
            raise Unsupported("bounds must be scalars")
    if fold_ok(x, lo_v, hi_v) and x.const is not None:
        value = x.const
        if lo_v is not None and lo_v.const is not None:
            value = np.maximum(value, lo_v.const.reshape(()))
        if hi_v is not None and hi_v.const is not None:
            value = np.minimum(value, hi_v.const.reshape(()))
        ctx.output(0, fold(ctx, value, x.dtype))
        return
    expr = ctx.ref(x)
    # ONNX Clip: y = min(max(x, min), max).
    if lo_v is not None:
        expr = build.call("max", expr, _scalar(ctx, lo_v))
    if hi_v is not None:
        expr = build.call("min", expr, _scalar(ctx, hi_v))
    if lo_v is None and hi_v is None:
        ctx.output(0, x)
        return
    ctx.output(0, ctx.let(expr, x.shape, x.dtype, "clipped"))


def _scalar(ctx: Context, v: object) -> ast.Expr:
    from linnet.sourcegen.values import Value

    assert isinstance(v, Value)
    if v.const is not None:
        return ctx.literal(v.const.reshape(()).item(), v.dtype)
    if v.is_scalar:
        return ctx.ref(v)
    return build.index(ctx.ref(v), [build.int_lit(0) for _ in v.shape])


@translator("Constant")
def constant(ctx: Context) -> None:
    """Constants the graph reader did not fold: refuse with the reason."""
    attrs = ctx.node.attrs
    for key in ("sparse_value", "value_string", "value_strings"):
        if key in attrs:
            raise Unsupported(f"a `{key}` constant has no Linnet value")
    value = attrs.get("value")
    if value is None:
        raise Unsupported("a constant of an element type Linnet lacks")
    arr = np.asarray(value)
    ctx.output(0, ctx.constant(arr))
