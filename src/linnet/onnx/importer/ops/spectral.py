"""ONNX `DFT` -> sums against cosine and sine tables.

Stage: ONNX import, translation. A discrete Fourier transform of length `L`
along one axis is a contraction with `cos(2 pi k n / L)` and `sin(...)`; the
phase is reduced exactly in integers first (`(k * n) % L`), so the tables are
accurate for any length. Complex values use ONNX's layout (a last axis of 2
holding real and imaginary parts, or 1 for a real signal). Forward, inverse
(divided by `L`), one-sided output (the first `L / 2 + 1` frequencies) and
the one-sided inverse (a real signal from half a spectrum, as NumPy's
`irfft`), with `dft_length` padding or truncating the input, follow the
operator definitions of opsets 17 and 20. The length must be known at import.
"""

from __future__ import annotations

import math

from linnet.check.dims import Dim
from linnet.onnx.importer.graph import translator
from linnet.onnx.importer.ops._common import FLOAT_DTYPES, cast, norm_axis
from linnet.onnx.importer.ops.conv import zero_padded
from linnet.onnx.importer.ops.reduce import access
from linnet.onnx.importer.ops.shapes import slice_axis
from linnet.sourcegen import build
from linnet.sourcegen.translate import Context, Unsupported
from linnet.sourcegen.values import Value
from linnet.syntax import ast

F = build.float_lit


def _tables(ctx: Context, rows: int, cols: int, length: int, wide: str) -> tuple[Value, Value]:
    """`cos` and `sin` of `2 pi k n / length` for `k < rows`, `n < cols`."""
    i64 = [build.named_type("i64")]
    ks = ctx.let(
        build.call("iota", build.int_lit(rows), generics=i64), (Dim.const(rows),), "i64", "freq"
    )
    ns = ctx.let(
        build.call("iota", build.int_lit(cols), generics=i64), (Dim.const(cols),), "i64", "time"
    )
    k, n = ctx.indices(2)
    turn = build.binary(
        "%", build.binary("*", access(ctx, ks, [k]), access(ctx, ns, [n])), build.int_lit(length)
    )
    phase_body = build.binary("*", cast(turn, wide), F(2 * math.pi / length))
    dims = (Dim.const(rows), Dim.const(cols))
    phase = ctx.comprehension([k, n], phase_body, dims, wide, "phase")
    cos = ctx.let(build.call("cos", ctx.ref(phase)), dims, wide, "cos_table")
    sin = ctx.let(build.call("sin", ctx.ref(phase)), dims, wide, "sin_table")
    return cos, sin


