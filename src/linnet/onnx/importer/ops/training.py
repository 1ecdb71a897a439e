"""ONNX training-preview optimizers (`ai.onnx.preview.training`): `Adagrad`, `Adam`, `Momentum`.

Stage: ONNX import, translation. Each is an elementwise update of parameters
from gradients and accumulators, with the learning rate `R` and the step
count `T` as runtime scalars, written from the operator definitions
(including their `T > 0` bias corrections). Several tensors in one node
(`X1, X2, G1, G2, ...`) are updated one after another with the same rate.
"""

from __future__ import annotations

import math

from linnet.onnx.importer.graph import translator
from linnet.onnx.importer.ops._common import FLOAT_DTYPES, cast
from linnet.sourcegen import build
from linnet.sourcegen.translate import Context, Unsupported
from linnet.sourcegen.values import Value
from linnet.syntax import ast

DOMAIN = "ai.onnx.preview.training"
F = build.float_lit


def _scalar(ctx: Context, v: Value, dtype: str) -> ast.Expr:
    if not all(d.as_int() == 1 for d in v.shape):
        raise Unsupported("R and T must hold one value")
    e = ctx.ref(v) if v.is_scalar else build.index(ctx.ref(v), [build.int_lit(0)] * v.rank)
    return e if v.dtype == dtype else cast(e, dtype)


def _groups(ctx: Context, per: int) -> tuple[Value, Value, list[list[Value]]]:
    values = [ctx.need(i) for i in range(ctx.n_inputs)]
    r, t, rest = values[0], values[1], values[2:]
    if len(rest) % per:
        raise Unsupported(f"inputs must come in groups of {per}")
    n = len(rest) // per
    groups = [[rest[k * n + i] for k in range(per)] for i in range(n)]
    for g in groups:
        if g[0].dtype not in FLOAT_DTYPES or any(v.dtype != g[0].dtype for v in g):
            raise Unsupported("tensors of one float dtype")
    return r, t, groups


def _started(ctx: Context, t: Value) -> ast.Expr:
    return build.binary(">", _scalar(ctx, t, "i64"), build.int_lit(0))


@translator("Adagrad", domain=DOMAIN)
def adagrad(ctx: Context) -> None:
    r, t, groups = _groups(ctx, 3)
    decay = float(ctx.attr("decay_factor", 0.0))
    eps = float(ctx.attr("epsilon", 0.0))
    norm = float(ctx.attr("norm_coefficient", 0.0))
    n = len(groups)
    for i, (x, g, h) in enumerate(groups):
        T = x.dtype
        rate = build.binary(
            "/",
            _scalar(ctx, r, T),
            build.paren(build.binary("+", F(1.0), build.binary("*", _scalar(ctx, t, T), F(decay)))),
        )
        reg = ctx.let(
            build.binary("+", build.binary("*", F(norm), ctx.ref(x)), ctx.ref(g)),
            x.shape,
            T,
            "regularized",
        )
        h_new = ctx.let(
            build.binary("+", ctx.ref(h), build.binary("*", ctx.ref(reg), ctx.ref(reg))),
            x.shape,
            T,
            "accumulated",
        )
        step = build.binary(
            "/",
            build.binary("*", rate, ctx.ref(reg)),
            build.paren(build.binary("+", build.call("sqrt", ctx.ref(h_new)), F(eps))),
        )
        ctx.output(i, ctx.let(build.binary("-", ctx.ref(x), step), x.shape, T, "updated"))
        ctx.output(n + i, h_new)


