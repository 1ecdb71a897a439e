"""Binary operators, their typing and broadcasting (language.md 7.4-7.6, 6.1).

Stage: part of the body checker. In: a `Binary` node. Out: its type.

Order of decisions for `a op b`:
1. `&&`, `||`: scalar `bool` operands only (E2116).
2. Both operands compile-time: fold (integers into a dimension, with E2205
   for divisors and E2123 for bitwise folding of symbols), or compare.
3. Otherwise a literal operand adopts the other operand's dtype (7.3), both
   dtypes must be identical (E2103), the dtype must suit the operator family
   (E2104), and tensor shapes broadcast (E2207).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from linnet.check import assignability
from linnet.check.dims import Dim, Symbol
from linnet.check.shapes import BroadcastFailure, broadcast
from linnet.check.types import (
    BOOL,
    ERROR,
    CtFloatType,
    CtIntType,
    DType,
    DTypeVar,
    EnumType,
    ErrorType,
    ScalarType,
    Shape,
    TensorType,
    Type,
    in_class,
    scalar,
    shape_str,
    show,
)
from linnet.syntax import ast

if TYPE_CHECKING:
    from linnet.check.exprs import BodyChecker

ARITHMETIC = frozenset({"+", "-", "*", "/", "%"})
ORDERING = frozenset({"<", "<=", ">", ">="})
EQUALITY = frozenset({"==", "!="})
BITWISE = frozenset({"&", "|", "^"})
LOGICAL = frozenset({"&&", "||"})
BOOL_T = scalar(BOOL)
ZERO = Dim.const(0)


def check_binary(chk: BodyChecker, e: ast.Binary, expected: Type | None) -> Type:
    op = e.op
    if op in LOGICAL:
        return _logical(chk, e)
    left = chk.expr(e.left)
    right = chk.expr(e.right)
    if isinstance(left, ErrorType) or isinstance(right, ErrorType):
        return ERROR
    if op in EQUALITY and (isinstance(left, EnumType) or isinstance(right, EnumType)):
        if isinstance(left, EnumType) and isinstance(right, EnumType) and left.info is right.info:
            return BOOL_T
        chk.ctx.error(
            "E2103" if isinstance(left, EnumType) and isinstance(right, EnumType) else "E2104",
            f"cannot compare {show(left)} with {show(right)}",
            e.span,
            notes=(f"the left operand is {show(left)}", f"the right operand is {show(right)}"),
        )
        return ERROR
    if isinstance(left, CtIntType) and isinstance(right, CtIntType):
        return chk.prefer(e, fold_ints(chk, e, op, left.value, right.value), expected)
    left_lit = isinstance(left, (CtIntType, CtFloatType))
    right_lit = isinstance(right, (CtIntType, CtFloatType))
    if left_lit and right_lit:
        return chk.prefer(e, _fold_floats(op, left, right), expected)  # type: ignore[arg-type]
    for side, t in ((e.left, left), (e.right, right)):
        if not isinstance(t, (ScalarType, TensorType, CtIntType, CtFloatType)):
            chk.ctx.error(
                "E2104",
                f"`{op}` cannot combine {show(t)}",
                side.span,
                "cannot be combined",
                notes=("operators take scalars, tensors and literals",),
            )
            return ERROR
    # At least one operand has a dtype; a literal operand adopts it (7.3).
    if left_lit:
        assert isinstance(right, (ScalarType, TensorType))
        if not assignability.adopt_literal(chk, e.left, left, right.dtype):  # type: ignore[arg-type]
            return ERROR
        return _typed(chk, e, op, None, right)
    if right_lit:
        assert isinstance(left, (ScalarType, TensorType))
        if not assignability.adopt_literal(chk, e.right, right, left.dtype):  # type: ignore[arg-type]
            return ERROR
        return _typed(chk, e, op, left, None)
    assert isinstance(left, (ScalarType, TensorType)) and isinstance(
        right, (ScalarType, TensorType)
    )
    return _typed(chk, e, op, left, right)


def _logical(chk: BodyChecker, e: ast.Binary) -> Type:
    ok = True
    for side in (e.left, e.right):
        t = chk.expr(side)
        if t is BOOL_T or isinstance(t, ErrorType):
            continue
        ok = False
        chk.ctx.error(
            "E2116",
            f"`{e.op}` needs scalar `bool` operands",
            side.span,
            f"found {show(t)}",
            notes=(f"this operand is {show(t)}",),
            help=("for boolean tensors use `&`, `|`, `^` and `select`",),
        )
    return BOOL_T if ok else ERROR


def fold_ints(chk: BodyChecker, e: ast.Expr, op: str, a: Dim, b: Dim) -> Type:
    """Two compile-time integers (6.1, 7.5)."""
    if op == "+":
        return chk.fold(lambda: a + b, e)
    if op == "-":
        return chk.fold(lambda: a - b, e)
    if op == "*":
        return chk.fold(lambda: a * b, e)
    if op in ("/", "%"):
        divisor = e.right if isinstance(e, ast.Binary) else e
        if not chk.where_mode and not positive_divisor(chk, b, divisor):
            return ERROR
        if op == "/":
            return chk.fold(lambda: a.floordiv(b), e)
        return chk.fold(lambda: a.mod(b), e)
    if op in ORDERING or op in EQUALITY:
        return BOOL_T
    # Bitwise folding needs constants (7.5).
    x, y = a.as_int(), b.as_int()
    if x is None or y is None:
        chk.ctx.error(
            "E2123",
            f"`{op}` on compile-time integers needs constants",
            e.span,
            "symbolic operand",
            notes=("bitwise operators fold only integer constants",),
        )
        return ERROR
    value = x & y if op == "&" else x | y if op == "|" else x ^ y
    return CtIntType(Dim.const(value))


def positive_divisor(chk: BodyChecker, d: Dim, node: ast.Expr) -> bool:
    """E2205: every `/` and `%` on dimensions needs a provably positive divisor (6.1)."""
    value = d.as_int()
    if value is not None and value > 0:
        return True
    if value is None and chk.facts.prove(d, ">", ZERO):
        return True
    names = sorted(s.name for s in d.symbols()) if value is None else []
    example = f"where {names[0]} > 0" if names else "a positive divisor"
    chk.proof_error(
        "E2205",
        f"the divisor `{d}` is not provably positive",
        node.span,
        "divisor must be > 0",
        help=(f"add a constraint such as `{example}`",),
    )
    return False


def _fold_floats(op: str, a: CtIntType | CtFloatType, b: CtIntType | CtFloatType) -> Type:
    """Literal arithmetic with a float literal stays a float literal (7.3)."""
    if op in ORDERING or op in EQUALITY:
        return BOOL_T
    x = _literal_value(a)
    y = _literal_value(b)
    if op in BITWISE:
        return CtFloatType(None)
    value: float | None = None
    if x is not None and y is not None:
        try:
            if op == "+":
                value = x + y
            elif op == "-":
                value = x - y
            elif op == "*":
                value = x * y
            elif op == "/":
                value = x / y
            else:
                value = math.fmod(x, y)
        except (ZeroDivisionError, OverflowError, ValueError):
            value = None
        if value is not None and not math.isfinite(value):
            value = None
    return CtFloatType(value)


def _literal_value(t: CtIntType | CtFloatType) -> float | None:
    if isinstance(t, CtFloatType):
        return t.value
    v = t.value.as_int()
    return None if v is None else float(v)


def _typed(
    chk: BodyChecker,
    e: ast.Binary,
    op: str,
    left: ScalarType | TensorType | None,
    right: ScalarType | TensorType | None,
) -> Type:
    """Operands with dtypes (a None side was a literal that adopted the other's dtype)."""
    if left is not None and right is not None and left.dtype is not right.dtype:
        chk.ctx.error(
            "E2103",
            "operands have different dtypes",
            e.span,
            notes=(f"the left operand is {left.dtype}", f"the right operand is {right.dtype}"),
            help=(f"convert one side explicitly, e.g. cast<{right.dtype}>({_short(e.left)})",),
        )
        return ERROR
    typed = left if left is not None else right
    assert typed is not None
    dtype = typed.dtype
    if not _family_accepts(chk, e, op, dtype):
        return ERROR
    result_dtype = BOOL if op in ORDERING or op in EQUALITY else dtype
    shapes = [t.shape for t in (left, right) if isinstance(t, TensorType)]
    if not shapes:
        return scalar(result_dtype)
    if len(shapes) == 1:
        return TensorType(shapes[0], result_dtype)
    shape = broadcast_or_report(chk, e, shapes[0], shapes[1])
    if shape is None:
        return ERROR
    return TensorType(shape, result_dtype)


def _short(node: ast.Expr) -> str:
    text = node.span.text
    return text if len(text) <= 20 else "x"


def _family_accepts(chk: BodyChecker, e: ast.Expr, op: str, dtype: DType) -> bool:
    """E2104 when the dtype does not suit the operator family (7.5)."""
    if op in ARITHMETIC or op in ORDERING:
        if in_class(dtype, "Numeric"):
            return True
        report_class(chk, e, op, dtype, "Numeric")
        return False
    if op in BITWISE:
        if dtype is BOOL or in_class(dtype, "Integer"):
            return True
        report_class(chk, e, op, dtype, "Integer")
        return False
    return True  # == and != take any dtype


def report_class(chk: BodyChecker, e: ast.Expr, op: str, dtype: DType, needed: str) -> None:
    """E2104 with the help of 16.2 for booleans, generics and floats."""
    helps: list[str] = []
    if dtype is BOOL:
        helps.append("use `&&`, `||`, `!` or `select` for booleans")
    elif isinstance(dtype, DTypeVar):
        helps.append(f"constrain the generic with `{needed}`: `{dtype}: {needed}`")
    elif needed == "Integer":
        helps.append("cast to an integer dtype first")
    else:
        helps.append("cast first")
    chk.ctx.error(
        "E2104",
        f"`{op}` cannot be applied to dtype `{dtype}`",
        e.span,
        f"needs {'an' if needed[0] in 'AEIOU' else 'a'} {needed} dtype",
        notes=(f"the operands have dtype `{dtype}`",),
        help=tuple(helps),
    )


def broadcast_or_report(chk: BodyChecker, e: ast.Expr, a: Shape, b: Shape) -> Shape | None:
    """Broadcast two shapes (7.6) or report E2207 with both dimensions and shapes."""
    result = broadcast(a, b, chk.facts)
    if not isinstance(result, BroadcastFailure):
        return result
    left = _item(result.left)
    right = _item(result.right)
    chk.proof_error(
        "E2207",
        f"cannot prove that `[{shape_str(a)}]` and `[{shape_str(b)}]` broadcast",
        e.span,
        f"`{left}` against `{right}`",
        notes=(
            f"the aligned dimensions are `{left}` and `{right}`; they must be equal or 1",
            f"the left shape is `[{shape_str(a)}]`, the right shape is `[{shape_str(b)}]`",
        ),
        help=("share one generic between the axes, or relate them in `where`",),
    )
    return None


def _item(item: object) -> str:
    if type(item) is Symbol:
        return f"*{item.name}"
    return str(item)
