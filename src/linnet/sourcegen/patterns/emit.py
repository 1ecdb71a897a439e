"""Translators for the `linnet` domain nodes that pattern recovery creates.

Stage: translation. Every importer's registry gets these (`install`), so a
recovered chain becomes one standard-library call whatever framework it came
from: `rms_norm(x, weight, eps)`, `silu(x)`, `gelu(x)`, `gelu_erf(x)`,
`softmax(x)` (over the last axis; another axis is permuted there and back),
`layer_norm(x, weight, some(bias), eps)` (a missing weight written as ones),
`table[ids[i, j], k]` for a row lookup whose ids are never negative
(`linnet::lookup`: torch's `embedding`), `x[..., i0, i1, ...]` with
broadcast index tensors over consecutive axes (`linnet::index`: torch's
advanced indexing, negative positions counted from the end), and the attention and rotary nodes of `linnet.sourcegen.patterns.attention`.
"""

from __future__ import annotations

import numpy as np

from linnet.check.dims import Dim
from linnet.sourcegen import build
from linnet.sourcegen.translate import Context, Registry, Unsupported
from linnet.sourcegen.values import FLOAT_DTYPES
from linnet.syntax import ast


def install(registry: Registry) -> None:
    """Add the `linnet` domain translators to `registry`."""
    registry.add("linnet", "silu", _activation("silu"))
    registry.add("linnet", "gelu", _activation("gelu"))
    registry.add("linnet", "gelu_erf", _activation("gelu_erf"))
    registry.add("linnet", "softmax", softmax)
    registry.add("linnet", "rms_norm", rms_norm)
    registry.add("linnet", "layer_norm", layer_norm)
    registry.add("linnet", "lookup", lookup)
    registry.add("linnet", "index", advanced_index)
    from linnet.sourcegen.patterns import attention

    attention.install(registry)
    from linnet.sourcegen.patterns import cache

    cache.install(registry)
    from linnet.sourcegen.patterns import linear

    linear.install(registry)


def _activation(name: str):  # type: ignore[no-untyped-def]
    def translate(ctx: Context) -> None:
        x = ctx.need(0)
        if x.dtype not in FLOAT_DTYPES:
            raise Unsupported(f"{name} needs a float input")
        fn = ctx.std("nn.activations", name)
        expr = build.call(fn, ctx.ref(x))
        if x.is_scalar:
            expr = build.index(build.call(fn, _as_tensor(ctx, x)), [build.int_lit(0)])
        ctx.output(0, ctx.let(expr, x.shape, x.dtype, name))

    return translate


def _as_tensor(ctx: Context, x):  # type: ignore[no-untyped-def]
    return build.call("fill", build.shape([build.int_lit(1)]), ctx.ref(x))


def softmax(ctx: Context) -> None:
    x = ctx.need(0)
    axis = int(ctx.attr("axis"))
    fn = ctx.std("nn.softmax", "softmax")
    last = x.rank - 1
    if axis == last:
        ctx.output(0, ctx.let(build.call(fn, ctx.ref(x)), x.shape, x.dtype, "softmax"))
        return
    # Move the axis last, normalise, move it back (std softmax works on the last axis).
    perm = [a for a in range(x.rank) if a != axis] + [axis]
    inverse = [int(i) for i in np.argsort(perm)]
    moved = build.call("permute", ctx.ref(x), build.shape([build.int_lit(p) for p in perm]))
    back = build.call(
        "permute", build.call(fn, moved), build.shape([build.int_lit(p) for p in inverse])
    )
    ctx.output(0, ctx.let(back, x.shape, x.dtype, "softmax"))


def lookup(ctx: Context) -> None:
    """Rows of `table` [N, *F] at `ids` [*S] (each in 0..N; no wrap of negative ids)."""
    table, ids = ctx.need(0), ctx.need(1)
    if table.rank < 1 or ids.dtype not in ("i32", "i64"):
        raise Unsupported("a lookup needs a table of rank 1 or more and integer ids")
    idx = ctx.indices(ids.rank + table.rank - 1)
    outer, inner = idx[: ids.rank], idx[ids.rank :]
    position = (
        build.index(ctx.ref(ids), [build.name(i) for i in outer]) if ids.rank else ctx.ref(ids)
    )
    body = build.index(ctx.ref(table), [position, *(build.name(i) for i in inner)])
    shape = (*ids.shape, *table.shape[1:])
    ctx.output(0, ctx.comprehension(idx, body, shape, table.dtype, "rows"))


