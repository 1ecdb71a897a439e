"""Gradient clauses in the front end (language-extensions 3.1, 3.2; rule 19).

Parsing (`grad` contextual, after any function body), the formatter's layout
(`} grad(y, dy) {`), and the checker's rules G1-G8 with their primary spans;
the corpus cases (tests/conformance, `x3_`) must each report exactly one
diagnostic.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from checker_support import ROOT, STDLIB, check, clean, only, position

from linnet.check.types import TensorType, TupleType
from linnet.pipeline import check_paths
from linnet.source import SourceFile
from linnet.spec_test import Case, read_manifest
from linnet.syntax import ast
from linnet.syntax.format import format_source
from linnet.syntax.parser import parse

CONFORMANCE = ROOT / "tests" / "conformance"

GATED = """
module m

op gated<N: Dim>(signal: Tensor[N; f32], gate: Tensor[N; f32], limit: f32) -> Tensor[N; f32] {
    return signal * gate
} grad(out, g) {
    let to_signal = g * gate
    return (max(min(to_signal, limit), -limit), g * signal)
}
"""


def _parse(text: str) -> ast.File:
    tree, diagnostics = parse(SourceFile("t.linnet", text))
    assert tree is not None and not diagnostics, [d.message for d in diagnostics]
    return tree


def test_the_clause_is_a_field_of_the_declaration() -> None:
    text = GATED.lstrip("\n")
    (fn,) = _parse(text).items
    assert isinstance(fn, ast.FnDecl) and fn.grad is not None
    assert (fn.grad.result.name, fn.grad.gradient.name) == ("out", "g")
    assert text[fn.grad.head.start : fn.grad.head.end] == "grad(out, g)"
    assert fn.span.end == fn.grad.span.end == text.rindex("}") + 1
    assert len(fn.grad.body.stmts) == 2


def test_grad_stays_an_ordinary_name_elsewhere() -> None:
    clean(
        """
        module m

        pub fn grad(x: f32) -> f32 {
            let grad_of = x
            return grad_of
        }

        pub fn twice(x: f32) -> f32 {
            let grad = grad(x)
            return grad * 2.0
        }
        """
    )


def test_a_malformed_head_is_a_syntax_error() -> None:
    _, diagnostics = parse(
        SourceFile(
            "t.linnet", "module m\n\nop f(x: f32) -> f32 { return x } grad(y) { return y }\n"
        )
    )
    assert [d.code for d in diagnostics] == ["E1101"]


def test_the_formatter_keeps_the_clause_on_the_closing_line() -> None:
    messy = (
        "module m\n\nop f(x: Tensor[4; f32]) -> Tensor[4; f32] { return x }"
        "   grad ( y ,dy )   {\n  // straight through\n  return dy }\n"
    )
    text, diagnostics = format_source(SourceFile("t.linnet", messy))
    assert not diagnostics
    assert text == (
        "module m\n\nop f(x: Tensor[4; f32]) -> Tensor[4; f32] {\n    return x\n"
        "} grad(y, dy) {\n    // straight through\n    return dy\n}\n"
    )
    again, _ = format_source(SourceFile("t.linnet", text))
    assert again == text


def test_the_spec_examples_are_formatted_already() -> None:
    path = CONFORMANCE / "valid" / "x3_grad_examples.linnet"
    text = path.read_text(encoding="utf-8")
    assert format_source(SourceFile(str(path), text))[0] == text


def test_the_clause_records_the_differentiated_parameters() -> None:
    program = clean(GATED)
    ((fn, info),) = program.grad_clauses.items()
    assert fn.name == "gated" and info.wrt == (0, 1)
    assert isinstance(info.gradient_type, TupleType)
    assert all(isinstance(t, TensorType) for t in info.gradient_type.elems)
    assert info.result is not None and info.result.name == "out"


def test_the_two_names_are_exempt_from_w1002_but_clause_locals_are_not() -> None:
    program = check(
        """
        module m

        pub op keep(x: Tensor[4; f32]) -> Tensor[4; f32] {
            return x
        } grad(y, dy) {
            let spare = x
            return x
        }
        """
    )
    assert [(d.code, d.message) for d in program.diagnostics] == [("W1002", "unused local `spare`")]


def test_clause_calls_count_as_calls_of_the_op() -> None:
    d = only(
        """
        module m

        pub op loop_back(x: Tensor[4; f32]) -> Tensor[4; f32] {
            return x
        } grad(y, dy) {
            return loop_back(dy)
        }
        """
    )
    assert d.code == "E2119" and position(d) == (6, 12)


def test_rejected_clauses_are_not_checked_further() -> None:
    # G5: the body would be E1201 (`nowhere`) but only the E2125 is reported.
    d = only(
        """
        module m

        pub fn twice(x: f32) -> f32 {
            return x * 2.0
        } grad(y, dy) {
            return nowhere
        }
        """
    )
    assert d.code == "E2125" and position(d) == (5, 3)
    assert d.related == ()


def test_g2_labels_the_result_type() -> None:
    d = only(
        """
        module m

        pub op levels(x: Tensor[4; f32]) -> Tensor[4; i32] {
            return cast<i32>(x)
        } grad(y, dy) {
            return x
        }
        """
    )
    assert d.code == "E2125" and position(d) == (5, 3)
    (label,) = d.related
    assert label.span.file.line_col(label.span.start) == (3, 37)


def test_g3_points_at_the_parameter_and_labels_the_clause() -> None:
    d = only(
        """
        module m

        pub op offset(x: Tensor[4; f32], shift: Tensor[4; f32]? = none) -> Tensor[4; f32] {
            return x
        } grad(y, dy) {
            return dy
        }
        """
    )
    assert d.code == "E2125" and position(d) == (3, 34)
    (label,) = d.related
    assert label.span.file.line_col(label.span.start) == (5, 3)


@pytest.mark.parametrize(
    ("names", "code", "column"), [("y, y", "E1205", 11), ("exp, dy", "E1207", 8)]
)
def test_g6_names(names: str, code: str, column: int) -> None:
    d = only(
        f"""
        module m

        pub op keep(x: Tensor[4; f32]) -> Tensor[4; f32] {{
            return x
        }} grad({names}) {{
            return x
        }}
        """
    )
    assert (d.code, position(d)) == (code, (5, column))


X3_INVALID = [c for c in read_manifest(CONFORMANCE) if "x3_" in c.file and c.expect == "error"]


@pytest.mark.parametrize("case", X3_INVALID, ids=[c.file for c in X3_INVALID])
def test_each_corpus_case_reports_exactly_one_diagnostic(case: Case) -> None:
    program = check_paths([CONFORMANCE / case.file], STDLIB, relative_to=CONFORMANCE)
    found = [(d.code, *position(d)) for d in program.diagnostics]
    assert found == [(case.code, case.line, case.column)]


def test_the_corpus_has_the_section_10_rejections() -> None:
    codes = sorted(Path(c.file).name.split("_x3_")[0] for c in X3_INVALID)
    assert codes.count("e2125") == 10
    assert {"e2101", "e2103", "e2202", "e2120", "e1205", "e1201"} <= set(codes)


WHERE_FACT = """
module m

pub op pairs<N: Dim>(x: Tensor[N; f32]) -> Tensor[N; f32]
where N % 2 == 0 {
    return x
} grad(y, dy) {
    let halves = reshape(dy, [N / 2, 2])
    return reshape(halves * cast<f32>(N), [N])
}
"""


def test_the_clause_sees_the_generics_and_where_facts() -> None:
    clean(WHERE_FACT)
    d = only(WHERE_FACT.replace("\nwhere N % 2 == 0 {", " {"))
    assert d.code == "E2203" and position(d) == (6, 18)
