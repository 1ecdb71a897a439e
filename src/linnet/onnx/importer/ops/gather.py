"""ONNX gathers and scatters -> element lookups in index notation.

Stage: ONNX import, translation. `Gather` along axis 0 with a scalar index is
slicing (`table[i]`); otherwise every gather is a comprehension whose access
reads a runtime position (8.3: "an integer position ... another element
access such as `labels[b]`"): `Gather(data, idx, axis=1)` on `[A, B, C]` data
and `[N]` indices is `let g[a, n, c] = data[a, idx[n], c]`.

ONNX indices may be negative (counting from the end); Linnet positions may
not (9.2), so runtime indices are wrapped first
(`select(idx < 0, idx + extent, idx)`) and constant ones at import time.
Scatters become comprehensions that ask, for every output position, which
update lands there (`any[...]` / `sum[...]` over the updates).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from linnet.check.dims import Dim
from linnet.onnx.importer.graph import translator
from linnet.onnx.importer.ops._common import (
    INT_DTYPES,
    SIGNED,
    elements_array,
    fold,
    is_nonneg,
    norm_axis,
    symbolic_result,
)
from linnet.onnx.importer.ops.reduce import access
from linnet.sourcegen import build
from linnet.sourcegen.translate import Context, Unsupported
from linnet.sourcegen.values import Value
from linnet.syntax import ast


def wrapped_indices(ctx: Context, idx: Value, extent: Dim) -> Value:
    """`idx` with negative entries counted from `extent` (ONNX index convention)."""
    if idx.dtype not in INT_DTYPES:
        raise Unsupported(f"indices of dtype {idx.dtype}")
    if idx.const is not None:
        n = extent.as_int()
        if bool(np.all(idx.const >= 0)):
            return idx
        if n is None:
            raise Unsupported("negative constant indices on a symbolic axis")
        return fold(ctx, np.where(idx.const < 0, idx.const + n, idx.const), idx.dtype)
    if idx.dtype not in SIGNED or is_nonneg(ctx, idx):
        return idx
    r = ctx.ref(idx)
    bump = build.binary(
        "+", r, build.call("cast", ctx.dim(extent), generics=[build.named_type(idx.dtype)])
    )
    expr = build.call("select", build.binary("<", r, build.int_lit(0)), bump, r)
    return ctx.let(expr, idx.shape, idx.dtype, "index")


@translator("Gather")
def gather(ctx: Context) -> None:
    data, idx = ctx.need(0), ctx.need(1)
    if data.is_scalar:
        raise Unsupported("Gather from a scalar")
    axis = norm_axis(int(ctx.attr("axis", 0)), data.rank)
    extent = data.shape[axis]
    known = _symbolic_gather(ctx, data, idx, axis)
    if known is not None:
        ctx.output(0, known)
        return
    idx = wrapped_indices(ctx, idx, extent)
    out_dims = list(data.shape[:axis]) + list(idx.shape) + list(data.shape[axis + 1 :])
    if idx.is_scalar:
        # One position: slicing with a runtime (or constant) index drops the axis (9.2).
        comps: list[build.Component] = [build.slice_() for _ in range(axis)]
        comps.append(_position(ctx, idx))
        ctx.output(0, ctx.let(build.index(ctx.ref(data), comps), out_dims, data.dtype, "picked"))
        return
    lead = ctx.indices(axis + idx.rank + data.rank - axis - 1)
    before, inner, after = lead[:axis], lead[axis : axis + idx.rank], lead[axis + idx.rank :]
    position = access(ctx, idx, inner)
    body = access(ctx, data, [*before, position, *after])
    ctx.output(0, ctx.comprehension(lead, body, out_dims, data.dtype, "gathered"))


def _position(ctx: Context, idx: Value) -> ast.Expr:
    if idx.const is not None:
        return build.int_lit(int(idx.const.reshape(())))
    return ctx.ref(idx)


def _symbolic_gather(ctx: Context, data: Value, idx: Value, axis: int) -> Value | None:
    """Gather on a known (shape) value with known indices, folded."""
    arr = elements_array(data) if data.const is None or data.source is not None else None
    if data.const is not None and (data.source is None or data.dtype in INT_DTYPES):
        arr = data.const
    if arr is None or idx.const is None:
        return None
    n = arr.shape[axis]
    where = np.where(idx.const < 0, idx.const + n, idx.const)
    if np.any(where < 0) or np.any(where >= n):
        raise Unsupported("constant indices out of range")
    taken = np.take(arr, where, axis=axis)
    if taken.dtype == object:
        return symbolic_result(ctx, taken, data.dtype)
    return fold(ctx, taken, data.dtype)


@translator("GatherElements")
def gather_elements(ctx: Context) -> None:
    data, idx = ctx.need(0), ctx.need(1)
    if data.rank != idx.rank or data.is_scalar:
        raise Unsupported("indices must have the data's rank")
    axis = norm_axis(int(ctx.attr("axis", 0)), data.rank)
    idx = wrapped_indices(ctx, idx, data.shape[axis])
    names = ctx.indices(data.rank)
    comps: list[str | ast.Expr] = list(names)
    comps[axis] = access(ctx, idx, names)
    for i, (d, e) in enumerate(zip(data.shape, idx.shape, strict=True)):
        if i != axis and not ctx.prove(e, "<=", d):
            raise Unsupported(f"indices extent {e} exceeds the data's {d} on axis {i}")
    body = _read(ctx, data, comps, idx, axis)
    ctx.output(0, ctx.comprehension(names, body, idx.shape, data.dtype, "gathered"))


def _read(
    ctx: Context, data: Value, comps: Sequence[str | ast.Expr], idx: Value, axis: int
) -> ast.Expr:
    """`data[comps]`, where axes other than `axis` may be shorter in `idx` than in `data`."""
    fixed: list[str | ast.Expr] = []
    for i, c in enumerate(comps):
        if i != axis and isinstance(c, str) and not ctx.equal(idx.shape[i], data.shape[i]):
            # A shorter index axis reads a prefix of the data axis: go through a position table.
            pos = ctx.let(
                build.call("iota", ctx.dim(idx.shape[i]), generics=[build.named_type("i64")]),
                (idx.shape[i],),
                "i64",
                "pos",
            )
            fixed.append(access(ctx, pos, [c]))
        else:
            fixed.append(c)
    return access(ctx, data, fixed)


@translator("GatherND")
def gather_nd(ctx: Context) -> None:
    data, idx = ctx.need(0), ctx.need(1)
    batch = int(ctx.attr("batch_dims", 0))
    depth = idx.shape[-1].as_int() if idx.rank else None
    if depth is None or idx.rank < 1:
        raise Unsupported("the last indices extent must be a constant")
    if batch + depth > data.rank:
        raise Unsupported("indices address more axes than the data has")
    out_dims = list(idx.shape[:-1]) + list(data.shape[batch + depth :])
    names = ctx.indices(len(out_dims))
    lead = names[: idx.rank - 1]
    tail = names[idx.rank - 1 :]
    positions: list[str | ast.Expr] = list(lead[:batch])
    for k in range(depth):
        raw = access(ctx, idx, [*lead, build.int_lit(k)])
        extent = data.shape[batch + k]
        bump = build.binary(
            "+", raw, build.call("cast", ctx.dim(extent), generics=[build.named_type(idx.dtype)])
        )
        positions.append(build.call("select", build.binary("<", raw, build.int_lit(0)), bump, raw))
    body = access(ctx, data, [*positions, *tail])
    if not out_dims:
        ctx.output(0, ctx.let(body, (), data.dtype, "gathered"))
        return
    ctx.output(0, ctx.comprehension(names, body, out_dims, data.dtype, "gathered"))


@translator("OneHot")
def one_hot(ctx: Context) -> None:
    idx, depth_v, values = ctx.need(0), ctx.need(1), ctx.need(2)
    depth_el = ctx.elements(1) if depth_v.dtype in INT_DTYPES else None
    if depth_el is None:
        if depth_v.const is None:
            raise Unsupported("depth must be a constant")
        depth = Dim.const(int(np.asarray(depth_v.const).reshape(-1)[0]))
    else:
        depth = depth_el[0]
    if values.const is None and values.rank != 1:
        raise Unsupported("values must be a pair")
    rank = idx.rank + 1
    axis = norm_axis(int(ctx.attr("axis", -1)), rank)
    out_dims = [*list(idx.shape[:axis]), depth, *list(idx.shape[axis:])]
    pos = ctx.let(
        build.call("iota", ctx.dim(depth), generics=[build.named_type("i64")]),
        (depth,),
        "i64",
        "pos",
    )
    names = ctx.indices(rank)
    at = [n for i, n in enumerate(names) if i != axis]
    raw: ast.Expr = access(ctx, idx, at)
    if idx.dtype != "i64":
        raw = build.call("cast", raw, generics=[build.named_type("i64")])
    # Negative indices count from the end (ONNX OneHot); others out of range hit nothing.
    wrapped = build.call(
        "select",
        build.binary("<", raw, build.int_lit(0)),
        build.binary(
            "+", raw, build.call("cast", ctx.dim(depth), generics=[build.named_type("i64")])
        ),
        raw,
    )
    hit = build.binary("==", access(ctx, pos, [names[axis]]), wrapped)
    off, on = (
        build.index(ctx.ref(values), [build.int_lit(0)]),
        build.index(ctx.ref(values), [build.int_lit(1)]),
    )
    body = build.call("select", hit, on, off)
    ctx.output(0, ctx.comprehension(names, body, out_dims, values.dtype, "one_hot"))


# ---------------------------------------------------------------- scatters


@translator("ScatterElements", "Scatter")
def scatter_elements(ctx: Context) -> None:
    data, idx, upd = ctx.need(0), ctx.need(1), ctx.need(2)
    reduction = ctx.attr("reduction", "none")
    if reduction not in ("none", "add", "mul", "max", "min"):
        raise Unsupported(f"reduction {reduction!r}")
    if idx.rank != data.rank or upd.rank != data.rank:
        raise Unsupported("indices and updates must have the data's rank")
    if data.dtype == "bool" and reduction != "none":
        raise Unsupported(f"reduction {reduction!r} on bool")
    axis = norm_axis(int(ctx.attr("axis", 0)), data.rank)
    idx = wrapped_indices(ctx, idx, data.shape[axis])
    # out[p] = combine(data[p], updates u whose target is p): the target of update u is
    # u with axis `axis` replaced by idx[u]; so along `axis` we reduce over the update rows.
    names = ctx.indices(data.rank + 1)
    outs, k = names[: data.rank], names[data.rank]
    upd_at: list[str | ast.Expr] = list(outs)
    upd_at[axis] = k
    pos = ctx.let(
        build.call("iota", ctx.dim(data.shape[axis]), generics=[build.named_type("i64")]),
        (data.shape[axis],),
        "i64",
        "pos",
    )
    for i in range(data.rank):
        if i != axis and not ctx.equal(upd.shape[i], data.shape[i]):
            raise Unsupported("updates narrower than the data on a non-scatter axis")
    target = access(ctx, idx, upd_at)
    if idx.dtype != "i64":
        target = build.call("cast", target, generics=[build.named_type("i64")])
    hit = build.binary("==", target, access(ctx, pos, [outs[axis]]))
    _combine(ctx, data, upd, outs, [k], upd_at, hit, reduction)


@translator("ScatterND")
def scatter_nd(ctx: Context) -> None:
    data, idx, upd = ctx.need(0), ctx.need(1), ctx.need(2)
    reduction = ctx.attr("reduction", "none")
    if reduction not in ("none", "add", "mul", "max", "min"):
        raise Unsupported(f"reduction {reduction!r}")
    depth = idx.shape[-1].as_int() if idx.rank else None
    if depth is None:
        raise Unsupported("the last indices extent must be a constant")
    lead_rank = idx.rank - 1
    names = ctx.indices(data.rank + lead_rank)
    outs, rows = names[: data.rank], names[data.rank :]
    hits: list[ast.Expr] = []
    for k in range(depth):
        raw = access(ctx, idx, [*rows, build.int_lit(k)])
        extent = data.shape[k]
        pos = ctx.let(
            build.call("iota", ctx.dim(extent), generics=[build.named_type(idx.dtype)]),
            (extent,),
            idx.dtype,
            "pos",
        )
        wrapped = build.call(
            "select",
            build.binary("<", raw, build.int_lit(0)),
            build.binary(
                "+",
                raw,
                build.call("cast", ctx.dim(extent), generics=[build.named_type(idx.dtype)]),
            ),
            raw,
        )
        hits.append(build.paren(build.binary("==", wrapped, access(ctx, pos, [outs[k]]))))
    hit = hits[0]
    for h in hits[1:]:
        hit = build.binary("&", hit, h)
    upd_at: list[str | ast.Expr] = [*rows, *outs[depth:]]
    _combine(ctx, data, upd, outs, rows, upd_at, hit, reduction)


def _combine(
    ctx: Context,
    data: Value,
    upd: Value,
    outs: Sequence[str],
    over: Sequence[str],
    upd_at: Sequence[str | ast.Expr],
    hit: ast.Expr,
    reduction: str,
) -> None:
    """`out[outs] = data[outs]` combined with every update `upd[upd_at]` whose `hit` holds."""
    base = access(ctx, data, list(outs))
    value = access(ctx, upd, list(upd_at))
    if data.dtype == "bool":
        zero: ast.Expr = build.bool_lit(False)
    else:
        zero = build.float_lit(0.0) if data.dtype.startswith(("f", "b")) else build.int_lit(0)
    hits_any = build.reduction("any", list(over), hit)
    if reduction == "none":
        # Without duplicates exactly one update hits; with duplicates ONNX leaves the order open.
        if data.dtype == "bool":
            picked = build.reduction(
                "any", list(over), build.binary("&", build.paren(hit), build.paren(value))
            )
        else:
            picked = build.reduction("sum", list(over), build.call("select", hit, value, zero))
        body = build.call("select", hits_any, picked, base)
    elif reduction == "add":
        body = build.binary(
            "+", base, build.reduction("sum", list(over), build.call("select", hit, value, zero))
        )
    elif reduction == "mul":
        one = build.float_lit(1.0) if data.dtype.startswith(("f", "b")) else build.int_lit(1)
        body = build.binary(
            "*", base, build.reduction("prod", list(over), build.call("select", hit, value, one))
        )
    else:
        kind = reduction
        lowest = build.call("select", hit, value, base)
        body = build.call(kind, base, build.reduction(kind, list(over), lowest))
    tmp = ctx.comprehension(list(outs), body, data.shape, data.dtype, "scattered")
    ctx.output(0, tmp)
