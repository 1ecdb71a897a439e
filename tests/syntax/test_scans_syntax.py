"""Parsing runtime `for` loops, scans and `yield` (language-extensions 0.1, 0.2 rules 16-18, 22).

The formatter's layout for them is a case file (format_cases/x1_scans.case); the
checker's rules are in tests/check/test_scans_check.py and the conformance corpus.
"""

from __future__ import annotations

from linnet.syntax import ast
from linnet.syntax.parser import parse_text
from linnet.syntax.tokens import KEYWORDS, RESERVED


def parsed(text: str) -> tuple[ast.File | None, list[tuple[str, str]]]:
    file, diagnostics = parse_text(text)
    return file, [(d.code, d.span.text if d.span else "") for d in diagnostics]


def body_of(text: str) -> tuple[ast.Stmt, ...]:
    file, errors = parsed(f"module m\nfn f() {{\n{text}\n}}")
    assert errors == [], errors
    assert file is not None
    fn = file.items[0]
    assert isinstance(fn, ast.FnDecl)
    return fn.body.stmts


def test_yield_is_a_keyword_now() -> None:
    assert "yield" in KEYWORDS and "yield" not in RESERVED
    # E1101, a keyword where a name is expected (no longer E1004)
    assert parsed("module m\nfn f(yield: i32) {}")[1] == [("E1101", "yield")]
    assert parsed("module m\nfn f() { let yield = 1 }")[1] == [("E1101", "yield")]
    assert parsed("module m\nfn f() { yield = 1 }")[1] == [("E1101", "yield")]


def test_statement_form_and_scan_values() -> None:
    loop, scan, ret = body_of(
        "for i in 0..N { x = x + 1 }\nlet (a, b) = for k in 2..5 { yield (k, k) }\n"
        "return for j in a..b - 1 { yield j }"
    )
    assert isinstance(loop, ast.ForLoop)
    assert loop.var.name == "i" and loop.range_span.text == "0..N"
    assert isinstance(loop.body.stmts[0], ast.AssignStmt)
    assert isinstance(scan, ast.LetStmt) and isinstance(scan.value, ast.ForLoop)
    last = scan.value.body.stmts[-1]
    assert isinstance(last, ast.YieldStmt) and isinstance(last.value, ast.TupleExpr)
    # rule 18: `return` followed by `for` returns the loop's value
    assert isinstance(ret, ast.ReturnStmt) and isinstance(ret.value, ast.ForLoop)
    assert ret.value.range_span.text == "a..b - 1"


def test_a_for_is_never_an_operand() -> None:
    # rule 16: parsed (to stay in step) and reported once, at the keyword
    assert parsed("module m\nfn f() { let y = x + for i in 0..3 { yield i } }")[1] == [
        ("E1101", "for")
    ]
    # as an argument it parses: where it may stand is the checker's E2124
    assert parsed("module m\nfn f() { let y = g(for i in 0..3 { yield i }) }")[1] == []


def test_loop_variable_is_one_name() -> None:
    # rule 17: a tuple pattern is E1101, a reserved word E1004, a keyword E1101
    assert parsed("module m\nfn f() { for (a, b) in 0..3 {} }")[1] == [("E1101", "(")]
    assert parsed("module m\nfn f() { for mut in 0..3 {} }")[1] == [("E1004", "mut")]
    assert parsed("module m\nfn f() { for yield in 0..3 {} }")[1] == [("E1101", "yield")]
    assert [s.var.name for s in body_of("for _ in 0..3 {}") if isinstance(s, ast.ForLoop)] == ["_"]


def test_recovery_restarts_at_for_and_yield() -> None:
    # rule 22: after a broken statement, `for` and `yield` start the next one
    text = "module m\nfn f() {\n let = 1\n for i in 0..3 { let = 2 }\n let = 3\n}"
    assert [code for code, _ in parsed(text)[1]] == ["E1101"] * 3
    text = "module m\nfn f() {\n let = 1\n yield x\n}"
    assert [code for code, _ in parsed(text)[1]] == ["E1101"]


def test_a_for_over_an_array_points_to_static_for() -> None:
    _, diagnostics = parse_text("module m\nfn f() { for layer in layers { } }")
    assert [(d.code, d.span.text if d.span else "") for d in diagnostics] == [("E1101", "{")]
    assert diagnostics[0].help == ("loop over a `sub` array with `static for`",)
