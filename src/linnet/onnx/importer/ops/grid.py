"""ONNX `GridSample` -> per-axis sample positions and weights, then one weighted gather.

Stage: ONNX import, translation. For each spatial axis the grid's normalised
coordinate is mapped to a pixel position (`align_corners`), rounded for
`nearest`, brought back inside the image for `border` (clamp) and
`reflection` (mirrored at the borders, as often as needed) padding, and split
into taps: one for nearest, two for linear, four for cubic (Keys, a = -0.75)
with their weights. The output is the sum over every combination of taps of
the product of the axes' weights times the input read at those taps (a tap
outside the image reads zero with `zeros` padding, the border pixel with
`border`, the mirrored pixel with `reflection`), as ONNX's definition
computes it. Positions and weights are f32 (f64 for f64 inputs).
"""

from __future__ import annotations

import itertools

from linnet.check.dims import Dim
from linnet.onnx.importer.graph import translator
from linnet.onnx.importer.ops._common import FLOAT_DTYPES, cast
from linnet.onnx.importer.ops.reduce import access
from linnet.onnx.importer.ops.unary import rounded
from linnet.sourcegen import build
from linnet.sourcegen.translate import Context, Unsupported
from linnet.sourcegen.values import Value
from linnet.syntax import ast

F = build.float_lit
_CUBIC = -0.75


def _reflect(ctx: Context, v: Value, low: float, high: float) -> Value:
    """`v` mirrored into `[low, high]` at its borders (ONNX GridSample reflection)."""
    span = high - low
    x = ctx.ref(v)
    if span <= 0:
        return ctx.let(build.binary("*", x, F(0.0)), v.shape, v.dtype, "reflected")
    below = ctx.let(build.binary("-", F(low), x), v.shape, v.dtype, "below")
    above = ctx.let(build.binary("-", x, F(high)), v.shape, v.dtype, "above")
    out = x
    for dist, near, far in ((below, low, high), (above, high, low)):
        d = ctx.ref(dist)
        turns = ctx.let(cast(build.binary("/", d, F(span)), "i64"), v.shape, "i64", "turns")
        rest = build.binary("-", d, build.binary("*", cast(ctx.ref(turns), v.dtype), F(span)))
        even = build.binary(
            "==", build.binary("%", ctx.ref(turns), build.int_lit(2)), build.int_lit(0)
        )
        sign = "+" if near < far else "-"
        mirrored = build.call(
            "select",
            even,
            build.binary(sign, F(near), rest),
            build.binary("-" if sign == "+" else "+", F(far), rest),
        )
        out = build.call("select", build.binary(">", d, F(0.0)), mirrored, out)
    return ctx.let(out, v.shape, v.dtype, "reflected")


def _cubic_weight(t: ast.Expr, k: int) -> ast.Expr:
    """Keys' cubic convolution weight of tap `k` (0..3) at fractional offset `t`."""
    a = _CUBIC
    if k == 0:
        s = build.paren(build.binary("+", t, F(1.0)))
        return build.binary(
            "-",
            build.binary(
                "*",
                build.paren(
                    build.binary(
                        "+",
                        build.binary(
                            "*",
                            build.paren(build.binary("-", build.binary("*", F(a), s), F(5 * a))),
                            s,
                        ),
                        F(8 * a),
                    )
                ),
                s,
            ),
            F(4 * a),
        )
    if k == 1:
        return build.binary(
            "+",
            build.binary(
                "*",
                build.binary(
                    "*", build.paren(build.binary("-", build.binary("*", F(a + 2), t), F(a + 3))), t
                ),
                t,
            ),
            F(1.0),
        )
    if k == 2:
        s = build.paren(build.binary("-", F(1.0), t))
        return build.binary(
            "+",
            build.binary(
                "*",
                build.binary(
                    "*", build.paren(build.binary("-", build.binary("*", F(a + 2), s), F(a + 3))), s
                ),
                s,
            ),
            F(1.0),
        )
    s = build.paren(build.binary("-", F(2.0), t))
    return build.binary(
        "-",
        build.binary(
            "*",
            build.paren(
                build.binary(
                    "+",
                    build.binary(
                        "*", build.paren(build.binary("-", build.binary("*", F(a), s), F(5 * a))), s
                    ),
                    F(8 * a),
                )
            ),
            s,
        ),
        F(4 * a),
    )


