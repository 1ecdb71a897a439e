"""Syntax tree builders: parentheses follow section 7.4, literals lex back to their values."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from linnet.check.dims import Dim, Symbol
from linnet.sourcegen import build
from linnet.syntax import ast
from linnet.syntax.parser import parse_text


def _parsed(text: str) -> ast.Expr:
    file, diags = parse_text(f"module m\nconst X = {text}\n")
    assert file is not None and not diags, diags
    decl = file.items[0]
    assert isinstance(decl, ast.ConstDecl)
    return decl.value


def test_binary_adds_only_needed_parentheses() -> None:
    a, b, c = build.name("a"), build.name("b"), build.name("c")
    assert build.text(build.binary("*", build.binary("+", a, b), c)) == "(a + b) * c"
    assert build.text(build.binary("+", build.binary("*", a, b), c)) == "a * b + c"
    assert build.text(build.binary("-", a, build.binary("-", b, c))) == "a - (b - c)"
    assert build.text(build.binary("-", build.binary("-", a, b), c)) == "a - b - c"
    assert build.text(build.binary("==", build.binary("==", a, b), c)) == "(a == b) == c"
    assert build.text(build.binary("==", build.binary("<", a, b), c)) == "a < b == c"


def test_unary_and_postfix_wrap_their_operands() -> None:
    a, b = build.name("a"), build.name("b")
    assert build.text(build.unary("-", build.binary("+", a, b))) == "-(a + b)"
    assert build.text(build.unary("-", build.unary("-", a))) == "-(-a)"
    assert build.text(build.index(build.binary("+", a, b), [build.int_lit(0)])) == "(a + b)[0]"
    red = build.reduction("sum", ["i"], build.index(a, [build.name("i")]))
    assert build.text(build.binary("+", red, b)) == "(sum[i] a[i]) + b"


@given(st.floats(allow_nan=False, allow_infinity=False, width=64))
def test_float_literals_read_back_exactly(value: float) -> None:
    expr = _parsed(build.text(build.float_lit(value)))
    negative = isinstance(expr, ast.Unary)
    lit = expr.operand if isinstance(expr, ast.Unary) else expr
    assert isinstance(lit, ast.FloatLit)
    assert (-lit.value if negative else lit.value) == value or (value == 0 and lit.value == 0)


def test_non_finite_floats_have_no_literal() -> None:
    with pytest.raises(ValueError):
        build.float_lit(math.inf)


def test_dimensions_print_in_normal_form() -> None:
    b, h, n = (Dim.symbol(Symbol(x)) for x in ("B", "H", "N"))
    assert (
        build.text(build.dim(b * h * 2)) == "2 * B * H"
        or build.text(build.dim(b * h * 2)) == "2 * H * B"
    )
    assert build.text(build.dim(b * h.floordiv(n))) in ("B * (H / N)", "(H / N) * B")
    assert build.text(build.dim(b - 3)) == "B - 3"
    assert build.text(build.dim(Dim.const(0))) == "0"