def advanced_index(ctx: Context) -> None:
    """`x[:, ..., i0, i1, ..., :]`: index tensors (inputs 1..) over the consecutive axes
    from `first` on, broadcast together; their broadcast shape replaces those axes."""
    x = ctx.need(0)
    first = int(ctx.attr("first", 0))
    idx = [ctx.need(i) for i in range(1, ctx.n_inputs)]
    if not idx or first + len(idx) > x.rank:
        raise Unsupported("more index tensors than axes")
    if any(i.dtype not in ("i32", "i64") for i in idx):
        raise Unsupported("index tensors must be integers")
    wide = ctx.broadcast(*(i.shape for i in idx))
    shape = (*x.shape[:first], *wide, *x.shape[first + len(idx) :])
    names = ctx.indices(len(shape))
    lead, mid = names[:first], names[first : first + len(wide)]
    rest = names[first + len(wide) :]
    one = Dim.const(1)
    positions: list[ast.Expr] = []
    for axis, i in enumerate(idx):
        offset = len(wide) - i.rank
        comps: list[ast.Expr] = [
            build.int_lit(0)
            if ctx.equal(d, one) and not ctx.equal(wide[offset + a], one)
            else build.name(mid[offset + a])
            for a, d in enumerate(i.shape)
        ]
        read = build.index(ctx.ref(i), comps) if i.rank else ctx.ref(i)
        if i.const is None or np.any(np.asarray(i.const) < 0):
            bump = build.binary("+", read, build.call("cast", ctx.dim(x.shape[first + axis]),
                                                      generics=[build.named_type(i.dtype)]))  # fmt: skip
            read = build.call("select", build.binary("<", read, build.int_lit(0)), bump, read)
        positions.append(read)
    body = build.index(ctx.ref(x), [*map(build.name, lead), *positions, *map(build.name, rest)])
    ctx.output(0, ctx.comprehension(names, body, shape, x.dtype, "picked"))


def rms_norm(ctx: Context) -> None:
    x, w = ctx.need(0), ctx.need(1)
    if w.rank != 1 or not ctx.equal(w.shape[0], x.shape[-1]) or w.dtype != x.dtype:
        raise Unsupported("the weight must be one value per element of the last axis")
    eps = float(np.float32(ctx.attr("eps")))
    fn = ctx.std("nn.norm", "rms_norm")
    expr = build.call(fn, ctx.ref(x), ctx.ref(w), ctx.literal(eps, "f32"))
    ctx.output(0, ctx.let(expr, x.shape, x.dtype, "normed"))


def layer_norm(ctx: Context) -> None:
    x, w, b = ctx.need(0), ctx.input(1), ctx.input(2)
    if x.dtype not in FLOAT_DTYPES or x.rank < 1:
        raise Unsupported("layer norm needs a float input of rank 1 or more")
    for affine in (w, b):
        if affine is not None and (
            affine.rank != 1
            or not ctx.equal(affine.shape[0], x.shape[-1])
            or affine.dtype != x.dtype
        ):
            raise Unsupported("the weight and bias must be one value per element of the last axis")
    eps = float(np.float32(ctx.attr("eps")))
    fn = ctx.std("nn.norm", "layer_norm")
    weight = (
        ctx.ref(w)
        if w is not None
        else build.call(
            "fill",
            ctx.shape_lit([x.shape[-1]]),
            ctx.literal(1.0, x.dtype),
            generics=[build.named_type(x.dtype)],
        )
    )
    bias = build.none() if b is None else build.some(ctx.ref(b))
    expr = build.call(fn, ctx.ref(x), weight, bias, ctx.literal(eps, "f32"))
    ctx.output(0, ctx.let(expr, x.shape, x.dtype, "normalized"))