@translator("GridSample")
def grid_sample(ctx: Context) -> None:
    x, grid = ctx.need(0), ctx.need(1)
    if x.dtype not in FLOAT_DTYPES or grid.dtype not in FLOAT_DTYPES or x.rank < 3:
        raise Unsupported("input [N, C, ...] and a float grid")
    mode = str(ctx.attr("mode", "linear" if ctx.node.opset >= 20 else "bilinear"))
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    padding = str(ctx.attr("padding_mode", "zeros"))
    align = bool(ctx.attr("align_corners", 0))
    if mode not in ("nearest", "linear", "cubic") or padding not in (
        "zeros",
        "border",
        "reflection",
    ):
        raise Unsupported(f"mode {mode!r} with padding {padding!r}")
    n_sp = x.rank - 2
    sizes = [d.as_int() for d in x.shape[2:]]
    if any(s is None for s in sizes) or grid.rank != n_sp + 2 or grid.shape[-1].as_int() != n_sp:
        raise Unsupported("static spatial extents and a grid [N, ..., spatial rank]")
    wide = "f64" if x.dtype == "f64" else "f32"
    out_sp = list(grid.shape[1:-1])
    gshape = (grid.shape[0], *out_sp)
    taps_per_axis: list[list[tuple[Value, Value, Value | None]]] = []
    for axis, size in enumerate(s for s in sizes if s is not None):
        names = ctx.indices(n_sp + 1)
        raw = access(ctx, grid, [*names, build.int_lit(n_sp - 1 - axis)])
        raw = raw if grid.dtype == wide else cast(raw, wide)
        if align:
            pos_expr = build.binary("*", build.binary("+", raw, F(1.0)), F((size - 1) / 2.0))
        else:
            pos_expr = build.binary(
                "/",
                build.binary(
                    "-",
                    build.binary("*", build.paren(build.binary("+", raw, F(1.0))), F(float(size))),
                    F(1.0),
                ),
                F(2.0),
            )
        pos = ctx.comprehension(names, pos_expr, gshape, wide, "position")
        if mode == "nearest":
            pos = rounded(ctx, pos)
        low, high = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
        if padding == "border":
            outside = build.binary(
                "|",
                build.paren(build.binary("<", ctx.ref(pos), F(low))),
                build.paren(build.binary(">", ctx.ref(pos), F(high))),
            )
            clamped = build.call("min", build.call("max", ctx.ref(pos), F(0.0)), F(size - 1.0))
            pos = ctx.let(
                build.call("select", outside, clamped, ctx.ref(pos)), gshape, wide, "position"
            )
        elif padding == "reflection":
            pos = _reflect(ctx, pos, low, high)
        taps_per_axis.append(_taps(ctx, pos, mode, size, padding, low, high, gshape, wide))
    names = ctx.indices(x.rank)
    nb, c, spatial = names[0], names[1], names[2:]
    terms: list[ast.Expr] = []
    for combo in itertools.product(*taps_per_axis):
        weight: ast.Expr | None = None
        index: list[str | ast.Expr] = [nb, c]
        valid: ast.Expr | None = None
        for w, i, ok in combo:
            term = access(ctx, w, [nb, *spatial])
            weight = term if weight is None else build.binary("*", weight, term)
            index.append(access(ctx, i, [nb, *spatial]))
            if ok is not None:
                test = access(ctx, ok, [nb, *spatial])
                valid = (
                    test
                    if valid is None
                    else build.binary("&", build.paren(valid), build.paren(test))
                )
        read: ast.Expr = access(ctx, x, index)
        if x.dtype != wide:
            read = cast(read, wide)
        if valid is not None:
            read = build.call("select", valid, read, F(0.0))
        assert weight is not None
        terms.append(build.binary("*", weight, read))
    body = terms[0]
    for t in terms[1:]:
        body = build.binary("+", body, t)
    dims = [x.shape[0], x.shape[1], *out_sp]
    out = ctx.comprehension(names, body, dims, wide, "sampled")
    if wide != x.dtype:
        out = ctx.let(cast(ctx.ref(out), x.dtype), dims, x.dtype, "sampled")
    ctx.output(0, out)


def _taps(
    ctx: Context, pos: Value, mode: str, size: int, padding: str, low: float, high: float,
    shape: tuple[Dim, ...], wide: str,
) -> list[tuple[Value, Value, Value | None]]:  # fmt: skip
    """(weight, index, in-range mask or None) of each tap along one axis."""
    p = ctx.ref(pos)
    if mode == "nearest":
        offsets, base = [0], ctx.let(cast(p, "i64"), shape, "i64", "tap")
        frac = None
    else:
        floor = rounded(ctx, pos, "floor")
        base = ctx.let(cast(ctx.ref(floor), "i64"), shape, "i64", "tap")
        frac = ctx.let(build.binary("-", p, ctx.ref(floor)), shape, wide, "frac")
        offsets = [0, 1] if mode == "linear" else [-1, 0, 1, 2]
    out: list[tuple[Value, Value, Value | None]] = []
    for k, off in enumerate(offsets):
        raw = ctx.let(
            build.binary("+", ctx.ref(base), build.int_lit(off)) if off else ctx.ref(base),
            shape,
            "i64",
            "tap",
        )
        if frac is None:
            weight = ctx.let(
                build.call("fill", ctx.shape_lit(shape), F(1.0), generics=[build.named_type(wide)]),
                shape,
                wide,
                "weight",
            )
        elif mode == "linear":
            w = build.binary("-", F(1.0), ctx.ref(frac)) if k == 0 else ctx.ref(frac)
            weight = ctx.let(w, shape, wide, "weight")
        else:
            weight = ctx.let(_cubic_weight(ctx.ref(frac), k), shape, wide, "weight")
        r = ctx.ref(raw)
        ok: Value | None = None
        if padding == "zeros":
            inside = build.binary(
                "&",
                build.paren(build.binary(">=", r, build.int_lit(0))),
                build.paren(build.binary("<", r, build.int_lit(size))),
            )
            ok = ctx.let(inside, shape, "bool", "inside")
            index = ctx.let(
                build.call("min", build.call("max", r, build.int_lit(0)), build.int_lit(size - 1)),
                shape,
                "i64",
                "index",
            )
        elif padding == "border":
            index = ctx.let(
                build.call("min", build.call("max", r, build.int_lit(0)), build.int_lit(size - 1)),
                shape,
                "i64",
                "index",
            )
        else:
            as_float = ctx.let(cast(r, wide), shape, wide, "tap_position")
            mirrored = _reflect(ctx, as_float, low, high)
            folded = cast(ctx.ref(mirrored), "i64")
            index = ctx.let(
                build.call(
                    "min", build.call("max", folded, build.int_lit(0)), build.int_lit(size - 1)
                ),
                shape,
                "i64",
                "index",
            )
        out.append((weight, index, ok))
    return out
