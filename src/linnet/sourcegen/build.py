"""Syntax tree builders: the importers' way to write Linnet expressions and types.

Stage: used by importers (`linnet.sourcegen.translate` and every translator)
to build the syntax tree of section 3 by hand; `syntax.format.format_file`
prints it. In: names, literals, sub-expressions. Out: `linnet.syntax.ast`
nodes carrying one shared placeholder span (a built tree has no source text).

Why builders rather than text: the formatter prints parentheses exactly as
written (section 17), so precedence has to be settled while building. Every
builder here adds the parentheses that section 7.4 requires (`binary` wraps a
looser operand, `index` and `member` wrap anything that is not a postfix
expression) and no others, so generated code reads like code a person wrote.

>>> from linnet.syntax.format_expr import ExprPrinter  # doctest: +SKIP
>>> text(binary("*", binary("+", name("a"), name("b")), float_lit(0.5)))
'(a + b) * 0.5'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

from linnet.check.dims import FLOOR, MAX, MIN, MOD, Dim, Op, Symbol
from linnet.source import SourceFile, Span
from linnet.syntax import ast

_FILE: Final = SourceFile("<generated>", "")
SPAN: Final = Span(_FILE, 0, 0)
"""The placeholder span of every built node."""

_LEVEL: Final[dict[str, int]] = {
    "||": 1, "&&": 2, "==": 3, "!=": 3, "<": 4, "<=": 4, ">": 4, ">=": 4,
    "|": 5, "^": 6, "&": 7, "+": 8, "-": 8, "*": 9, "/": 9, "%": 9,
}  # fmt: skip
_PREFIX_LEVEL: Final = 10
_POSTFIX_LEVEL: Final = 11

# Comparisons do not chain (7.4: `a < b < c` does not type-check), so a
# comparison operand that is itself a comparison always keeps its parentheses.
_NON_ASSOC: Final = frozenset({3, 4})


def ident(text: str) -> ast.Ident:
    return ast.Ident(text, SPAN)


def name(text: str) -> ast.Name:
    return ast.Name(ident(text), SPAN)


def path(text: str) -> ast.Expr:
    """`a.b.c` as member reads (a child's member, `module.item`)."""
    parts = text.split(".")
    expr: ast.Expr = name(parts[0])
    for part in parts[1:]:
        expr = ast.Member(expr, ident(part), SPAN)
    return expr


def int_lit(value: int) -> ast.Expr:
    """An integer literal; negative values are written with unary minus (2.8)."""
    if value < 0:
        return ast.Unary("-", ast.IntLit(str(-value), -value, SPAN), SPAN)
    return ast.IntLit(str(value), value, SPAN)


def float_text(value: float) -> str:
    """The shortest spelling of a finite float that lexes as a floating literal (2.8)."""
    if not math.isfinite(value):
        raise ValueError(f"{value} has no literal")
    text = repr(abs(float(value)))
    if "e" in text or "E" in text:
        mantissa, exponent = text.split("e")
        exp_value = int(exponent)
        return f"{mantissa}e{exp_value}"
    if "." not in text:
        text += ".0"
    return text


def float_lit(value: float) -> ast.Expr:
    """A floating literal; negative values get unary minus. Must be finite."""
    text = float_text(value)
    lit = ast.FloatLit(text, abs(float(value)), SPAN)
    if math.copysign(1.0, value) < 0:
        return ast.Unary("-", lit, SPAN)
    return lit


def bool_lit(value: bool) -> ast.Expr:
    return ast.BoolLit(value, SPAN)


def none() -> ast.Expr:
    return ast.NoneLit(SPAN)


def some(value: ast.Expr) -> ast.Expr:
    return ast.SomeExpr(value, SPAN)


def paren(expr: ast.Expr) -> ast.Expr:
    return ast.Paren(expr, SPAN)


def level(expr: ast.Expr) -> int:
    """The precedence level of an expression (7.4); higher binds tighter."""
    if isinstance(expr, ast.Binary):
        return _LEVEL[expr.op]
    if isinstance(expr, ast.Unary):
        return _PREFIX_LEVEL
    if isinstance(expr, (ast.IfExpr, ast.MatchExpr, ast.Reduction)):
        return 0
    if isinstance(expr, (ast.IntLit, ast.FloatLit)):
        return _POSTFIX_LEVEL
    return _POSTFIX_LEVEL


def _wrap(expr: ast.Expr, at_least: int) -> ast.Expr:
    return paren(expr) if level(expr) < at_least else expr


def binary(op: str, left: ast.Expr, right: ast.Expr) -> ast.Expr:
    """`left op right` with the parentheses section 7.4 needs (left-associative)."""
    lv = _LEVEL[op]
    lhs = _wrap(left, lv + 1 if lv in _NON_ASSOC else lv)
    # A reduction swallows everything to its right (3.3 rule 14), so one on the
    # left must be parenthesised; on the right it is safe only as the last operand.
    if isinstance(left, ast.Reduction):
        lhs = paren(left)
    rhs = _wrap(right, lv + 1)
    return ast.Binary(op, lhs, rhs, SPAN, SPAN)  # type: ignore[arg-type]


def unary(op: str, operand: ast.Expr) -> ast.Expr:
    """`-x`, `!x`: one prefix operator at most (3.3 rule 10), so nested ones get parentheses."""
    inner = operand if level(operand) > _PREFIX_LEVEL else paren(operand)
    return ast.Unary(op, inner, SPAN)  # type: ignore[arg-type]


def arg(value: ast.Expr, label: str | None = None) -> ast.Arg:
    return ast.Arg(None if label is None else ident(label), value, SPAN)


GenArgLike = ast.Expr | ast.NamedType | ast.TensorType


def call(
    callee: str | ast.Expr,
    *args: ast.Expr,
    generics: Sequence[GenArgLike] | None = None,
    named: Sequence[tuple[str, ast.Expr]] = (),
) -> ast.Expr:
    """`f(args)`, `f<G>(args)`, `m.f(args)`; `named` arguments come last (`axis = -1`)."""
    target = path(callee) if isinstance(callee, str) else callee
    all_args = tuple(arg(a) for a in args) + tuple(arg(v, k) for k, v in named)
    gen = None if generics is None else tuple(generics)
    return ast.Call(target, gen, all_args, False, SPAN)


def member(target: ast.Expr, item: str) -> ast.Expr:
    return ast.Member(_wrap(target, _POSTFIX_LEVEL), ident(item), SPAN)


Component = ast.Expr | ast.Slice | ast.EllipsisComponent | ast.PackIndex


def index(target: ast.Expr, components: Sequence[Component]) -> ast.Expr:
    """`target[c1, c2]`: element access or slicing (sections 8.3, 9)."""
    return ast.Index(_wrap(target, _POSTFIX_LEVEL), tuple(components), SPAN)


def slice_(
    start: ast.Expr | None = None, stop: ast.Expr | None = None, step: ast.Expr | None = None
) -> ast.Slice:
    return ast.Slice(start, stop, step, step is not None, SPAN)


def ellipsis() -> ast.EllipsisComponent:
    return ast.EllipsisComponent(SPAN)


def pack_index(text: str) -> ast.PackIndex:
    return ast.PackIndex(ident(text), SPAN)


def tuple_expr(elems: Sequence[ast.Expr]) -> ast.Expr:
    return ast.TupleExpr(tuple(elems), False, SPAN)


def shape(dims: Sequence[ast.Expr]) -> ast.Expr:
    """A shape literal `[a, b]` (7.10)."""
    return ast.ShapeLit(tuple(dims), False, SPAN)


def reduction(
    kind: str, indices: Sequence[str], body: ast.Expr, accumulator: str | None = None
) -> ast.Expr:
    """`sum[i, j] body` or `sum<f32>[i] body` (8.6)."""
    acc = None if accumulator is None else named_type(accumulator)
    return ast.Reduction(
        kind,  # type: ignore[arg-type]
        SPAN,
        acc,
        tuple(ident(i) for i in indices),
        body,
        SPAN,
    )


def if_expr(cond: ast.Expr, then: ast.Expr, otherwise: ast.Expr) -> ast.Expr:
    return ast.IfExpr(cond, then, otherwise, SPAN)


# ---------------------------------------------------------------- types


def named_type(text: str, args: Sequence[GenArgLike] | None = None) -> ast.NamedType:
    parts = tuple(ident(p) for p in text.split("."))
    return ast.NamedType(parts, None if args is None else tuple(args), SPAN)


def tensor_type(dims: Sequence[ast.Expr | ast.PackRef], dtype: str) -> ast.Type:
    """`Tensor[d1, d2; dtype]`; an empty shape is the scalar type `dtype` (5.1)."""
    if not dims:
        return named_type(dtype)
    return ast.TensorType(tuple(dims), named_type(dtype), SPAN)


def pack_ref(text: str) -> ast.PackRef:
    return ast.PackRef(ident(text), SPAN)


def array_type(elem: ast.Type, length: ast.Expr) -> ast.Type:
    return ast.ArrayType(elem, length, SPAN)


def optional_type(inner: ast.Type) -> ast.Type:
    return ast.OptionalType(inner, SPAN)


def tuple_type(elems: Sequence[ast.Type]) -> ast.Type:
    return ast.TupleType(tuple(elems), False, SPAN)


# ---------------------------------------------------------------- dimensions


def dim(d: Dim | int) -> ast.Expr:
    """A normal-form dimension as an expression (6.1), with minimal parentheses."""
    if isinstance(d, int):
        return int_lit(d)
    terms = d.terms
    if not terms:
        return int_lit(0)
    # Positive terms first (`H + 2 * P - K`), as the checker prints dimensions.
    ordered = [t for t in terms if t[1] > 0] + [t for t in terms if t[1] < 0]
    expr: ast.Expr | None = None
    for mono, coeff in ordered:
        term = _term(mono, abs(coeff))
        if expr is None:
            expr = unary("-", term) if coeff < 0 else term
        else:
            expr = binary("-" if coeff < 0 else "+", expr, term)
    assert expr is not None
    return expr


def _term(mono: tuple[Symbol | Op, ...], coeff: int) -> ast.Expr:
    factors: list[ast.Expr] = []
    if coeff != 1 or not mono:
        factors.append(int_lit(coeff))
    factors.extend(_atom(a) for a in mono)
    expr = factors[0]
    for f in factors[1:]:
        # `B * (H / N)`: a division on the right of `*` keeps its parentheses.
        expr = binary("*", expr, f)
    return expr


def _atom(a: Symbol | Op) -> ast.Expr:
    if isinstance(a, Symbol):
        if a.is_pack:
            raise ValueError("shape packs have no expression form")
        return name(a.name)
    if a.kind == MIN:
        return call("min", dim(a.a), dim(a.b))
    if a.kind == MAX:
        return call("max", dim(a.a), dim(a.b))
    op = "/" if a.kind == FLOOR else "%"
    assert a.kind in (FLOOR, MOD)
    return binary(op, dim(a.a), dim(a.b))


def text(expr: ast.Expr) -> str:
    """The formatted text of one expression (tests, notes and error messages)."""
    from linnet.syntax.format import format_file

    decl = ast.ConstDecl(False, ident("X"), None, expr, SPAN)
    file = ast.File((ident("m"),), SPAN, (), (decl,), (), SPAN)
    out = format_file(file, _FILE)
    return out.split("const X = ", 1)[1].strip()
