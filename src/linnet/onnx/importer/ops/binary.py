"""ONNX elementwise binary and variadic operators -> Linnet operators and prelude calls.

Stage: ONNX import, translation. Each operator broadcasts its operands the
ONNX way (multidirectional, aligned from the right), which is Linnet's rule
too (7.6), so `Add` is `a + b` and `Where` is `select(c, a, b)`.

Meaning that differs between the two and is spelled out here:
- integer `Div` truncates in both (ONNX `Div`, language 7.5);
- `Mod` with `fmod = 0` on signed integers takes the divisor's sign (Python's
  `%`), while Linnet's `%` follows the dividend, so the remainder is adjusted;
- `Pow` has no Linnet operator: small constant exponents become products,
  `sqrt` or `rsqrt`; other exponents `exp(y * log(|x|))` in f64 with the sign
  of a negative base restored for integer exponents;
- `BitwiseNot` is `x ^ all-ones`, `Not` is `x ^ true` (`!` takes scalars only).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from linnet.onnx.importer.graph import translator
from linnet.onnx.importer.ops._common import (
    FLOAT_DTYPES,
    INT_DTYPES,
    SIGNED,
    UNSIGNED,
    cast,
    fold,
    fold_ok,
    is_nonneg,
    mark_nonneg,
    operand,
    scalar_const,
)
from linnet.sourcegen import build
from linnet.sourcegen.translate import Context, Unsupported
from linnet.sourcegen.values import Value
from linnet.syntax import ast

_ARITH: dict[str, tuple[str, Callable[[Any, Any], Any]]] = {
    "Add": ("+", operator.add),
    "Sub": ("-", operator.sub),
    "Mul": ("*", operator.mul),
}
_COMPARE: dict[str, tuple[str, Callable[[Any, Any], Any]]] = {
    "Equal": ("==", np.equal),
    "Less": ("<", np.less),
    "LessOrEqual": ("<=", np.less_equal),
    "Greater": (">", np.greater),
    "GreaterOrEqual": (">=", np.greater_equal),
}
_LOGIC: dict[str, tuple[str, Callable[[Any, Any], Any]]] = {
    "And": ("&", np.logical_and),
    "Or": ("|", np.logical_or),
    "Xor": ("^", np.logical_xor),
    "BitwiseAnd": ("&", np.bitwise_and),
    "BitwiseOr": ("|", np.bitwise_or),
    "BitwiseXor": ("^", np.bitwise_xor),
}


def _pair(ctx: Context) -> tuple[Value, Value]:
    a, b = ctx.need(0), ctx.need(1)
    if a.dtype != b.dtype:
        raise Unsupported(f"operands have different dtypes ({a.dtype}, {b.dtype})")
    return a, b


def _operator(ctx: Context, op: str, a: Value, b: Value, dtype: str) -> Value:
    """`a op b` with the broadcast shape; a lone literal operand adopts the other's dtype.

    A one-element operand known at import time (a folded size, `[seq]`) that the
    other operand's shape already covers is written as a scalar: `x * cast<i64>(seq)`.
    """
    shape = ctx.broadcast(a.shape, b.shape)
    both_literal = a.const is not None and b.const is not None
    lhs = _scalar_form(ctx, a, b) or operand(ctx, a, both_literal)
    rhs = _scalar_form(ctx, b, a) or ctx.ref(b)
    out = ctx.let(build.binary(op, lhs, rhs), shape, dtype)
    if op in ("+", "*") and is_nonneg(ctx, a) and is_nonneg(ctx, b):
        mark_nonneg(ctx, out)
    return out


def _scalar_form(ctx: Context, v: Value, other: Value) -> ast.Expr | None:
    if v.expr is not None or v.elements is None or len(v.elements) != 1 or v.const is not None:
        return None
    if other.rank < v.rank or other.const is not None:
        return None
    return cast(ctx.dim(v.elements[0]), v.dtype)


@translator(*_ARITH)
def arithmetic(ctx: Context) -> None:
    a, b = _pair(ctx)
    op, fn = _ARITH[ctx.node.op]
    if a.dtype == "bool":
        raise Unsupported("arithmetic on bool")
    if fold_ok(a, b):
        assert a.const is not None and b.const is not None
        with np.errstate(all="ignore"):
            ctx.output(0, fold(ctx, fn(a.const, b.const), a.dtype))
        return
    ctx.output(0, _operator(ctx, op, a, b, a.dtype))


@translator("Div")
def div(ctx: Context) -> None:
    a, b = _pair(ctx)
    if a.dtype == "bool":
        raise Unsupported("division of bool")
    if fold_ok(a, b):
        assert a.const is not None and b.const is not None
        ctx.output(0, fold(ctx, _trunc_div(a.const, b.const, a.dtype), a.dtype))
        return
    ctx.output(0, _operator(ctx, "/", a, b, a.dtype))


def _trunc_div(x: np.ndarray, y: np.ndarray, dtype: str) -> np.ndarray:
    with np.errstate(all="ignore"):
        if dtype in FLOAT_DTYPES:
            return np.asarray(x / y)
        q = np.abs(x.astype(np.int64)) // np.abs(y.astype(np.int64))
        return np.asarray(np.sign(x) * np.sign(y) * q)


@translator(*_COMPARE)
def compare(ctx: Context) -> None:
    a, b = _pair(ctx)
    op, fn = _COMPARE[ctx.node.op]
    if op != "==" and a.dtype == "bool":
        raise Unsupported("ordering of bool values")
    if fold_ok(a, b):
        assert a.const is not None and b.const is not None
        ctx.output(0, fold(ctx, fn(a.const, b.const), "bool"))
        return
    ctx.output(0, _operator(ctx, op, a, b, "bool"))


@translator(*_LOGIC)
def logic(ctx: Context) -> None:
    a, b = _pair(ctx)
    op, fn = _LOGIC[ctx.node.op]
    bitwise = ctx.node.op.startswith("Bitwise")
    if bitwise and a.dtype not in INT_DTYPES:
        raise Unsupported(f"bitwise operator on {a.dtype}")
    if not bitwise and a.dtype != "bool":
        raise Unsupported(f"logical operator on {a.dtype}")
    if fold_ok(a, b):
        assert a.const is not None and b.const is not None
        ctx.output(0, fold(ctx, fn(a.const, b.const), a.dtype))
        return
    if a.dtype == "bool" and op in ("&", "|"):
        # `x & true` and `x | false` are `x` where `x` already has the result's shape.
        neutral = op == "&"
        for keep, other in ((a, b), (b, a)):
            if scalar_const(other) == neutral and _covers(ctx, keep, other):
                ctx.output(0, keep)
                return
    ctx.output(0, _operator(ctx, op, a, b, a.dtype))


def _covers(ctx: Context, v: Value, other: Value) -> bool:
    shape = ctx.broadcast(v.shape, other.shape)
    return len(shape) == v.rank and all(
        ctx.equal(x, y) for x, y in zip(shape, v.shape, strict=True)
    )


@translator("Not")
def not_(ctx: Context) -> None:
    x = ctx.need(0)
    if x.dtype != "bool":
        raise Unsupported(f"Not of {x.dtype}")
    if fold_ok(x):
        assert x.const is not None
        ctx.output(0, fold(ctx, np.logical_not(x.const), "bool"))
        return
    # `!` takes scalar bools only (7.5); `^ true` negates tensors and scalars.
    expr = (
        build.unary("!", ctx.ref(x))
        if x.is_scalar
        else build.binary("^", ctx.ref(x), build.bool_lit(True))
    )
    ctx.output(0, ctx.let(expr, x.shape, "bool", "not_"))


@translator("BitwiseNot")
def bitwise_not(ctx: Context) -> None:
    x = ctx.need(0)
    if x.dtype not in INT_DTYPES:
        raise Unsupported(f"BitwiseNot of {x.dtype}")
    if fold_ok(x):
        assert x.const is not None
        ctx.output(0, fold(ctx, np.invert(x.const), x.dtype))
        return
    ones = -1 if x.dtype in SIGNED else (1 << _BITS[x.dtype]) - 1
    expr = build.binary("^", ctx.ref(x), ctx.literal(ones, x.dtype))
    ctx.output(0, ctx.let(expr, x.shape, x.dtype, "inverted"))


_BITS = {"i8": 8, "i16": 16, "i32": 32, "i64": 64, "u8": 8, "u16": 16, "u32": 32, "u64": 64}


@translator("BitShift")
def bit_shift(ctx: Context) -> None:
    a, b = _pair(ctx)
    if a.dtype not in INT_DTYPES:
        raise Unsupported(f"BitShift of {a.dtype}")
    direction = ctx.attr("direction")
    if direction not in ("LEFT", "RIGHT"):
        raise Unsupported(f"direction {direction!r}")
    width = _BITS[a.dtype]
    if fold_ok(a, b):
        assert a.const is not None and b.const is not None
        ctx.output(0, fold(ctx, _shift_fold(a.const, b.const, direction, width), a.dtype))
        return
    shape = ctx.broadcast(a.shape, b.shape)
    fn = "shl" if direction == "LEFT" else "shr"
    shifted = build.call(fn, ctx.ref(a), ctx.ref(b))
    # Linnet leaves shifts outside 0..width-1 to the backend (10.3); ONNX gives 0,
    # or the sign fill for a right shift of a negative value.
    amount = ctx.ref(b)
    in_range = build.binary("<", amount, ctx.literal(width, b.dtype))
    if b.dtype in SIGNED:
        low = build.binary(">=", amount, ctx.literal(0, b.dtype))
        in_range = build.binary("&", build.paren(low), build.paren(in_range))
    zero = ctx.literal(0, a.dtype)
    if direction == "RIGHT" and a.dtype in SIGNED:
        fill = build.call(
            "select", build.binary("<", ctx.ref(a), zero), ctx.typed(-1, a.dtype), zero
        )
    else:
        fill = ctx.typed(0, a.dtype)
    expr = build.call("select", in_range, shifted, fill)
    ctx.output(0, ctx.let(expr, shape, a.dtype, "shifted"))


def _shift_fold(x: np.ndarray, y: np.ndarray, direction: str, width: int) -> np.ndarray:
    inside = (y >= 0) & (y < width)
    safe = np.where(inside, y, 0).astype(x.dtype)
    if direction == "LEFT":
        return np.where(inside, np.left_shift(x, safe), 0).astype(x.dtype)
    fill = np.where(x < 0, -1, 0) if x.dtype.kind == "i" else np.zeros_like(x)
    return np.where(inside, np.right_shift(x, safe), fill).astype(x.dtype)


@translator("Mod")
def mod(ctx: Context) -> None:
    a, b = _pair(ctx)
    fmod = int(ctx.attr("fmod", 0))
    if a.dtype == "bool":
        raise Unsupported("Mod of bool")
    if a.dtype in FLOAT_DTYPES and not fmod and ctx.node.opset < 10:
        raise Unsupported("Mod of floats requires fmod = 1")
    if fold_ok(a, b):
        assert a.const is not None and b.const is not None
        with np.errstate(all="ignore"):
            value = np.fmod(a.const, b.const) if fmod else np.mod(a.const, b.const)
        ctx.output(0, fold(ctx, value, a.dtype))
        return
    rem = _operator(ctx, "%", a, b, a.dtype)
    if fmod or a.dtype in UNSIGNED:
        ctx.output(0, rem)
        return
    # Floor modulo (ONNX fmod = 0): the remainder takes the divisor's sign.
    r = ctx.ref(rem)
    zero = ctx.literal(0, a.dtype)
    differs = build.binary(
        "^",
        build.paren(build.binary("<", r, zero)),
        build.paren(build.binary("<", ctx.ref(b), ctx.literal(0, a.dtype))),
    )
    wrong = build.binary("&", build.paren(build.binary("!=", r, zero)), build.paren(differs))
    fixed = build.call("select", wrong, build.binary("+", r, ctx.ref(b)), r)
    ctx.output(0, ctx.let(fixed, rem.shape, a.dtype, "mod"))


@translator("Where")
def where(ctx: Context) -> None:
    c, a, b = ctx.need(0), ctx.need(1), ctx.need(2)
    if c.dtype != "bool":
        raise Unsupported(f"condition of dtype {c.dtype}")
    if a.dtype != b.dtype:
        raise Unsupported("branches of different dtypes")
    if fold_ok(c, a, b):
        assert c.const is not None and a.const is not None and b.const is not None
        ctx.output(0, fold(ctx, np.where(c.const, a.const, b.const), a.dtype))
        return
    shape = ctx.broadcast(c.shape, a.shape, b.shape)
    both_literal = a.const is not None and b.const is not None
    expr = build.call("select", ctx.ref(c), operand(ctx, a, both_literal), ctx.ref(b))
    ctx.output(0, ctx.let(expr, shape, a.dtype, "selected"))


@translator("Max", "Min")
def max_min(ctx: Context) -> None:
    values = [ctx.need(i) for i in range(ctx.n_inputs)]
    fn = "max" if ctx.node.op == "Max" else "min"
    dtype = values[0].dtype
    if dtype == "bool" or any(v.dtype != dtype for v in values):
        raise Unsupported("operands of different dtypes or bool")
    if fold_ok(*values):
        np_fn = np.maximum if fn == "max" else np.minimum
        acc = np.asarray(values[0].const)
        for v in values[1:]:
            acc = np_fn(acc, np.asarray(v.const))
        ctx.output(0, fold(ctx, acc, dtype))
        return
    ctx.output(0, _chain(ctx, values, lambda x, y: build.call(fn, x, y), fn))


@translator("Sum", "Mean")
def sum_mean(ctx: Context) -> None:
    values = [ctx.need(i) for i in range(ctx.n_inputs)]
    dtype = values[0].dtype
    if dtype == "bool" or any(v.dtype != dtype for v in values):
        raise Unsupported("operands of different dtypes or bool")
    if ctx.node.op == "Mean" and dtype not in FLOAT_DTYPES:
        raise Unsupported(f"Mean of {dtype}")
    total = _chain(ctx, values, lambda x, y: build.binary("+", x, y), "total")
    if ctx.node.op == "Mean" and len(values) > 1:
        expr = build.binary("/", ctx.ref(total), ctx.literal(float(len(values)), dtype))
        total = ctx.let(expr, total.shape, dtype, "mean")
    ctx.output(0, total)


def _chain(
    ctx: Context, values: list[Value], combine: Callable[[ast.Expr, ast.Expr], ast.Expr], hint: str
) -> Value:
    if len(values) == 1:
        return values[0]
    shape = ctx.broadcast(*(v.shape for v in values))
    typed_first = all(v.const is not None for v in values)
    expr = operand(ctx, values[0], typed_first)
    for v in values[1:]:
        expr = combine(expr, ctx.ref(v))
    if len(shape) > 0 and all(v.is_scalar for v in values):
        raise AssertionError("unreachable: scalars broadcast to a scalar")
    # A chain of scalars and tensors: the operator broadcasts every operand (7.6).
    return ctx.let(expr, shape, values[0].dtype, hint)


@translator("PRelu")
def prelu(ctx: Context) -> None:
    x, slope = ctx.need(0), ctx.need(1)
    if x.dtype != slope.dtype:
        raise Unsupported("slope of another dtype")
    if x.dtype == "bool" or x.dtype in UNSIGNED:
        raise Unsupported(f"PRelu of {x.dtype}")
    shape = ctx.broadcast(x.shape, slope.shape)
    if len(shape) != x.rank:
        raise Unsupported("slope of a higher rank than the input")
    xr = ctx.ref(x)
    scaled = build.binary("*", ctx.ref(slope), xr)
    expr = build.call("select", build.binary("<", xr, ctx.literal(0, x.dtype)), scaled, xr)
    ctx.output(0, ctx.let(expr, shape, x.dtype, "prelu"))


# ---------------------------------------------------------------- Pow


@translator("Pow")
def pow_(ctx: Context) -> None:
    x, y = ctx.need(0), ctx.need(1)
    if x.dtype == "bool" or y.dtype == "bool":
        raise Unsupported("Pow of bool")
    if fold_ok(x, y):
        assert x.const is not None and y.const is not None
        with np.errstate(all="ignore"):
            value = np.power(x.const, y.const.astype(x.const.dtype))
        ctx.output(0, fold(ctx, value, x.dtype))
        return
    shape = ctx.broadcast(x.shape, y.shape)
    e = scalar_const(y)
    same_shape = len(shape) == x.rank and all(
        ctx.equal(a, b) for a, b in zip(shape, x.shape, strict=False)
    )
    if e is not None and same_shape:
        special = _constant_power(ctx, x, float(e), shape)
        if special is not None:
            ctx.note(f"Pow `{ctx.node.label}` with exponent {e:g} written as {special[1]}")
            ctx.output(0, special[0])
            return
    ctx.output(0, _general_power(ctx, x, y, shape))


def _constant_power(
    ctx: Context, x: Value, e: float, shape: tuple[Any, ...]
) -> tuple[Value, str] | None:
    """`x ** e` for a constant `e` as products and roots, when exact enough."""
    xr = ctx.ref(x)
    is_float = x.dtype in FLOAT_DTYPES
    if e == 1.0:
        return x, "x itself"
    if e == 0.5 and is_float:
        return ctx.let(build.call("sqrt", xr), shape, x.dtype, "pow"), "sqrt"
    if e == -0.5 and is_float:
        return ctx.let(build.call("rsqrt", xr), shape, x.dtype, "pow"), "rsqrt"
    if e == int(e) and 2 <= e <= 16:
        return _product(ctx, x, int(e), shape), "a product"
    if e == int(e) and -16 <= e <= -1 and is_float:
        positive = _product(ctx, x, -int(e), shape) if e < -1 else x
        one = ctx.literal(1.0, x.dtype)
        return ctx.let(build.binary("/", one, ctx.ref(positive)), shape, x.dtype, "pow"), "1 / x^n"
    return None


def _product(ctx: Context, x: Value, n: int, shape: tuple[Any, ...]) -> Value:
    """`x ** n` by repeated squaring (n >= 2)."""
    result: Value | None = None
    base = x
    while n:
        if n & 1:
            result = (
                base
                if result is None
                else ctx.let(
                    build.binary("*", ctx.ref(result), ctx.ref(base)), shape, x.dtype, "pow"
                )
            )
        n >>= 1
        if n:
            base = ctx.let(build.binary("*", ctx.ref(base), ctx.ref(base)), x.shape, x.dtype, "sq")
    assert result is not None
    return result


def _general_power(ctx: Context, x: Value, y: Value, shape: tuple[Any, ...]) -> Value:
    """`exp(y * log(|x|))` in f64; a negative base keeps its sign for odd integer
    exponents and gives NaN for fractional ones; `x ** 0` is 1 (ONNX Pow, C `pow`)."""
    bx, by = _f64(ctx, x, "base"), _f64(ctx, y, "exponent")
    magnitude = build.call("exp", build.binary("*", by, build.call("log", build.call("abs", bx))))
    mag = ctx.let(magnitude, shape, "f64", "magnitude")
    whole = ctx.let(cast(by, "i64"), y.shape, "i64", "whole")
    is_int = build.paren(build.binary("==", cast(ctx.ref(whole), "f64"), by))
    odd = build.paren(
        build.binary("!=", build.binary("%", ctx.ref(whole), build.int_lit(2)), build.int_lit(0))
    )
    m = ctx.ref(mag)
    nan = ctx.literal(math.nan, "f64")
    signed = build.call("select", is_int, build.call("select", odd, build.unary("-", m), m), nan)
    negative = build.binary("<", bx, build.float_lit(0.0))
    value = build.call("select", negative, signed, m)
    value = build.call(
        "select", build.binary("==", by, build.float_lit(0.0)), build.float_lit(1.0), value
    )
    result = ctx.let(value, shape, "f64", "power")
    if x.dtype == "f64":
        return result
    if x.dtype in FLOAT_DTYPES:
        return ctx.let(cast(ctx.ref(result), x.dtype), shape, x.dtype, "pow")
    # Integer results: round to the nearest integer before converting.
    r = ctx.ref(result)
    rounded = build.call(
        "select",
        build.binary("<", r, build.float_lit(0.0)),
        build.binary("-", r, build.float_lit(0.5)),
        build.binary("+", r, build.float_lit(0.5)),
    )
    return ctx.let(cast(rounded, x.dtype), shape, x.dtype, "pow")


def _f64(ctx: Context, v: Value, hint: str) -> ast.Expr:
    if v.dtype == "f64":
        return operand(ctx, v, True)
    return ctx.ref(ctx.let(cast(ctx.ref(v), "f64"), v.shape, "f64", hint))
