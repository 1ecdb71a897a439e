"""ONNX activation operators -> `std.nn.activations` calls and their formulas.

Stage: ONNX import, translation. `Relu`, `Sigmoid` and `Gelu` (both
`approximate` modes) call the standard library on float tensors; the other
activations are written out from their ONNX definitions with the attribute
defaults of the operator spec (`alpha`, `beta`, `gamma`, `lambd`, `bias`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from linnet.onnx.importer.graph import translator
from linnet.onnx.importer.ops._common import FLOAT_DTYPES, UNSIGNED, cast, fold_ok
from linnet.sourcegen import build
from linnet.sourcegen.translate import Context, Unsupported
from linnet.sourcegen.values import Value
from linnet.syntax import ast

F = build.float_lit


def _float_input(ctx: Context) -> Value:
    x = ctx.need(0)
    if x.dtype not in FLOAT_DTYPES:
        raise Unsupported(f"{ctx.node.op} of {x.dtype}")
    return x


def _std(ctx: Context, item: str, hint: str) -> None:
    x = _float_input(ctx)
    fn = ctx.std("nn.activations", item)
    ctx.output(0, ctx.let(build.call(fn, ctx.ref(x)), x.shape, x.dtype, hint))


@translator("Relu")
def relu(ctx: Context) -> None:
    x = ctx.need(0)
    if fold_ok(x) and x.dtype != "bool":
        assert x.const is not None
        ctx.output(0, ctx.constant(np.maximum(x.const, np.zeros((), x.const.dtype)), x.dtype))
        return
    if x.dtype in FLOAT_DTYPES:
        _std(ctx, "relu", "relu")
        return
    if x.dtype == "bool":
        raise Unsupported("Relu of bool")
    if x.dtype in UNSIGNED:
        ctx.output(0, x)
        return
    expr = build.call("max", ctx.ref(x), ctx.literal(0, x.dtype))
    ctx.output(0, ctx.let(expr, x.shape, x.dtype, "relu"))


@translator("Sigmoid")
def sigmoid(ctx: Context) -> None:
    _std(ctx, "sigmoid", "sigmoid")


@translator("Gelu")
def gelu(ctx: Context) -> None:
    approximate = ctx.attr("approximate", "none")
    if approximate == "tanh":
        _std(ctx, "gelu", "gelu")
    elif approximate == "none":
        _std(ctx, "gelu_erf", "gelu")
    else:
        raise Unsupported(f"approximate = {approximate!r}")


def _formula(ctx: Context, make: Callable[[Value, ast.Expr], ast.Expr], hint: str) -> None:
    """`make(x)`; f16 and bf16 inputs are computed in f32 and rounded once at the end."""
    x = _float_input(ctx)
    if x.dtype in ("f16", "bf16"):
        wide = ctx.let(cast(ctx.ref(x), "f32"), x.shape, "f32", "wide")
        value = ctx.let(make(wide, ctx.ref(wide)), x.shape, "f32", hint)
        ctx.output(0, ctx.let(cast(ctx.ref(value), x.dtype), x.shape, x.dtype, hint))
        return
    ctx.output(0, ctx.let(make(x, ctx.ref(x)), x.shape, x.dtype, hint))


def _alpha(ctx: Context, default: float) -> float:
    return float(ctx.attr("alpha", default))


@translator("LeakyRelu")
def leaky_relu(ctx: Context) -> None:
    a = _alpha(ctx, 0.01)
    _formula(
        ctx,
        lambda x, e: build.call(
            "select", build.binary("<", e, F(0.0)), build.binary("*", F(a), e), e
        ),
        "leaky_relu",
    )


@translator("Elu")
def elu(ctx: Context) -> None:
    a = _alpha(ctx, 1.0)
    _formula(
        ctx,
        lambda x, e: build.call(
            "select",
            build.binary("<", e, F(0.0)),
            build.binary("*", F(a), build.paren(build.binary("-", build.call("exp", e), F(1.0)))),
            e,
        ),
        "elu",
    )


@translator("Selu")
def selu(ctx: Context) -> None:
    a = _alpha(ctx, 1.67326319217681884765625)
    g = float(ctx.attr("gamma", 1.05070102214813232421875))
    _formula(
        ctx,
        lambda x, e: build.binary(
            "*",
            F(g),
            build.call(
                "select",
                build.binary("<=", e, F(0.0)),
                build.binary("-", build.binary("*", F(a), build.call("exp", e)), F(a)),
                e,
            ),
        ),
        "selu",
    )


@translator("Celu")
def celu(ctx: Context) -> None:
    a = _alpha(ctx, 1.0)
    if a == 0.0:
        raise Unsupported("alpha = 0")

    def make(x: Value, e: ast.Expr) -> ast.Expr:
        neg = build.binary(
            "*",
            F(a),
            build.paren(build.binary("-", build.call("exp", build.binary("/", e, F(a))), F(1.0))),
        )
        return build.binary("+", build.call("max", e, F(0.0)), build.call("min", neg, F(0.0)))

    _formula(ctx, make, "celu")


@translator("ThresholdedRelu")
def thresholded_relu(ctx: Context) -> None:
    a = _alpha(ctx, 1.0)
    _formula(
        ctx,
        lambda x, e: build.call("select", build.binary(">", e, F(a)), e, _zero_like(ctx, x)),
        "thresholded",
    )


def _zero_like(ctx: Context, x: Value) -> ast.Expr:
    return build.float_lit(0.0)


@translator("HardSigmoid")
def hard_sigmoid(ctx: Context) -> None:
    a = _alpha(ctx, 0.2)
    b = float(ctx.attr("beta", 0.5))
    _formula(
        ctx,
        lambda x, e: build.call(
            "max",
            build.call("min", build.binary("+", build.binary("*", F(a), e), F(b)), F(1.0)),
            F(0.0),
        ),
        "hard_sigmoid",
    )


@translator("HardSwish")
def hard_swish(ctx: Context) -> None:
    _formula(
        ctx,
        lambda x, e: build.binary(
            "*",
            e,
            build.call(
                "max",
                build.call("min", build.binary("+", build.binary("/", e, F(6.0)), F(0.5)), F(1.0)),
                F(0.0),
            ),
        ),
        "hard_swish",
    )


@translator("Softplus")
def softplus(ctx: Context) -> None:
    _formula(
        ctx,
        lambda x, e: build.call("log", build.binary("+", build.call("exp", e), F(1.0))),
        "softplus",
    )


@translator("Softsign")
def softsign(ctx: Context) -> None:
    _formula(
        ctx,
        lambda x, e: build.binary(
            "/", e, build.paren(build.binary("+", F(1.0), build.call("abs", e)))
        ),
        "softsign",
    )


@translator("Mish")
def mish(ctx: Context) -> None:
    _formula(
        ctx,
        lambda x, e: build.binary(
            "*",
            e,
            build.call("tanh", build.call("log", build.binary("+", build.call("exp", e), F(1.0)))),
        ),
        "mish",
    )


@translator("Swish")
def swish(ctx: Context) -> None:
    a = _alpha(ctx, 1.0)
    if a == 1.0:
        x = _float_input(ctx)
        fn = ctx.std("nn.activations", "silu")
        ctx.output(0, ctx.let(build.call(fn, ctx.ref(x)), x.shape, x.dtype, "swish"))
        return
    sig = ctx.std("nn.activations", "sigmoid")
    _formula(
        ctx, lambda x, e: build.binary("*", e, build.call(sig, build.binary("*", F(a), e))), "swish"
    )


@translator("Shrink")
def shrink(ctx: Context) -> None:
    x = ctx.need(0)
    if x.dtype == "bool":
        raise Unsupported("Shrink of bool")
    lambd = float(ctx.attr("lambd", 0.5))
    bias = float(ctx.attr("bias", 0.0))
    if fold_ok(x):
        assert x.const is not None
        v = x.const.astype(np.float64)
        out = np.where(v < -lambd, v + bias, np.where(v > lambd, v - bias, 0.0))
        ctx.output(0, ctx.constant(out.astype(x.const.dtype), x.dtype))
        return
    is_float = x.dtype in FLOAT_DTYPES
    if not is_float and not (lambd.is_integer() and bias.is_integer()):
        raise Unsupported("fractional lambd or bias on integers")

    def lit(v: float) -> ast.Expr:
        return ctx.literal(v if is_float else int(v), x.dtype)

    e = ctx.ref(x)
    lower = build.binary("<", e, build.unary("-", lit(lambd)) if lambd else lit(0))
    upper = build.binary(">", e, lit(lambd))
    inner = build.call("select", upper, build.binary("-", e, lit(bias)), ctx.typed(0, x.dtype))
    expr = build.call("select", lower, build.binary("+", e, lit(bias)), inner)
    ctx.output(0, ctx.let(expr, x.shape, x.dtype, "shrunk"))
