"""ONNX `Slice`, `Pad`, `DepthToSpace`/`SpaceToDepth`, `Trilu`, `EyeLike`, `CenterCropPad`.

Stage: ONNX import, translation. Linnet slices take compile-time,
non-negative bounds and a positive constant step (9.3), so `Slice` clamps
ONNX's bounds at import time (negative bounds count from the end, as the
operator spec says) and writes `x[a:b:s]`; a negative step reads the
forward slice and reverses it through a position table (`iota`). Padding is
`concat` with `fill` blocks (constant mode) or a gather through a position
table computed from `iota` (edge, reflect, wrap).
"""

from __future__ import annotations

import numpy as np

from linnet.check.dims import Dim
from linnet.onnx.importer.graph import translator
from linnet.onnx.importer.ops._common import (
    elements_array,
    fold,
    norm_axis,
    symbolic_result,
)
from linnet.onnx.importer.ops.reduce import access
from linnet.onnx.importer.ops.shapes import permuted, reshaped, slice_axis
from linnet.sourcegen import build
from linnet.sourcegen.translate import Context, Unsupported
from linnet.sourcegen.values import INT_DTYPES, Value
from linnet.syntax import ast

ZERO = Dim.const(0)
_BIG = 1 << 62
"""Bounds at least this large mean "to the end" (exporters write INT64_MAX or INT32_MAX-ish)."""
_TO_END = 10**9
"""A stop at least this large on a symbolic axis means "to the end": exporters write
1e9 (tf2onnx, jax2tf), INT32_MAX or INT64_MAX for an open slice. Taking it as the
axis' end, rather than `min(stop, n)`, spares every entry a vacuous `where n ==
min(1000000000, n)`; it differs only on an axis of more than 1e9 elements."""


@translator("Slice")
def slice_(ctx: Context) -> None:
    x = ctx.need(0)
    if x.is_scalar:
        raise Unsupported("Slice of a scalar")
    if ctx.node.opset < 10:
        starts = [Dim.const(int(s)) for s in ctx.attr("starts")]
        ends = [Dim.const(int(e)) for e in ctx.attr("ends")]
        axes_raw = ctx.attr("axes", None)
        steps = [1] * len(starts)
    else:
        starts_el, ends_el = ctx.elements(1), ctx.elements(2)
        assert starts_el is not None and ends_el is not None
        starts, ends = list(starts_el), list(ends_el)
        axes_raw = ctx.ints(3)
        steps = ctx.ints(4) or [1] * len(starts)
    axes = (
        list(range(len(starts)))
        if axes_raw is None
        else [norm_axis(int(a), x.rank) for a in axes_raw]
    )
    if not len(axes) == len(starts) == len(ends) == len(steps) or len(set(axes)) != len(axes):
        raise Unsupported("starts, ends, axes and steps disagree")
    known = _known(x)
    if known is not None and all(s.as_int() is not None for s in starts + ends):
        index = [slice(None)] * x.rank
        for a, s, e, st in zip(axes, starts, ends, steps, strict=True):
            index[a] = slice(_clip_py(s.as_int()), _clip_py(e.as_int()), st)
        out = _from(ctx, known[tuple(index)], x)
        if out is not None:
            ctx.output(0, out)
            return
    value = x
    comps: list[build.Component] = [build.slice_() for _ in range(x.rank)]
    dims = list(x.shape)
    reverse: list[int] = []
    for a, s, e, st in zip(axes, starts, ends, steps, strict=True):
        if st == 0:
            raise Unsupported("step 0")
        if st > 0:
            start, stop = _forward_bounds(ctx, x.shape[a], s, e)
            comps[a] = _component(ctx, start, stop, st, x.shape[a])
            dims[a] = _extent(ctx, start, stop, st, x.shape[a])
        else:
            start, stop, count = _backward_bounds(x.shape[a], s, e, st)
            comps[a] = _component(ctx, start, stop, -st, x.shape[a])
            dims[a] = Dim.const(count)
            reverse.append(a)
    if not all(
        isinstance(c, ast.Slice) and c.start is None and c.stop is None and c.step is None
        for c in comps
    ):
        value = ctx.let(build.index(ctx.ref(x), _trim(comps)), dims, x.dtype, "sliced")
    for a in reverse:
        value = reversed_axis(ctx, value, a)
    ctx.output(0, value)