@translator("Adam", domain=DOMAIN)
def adam(ctx: Context) -> None:
    r, t, groups = _groups(ctx, 4)
    alpha = float(ctx.attr("alpha", 0.9))
    beta = float(ctx.attr("beta", 0.999))
    eps = float(ctx.attr("epsilon", 0.0))
    norm = float(ctx.attr("norm_coefficient", 0.0))
    post = float(ctx.attr("norm_coefficient_post", 0.0))
    if alpha <= 0 or beta <= 0:
        raise Unsupported("alpha and beta must be positive")
    steps = _scalar(ctx, t, "f64")
    # r * sqrt(1 - beta^t) / (1 - alpha^t) for t > 0, in f64 as the definition's Python floats.
    power_b = build.call("exp", build.binary("*", steps, F(math.log(beta))))
    power_a = build.call("exp", build.binary("*", steps, F(math.log(alpha))))
    corrected = build.binary(
        "/",
        build.binary(
            "*", _scalar(ctx, r, "f64"), build.call("sqrt", build.binary("-", F(1.0), power_b))
        ),
        build.paren(build.binary("-", F(1.0), power_a)),
    )
    rate = ctx.let(
        build.call("select", _started(ctx, t), corrected, _scalar(ctx, r, "f64")), (), "f64", "rate"
    )
    n = len(groups)
    for i, (x, g, v, h) in enumerate(groups):
        T = x.dtype
        reg = ctx.let(
            build.binary("+", build.binary("*", F(norm), ctx.ref(x)), ctx.ref(g)),
            x.shape,
            T,
            "regularized",
        )
        v_new = ctx.let(
            build.binary(
                "+",
                build.binary("*", F(alpha), ctx.ref(v)),
                build.binary("*", F(1 - alpha), ctx.ref(reg)),
            ),
            x.shape,
            T,
            "moment",
        )
        h_new = ctx.let(
            build.binary(
                "+",
                build.binary("*", F(beta), ctx.ref(h)),
                build.binary(
                    "*", F(1 - beta), build.paren(build.binary("*", ctx.ref(reg), ctx.ref(reg)))
                ),
            ),
            x.shape,
            T,
            "second_moment",
        )
        r_t = ctx.ref(rate) if T == "f64" else cast(ctx.ref(rate), T)
        ratio = build.binary(
            "/",
            ctx.ref(v_new),
            build.paren(build.binary("+", build.call("sqrt", ctx.ref(h_new)), F(eps))),
        )
        x_new = build.binary("-", ctx.ref(x), build.binary("*", r_t, build.paren(ratio)))
        ctx.output(
            i, ctx.let(build.binary("*", F(1 - post), build.paren(x_new)), x.shape, T, "updated")
        )
        ctx.output(n + i, v_new)
        ctx.output(2 * n + i, h_new)


@translator("Momentum", domain=DOMAIN)
def momentum(ctx: Context) -> None:
    r, t, groups = _groups(ctx, 3)
    alpha = float(ctx.attr("alpha"))
    beta = float(ctx.attr("beta"))
    norm = float(ctx.attr("norm_coefficient"))
    mode = str(ctx.attr("mode", "standard"))
    if mode not in ("standard", "nesterov"):
        raise Unsupported(f"mode {mode!r}")
    n = len(groups)
    for i, (x, g, v) in enumerate(groups):
        T = x.dtype
        reg = ctx.let(
            build.binary("+", build.binary("*", F(norm), ctx.ref(x)), ctx.ref(g)),
            x.shape,
            T,
            "regularized",
        )
        scale = build.call("select", _started(ctx, t), ctx.typed(beta, T), ctx.typed(1.0, T))
        v_new = ctx.let(
            build.binary(
                "+", build.binary("*", F(alpha), ctx.ref(v)), build.binary("*", scale, ctx.ref(reg))
            ),
            x.shape,
            T,
            "velocity",
        )
        move: ast.Expr = ctx.ref(v_new)
        if mode == "nesterov":
            move = build.paren(
                build.binary("+", ctx.ref(reg), build.binary("*", F(alpha), ctx.ref(v_new)))
            )
        step = build.binary("*", _scalar(ctx, r, T), move)
        ctx.output(i, ctx.let(build.binary("-", ctx.ref(x), step), x.shape, T, "updated"))
        ctx.output(n + i, v_new)
