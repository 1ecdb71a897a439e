"""ONNX `NegativeLogLikelihoodLoss` and `SoftmaxCrossEntropyLoss` -> index notation.

Stage: ONNX import, translation. Both read, for every sample `n` and extra
position `d`, the log-probability of the target class (an element access at a
runtime position, 8.3), weight it by `weight[target]` (0 for `ignore_index`),
and reduce as `reduction` says: `none`, `sum`, or `mean` (divided by the sum
of the weights, which is the count when there are no weights), as the ONNX
operator definitions do. `SoftmaxCrossEntropyLoss` takes the log-softmax over
the class axis first and can return it as its second output.
"""

from __future__ import annotations

from linnet.check.dims import Dim
from linnet.onnx.importer.graph import translator
from linnet.onnx.importer.ops._common import FLOAT_DTYPES, INT_DTYPES, cast, numel
from linnet.onnx.importer.ops.reduce import access, log_softmax_value
from linnet.sourcegen import build
from linnet.sourcegen.translate import Context, Unsupported
from linnet.sourcegen.values import Value
from linnet.syntax import ast


def _loss(ctx: Context, logp: Value, target: Value, weight: Value | None) -> Value:
    if logp.dtype not in FLOAT_DTYPES:
        raise Unsupported(f"loss of {logp.dtype}")
    if target.dtype not in INT_DTYPES:
        raise Unsupported(f"targets of {target.dtype}")
    if logp.rank < 2 or target.rank != logp.rank - 1:
        raise Unsupported("input must be [N, C, ...] and target [N, ...]")
    reduction = str(ctx.attr("reduction", "mean"))
    if reduction not in ("none", "sum", "mean"):
        raise Unsupported(f"reduction {reduction!r}")
    ignore = ctx.attr("ignore_index", None)
    T = logp.dtype
    classes = logp.shape[1]
    names = ctx.indices(target.rank)
    n, rest = names[0], names[1:]
    t: ast.Expr = access(ctx, target, names)
    if target.dtype != "i64":
        t = cast(t, "i64")
    # Targets read clipped into [0, C - 1] (ONNX gathers the weight with mode "clip").
    clipped = build.call(
        "min",
        build.call("max", t, build.int_lit(0)),
        build.binary("-", ctx.dim(classes), build.int_lit(1)),
    )
    picked = build.unary("-", access(ctx, logp, [n, clipped, *rest]))
    w: ast.Expr | None = None
    if weight is not None:
        if weight.dtype != T:
            raise Unsupported("weight of another dtype")
        w = access(ctx, weight, [clipped])
    if ignore is not None:
        keep = build.binary("!=", t, build.int_lit(int(ignore)))
        w = build.call(
            "select", keep, w if w is not None else ctx.typed(1.0, T), build.float_lit(0.0)
        )
    body = picked if w is None else build.binary("*", build.paren(picked), w)
    losses = ctx.comprehension(names, body, target.shape, T, "losses")
    if reduction == "none":
        return losses
    total = ctx.let(build.reduction("sum", names, access(ctx, losses, names)), (), T, "total")
    if reduction == "sum":
        return total
    if w is None:
        count = ctx.simplify(_numel(target))
        n_int = count.as_int()
        divisor: ast.Expr = (
            build.float_lit(float(n_int)) if n_int is not None else cast(ctx.dim(count), T)
        )
    else:
        names2 = ctx.indices(target.rank)
        t2: ast.Expr = access(ctx, target, names2)
        if target.dtype != "i64":
            t2 = cast(t2, "i64")
        clipped2 = build.call(
            "min",
            build.call("max", t2, build.int_lit(0)),
            build.binary("-", ctx.dim(classes), build.int_lit(1)),
        )
        w2: ast.Expr = access(ctx, weight, [clipped2]) if weight is not None else ctx.typed(1.0, T)
        if ignore is not None:
            w2 = build.call(
                "select",
                build.binary("!=", t2, build.int_lit(int(ignore))),
                w2,
                build.float_lit(0.0),
            )
        weights = ctx.comprehension(names2, w2, target.shape, T, "weights")
        divisor = ctx.ref(
            ctx.let(
                build.reduction("sum", names2, access(ctx, weights, names2)), (), T, "weight_sum"
            )
        )
    return ctx.let(build.binary("/", ctx.ref(total), divisor), (), T, "loss")


def _numel(v: Value) -> Dim:
    return numel(v.shape)


@translator("NegativeLogLikelihoodLoss")
def negative_log_likelihood_loss(ctx: Context) -> None:
    ctx.output(0, _loss(ctx, ctx.need(0), ctx.need(1), ctx.input(2)))


@translator("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy_loss(ctx: Context) -> None:
    x = ctx.need(0)
    if x.dtype not in FLOAT_DTYPES or x.rank < 2:
        raise Unsupported("scores must be float [N, C, ...]")
    logp = log_softmax_value(ctx, x, 1)
    ctx.output(0, _loss(ctx, logp, ctx.need(1), ctx.input(2)))
    if ctx.n_outputs > 1 and ctx.node.outputs[1]:
        ctx.output(1, logp)