def _clip_py(v: int | None) -> int | None:
    if v is None:
        return None
    return max(min(v, _BIG), -_BIG)


def _known(x: Value) -> np.ndarray | None:
    if x.const is not None and (x.source is None or x.dtype in INT_DTYPES or x.dtype == "bool"):
        return x.const
    return elements_array(x)


def _from(ctx: Context, arr: np.ndarray, like: Value) -> Value | None:
    if arr.dtype == object:
        return symbolic_result(ctx, arr, like.dtype)
    return fold(ctx, arr, like.dtype)


def _forward_bounds(ctx: Context, extent: Dim, s: Dim, e: Dim) -> tuple[Dim, Dim]:
    """ONNX clamping for a positive step: negative bounds add the extent, then [0, extent]."""
    return _clamp(ctx, extent, s), _clamp(ctx, extent, e)


def _clamp(ctx: Context, extent: Dim, b: Dim) -> Dim:
    v = b.as_int()
    n = extent.as_int()
    if v is not None and n is not None:
        if v < 0:
            v += n
        return Dim.const(min(max(v, 0), n))
    if v is not None:
        if v >= _TO_END:
            return extent
        if v >= 0:
            return b  # the slice extent takes min(stop, extent) itself (9.3)
        # A negative bound on a symbolic axis counts from its end: assume the axis is long enough.
        if not ctx.prove(extent, ">=", Dim.const(-v)):
            ctx.require(extent, ">=", Dim.const(-v))
        return ctx.simplify(extent + v)
    # A symbolic bound (from a shape computation); it must not exceed the extent.
    if not ctx.prove(b, "<=", extent):
        ctx.require(b, "<=", extent)
    return b


def _backward_bounds(extent: Dim, s: Dim, e: Dim, step: int) -> tuple[Dim, Dim, int]:
    """For a negative step: the forward slice [start, stop) with step |step| covering the
    same elements, and their count (static extents only)."""
    n, sv, ev = extent.as_int(), s.as_int(), e.as_int()
    if n is None or sv is None or ev is None:
        raise Unsupported("a negative step needs static bounds and extent")
    picked = list(range(n))[slice(_clip_py(sv), _clip_py(ev), step)]
    if not picked:
        return ZERO, ZERO, 0
    low = picked[-1]
    high = picked[0]
    return Dim.const(low), Dim.const(high + 1), len(picked)


def _component(ctx: Context, start: Dim, stop: Dim, step: int, extent: Dim) -> ast.Slice:
    begin = None if start.as_int() == 0 else ctx.dim(start)
    end = None if ctx.equal(stop, extent) else ctx.dim(stop)
    return build.slice_(begin, end, None if step == 1 else build.int_lit(step))


