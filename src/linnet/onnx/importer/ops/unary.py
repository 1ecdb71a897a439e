"""ONNX elementwise unary math -> prelude functions and short formulas.

Stage: ONNX import, translation. The prelude has `exp log sqrt rsqrt sin cos
tanh abs` (10.1); every other ONNX math operator is written with them:

- `Floor`, `Ceil`, `Round` (half to even) through a truncating `cast` to i64,
  corrected by one where truncation went the wrong way; values of magnitude
  at least 2^mantissa are already integers (and NaN, inf) and pass unchanged;
- `Erf` from its Maclaurin series below 0.5 and from a rational approximation
  of `erfc` above (absolute error below 1.2e-7, W. J. Cody's form as in
  Numerical Recipes `erfcc`), in f32 or f64;
- `Atan` by argument reduction to |t| <= tan(pi/12) and an odd series
  (error below 1e-9), `Asin`, `Acos` from it; hyperbolic functions from `exp`
  and `log`.
Each approximation is listed in the import notes.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from linnet.onnx.importer.graph import translator
from linnet.onnx.importer.ops._common import (
    FLOAT_DTYPES,
    INT_DTYPES,
    UNSIGNED,
    apply_unary_fold,
    cast,
    fold_ok,
)
from linnet.sourcegen import build
from linnet.sourcegen.translate import Context, Unsupported
from linnet.sourcegen.values import Value
from linnet.syntax import ast

Builder = Callable[[Context, Value, ast.Expr], ast.Expr]

_PRELUDE: dict[str, tuple[str, Callable[[np.ndarray], np.ndarray]]] = {
    "Exp": ("exp", np.exp),
    "Log": ("log", np.log),
    "Sqrt": ("sqrt", np.sqrt),
    "Sin": ("sin", np.sin),
    "Cos": ("cos", np.cos),
    "Tanh": ("tanh", np.tanh),
}


def _float_input(ctx: Context) -> Value:
    x = ctx.need(0)
    if x.dtype not in FLOAT_DTYPES:
        raise Unsupported(f"{ctx.node.op} of {x.dtype}")
    return x


@translator(*_PRELUDE)
def prelude_math(ctx: Context) -> None:
    x = _float_input(ctx)
    fn, np_fn = _PRELUDE[ctx.node.op]
    if fold_ok(x):
        ctx.output(0, apply_unary_fold(ctx, x, np_fn))
        return
    ctx.output(0, ctx.let(build.call(fn, ctx.ref(x)), x.shape, x.dtype, fn))


@translator("Abs")
def abs_(ctx: Context) -> None:
    x = ctx.need(0)
    if x.dtype == "bool":
        raise Unsupported("Abs of bool")
    if fold_ok(x):
        ctx.output(0, apply_unary_fold(ctx, x, np.abs))
        return
    if x.dtype in UNSIGNED:
        ctx.output(0, x)
        return
    ctx.output(0, ctx.let(build.call("abs", ctx.ref(x)), x.shape, x.dtype, "magnitude"))


@translator("Neg")
def neg(ctx: Context) -> None:
    x = ctx.need(0)
    if x.dtype == "bool" or x.dtype in UNSIGNED:
        raise Unsupported(f"Neg of {x.dtype}")
    if fold_ok(x):
        ctx.output(0, apply_unary_fold(ctx, x, np.negative))
        return
    ctx.output(0, ctx.let(build.unary("-", ctx.ref(x)), x.shape, x.dtype, "negated"))


@translator("Reciprocal")
def reciprocal(ctx: Context) -> None:
    x = _float_input(ctx)
    if fold_ok(x):
        ctx.output(0, apply_unary_fold(ctx, x, np.reciprocal))
        return
    expr = build.binary("/", build.float_lit(1.0), ctx.ref(x))
    ctx.output(0, ctx.let(expr, x.shape, x.dtype, "reciprocal"))


@translator("Sign")
def sign(ctx: Context) -> None:
    x = ctx.need(0)
    if x.dtype == "bool":
        raise Unsupported("Sign of bool")
    if fold_ok(x):
        ctx.output(0, apply_unary_fold(ctx, x, np.sign))
        return
    xr = ctx.ref(x)
    zero, one = ctx.literal(0, x.dtype), ctx.literal(1, x.dtype)
    if x.dtype in UNSIGNED:
        expr = build.call("select", build.binary(">", xr, zero), ctx.typed(1, x.dtype), zero)
    else:
        minus = ctx.typed(-1, x.dtype)
        inner = build.call("select", build.binary("<", xr, zero), minus, zero)
        expr = build.call("select", build.binary(">", xr, zero), one, inner)
    ctx.output(0, ctx.let(expr, x.shape, x.dtype, "sign"))


# ---------------------------------------------------------------- rounding

_EXACT = {"f16": 1024.0, "bf16": 128.0, "f32": 8388608.0, "f64": 4503599627370496.0}
"""2^mantissa bits: from this magnitude on every value of the dtype is an integer."""


def _rounding(ctx: Context, kind: str) -> None:
    x = ctx.need(0)
    if x.dtype in INT_DTYPES:
        ctx.output(0, x)
        return
    if x.dtype not in FLOAT_DTYPES:
        raise Unsupported(f"{ctx.node.op} of {x.dtype}")
    if fold_ok(x):
        fns: dict[str, Callable[[np.ndarray], np.ndarray]] = {
            "floor": np.floor,
            "ceil": np.ceil,
            "round": np.round,
        }
        fn = fns[kind]
        ctx.output(0, apply_unary_fold(ctx, x, fn))
        return
    ctx.output(0, rounded(ctx, x, kind))


def rounded(ctx: Context, x: Value, kind: str = "round") -> Value:
    """`floor`, `ceil` or `round` (half to even, NumPy's `rint`) of a float value, as code."""
    T = x.dtype
    xr = ctx.ref(x)
    exact = build.binary("<", build.call("abs", xr), build.float_lit(_EXACT[T]))
    # Only values of magnitude below 2^mantissa reach the i64 cast (they fit).
    safe = build.call("select", exact, xr, build.float_lit(0.0))
    if kind == "round":
        # Half to even: floor(x + 0.5), minus one where x + 0.5 is an odd integer.
        shifted = ctx.let(build.binary("+", safe, build.float_lit(0.5)), x.shape, T, "shifted")
        down = _floor(ctx, ctx.ref(shifted), x)
        d = ctx.ref(down)
        tie = build.binary("==", d, ctx.ref(shifted))
        odd = build.binary(
            "!=", build.binary("%", cast(d, "i64"), build.int_lit(2)), build.int_lit(0)
        )
        fix = build.binary("&", build.paren(tie), build.paren(odd))
        value = build.call("select", fix, build.binary("-", d, build.float_lit(1.0)), d)
        result = ctx.let(value, x.shape, T, "rounded")
    elif kind == "floor":
        result = _floor(ctx, safe, x)
    else:
        whole = ctx.let(cast(cast(safe, "i64"), T), x.shape, T, "whole")
        w = ctx.ref(whole)
        up = build.call(
            "select", build.binary("<", w, safe), build.binary("+", w, build.float_lit(1.0)), w
        )
        result = ctx.let(up, x.shape, T, "ceiled")
    expr = build.call("select", exact, ctx.ref(result), xr)
    return ctx.let(expr, x.shape, T, kind)


def _floor(ctx: Context, safe: ast.Expr, x: Value) -> Value:
    whole = ctx.let(cast(cast(safe, "i64"), x.dtype), x.shape, x.dtype, "whole")
    w = ctx.ref(whole)
    down = build.call(
        "select", build.binary(">", w, safe), build.binary("-", w, build.float_lit(1.0)), w
    )
    return ctx.let(down, x.shape, x.dtype, "floored")


@translator("Floor")
def floor(ctx: Context) -> None:
    _rounding(ctx, "floor")


@translator("Ceil")
def ceil(ctx: Context) -> None:
    _rounding(ctx, "ceil")


@translator("Round")
def round_(ctx: Context) -> None:
    _rounding(ctx, "round")


# ---------------------------------------------------------------- special functions


def _compute_dtype(dtype: str) -> str:
    return "f64" if dtype == "f64" else "f32"


def _widened(ctx: Context, x: Value) -> tuple[ast.Expr, str]:
    wide = _compute_dtype(x.dtype)
    if x.dtype == wide:
        return ctx.ref(x), wide
    return ctx.ref(ctx.let(cast(ctx.ref(x), wide), x.shape, wide, "wide")), wide


def _narrowed(ctx: Context, x: Value, value: Value, hint: str) -> Value:
    if value.dtype == x.dtype:
        return value
    return ctx.let(cast(ctx.ref(value), x.dtype), x.shape, x.dtype, hint)


def _poly(t: ast.Expr, coeffs: list[float]) -> ast.Expr:
    """Horner form `c0 + t * (c1 + t * (...))`."""
    expr = build.float_lit(coeffs[-1])
    for c in reversed(coeffs[:-1]):
        expr = build.binary("+", build.float_lit(c), build.binary("*", t, build.paren(expr)))
    return expr


# erfc(z) ~ t * exp(-z^2 + P(t)), t = 1 / (1 + z / 2) (Numerical Recipes `erfcc`).
_ERFC = [
    -1.26551223,
    1.00002368,
    0.37409196,
    0.09678418,
    -0.18628806,
    0.27886807,
    -1.13520398,
    1.48851587,
    -0.82215223,
    0.17087277,
]


def erf_value(ctx: Context, x: Value) -> Value:
    """`erf(x)` as code (see the module docstring), in `x`'s dtype."""
    xw, wide = _widened(ctx, x)
    a = ctx.ref(ctx.let(build.call("abs", xw), x.shape, wide, "magnitude"))
    # Series: erf(x) = 2/sqrt(pi) * (x - x^3/3 + x^5/10 - x^7/42 + x^9/216 - x^11/1320).
    sq = ctx.ref(ctx.let(build.binary("*", xw, xw), x.shape, wide, "square"))
    series_poly = _poly(sq, [1.0, -1 / 3, 1 / 10, -1 / 42, 1 / 216, -1 / 1320, 1 / 9360])
    series = build.binary(
        "*",
        build.binary("*", build.float_lit(2 / math.sqrt(math.pi)), xw),
        build.paren(series_poly),
    )
    t = ctx.ref(
        ctx.let(
            build.binary(
                "/",
                build.float_lit(1.0),
                build.binary("+", build.float_lit(1.0), build.binary("*", build.float_lit(0.5), a)),
            ),
            x.shape,
            wide,
            "t",
        )
    )
    exponent = build.binary(
        "+", build.unary("-", build.paren(build.binary("*", a, a))), _poly(t, _ERFC)
    )
    tail = ctx.ref(
        ctx.let(
            build.binary(
                "-", build.float_lit(1.0), build.binary("*", t, build.call("exp", exponent))
            ),
            x.shape,
            wide,
            "tail",
        )
    )
    signed_tail = build.call(
        "select", build.binary("<", xw, build.float_lit(0.0)), build.unary("-", tail), tail
    )
    value = build.call("select", build.binary("<", a, build.float_lit(0.5)), series, signed_tail)
    result = ctx.let(value, x.shape, wide, "erf")
    return _narrowed(ctx, x, result, "erf")


@translator("Erf")
def erf(ctx: Context) -> None:
    x = _float_input(ctx)
    if fold_ok(x):
        assert x.const is not None
        values = np.vectorize(math.erf, otypes=[np.float64])(x.const.astype(np.float64))
        ctx.output(0, apply_unary_fold(ctx, x, lambda _: values))
        return
    ctx.note(
        f"Erf `{ctx.node.label}` written as a series and a rational approximation (error < 1.2e-7)"
    )
    ctx.output(0, erf_value(ctx, x))


def atan_value(ctx: Context, x: Value, xw: ast.Expr, wide: str) -> ast.Expr:
    """`atan` of the expression `xw` (shape of `x`) in `wide`, as a bound expression."""
    a = ctx.ref(ctx.let(build.call("abs", xw), x.shape, wide, "magnitude"))
    big = build.binary(">", a, build.float_lit(1.0))
    # atan(a) = pi/2 - atan(1/a) for a > 1; then atan(u) = pi/6 + atan((u*sqrt3 - 1)/(sqrt3 + u))
    # for u > tan(pi/12), leaving |t| <= tan(pi/12) for the odd series.
    u = ctx.ref(
        ctx.let(
            build.call("select", big, build.binary("/", build.float_lit(1.0), a), a),
            x.shape,
            wide,
            "u",
        )
    )
    s3 = math.sqrt(3.0)
    shifted = build.binary(">", u, build.float_lit(math.tan(math.pi / 12)))
    reduced = build.binary(
        "/",
        build.paren(
            build.binary("-", build.binary("*", u, build.float_lit(s3)), build.float_lit(1.0))
        ),
        build.paren(build.binary("+", build.float_lit(s3), u)),
    )
    t = ctx.ref(ctx.let(build.call("select", shifted, reduced, u), x.shape, wide, "t"))
    t2 = ctx.ref(ctx.let(build.binary("*", t, t), x.shape, wide, "t2"))
    series = build.binary(
        "*", t, build.paren(_poly(t2, [1.0, -1 / 3, 1 / 5, -1 / 7, 1 / 9, -1 / 11, 1 / 13]))
    )
    base = ctx.ref(ctx.let(series, x.shape, wide, "series"))
    base = build.call(
        "select", shifted, build.binary("+", build.float_lit(math.pi / 6), base), base
    )
    base_v = ctx.ref(ctx.let(base, x.shape, wide, "angle"))
    full = build.call(
        "select", big, build.binary("-", build.float_lit(math.pi / 2), base_v), base_v
    )
    full_v = ctx.ref(ctx.let(full, x.shape, wide, "angle"))
    return build.call(
        "select", build.binary("<", xw, build.float_lit(0.0)), build.unary("-", full_v), full_v
    )


def _special(
    ctx: Context,
    make: Callable[[Context, Value, ast.Expr, str], ast.Expr],
    np_fn: Callable[[np.ndarray], np.ndarray],
    note: str | None = None,
) -> None:
    x = _float_input(ctx)
    if fold_ok(x):
        ctx.output(0, apply_unary_fold(ctx, x, np_fn))
        return
    if note:
        ctx.note(f"{ctx.node.op} `{ctx.node.label}` {note}")
    xw, wide = _widened(ctx, x)
    value = ctx.let(make(ctx, x, xw, wide), x.shape, wide, ctx.node.op.lower())
    ctx.output(0, _narrowed(ctx, x, value, ctx.node.op.lower()))


@translator("Atan")
def atan(ctx: Context) -> None:
    _special(ctx, atan_value, np.arctan, "written with argument reduction and a series")


def _asin(ctx: Context, x: Value, xw: ast.Expr, wide: str) -> ast.Expr:
    # asin(x) = atan(x / sqrt(1 - x^2)); |x| = 1 gives atan(+-inf) = +-pi/2.
    ratio = build.binary(
        "/",
        xw,
        build.call("sqrt", build.binary("-", build.float_lit(1.0), build.binary("*", xw, xw))),
    )
    r = ctx.let(ratio, x.shape, wide, "ratio")
    return atan_value(ctx, x, ctx.ref(r), wide)


@translator("Asin")
def asin(ctx: Context) -> None:
    _special(ctx, _asin, np.arcsin, "written as atan(x / sqrt(1 - x^2))")


@translator("Acos")
def acos(ctx: Context) -> None:
    def make(c: Context, x: Value, xw: ast.Expr, wide: str) -> ast.Expr:
        inner = c.let(_asin(c, x, xw, wide), x.shape, wide, "asin")
        return build.binary("-", build.float_lit(math.pi / 2), c.ref(inner))

    _special(ctx, make, np.arccos, "written as pi/2 - asin(x)")


@translator("Tan")
def tan(ctx: Context) -> None:
    _special(
        ctx,
        lambda c, x, xw, w: build.binary("/", build.call("sin", xw), build.call("cos", xw)),
        np.tan,
    )


def _exp_pair(ctx: Context, x: Value, xw: ast.Expr, wide: str) -> tuple[ast.Expr, ast.Expr]:
    up = ctx.ref(ctx.let(build.call("exp", xw), x.shape, wide, "up"))
    down = ctx.ref(ctx.let(build.call("exp", build.unary("-", xw)), x.shape, wide, "down"))
    return up, down


@translator("Sinh")
def sinh(ctx: Context) -> None:
    def make(c: Context, x: Value, xw: ast.Expr, wide: str) -> ast.Expr:
        up, down = _exp_pair(c, x, xw, wide)
        return build.binary("*", build.float_lit(0.5), build.paren(build.binary("-", up, down)))

    _special(ctx, make, np.sinh)


@translator("Cosh")
def cosh(ctx: Context) -> None:
    def make(c: Context, x: Value, xw: ast.Expr, wide: str) -> ast.Expr:
        up, down = _exp_pair(c, x, xw, wide)
        return build.binary("*", build.float_lit(0.5), build.paren(build.binary("+", up, down)))

    _special(ctx, make, np.cosh)


@translator("Asinh")
def asinh(ctx: Context) -> None:
    def make(c: Context, x: Value, xw: ast.Expr, wide: str) -> ast.Expr:
        # log(|x| + sqrt(x^2 + 1)) with the sign of x (no cancellation for negative x).
        a = c.ref(c.let(build.call("abs", xw), x.shape, wide, "magnitude"))
        root = build.call("sqrt", build.binary("+", build.binary("*", a, a), build.float_lit(1.0)))
        mag = c.ref(c.let(build.call("log", build.binary("+", a, root)), x.shape, wide, "asinh"))
        return build.call(
            "select", build.binary("<", xw, build.float_lit(0.0)), build.unary("-", mag), mag
        )

    _special(ctx, make, np.arcsinh)


@translator("Acosh")
def acosh(ctx: Context) -> None:
    def make(c: Context, x: Value, xw: ast.Expr, wide: str) -> ast.Expr:
        root = build.call(
            "sqrt", build.binary("-", build.binary("*", xw, xw), build.float_lit(1.0))
        )
        return build.call("log", build.binary("+", xw, root))

    _special(ctx, make, np.arccosh)


@translator("Atanh")
def atanh(ctx: Context) -> None:
    def make(c: Context, x: Value, xw: ast.Expr, wide: str) -> ast.Expr:
        ratio = build.binary(
            "/",
            build.paren(build.binary("+", build.float_lit(1.0), xw)),
            build.paren(build.binary("-", build.float_lit(1.0), xw)),
        )
        return build.binary("*", build.float_lit(0.5), build.call("log", ratio))

    _special(ctx, make, np.arctanh)


@translator("IsNaN")
def is_nan(ctx: Context) -> None:
    x = _float_input(ctx)
    if fold_ok(x):
        ctx.output(0, apply_unary_fold(ctx, x, np.isnan, "bool"))
        return
    xr = ctx.ref(x)
    ctx.output(0, ctx.let(build.binary("!=", xr, xr), x.shape, "bool", "nan"))


@translator("IsInf")
def is_inf(ctx: Context) -> None:
    x = _float_input(ctx)
    pos = bool(ctx.attr("detect_positive", 1))
    neg_ = bool(ctx.attr("detect_negative", 1))
    if fold_ok(x):
        assert x.const is not None
        found = (np.isposinf(x.const) & pos) | (np.isneginf(x.const) & neg_)
        ctx.output(0, apply_unary_fold(ctx, x, lambda _: found, "bool"))
        return
    xr = ctx.ref(x)
    big = build.float_lit(
        {
            "f16": 65504.0,
            "bf16": 3.3895313892515355e38,
            "f32": 3.4028234663852886e38,
            "f64": 1.7976931348623157e308,
        }[x.dtype]
    )
    tests: list[ast.Expr] = []
    if pos:
        tests.append(build.binary(">", xr, big))
    if neg_:
        tests.append(build.binary("<", xr, build.unary("-", big)))
    if not tests:
        expr = build.binary("!=", xr, xr)
        expr = build.binary("&", build.paren(expr), build.paren(build.binary("==", xr, xr)))
    elif len(tests) == 1:
        expr = tests[0]
    else:
        expr = build.binary("|", build.paren(tests[0]), build.paren(tests[1]))
    ctx.output(0, ctx.let(expr, x.shape, "bool", "infinite"))


__all__ = ["atan_value", "erf_value", "rounded"]
