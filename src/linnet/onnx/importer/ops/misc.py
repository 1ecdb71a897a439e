"""ONNX `TopK`, window functions, `SwiGLU`, `Compress`, `Det`, `TensorScatter`.

Stage: ONNX import, translation. Operators with a fixed-size result that
index notation expresses directly:

- `TopK` ranks every element along the axis (how many elements come before it:
  larger ones, and equal ones at smaller positions, so ties keep index order
  as ONNX requires) and reads the element of each rank `< k`;
- `HannWindow`, `HammingWindow`, `BlackmanWindow` are cosine sums over
  `iota(size)` (the size must be known at import time, it is the output extent);
- `SwiGLU` is `a * sigmoid(alpha * a) * b`;
- `Compress` with a condition known at import time is a gather through the
  kept positions;
- `Det` of small matrices (n <= 4) is the Leibniz sum over permutations;
- `TensorScatter` writes an update into a cache at per-batch positions
  (linear or circular), the KV-cache write of decoder graphs.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from linnet.check.dims import Dim
from linnet.onnx.importer.graph import translator
from linnet.onnx.importer.ops._common import FLOAT_DTYPES, cast, norm_axis
from linnet.onnx.importer.ops.basic import linnet_dtype
from linnet.onnx.importer.ops.reduce import access
from linnet.onnx.importer.ops.slicing import position_table
from linnet.sourcegen import build
from linnet.sourcegen.translate import Context, Unsupported
from linnet.sourcegen.values import Value
from linnet.syntax import ast


@translator("TopK")
def top_k(ctx: Context) -> None:
    x = ctx.need(0)
    if x.dtype == "bool" or x.is_scalar:
        raise Unsupported(f"TopK of {x.dtype}")
    if ctx.node.opset < 10:
        k = int(ctx.attr("k"))
    else:
        given = ctx.ints(1)
        if given is None or len(given) != 1:
            raise Unsupported("k must be one constant")
        k = given[0]
    axis = norm_axis(int(ctx.attr("axis", -1)), x.rank)
    largest = bool(ctx.attr("largest", 1))
    extent = x.shape[axis]
    n = extent.as_int()
    if n is not None and k > n:
        raise Unsupported(f"k = {k} exceeds the axis extent {n}")
    pos = position_table(ctx, extent)
    names = ctx.indices(x.rank + 1)
    outs, j = names[: x.rank], names[x.rank]
    other = list[str | ast.Expr](outs)
    other[axis] = j
    mine, theirs = access(ctx, x, outs), access(ctx, x, other)
    before = build.binary(">" if largest else "<", theirs, mine)
    tie = build.binary(
        "&",
        build.paren(build.binary("==", theirs, mine)),
        build.paren(build.binary("<", access(ctx, pos, [j]), access(ctx, pos, [outs[axis]]))),
    )
    ahead = cast(build.binary("|", build.paren(before), build.paren(tie)), "i64")
    rank = ctx.comprehension(outs, build.reduction("sum", [j], ahead), x.shape, "i64", "rank")
    slots = position_table(ctx, Dim.const(k), "slot")
    dims = list(x.shape)
    dims[axis] = Dim.const(k)
    names2 = ctx.indices(x.rank + 1)
    outs2, i = names2[: x.rank], names2[x.rank]
    src = list[str | ast.Expr](outs2)
    src[axis] = i
    hit = build.binary("==", access(ctx, rank, src), access(ctx, slots, [outs2[axis]]))
    zero = build.float_lit(0.0) if x.dtype in FLOAT_DTYPES else build.int_lit(0)
    value = build.reduction("sum", [i], build.call("select", hit, access(ctx, x, src), zero))
    ctx.output(0, ctx.comprehension(outs2, value, dims, x.dtype, "top_values"))
    if ctx.n_outputs > 1 and ctx.node.outputs[1]:
        index = build.reduction(
            "sum", [i], build.call("select", hit, access(ctx, pos, [i]), build.int_lit(0))
        )
        ctx.output(1, ctx.comprehension(outs2, index, dims, "i64", "top_indices"))


_WINDOWS = {
    "HannWindow": [0.5, -0.5],
    "HammingWindow": [25 / 46, -21 / 46],
    "BlackmanWindow": [0.42, -0.5, 0.08],
}


@translator(*_WINDOWS)
def window(ctx: Context) -> None:
    size = ctx.elements(0)
    if size is None or len(size) != 1 or size[0].as_int() is None:
        raise Unsupported("the size must be known at import time")
    n = int(size[0].as_int() or 0)
    dtype = linnet_dtype(int(ctx.attr("output_datatype", 1)))
    periodic = bool(ctx.attr("periodic", 1))
    span = n if periodic else n - 1
    if dtype not in FLOAT_DTYPES:
        raise Unsupported(f"a window of {dtype}")
    wide = "f64" if dtype == "f64" else "f32"
    at = ctx.let(
        cast(build.call("iota", build.int_lit(n), generics=[build.named_type("i64")]), wide),
        (Dim.const(n),),
        wide,
        "at",
    )
    step = 2 * math.pi / span if span else 0.0
    expr: ast.Expr = build.float_lit(_WINDOWS[ctx.node.op][0])
    for m, coeff in enumerate(_WINDOWS[ctx.node.op][1:], start=1):
        wave = build.call("cos", build.binary("*", ctx.ref(at), build.float_lit(step * m)))
        term = build.binary("*", build.float_lit(abs(coeff)), wave)
        expr = build.binary("-" if coeff < 0 else "+", expr, term)
    out = ctx.let(expr, (Dim.const(n),), wide, "window")
    if wide != dtype:
        out = ctx.let(cast(ctx.ref(out), dtype), out.shape, dtype, "window")
    ctx.output(0, out)


@translator("SwiGLU")
def swiglu(ctx: Context) -> None:
    a, b = ctx.need(0), ctx.need(1)
    if a.dtype not in FLOAT_DTYPES or a.dtype != b.dtype:
        raise Unsupported(f"SwiGLU of {a.dtype}")
    if a.rank != b.rank or not all(ctx.equal(x, y) for x, y in zip(a.shape, b.shape, strict=True)):
        raise Unsupported("inputs of different shapes")
    alpha = float(ctx.attr("alpha", 1.0))
    if alpha == 1.0:
        gate = build.call(ctx.std("nn.activations", "silu"), ctx.ref(a))
    else:
        sig = ctx.std("nn.activations", "sigmoid")
        gate = build.binary(
            "*", ctx.ref(a), build.call(sig, build.binary("*", build.float_lit(alpha), ctx.ref(a)))
        )
    ctx.output(0, ctx.let(build.binary("*", gate, ctx.ref(b)), a.shape, a.dtype, "swiglu"))


@translator("Compress")
def compress(ctx: Context) -> None:
    x, cond = ctx.need(0), ctx.need(1)
    if cond.const is None:
        raise Unsupported("the condition decides the output shape, so it must be a constant")
    keep = np.flatnonzero(np.asarray(cond.const).reshape(-1).astype(bool))
    axis_attr = ctx.attr("axis", None)
    value = x
    if axis_attr is None:
        from linnet.onnx.importer.ops.shapes import reshaped

        total = 1
        for d in x.shape:
            v = d.as_int()
            if v is None:
                raise Unsupported("a symbolic extent")
            total *= v
        value = reshaped(ctx, x, [Dim.const(total)], "flat")
        axis = 0
    else:
        axis = norm_axis(int(axis_attr), x.rank)
    n = value.shape[axis].as_int()
    if n is None or (keep.size and keep[-1] >= n):
        raise Unsupported("the condition is longer than the axis")
    table = ctx.constant(keep.astype(np.int64))
    names = ctx.indices(value.rank)
    comps = list[str | ast.Expr](names)
    comps[axis] = access(ctx, table, [names[axis]])
    dims = list(value.shape)
    dims[axis] = Dim.const(int(keep.size))
    if keep.size == 0:
        raise Unsupported("an empty selection")
    ctx.output(0, ctx.comprehension(names, access(ctx, value, comps), dims, x.dtype, "kept"))


@translator("Det")
def det(ctx: Context) -> None:
    x = ctx.need(0)
    if x.dtype not in FLOAT_DTYPES or x.rank < 2:
        raise Unsupported(f"Det of {x.dtype}")
    n = x.shape[-1].as_int()
    if n is None or x.shape[-2].as_int() != n or n > 4 or n < 1:
        raise Unsupported("Det of matrices larger than 4x4 or symbolic")
    lead = ctx.indices(x.rank - 2)
    total: ast.Expr | None = None
    for perm in itertools.permutations(range(n)):
        sign = _parity(perm)
        term: ast.Expr | None = None
        for row, col in enumerate(perm):
            e = access(ctx, x, [*lead, build.int_lit(row), build.int_lit(col)])
            term = e if term is None else build.binary("*", term, e)
        assert term is not None
        if total is None:
            total = term if sign > 0 else build.unary("-", build.paren(term))
        else:
            total = build.binary("+" if sign > 0 else "-", total, term)
    assert total is not None
    if lead:
        ctx.output(0, ctx.comprehension(lead, total, x.shape[:-2], x.dtype, "det"))
    else:
        ctx.output(0, ctx.let(total, (), x.dtype, "det"))


def _parity(perm: tuple[int, ...]) -> int:
    sign = 1
    seen = list(perm)
    for i in range(len(seen)):
        while seen[i] != i:
            j = seen[i]
            seen[i], seen[j] = seen[j], seen[i]
            sign = -sign
    return sign


@translator("TensorScatter")
def tensor_scatter(ctx: Context) -> None:
    past, update, where = ctx.need(0), ctx.need(1), ctx.input(2)
    mode = str(ctx.attr("mode", "linear"))
    if mode not in ("linear", "circular"):
        raise Unsupported(f"mode {mode!r}")
    if past.rank != update.rank or past.dtype != update.dtype or past.rank < 2:
        raise Unsupported("the update must match the cache's rank and dtype")
    axis = norm_axis(int(ctx.attr("axis", -2)), past.rank)
    if axis == 0:
        raise Unsupported("the sequence axis cannot be the batch axis")
    size, steps = past.shape[axis], update.shape[axis]
    names = ctx.indices(past.rank)
    pos = position_table(ctx, size, "slot")
    start: ast.Expr = build.int_lit(0)
    if where is not None:
        start = access(ctx, where, [names[0]])
        if where.dtype != "i64":
            start = cast(start, "i64")
    offset = build.binary("-", access(ctx, pos, [names[axis]]), start)
    if mode == "circular":
        # (slot - start) mod size, non-negative (Linnet's `%` truncates).
        m = ctx.dim(size)
        offset = build.binary(
            "%", build.paren(build.binary("+", build.binary("%", offset, m), m)), m
        )
    fresh = build.binary(
        "&",
        build.paren(build.binary(">=", offset, build.int_lit(0))),
        build.paren(build.binary("<", offset, ctx.dim(steps))),
    )
    src = list[str | ast.Expr](names)
    clamp = build.call(
        "min",
        build.call("max", offset, build.int_lit(0)),
        build.binary("-", ctx.dim(steps), build.int_lit(1)),
    )
    src[axis] = clamp
    if steps.as_int() == 0:
        ctx.output(0, past)
        return
    body = build.call("select", fresh, access(ctx, update, src), access(ctx, past, names))
    ctx.output(0, ctx.comprehension(names, body, past.shape, past.dtype, "cache"))


@translator("AffineGrid")
def affine_grid(ctx: Context) -> None:
    theta = ctx.need(0)
    size = ctx.ints(1)
    if size is None or len(size) not in (4, 5) or theta.dtype not in FLOAT_DTYPES:
        raise Unsupported("size must be a constant [N, C, H, W] or [N, C, D, H, W]")
    spatial = size[2:]
    if theta.rank != 3 or theta.shape[1].as_int() != len(spatial):
        raise Unsupported("theta must be [N, 2, 3] or [N, 3, 4]")
    align = bool(ctx.attr("align_corners", 0))
    T = theta.dtype
    coords: list[Value] = []
    for extent in spatial:
        at = cast(build.call("iota", build.int_lit(extent), generics=[build.named_type("i64")]), T)
        if align:
            step = 2.0 / (extent - 1) if extent > 1 else 0.0
            expr = build.binary(
                "-", build.binary("*", at, build.float_lit(step)), build.float_lit(1.0)
            )
        else:
            expr = build.binary(
                "-",
                build.binary(
                    "*", build.binary("+", at, build.float_lit(0.5)), build.float_lit(2.0 / extent)
                ),
                build.float_lit(1.0),
            )
        coords.append(ctx.let(expr, (Dim.const(extent),), T, "coords"))
    names = ctx.indices(len(spatial) + 2)
    n, axes, i = names[0], names[1:-1], names[-1]
    # The homogeneous base point is (x, y[, z], 1): the last spatial axis first.
    terms: list[ast.Expr] = []
    for j, (coord, axis_name) in enumerate(zip(reversed(coords), reversed(axes), strict=True)):
        terms.append(
            build.binary(
                "*", access(ctx, theta, [n, i, build.int_lit(j)]), access(ctx, coord, [axis_name])
            )
        )
    terms.append(access(ctx, theta, [n, i, build.int_lit(len(spatial))]))
    body = terms[0]
    for term in terms[1:]:
        body = build.binary("+", body, term)
    dims = [theta.shape[0], *(Dim.const(s) for s in spatial), Dim.const(len(spatial))]
    ctx.output(0, ctx.comprehension([n, *axes, i], body, dims, T, "grid"))