@translator("DFT")
def dft(ctx: Context) -> None:
    x = ctx.need(0)
    if x.dtype not in FLOAT_DTYPES or x.rank < 2:
        raise Unsupported(f"DFT of {x.dtype}")
    parts = x.shape[-1].as_int()
    if parts not in (1, 2):
        raise Unsupported("the last axis must hold 1 (real) or 2 (complex) values")
    if ctx.node.opset >= 20:
        axis_in = ctx.ints(2)
        axis = axis_in[0] if axis_in else -2
    else:
        axis = int(ctx.attr("axis", 1))
    axis = norm_axis(axis, x.rank)
    if axis == x.rank - 1:
        raise Unsupported("the transform axis cannot be the real/imaginary axis")
    inverse, onesided = bool(ctx.attr("inverse", 0)), bool(ctx.attr("onesided", 0))
    n_in = x.shape[axis].as_int()
    if n_in is None:
        raise Unsupported("a symbolic transform length")
    given = ctx.ints(1) if ctx.input(1) is not None else None
    if given:
        length = given[0]
    else:
        length = 2 * (n_in - 1) if inverse and onesided else n_in
    if length <= 0:
        raise Unsupported(f"dft_length {length}")
    # f64 tables and sums (as NumPy's FFT): exact zeros (the imaginary part at the
    # Nyquist frequency) stay far below any tolerance after the cast back.
    wide = "f64"
    # The input along the axis: truncated or zero-padded to what the transform reads.
    reads = length // 2 + 1 if inverse and onesided else length
    value = x
    if n_in > reads:
        value = slice_axis(ctx, value, axis, Dim.const(0), Dim.const(reads), "truncated")
    elif n_in < reads:
        value = zero_padded(ctx, value, axis, [0], [reads - n_in], F(0.0))
    outs = length // 2 + 1 if onesided and not inverse else length
    cos, sin = _tables(ctx, outs, reads, length, wide)
    names = ctx.indices(x.rank + 1)
    lead, j = names[: x.rank - 1], names[x.rank - 1]
    out_idx = list(lead)

    def read(part: int, position: str) -> ast.Expr:
        at: list[str | ast.Expr] = list(lead)
        at[axis] = position
        e = access(ctx, value, [*at, build.int_lit(part)])
        return e if value.dtype == wide else cast(e, wide)

    k = out_idx[axis]
    c, s = access(ctx, cos, [k, j]), access(ctx, sin, [k, j])
    re_j, im_j = read(0, j), (read(1, j) if parts == 2 else None)
    if inverse and onesided:
        # Hermitian half spectrum: interior frequencies count twice, DC and Nyquist once.
        i64 = [build.named_type("i64")]
        freqs = ctx.let(
            build.call("iota", build.int_lit(reads), generics=i64),
            (Dim.const(reads),),
            "i64",
            "freq",
        )
        f = ctx.ref(freqs)
        edge = build.binary(
            "|",
            build.paren(build.binary("==", f, build.int_lit(0))),
            build.paren(
                build.binary("==", build.binary("*", f, build.int_lit(2)), build.int_lit(length))
            ),
        )
        weight = ctx.let(
            build.call("select", edge, ctx.typed(1.0, wide), ctx.typed(2.0, wide)),
            (Dim.const(reads),),
            wide,
            "fold",
        )
        c_t, s_t = access(ctx, cos, [k, j]), access(ctx, sin, [k, j])
        term: ast.Expr = build.binary("*", re_j, c_t)
        if im_j is not None:
            term = build.binary("-", term, build.binary("*", im_j, s_t))
        total = build.reduction(
            "sum", [j], build.binary("*", access(ctx, weight, [j]), build.paren(term))
        )
        body = build.binary("/", build.paren(total), F(float(length)))
        dims = list(x.shape[:-1])
        dims[axis] = Dim.const(length)
        real = ctx.comprehension(out_idx, body, dims, wide, "signal")
        out = _pack(ctx, [real], x.dtype, wide)
        ctx.output(0, out)
        return
    if inverse:
        c_t, s_t = access(ctx, cos, [k, j]), access(ctx, sin, [k, j])
        re_term: ast.Expr = build.binary("*", re_j, c_t)
        im_term: ast.Expr = build.binary("*", re_j, s_t)
        if im_j is not None:
            re_term = build.binary("-", re_term, build.binary("*", im_j, s_t))
            im_term = build.binary("+", im_term, build.binary("*", im_j, c_t))
        scale = F(float(length))
        re_body = build.binary("/", build.paren(build.reduction("sum", [j], re_term)), scale)
        im_body = build.binary("/", build.paren(build.reduction("sum", [j], im_term)), scale)
    else:
        re_term = build.binary("*", re_j, c)
        im_term = build.unary("-", build.paren(build.binary("*", re_j, s)))
        if im_j is not None:
            re_term = build.binary("+", re_term, build.binary("*", im_j, s))
            im_term = build.binary("+", im_term, build.binary("*", im_j, c))
        re_body = build.reduction("sum", [j], re_term)
        im_body = build.reduction("sum", [j], im_term)
    dims = list(x.shape[:-1])
    dims[axis] = Dim.const(outs)
    real = ctx.comprehension(out_idx, re_body, dims, wide, "real")
    imag = ctx.comprehension(out_idx, im_body, dims, wide, "imag")
    ctx.output(0, _pack(ctx, [real, imag], x.dtype, wide))


def _pack(ctx: Context, parts: list[Value], dtype: str, wide: str) -> Value:
    """`[..., n]` parts -> `[..., n, len(parts)]` in `dtype`."""
    from linnet.onnx.importer.ops.shapes import reshaped

    lifted = [reshaped(ctx, p, [*p.shape, Dim.const(1)], "part") for p in parts]
    if len(lifted) == 1:
        out = lifted[0]
    else:
        expr = build.call(
            "concat", *(ctx.ref(v) for v in lifted), named=[("axis", build.int_lit(-1))]
        )
        out = ctx.let(expr, [*parts[0].shape, Dim.const(len(parts))], wide, "spectrum")
    if dtype != wide:
        out = ctx.let(cast(ctx.ref(out), dtype), out.shape, dtype, "spectrum")
    return out