def _extent(ctx: Context, start: Dim, stop: Dim, step: int, extent: Dim) -> Dim:
    """floor((min(stop, D) - start + step - 1) / step), at least 0 (9.3)."""
    top = ctx.simplify(stop.minimum(extent))
    span = ctx.simplify(top - start)
    known = span.as_int()
    if known is not None:
        return Dim.const(max(0, -(-known // step)))
    if not ctx.prove(span, ">=", ZERO):
        span = span.maximum(ZERO)
    return ctx.simplify((span + (step - 1)) // Dim.const(step))


def _trim(comps: list[build.Component]) -> list[build.Component]:
    out = list(comps)
    while (
        len(out) > 1
        and isinstance(out[-1], ast.Slice)
        and out[-1].start is None
        and out[-1].stop is None
        and out[-1].step is None
    ):
        out.pop()
    return out


def position_table(ctx: Context, extent: Dim, hint: str = "pos") -> Value:
    """`iota<i64>(extent)`: positions along one axis, for computed element accesses."""
    expr = build.call("iota", ctx.dim(extent), generics=[build.named_type("i64")])
    return ctx.let(expr, (extent,), "i64", hint)


def reversed_axis(ctx: Context, x: Value, axis: int) -> Value:
    """`x` with `axis` reversed: `y[.., i, ..] = x[.., D - 1 - pos[i], ..]`."""
    extent = x.shape[axis]
    if extent.as_int() in (0, 1):
        return x
    pos = position_table(ctx, extent)
    names = ctx.indices(x.rank)
    comps: list[str | ast.Expr] = list(names)
    comps[axis] = build.binary(
        "-", ctx.dim(ctx.simplify(extent - 1)), access(ctx, pos, [names[axis]])
    )
    return ctx.comprehension(names, access(ctx, x, comps), x.shape, x.dtype, "reversed")


# ---------------------------------------------------------------- Pad


@translator("Pad")
def pad(ctx: Context) -> None:
    x = ctx.need(0)
    mode = ctx.attr("mode", "constant")
    if ctx.node.opset < 11:
        pads = [int(p) for p in ctx.attr("pads", ctx.attr("paddings", []))]
        fill_value: ast.Expr | None = ctx.literal(float(ctx.attr("value", 0.0)), x.dtype)
        axes = list(range(x.rank))
    else:
        given = ctx.ints(1)
        if given is None:
            raise Unsupported("pads are required")
        pads = given
        value = ctx.input(2)
        fill_value = None if value is None else _scalar_of(ctx, value)
        axes_in = ctx.ints(3)
        axes = list(range(x.rank)) if axes_in is None else [norm_axis(a, x.rank) for a in axes_in]
    if len(pads) != 2 * len(axes):
        raise Unsupported(f"{len(pads)} pads for {len(axes)} axes")
    if mode not in ("constant", "edge", "reflect", "wrap"):
        raise Unsupported(f"mode {mode!r}")
    value_v = x
    for k, a in enumerate(axes):
        before, after = pads[k], pads[k + len(axes)]
        if before == 0 and after == 0:
            continue
        # Negative pads remove elements (crop) first.
        if before < 0 or after < 0:
            extent = value_v.shape[a]
            start = Dim.const(max(-before, 0))
            stop = ctx.simplify(extent - max(-after, 0))
            value_v = slice_axis(ctx, value_v, a, start, stop, "cropped")
            before, after = max(before, 0), max(after, 0)
            if before == 0 and after == 0:
                continue
        if mode == "constant":
            value_v = _pad_constant(ctx, value_v, a, before, after, fill_value)
        else:
            value_v = _pad_gather(ctx, value_v, a, before, after, mode)
    ctx.output(0, value_v)


def _scalar_of(ctx: Context, v: Value) -> ast.Expr:
    if v.const is not None:
        return ctx.literal(np.asarray(v.const).reshape(-1)[0].item(), v.dtype)
    if v.is_scalar:
        return ctx.ref(v)
    return build.index(ctx.ref(v), [build.int_lit(0)] * v.rank)


def _pad_constant(
    ctx: Context, x: Value, axis: int, before: int, after: int, value: ast.Expr | None
) -> Value:
    fill_with = value if value is not None else ctx.literal(0, x.dtype)
    parts: list[ast.Expr] = []
    dims = list(x.shape)

    def block(n: int) -> ast.Expr:
        shape = list(x.shape)
        shape[axis] = Dim.const(n)
        return build.call(
            "fill", ctx.shape_lit(shape), fill_with, generics=[build.named_type(x.dtype)]
        )

    if before:
        parts.append(block(before))
    parts.append(ctx.ref(x))
    if after:
        parts.append(block(after))
    dims[axis] = ctx.simplify(x.shape[axis] + before + after)
    expr = build.call("concat", *parts, named=[("axis", build.int_lit(axis))])
    return ctx.let(expr, dims, x.dtype, "padded")


def _pad_gather(ctx: Context, x: Value, axis: int, before: int, after: int, mode: str) -> Value:
    extent = x.shape[axis]
    n = extent.as_int()
    if n is None:
        raise Unsupported(f"{mode} padding of a symbolic axis")
    if n == 0:
        raise Unsupported(f"{mode} padding of an empty axis")
    total = n + before + after
    pos = position_table(ctx, Dim.const(total))
    p = ctx.ref(pos)
    shifted = build.binary("-", p, build.int_lit(before))
    if mode == "edge":
        index = build.call(
            "min", build.call("max", shifted, build.int_lit(0)), build.int_lit(n - 1)
        )
    elif mode == "wrap":
        # ((i - before) mod n + n) mod n, with Linnet's truncating `%`.
        index = build.binary(
            "%",
            build.paren(
                build.binary("+", build.binary("%", shifted, build.int_lit(n)), build.int_lit(n))
            ),
            build.int_lit(n),
        )
    else:
        if n == 1:
            index = build.binary("*", p, build.int_lit(0))
        else:
            if before >= n or after >= n:
                raise Unsupported("reflect padding wider than the axis")
            # Mirror without repeating the edge: n - 1 - |n - 1 - |i - before||.
            index = build.binary(
                "-",
                build.int_lit(n - 1),
                build.call(
                    "abs", build.binary("-", build.int_lit(n - 1), build.call("abs", shifted))
                ),
            )
    table = ctx.let(index, (Dim.const(total),), "i64", "source")
    names = ctx.indices(x.rank)
    comps: list[str | ast.Expr] = list(names)
    comps[axis] = access(ctx, table, [names[axis]])
    dims = list(x.shape)
    dims[axis] = Dim.const(total)
    return ctx.comprehension(names, access(ctx, x, comps), dims, x.dtype, "padded")


@translator("CenterCropPad")
def center_crop_pad(ctx: Context) -> None:
    x = ctx.need(0)
    target = ctx.ints(1)
    if target is None:
        raise Unsupported("shape is required")
    axes_attr = ctx.attr("axes", None)
    axes = (
        list(range(x.rank)) if axes_attr is None else [norm_axis(int(a), x.rank) for a in axes_attr]
    )
    if len(target) != len(axes):
        raise Unsupported("shape and axes disagree")
    value = x
    for a, want in zip(axes, target, strict=True):
        n = value.shape[a].as_int()
        if n is None:
            raise Unsupported("a symbolic axis")
        if want < n:
            start = (n - want) // 2
            value = slice_axis(ctx, value, a, Dim.const(start), Dim.const(start + want), "cropped")
        elif want > n:
            before = (want - n) // 2
            value = _pad_constant(ctx, value, a, before, want - n - before, None)
    ctx.output(0, value)


# ---------------------------------------------------------------- depth and space


@translator("DepthToSpace")
def depth_to_space(ctx: Context) -> None:
    x = ctx.need(0)
    if x.rank != 4:
        raise Unsupported("input must be [N, C, H, W]")
    b = int(ctx.attr("blocksize"))
    mode = ctx.attr("mode", "DCR")
    n, c, h, w = x.shape
    cb = ctx.simplify(c // Dim.const(b * b))
    if not ctx.equal(cb * (b * b), c):
        ctx.require(c % Dim.const(b * b), "==", ZERO)
    B = Dim.const(b)
    if mode == "DCR":
        tmp = reshaped(ctx, x, [n, B, B, cb, h, w], "blocks")
        moved = permuted(ctx, tmp, [0, 3, 4, 1, 5, 2], "moved")
    elif mode == "CRD":
        tmp = reshaped(ctx, x, [n, cb, B, B, h, w], "blocks")
        moved = permuted(ctx, tmp, [0, 1, 4, 2, 5, 3], "moved")
    else:
        raise Unsupported(f"mode {mode!r}")
    ctx.output(0, reshaped(ctx, moved, [n, cb, h * b, w * b], "spread"))


@translator("SpaceToDepth")
def space_to_depth(ctx: Context) -> None:
    x = ctx.need(0)
    if x.rank != 4:
        raise Unsupported("input must be [N, C, H, W]")
    b = int(ctx.attr("blocksize"))
    n, c, h, w = x.shape
    B = Dim.const(b)
    hb, wb = ctx.simplify(h // B), ctx.simplify(w // B)
    for d in (h, w):
        if not ctx.equal(d % B, ZERO):
            ctx.require(d % B, "==", ZERO)
    tmp = reshaped(ctx, x, [n, c, hb, B, wb, B], "blocks")
    mode = ctx.attr("mode", "DCR")
    if mode not in ("DCR", "CRD"):
        raise Unsupported(f"mode {mode!r}")
    order = [0, 3, 5, 1, 2, 4] if mode == "DCR" else [0, 1, 3, 5, 2, 4]
    moved = permuted(ctx, tmp, order, "moved")
    ctx.output(0, reshaped(ctx, moved, [n, c * (b * b), hb, wb], "stacked"))


# ---------------------------------------------------------------- masks


@translator("Trilu")
def trilu(ctx: Context) -> None:
    x = ctx.need(0)
    if x.rank < 2:
        raise Unsupported("input must have at least 2 axes")
    upper = bool(ctx.attr("upper", 1))
    k_v = ctx.input(1)
    rows, cols = x.shape[-2], x.shape[-1]
    r = position_table(ctx, rows, "rows")
    c = position_table(ctx, cols, "cols")
    names = ctx.indices(x.rank)
    offset: ast.Expr
    if k_v is None:
        offset = build.int_lit(0)
    elif k_v.const is not None:
        offset = build.int_lit(int(np.asarray(k_v.const).reshape(-1)[0]))
    else:
        offset = (
            ctx.ref(k_v)
            if k_v.is_scalar
            else build.index(ctx.ref(k_v), [build.int_lit(0)] * k_v.rank)
        )
    diff = build.binary("-", access(ctx, c, [names[-1]]), access(ctx, r, [names[-2]]))
    keep = build.binary(">=" if upper else "<=", diff, offset)
    zero = (
        build.bool_lit(False)
        if x.dtype == "bool"
        else (build.int_lit(0) if x.dtype in INT_DTYPES else build.float_lit(0.0))
    )
    body = build.call("select", keep, access(ctx, x, names), zero)
    ctx.output(0, ctx.comprehension(names, body, x.shape, x.dtype, "triangle"))


@translator("EyeLike")
def eye_like(ctx: Context) -> None:
    x = ctx.need(0)
    if x.rank != 2:
        raise Unsupported("input must be 2-D")
    code = ctx.attr("dtype", None)
    if code is None:
        dtype = x.dtype
    else:
        from linnet.onnx.importer.ops.basic import linnet_dtype

        dtype = linnet_dtype(int(code))
    k = int(ctx.attr("k", 0))
    r = position_table(ctx, x.shape[0], "rows")
    c = position_table(ctx, x.shape[1], "cols")
    i, j = ctx.indices(2)
    on = build.binary(
        "==", access(ctx, c, [j]), build.binary("+", access(ctx, r, [i]), build.int_lit(k))
    )
    body = on if dtype == "bool" else build.call("cast", on, generics=[build.named_type(dtype)])
    ctx.output(0, ctx.comprehension([i, j], body, x.shape, dtype, "eye"))


@translator("ReverseSequence")
def reverse_sequence(ctx: Context) -> None:
    x, lens = ctx.need(0), ctx.need(1)
    batch_axis = int(ctx.attr("batch_axis", 1))
    time_axis = int(ctx.attr("time_axis", 0))
    if x.rank < 2 or {batch_axis, time_axis} != {0, 1}:
        raise Unsupported("batch and time must be the first two axes")
    steps = x.shape[time_axis]
    pos = position_table(ctx, steps, "steps")
    names = ctx.indices(x.rank)
    t, b = names[time_axis], names[batch_axis]
    length = access(ctx, lens, [b])
    if lens.dtype != "i64":
        length = build.call("cast", length, generics=[build.named_type("i64")])
    p = access(ctx, pos, [t])
    flipped = build.call(
        "select",
        build.binary("<", p, length),
        build.binary("-", build.binary("-", length, build.int_lit(1)), p),
        p,
    )
    comps: list[str | ast.Expr] = list(names)
    comps[time_axis] = flipped
    ctx.output(0, ctx.comprehension(names, access(ctx, x, comps), x.shape, x.dtype, "reversed"))
