"""Folding constant initialisers to values (language.md 14.1).

Stage: after a constant's initialiser has been type-checked. In: the
initialiser AST and the checker's side tables. Out: a Python value (int,
float, bool or `EnumVariant`) for `ConstInfo.value`, or E2123 when the
initialiser needs something that only exists at run time.

Compile-time integers and float literals are already folded by the
expression checker (their types carry the value); this module adds what
typed constants need: arithmetic on annotated constants, comparisons,
logical operators, enum variants and the prelude's arithmetic functions.
Integer results wrap to the width of their dtype, as at run time (7.5).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from linnet.check.decls import ConstInfo, ConstValue, EnumVariant
from linnet.check.types import CtFloatType, CtIntType, ErrorType, ScalarDType, ScalarType
from linnet.syntax import ast

if TYPE_CHECKING:
    from linnet.check.exprs import BodyChecker


class NotConstant(Exception):
    """The initialiser needs a value that is not known at compile time."""


def evaluate(chk: BodyChecker, e: ast.Expr) -> ConstValue | None:
    if isinstance(chk.types.get(e), ErrorType):
        return None
    try:
        return _eval(chk, e)
    except NotConstant as failure:
        node = failure.args[0] if failure.args else e
        chk.ctx.error(
            "E2123",
            "a constant's initialiser must be evaluable at compile time",
            node.span,
            "not a compile-time value",
            notes=("constants use literals, other constants, enum variants and arithmetic",),
        )
        return None
    except (ZeroDivisionError, OverflowError, ValueError):
        chk.ctx.error("E2123", "this constant cannot be evaluated", e.span, "evaluation fails here")
        return None


def _eval(chk: BodyChecker, e: ast.Expr) -> ConstValue:
    t = chk.types.get(e)
    if isinstance(t, CtIntType):
        folded = t.value.as_int()
        if folded is None:
            raise NotConstant(e)
        return folded
    if isinstance(t, CtFloatType) and t.value is not None:
        return t.value
    if isinstance(e, ast.Paren):
        return _eval(chk, e.inner)
    if isinstance(e, ast.BoolLit):
        return e.value
    if isinstance(e, (ast.IntLit, ast.FloatLit)):
        return e.value
    if isinstance(e, (ast.Name, ast.Member)):
        decl = chk.resolutions.get(e)
        if isinstance(decl, ConstInfo) and decl.value is not None:
            return decl.value
        if isinstance(decl, EnumVariant):
            return decl
        raise NotConstant(e)
    if isinstance(e, ast.Unary):
        operand = _eval(chk, e.operand)
        if e.op == "!":
            return not operand
        number = _number(operand, e)
        return _wrap(chk, e, -number if e.op == "-" else number)
    if isinstance(e, ast.Binary):
        return _binary(chk, e, _eval(chk, e.left), _eval(chk, e.right))
    if isinstance(e, ast.Call) and isinstance(e.callee, ast.Name):
        return _call(chk, e, e.callee.ident.name)
    raise NotConstant(e)


def _number(value: ConstValue, node: ast.Expr) -> int | float:
    if isinstance(value, EnumVariant):
        raise NotConstant(node)
    return value


def _binary(chk: BodyChecker, e: ast.Binary, a: ConstValue, b: ConstValue) -> ConstValue:
    op = e.op
    if op == "&&":
        return bool(a) and bool(b)
    if op == "||":
        return bool(a) or bool(b)
    if op == "==":
        return a == b
    if op == "!=":
        return a != b
    x, y = _number(a, e.left), _number(b, e.right)
    if op == "<":
        return x < y
    if op == "<=":
        return x <= y
    if op == ">":
        return x > y
    if op == ">=":
        return x >= y
    if op in ("&", "|", "^"):
        if isinstance(x, bool) and isinstance(y, bool):
            return {"&": x and y, "|": x or y, "^": x != y}[op]
        xi, yi = int(x), int(y)
        return _wrap(chk, e, xi & yi if op == "&" else xi | yi if op == "|" else xi ^ yi)
    if isinstance(x, int) and isinstance(y, int) and not _is_float(chk, e):
        if op == "+":
            return _wrap(chk, e, x + y)
        if op == "-":
            return _wrap(chk, e, x - y)
        if op == "*":
            return _wrap(chk, e, x * y)
        # Runtime integer division truncates toward zero (7.5).
        quotient = abs(x) // abs(y) * (1 if (x >= 0) == (y >= 0) else -1)
        return _wrap(chk, e, quotient if op == "/" else x - quotient * y)
    fx, fy = float(x), float(y)
    result = {"+": fx + fy, "-": fx - fy, "*": fx * fy}.get(op)
    if result is None:
        result = fx / fy if op == "/" else math.fmod(fx, fy)
    return result


def _is_float(chk: BodyChecker, e: ast.Expr) -> bool:
    t = chk.adopted.get(e) or chk.types.get(e)
    return isinstance(t, ScalarType) and isinstance(t.dtype, ScalarDType) and t.dtype.is_float


def _wrap(chk: BodyChecker, e: ast.Expr, value: int | float) -> int | float:
    """Two's-complement wrapping at the dtype's width (7.5)."""
    t = chk.adopted.get(e) or chk.types.get(e)
    if not isinstance(value, int) or not isinstance(t, ScalarType):
        return value
    dtype = t.dtype
    if not isinstance(dtype, ScalarDType) or not dtype.is_int:
        return value
    bits = dtype.bits
    value &= (1 << bits) - 1
    if dtype.is_signed and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


def _call(chk: BodyChecker, e: ast.Call, name: str) -> ConstValue:
    args = [_number(_eval(chk, a.value), a.value) for a in e.args]
    if name in ("min", "max") and len(args) == 2:
        return min(args) if name == "min" else max(args)
    if name == "abs" and len(args) == 1:
        return abs(args[0])
    if name in ("shl", "shr") and len(args) == 2:
        x, bits = int(args[0]), int(args[1])
        if name == "shl":
            return _wrap(chk, e, x << bits if 0 <= bits <= 63 else 0)
        return x >> bits if 0 <= bits <= 63 else (-1 if x < 0 else 0)
    if name == "cast" and len(args) == 1:
        t = chk.types.get(e)
        if isinstance(t, ScalarType) and isinstance(t.dtype, ScalarDType):
            if t.dtype.name == "bool":
                return args[0] != 0
            if t.dtype.is_int:
                return _wrap(chk, e, int(args[0]))
            return float(args[0])
    raise NotConstant(e)
