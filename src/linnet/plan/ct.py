"""Compile-time values of checked expressions, for the plan's constants (language.md 5.4, 6.1, 7.3).

Stage: a helper of `linnet.plan.body`. In: an expression of a checked
program. Out: its compile-time value (a `Dim` for integers, a float for
float literals) or None for a runtime expression.

Why it is needed: the checker records a compile-time value's type as
`CtIntType`/`CtFloatType`, but when a context gave the value a runtime type
(`return N - 1` in a function returning `i64`, an argument for an `f32`
parameter) the recorded type is that scalar type and the value is only in
the operands. This module folds the operands again with the rules of 6.1
(floor division, the divisor's sign for `%`) and 7.3 (literal arithmetic with
a float stays a float literal), exactly as the checker did.
"""

from __future__ import annotations

import math

from linnet.check.decls import ConstInfo, GenericInfo, LocalInfo, PreludeFn
from linnet.check.dims import Dim, DimOverflow, Symbol
from linnet.check.prelude import FLOAT_FUNCTIONS
from linnet.check.program import CheckedProgram
from linnet.check.types import CtFloatType, CtIntType
from linnet.syntax import ast

CtValue = Dim | float


def strip_parens(e: ast.Expr) -> ast.Expr:
    while isinstance(e, ast.Paren):
        e = e.inner
    return e


def ct_value(program: CheckedProgram, e: ast.Expr) -> CtValue | None:
    """The compile-time value of `e`, or None if it is a runtime value or unknown."""
    e = strip_parens(e)
    t = program.types.get(e)
    if isinstance(t, CtIntType):
        return t.value
    if isinstance(t, CtFloatType):
        return t.value
    try:
        return _fold(program, e)
    except (DimOverflow, ZeroDivisionError, OverflowError, ValueError):
        return None


def _fold(program: CheckedProgram, e: ast.Expr) -> CtValue | None:
    if isinstance(e, ast.IntLit):
        return Dim.const(e.value)
    if isinstance(e, ast.FloatLit):
        return e.value
    if isinstance(e, (ast.Name, ast.Member)):
        return _named(program, e)
    if isinstance(e, ast.Unary):
        inner = ct_value(program, e.operand)
        if inner is None or e.op == "!":
            return None
        return -inner if e.op == "-" else inner
    if isinstance(e, ast.Binary):
        a = ct_value(program, e.left)
        b = ct_value(program, e.right)
        if a is None or b is None:
            return None
        return _binary(e.op, a, b)
    if isinstance(e, ast.Call):
        return _call(program, e)
    return None


def _named(program: CheckedProgram, e: ast.Name | ast.Member) -> CtValue | None:
    decl = program.resolutions.get(e)
    if isinstance(decl, GenericInfo) and decl.kind == "Dim" and isinstance(decl.key, Symbol):
        return Dim.symbol(decl.key)
    if isinstance(decl, ConstInfo) and isinstance(decl.type, (CtIntType, CtFloatType)):
        value = decl.value
        if isinstance(value, bool):
            return None
        if isinstance(value, int):
            return Dim.const(value)
        if isinstance(value, float):
            return value
        return None
    if isinstance(decl, LocalInfo) and isinstance(decl.type, CtIntType):
        return decl.type.value
    return None


def _binary(op: str, a: CtValue, b: CtValue) -> CtValue | None:
    if isinstance(a, Dim) and isinstance(b, Dim):
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if op == "/":
            return a.floordiv(b)
        if op == "%":
            return a.mod(b)
        i, j = a.as_int(), b.as_int()
        if i is None or j is None or op not in ("&", "|", "^"):
            return None
        return Dim.const(i & j if op == "&" else i | j if op == "|" else i ^ j)
    x, y = _as_float(a), _as_float(b)
    if x is None or y is None:
        return None
    folded: float
    if op == "+":
        folded = x + y
    elif op == "-":
        folded = x - y
    elif op == "*":
        folded = x * y
    elif op == "/":
        folded = x / y
    elif op == "%":
        folded = math.fmod(x, y)
    else:
        return None
    return folded if math.isfinite(folded) else None


def _as_float(v: CtValue) -> float | None:
    if isinstance(v, Dim):
        i = v.as_int()
        return None if i is None else float(i)
    return v


def _call(program: CheckedProgram, e: ast.Call) -> CtValue | None:
    info = program.calls.get(e)
    if info is None or not isinstance(info.callee, PreludeFn):
        return None
    name = info.callee.name
    args = [a for a in info.args if a is not None]
    values = [ct_value(program, a) for a in args]
    if any(v is None for v in values):
        return None
    if name in ("min", "max") and len(values) == 2:
        a, b = values
        if isinstance(a, Dim) and isinstance(b, Dim):
            return a.minimum(b) if name == "min" else a.maximum(b)
        return None
    if name == "abs" and len(values) == 1:
        (v,) = values
        if isinstance(v, Dim):
            i = v.as_int()
            return v if i is None or i >= 0 else Dim.const(-i)
        return abs(v) if v is not None else None
    if name in FLOAT_FUNCTIONS and len(values) == 1:
        (v,) = values
        if isinstance(v, float):
            result = FLOAT_FUNCTIONS[name](v)
            return result if math.isfinite(result) else None
    return None
