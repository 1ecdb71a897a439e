"""ONNX `Resize` and `Upsample` -> `std.nn.resize` or per-axis interpolation tables.

Stage: ONNX import, translation. Resizing is separable: each resized axis
maps its output positions to input positions with weights that depend only
on the extents and the attributes (mode, coordinate transformation, nearest
rounding, cubic coefficient, `exclude_outside`, antialiasing). Those tables
are computed here at import time with NumPy, following the operator spec
(the formulas of ONNX's reference implementation), and the generated code
applies them: a nearest resize is a gather through an index table
(`x[n, c, rows[i], cols[j]]`), a linear or cubic one a sum over a weight
table per axis. An integer-factor nearest upsample of `[N, C, H, W]` whose
table is `i / scale` calls `std.nn.resize::upsample_nearest2d`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from linnet.check.dims import Dim
from linnet.onnx.importer.graph import translator
from linnet.onnx.importer.ops._common import FLOAT_DTYPES
from linnet.onnx.importer.ops.reduce import access
from linnet.sourcegen import build
from linnet.sourcegen.translate import Context, Unsupported
from linnet.sourcegen.values import Value
from linnet.syntax import ast

Coeffs = Callable[[float, float], np.ndarray]


def _nearest(mode: str) -> Coeffs:
    def coeffs(ratio: float, scale: float) -> np.ndarray:
        if float(ratio).is_integer():
            return np.array([0.0, 1.0])
        table = {
            "round_prefer_floor": [ratio <= 0.5, ratio > 0.5],
            "round_prefer_ceil": [ratio < 0.5, ratio >= 0.5],
            "floor": [1, 0],
            "ceil": [0, 1],
        }
        if mode not in table:
            raise Unsupported(f"nearest_mode {mode!r}")
        out: np.ndarray = np.array(table[mode], dtype=np.float64)
        return out

    return coeffs


def _linear(antialias: bool) -> Coeffs:
    def coeffs(ratio: float, scale: float) -> np.ndarray:
        if not antialias:
            return np.array([1 - ratio, ratio])
        s = min(scale, 1.0)
        start = int(np.floor(-1 / s) + 1)
        args = (np.arange(start, start + 2 - 2 * start) - ratio) * s
        c: np.ndarray = np.clip(1 - np.abs(args), 0, 1)
        return np.asarray(c / float(c.sum()))

    return coeffs


def _cubic(a: float, antialias: bool) -> Coeffs:
    def kernel(x: float) -> float:
        x = abs(x)
        if x <= 1:
            return (a + 2) * x**3 - (a + 3) * x**2 + 1
        if x < 2:
            return a * x**3 - 5 * a * x**2 + 8 * a * x - 4 * a
        return 0.0

    def coeffs(ratio: float, scale: float) -> np.ndarray:
        if not antialias:
            return np.array(
                [kernel(ratio + 1), kernel(ratio), kernel(1 - ratio), kernel(2 - ratio)]
            )
        s = min(scale, 1.0)
        start = int(np.floor(-2 / s) + 1)
        c = np.array([kernel(s * (i - ratio)) for i in range(start, 2 - start)])
        return np.asarray(c / float(c.sum()))

    return coeffs


def axis_table(
    size: int,
    out: int,
    scale: float,
    coeffs: Coeffs,
    coord: str,
    roi: tuple[float, float] | None,
    exclude_outside: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """Weights `[out, size]` of one resized axis and the mask of extrapolated outputs."""
    y = np.arange(out, dtype=np.float64)
    width = scale * size
    extrapolated = np.zeros(out, dtype=bool)
    if coord == "align_corners":
        x = np.zeros(out) if width == 1 else y * (size - 1) / (width - 1)
    elif coord == "asymmetric":
        x = y / scale
    elif coord == "tf_crop_and_resize":
        if roi is None:
            raise Unsupported("tf_crop_and_resize needs roi")
        lo, hi = roi
        x = (
            np.full(out, (hi - lo) * (size - 1) / 2)
            if width == 1
            else y * (hi - lo) * (size - 1) / (width - 1)
        )
        x = x + lo * (size - 1)
        extrapolated = (x < 0) | (x > size - 1)
    elif coord == "pytorch_half_pixel":
        x = np.full(out, -0.5) if width == 1 else (y + 0.5) / scale - 0.5
    elif coord == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif coord == "half_pixel_symmetric":
        offset = size / 2 * (1 - out / width)
        x = offset + (y + 0.5) / scale - 0.5
    else:
        raise Unsupported(f"coordinate_transformation_mode {coord!r}")
    weights = np.zeros((out, size), dtype=np.float64)
    for o in range(out):
        base = math.floor(x[o])
        ratio = 1.0 if x[o] == base else x[o] - base
        c = np.asarray(coeffs(float(ratio), scale), dtype=np.float64)
        n = len(c)
        pad = math.ceil(n / 2)
        xp = x[o] + pad
        p = math.floor(xp)
        frac = xp - p
        if n % 2 == 0:
            start = p - n // 2 if frac == 0 else p - n // 2 + 1
        else:
            start = p - (n - 1) // 2 + (0 if frac <= 0.5 else 1)
        idx = np.arange(start, start + n) - pad
        if exclude_outside:
            c = np.where((idx < 0) | (idx >= size), 0.0, c)
            total = c.sum()
            c = c / (total if total != 0 else 1.0)
        for k, i in zip(np.clip(idx, 0, size - 1), c, strict=True):
            weights[o, int(k)] += i
    return weights, extrapolated


@translator("Resize", "Upsample")
def resize(ctx: Context) -> None:
    x = ctx.need(0)
    if x.dtype not in FLOAT_DTYPES:
        raise Unsupported(f"{ctx.node.op} of {x.dtype}")
    # Axes that are not resized may be symbolic (a batch); -1 marks them.
    shape = [-1 if d.as_int() is None else int(d.as_int() or 0) for d in x.shape]
    op, opset = ctx.node.op, ctx.node.opset
    mode = str(ctx.attr("mode", "nearest"))
    roi_arr: np.ndarray | None = None
    scales: list[float] | None = None
    sizes: list[int] | None = None
    if op == "Upsample":
        coord, nearest_mode = "asymmetric", "floor"
        raw = ctx.attr("scales", None) if opset < 9 else ctx.const(1)
        if raw is None:
            raise Unsupported("scales are required")
        scales = [float(s) for s in np.asarray(raw).reshape(-1)]
    else:
        coord = str(
            ctx.attr("coordinate_transformation_mode", "asymmetric" if opset < 11 else "half_pixel")
        )
        nearest_mode = str(
            ctx.attr("nearest_mode", "round_prefer_floor" if opset >= 11 else "floor")
        )
        if opset < 11:
            scales = [float(s) for s in np.asarray(ctx.const(1)).reshape(-1)]
        else:
            roi_in = ctx.input(1)
            if roi_in is not None and roi_in.const is not None and roi_in.const.size:
                roi_arr = roi_in.const.astype(np.float64).reshape(-1)
            elif roi_in is not None and roi_in.const is None:
                raise Unsupported("roi must be a constant")
            s_in, z_in = ctx.input(2), ctx.input(3)
            if s_in is not None and s_in.const is not None and s_in.const.size:
                scales = [float(s) for s in s_in.const.reshape(-1)]
            elif z_in is not None:
                z = ctx.ints(3)
                assert z is not None
                sizes = z
            else:
                raise Unsupported("scales or sizes must be constants")
    if mode == "linear" or mode == "bilinear":
        coeffs = _linear(bool(ctx.attr("antialias", 0)))
    elif mode == "cubic":
        coeffs = _cubic(float(ctx.attr("cubic_coeff_a", -0.75)), bool(ctx.attr("antialias", 0)))
    elif mode == "nearest":
        if ctx.attr("antialias", 0):
            raise Unsupported("antialias with nearest")
        coeffs = _nearest(nearest_mode)
    else:
        raise Unsupported(f"mode {mode!r}")
    rank = len(shape)
    axes = [int(a) + (rank if int(a) < 0 else 0) for a in ctx.attr("axes", list(range(rank)))]
    full_scales, full_sizes, full_roi = _per_axis(ctx, shape, axes, scales, sizes, roi_arr)
    exclude = bool(ctx.attr("exclude_outside", 0))
    extrapolation = float(ctx.attr("extrapolation_value", 0.0))
    tables: list[tuple[int, np.ndarray, np.ndarray]] = []
    for a in range(rank):
        scale, out = full_scales[a], full_sizes[a]
        roi = None if full_roi is None else (full_roi[a], full_roi[a + rank])
        identity = (
            math.isclose(scale, 1.0)
            and out == shape[a]
            and (roi is None or (roi[0] == 0 and roi[1] == 1))
        )
        if identity:
            continue
        w, extra = axis_table(shape[a], out, scale, coeffs, coord, roi, exclude)
        tables.append((a, w, extra))
    value = x
    if mode == "nearest" and _std_upsample(ctx, x, tables, shape):
        return
    for a, w, extra in tables:
        value = _apply(ctx, value, a, w, extra, extrapolation, mode == "nearest")
    ctx.output(0, value)


def _per_axis(
    ctx: Context,
    shape: list[int],
    axes: list[int],
    scales: list[float] | None,
    sizes: list[int] | None,
    roi: np.ndarray | None,
) -> tuple[list[float], list[int], list[float] | None]:
    rank = len(shape)
    full_roi: list[float] | None = None
    if roi is not None:
        if len(roi) == 2 * rank and len(axes) == rank:
            full_roi = [float(r) for r in roi]
        else:
            full_roi = [0.0] * rank + [1.0] * rank
            n = len(axes)
            for i, a in enumerate(axes):
                full_roi[a], full_roi[rank + a] = float(roi[i]), float(roi[n + i])
    if scales is not None:
        if len(scales) != len(axes):
            raise Unsupported("one scale per axis is required")
        full = [1.0] * rank
        for s, a in zip(scales, axes, strict=True):
            full[a] = s
        if any(s <= 0 for s in full):
            raise Unsupported("non-positive scales")
        _static_where_resized(shape, full)
        out_sizes = [n if s == 1.0 else math.floor(s * n) for s, n in zip(full, shape, strict=True)]
        return full, out_sizes, full_roi
    assert sizes is not None
    if len(sizes) != len(axes):
        raise Unsupported("one size per axis is required")
    out = list(shape)
    for z, a in zip(sizes, axes, strict=True):
        if shape[a] < 0:
            raise Unsupported("a size for a symbolic extent")
        out[a] = int(z)
    full = [o / n if n > 0 else 1.0 for o, n in zip(out, shape, strict=True)]
    policy = str(ctx.attr("keep_aspect_ratio_policy", "stretch"))
    if policy != "stretch":
        picked = [full[a] for a in axes]
        if policy == "not_larger":
            scale = min(picked)
        elif policy == "not_smaller":
            scale = max(picked)
        else:
            raise Unsupported(f"keep_aspect_ratio_policy {policy!r}")
        full = [scale if a in axes else 1.0 for a in range(rank)]
        out = [int(scale * shape[a] + 0.5) if a in axes else shape[a] for a in range(rank)]
    _static_where_resized(shape, full)
    return full, out, full_roi


def _static_where_resized(shape: list[int], scales: list[float]) -> None:
    for n, s in zip(shape, scales, strict=True):
        if n < 0 and s != 1.0:
            raise Unsupported("a resized extent must be a constant extent")


def _std_upsample(
    ctx: Context, x: Value, tables: list[tuple[int, np.ndarray, np.ndarray]], shape: list[int]
) -> bool:
    if x.rank != 4 or [a for a, _, _ in tables] != [2, 3]:
        return False
    factors: list[int] = []
    for _a, w, extra in tables:
        out, size = w.shape
        if out % size or extra.any():
            return False
        s = out // size
        expected = np.zeros_like(w)
        expected[np.arange(out), np.arange(out) // s] = 1.0
        if not np.array_equal(w, expected):
            return False
        factors.append(s)
    if factors[0] != factors[1]:
        return False
    fn = ctx.std("nn.resize", "upsample_nearest2d")
    gens: list[ast.Expr | ast.NamedType] = [ctx.dim(d) for d in x.shape]
    gens += [build.int_lit(factors[0]), build.named_type(x.dtype)]
    dims = [
        x.shape[0],
        x.shape[1],
        Dim.const(shape[2] * factors[0]),
        Dim.const(shape[3] * factors[0]),
    ]
    ctx.output(0, ctx.let(build.call(fn, ctx.ref(x), generics=gens), dims, x.dtype, "upsampled"))
    return True


def _apply(
    ctx: Context, x: Value, axis: int, w: np.ndarray, extra: np.ndarray, fill: float, nearest: bool
) -> Value:
    out = w.shape[0]
    dims = list(x.shape)
    dims[axis] = Dim.const(out)
    names = ctx.indices(x.rank + 1)
    outs, k = names[: x.rank], names[x.rank]
    if nearest and bool(np.all(np.sum(w > 0, axis=1) <= 1)):
        index = ctx.constant(np.argmax(w, axis=1).astype(np.int64))
        comps: list[str | ast.Expr] = list(outs)
        comps[axis] = access(ctx, index, [outs[axis]])
        body: ast.Expr = access(ctx, x, comps)
    else:
        table = ctx.constant(
            w.astype(np.float64 if x.dtype == "f64" else np.float32).astype(
                np.float16 if x.dtype == "f16" else (np.float64 if x.dtype == "f64" else np.float32)
            )
        )
        if x.dtype == "bf16":
            raise Unsupported("interpolation of bf16")
        comps = list(outs)
        comps[axis] = k
        term = build.binary("*", access(ctx, x, comps), access(ctx, table, [outs[axis], k]))
        body = build.reduction("sum", [k], term)
    if extra.any():
        mask = ctx.constant(extra)
        body = build.call("select", access(ctx, mask, [outs[axis]]), build.float_lit(fill), body)
    return ctx.comprehension(outs, body, dims, x.dtype, "resized")
