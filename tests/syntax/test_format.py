"""The formatter against language.md section 17.

Case files (Black style) live in `format_cases/`: the input, then a line
`=== output` and the expected output; a case without that line is already
canonical and must come out unchanged. Every formatted text is also checked to
be a fixed point (formatting it again changes nothing) and to parse to the same
syntax tree as the input, comments included (`check_round_trip`).
"""

from __future__ import annotations

import doctest
import importlib.util
import random
import re
import time
from pathlib import Path

import pytest

from linnet.errors import InternalError
from linnet.source import SourceFile, Span
from linnet.syntax import ast, doc
from linnet.syntax import format as fmt
from linnet.syntax.doc import (
    BLANKLINE,
    HARDLINE,
    LINE,
    SOFTLINE,
    concat,
    flat,
    group,
    if_break,
    indent,
    line_suffix,
    render,
)
from linnet.syntax.format import format_file, format_source
from linnet.syntax.format_comments import clean_comment
from linnet.syntax.lexer import scan
from linnet.syntax.parser import parse

ROOT = Path(__file__).resolve().parents[2]
CASES = Path(__file__).parent / "format_cases"
DOCS = Path("/work/shared/docs/language.md")
SEPARATOR = "=== output\n"


# ---------------------------------------------------------------- helpers


def parse_ok(text: str, path: str = "<input>") -> ast.File:
    tree, diagnostics = parse(SourceFile(path, text))
    assert not [d for d in diagnostics if d.is_error], [(d.code, d.message) for d in diagnostics]
    assert tree is not None
    return tree


def formatted(text: str) -> str:
    out, diagnostics = format_source(SourceFile("<input>", text))
    assert out is not None, [(d.code, d.message) for d in diagnostics]
    return out


def comments(tree: ast.File) -> list[tuple[str, bool]]:
    # Section 17: comments are reproduced verbatim except for trailing blanks.
    return [(clean_comment(c.text), c.own_line) for c in tree.comments]


def check_round_trip(text: str) -> str:
    """Format `text`; assert the tree (comments included) is unchanged, the
    result is a fixed point and its lines obey the layout rules."""
    before = parse_ok(text)
    out = formatted(text)
    after = parse_ok(out, "<formatted>")
    assert ast.same_tree(
        (before.module, before.uses, before.items), (after.module, after.uses, after.items)
    ), out
    assert comments(before) == comments(after), out
    assert formatted(out) == out, "formatting is not idempotent:\n" + out
    assert out.endswith("\n") and not out.endswith("\n\n")
    assert "\r" not in out
    for line in out.split("\n"):
        assert line == line.rstrip(), f"trailing whitespace in {line!r}"
    return out


def read_case(path: Path) -> tuple[str, str]:
    text = path.read_text()
    if SEPARATOR in text:
        source, expected = text.split(SEPARATOR, 1)
        return source, expected
    return text, text


def spec_blocks() -> list[str]:
    return re.findall(r"```linnet\n(.*?)```", DOCS.read_text(), re.S) if DOCS.exists() else []


def repository_files() -> list[Path]:
    # Everything but hidden folders (.venv, .git).
    return sorted(
        p
        for p in ROOT.rglob("*.linnet")
        if not any(part.startswith(".") for part in p.relative_to(ROOT).parts)
    )


def long_lines(text: str) -> list[str]:
    return [line for line in text.split("\n") if len(line) > doc.WIDTH]


# ---------------------------------------------------------------- case files


CASE_FILES = sorted(CASES.glob("*.case"))


def test_there_are_case_files() -> None:
    assert len(CASE_FILES) >= 12


@pytest.mark.parametrize("path", CASE_FILES, ids=lambda p: p.stem)
def test_case(path: Path) -> None:
    source, expected = read_case(path)
    out = check_round_trip(source)
    assert out == expected


def test_canonical_example_of_section_17_is_a_case() -> None:
    source, expected = read_case(CASES / "canonical_layout.case")
    assert source == expected
    assert "pub fn widen<B: Dim, H: Dim>(" in source
    if DOCS.exists():
        assert source in spec_blocks()


# ---------------------------------------------------------------- whole files


@pytest.mark.skipif(not DOCS.exists(), reason="language.md is not available")
def test_every_linnet_block_of_the_language_reference() -> None:
    blocks = spec_blocks()
    assert len(blocks) >= 15
    for index, block in enumerate(blocks):
        out = check_round_trip(block)
        # Every block of the reference is written in the canonical layout.
        assert out == block, f"language.md block {index} is not canonical:\n{out}"


@pytest.mark.parametrize("path", repository_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_repository_file(path: Path) -> None:
    source = SourceFile.read(path)
    tree, diagnostics = parse(source)
    if tree is None or any(d.is_error for d in diagnostics):
        out, found = format_source(source)
        assert out is None and found  # never rewritten
        return
    check_round_trip(source.text)


def test_long_lines_break_within_the_width() -> None:
    source, _ = read_case(CASES / "lists.case")
    assert long_lines(source)
    assert long_lines(formatted(source)) == []


# ---------------------------------------------------------------- comments


def test_comments_survive_at_every_token_boundary() -> None:
    """A comment of each kind inserted after every token of a program: the tree
    and the comments survive and the result is a fixed point."""
    source, _ = read_case(CASES / "canonical_layout.case")
    kinds = (" /* c */ ", " // c\n", "\n// c\n", "\n\n/* c\n   d */\n\n")
    ends = scan(SourceFile("<input>", source)).ends[:-1]
    checked = 0
    for end in ends:
        for kind in kinds:
            variant = source[:end] + kind + source[end:]
            check_round_trip(variant)
            checked += 1
    assert checked == 4 * len(ends) > 300


def test_comments_survive_in_random_combinations() -> None:
    """Derandomised: several comments at once, including several on one line."""
    rng = random.Random(17)
    kinds = (
        " /* c{} */ ",
        " // c{}\n",
        "\n// c{}\n",
        "/*c{}*/",
        " /* c{} */\n",
        "\n   /* c{} */ /* d{} */ // e{}\n",
        "\n\n\n/* c{}\n   more */\n\n",
        " /* c{}\n   more */ ",
        " /* c{}\n more */\n",
    )
    for case in ("expressions", "trailing_commas", "comments_lists"):
        source, _ = read_case(CASES / f"{case}.case")
        ends = scan(SourceFile("<input>", source)).ends[:-1]
        for _ in range(30):
            variant = source
            for n, index in enumerate(sorted(rng.sample(range(len(ends)), 6), reverse=True)):
                text = rng.choice(kinds).replace("{}", str(n))
                variant = variant[: ends[index]] + text + variant[ends[index] :]
            check_round_trip(variant)


def test_trailing_comment_forces_the_enclosing_list_to_break() -> None:
    out = formatted("module m\nfn f() {\n    let x = g(a, // first\n        b)\n}\n")
    assert "    let x = g(\n        a, // first\n        b,\n    )\n" in out


def test_trailing_comment_after_a_statement_breaks_nothing() -> None:
    out = formatted("module m\nfn f() {\n    let x = g(a, b)   // note\n}\n")
    assert "    let x = g(a, b) // note\n" in out


def test_comment_text_is_kept_but_trailing_blanks_are_removed() -> None:
    text = "module m\n\n/* first   \n   second\t \n*/\n// line  \nconst A = 1\n"
    out = check_round_trip(text)
    assert out == "module m\n\n/* first\n   second\n*/\n// line\nconst A = 1\n"


# ---------------------------------------------------------------- whitespace and errors


def test_crlf_tabs_and_missing_final_newline() -> None:
    text = "module m\r\n\r\nfn f(x: f32) -> f32 {\r\n\treturn x\t\r\n}"
    out = check_round_trip(text)
    assert out == "module m\n\nfn f(x: f32) -> f32 {\n    return x\n}\n"


def test_extra_blank_lines_at_the_end_are_removed() -> None:
    assert formatted("module m\n\nconst A = 1\n\n\n\n") == "module m\n\nconst A = 1\n"


def test_a_file_with_syntax_errors_is_never_formatted() -> None:
    out, diagnostics = format_source(SourceFile("<input>", "module m\nfn f( {\n"))
    assert out is None
    assert diagnostics and all(d.code.startswith("E1") for d in diagnostics)


def test_deep_nesting_and_long_chains() -> None:
    depth = 200
    nested = "(" * depth + "x" + ")" * depth
    chain = " + ".join(f"v{i}" for i in range(250))
    text = f"module m\nfn f() {{\n    let a = {nested}\n    let b = {chain}\n}}\n"
    out = check_round_trip(text)
    assert f"    let a =\n        {nested}\n" in out  # parentheses never break
    assert long_lines(out) == [f"        {nested}"]
    assert "        v0 +\n        v1 +\n" in out


def test_formatting_an_ast_built_without_source() -> None:
    """Importers print syntax trees they built themselves (no comments)."""
    empty = SourceFile("<built>", "")
    span = Span(empty, 0, 0)

    def ident(name: str) -> ast.Ident:
        return ast.Ident(name, span)

    def name(n: str) -> ast.Name:
        return ast.Name(ident(n), span)

    def f32() -> ast.NamedType:
        return ast.NamedType((ident("f32"),), None, span)

    value = ast.Binary("*", name("x"), ast.FloatLit("2.0", 2.0, span), span, span)
    fn = ast.FnDecl(
        pub=True,
        kind="fn",
        name=ident("double"),
        generics=None,
        params=ast.Params((ast.Param(ident("x"), f32(), None, span),), False, span),
        result=f32(),
        where=None,
        body=ast.Body((ast.ReturnStmt(value, span),), span),
        span=span,
    )
    file = ast.File((ident("built"),), span, (), (fn,), (), span)
    out = format_file(file, empty)
    assert out == "module built\n\npub fn double(x: f32) -> f32 {\n    return x * 2.0\n}\n"


def test_the_printer_reports_a_tree_that_does_not_match_its_source() -> None:
    source = SourceFile("<input>", "module m // c\n\nconst A = 1\n")
    tree = parse_ok("module n // c\n\nconst A = 1\n")
    with pytest.raises(InternalError):
        format_file(tree, source)


@pytest.mark.slow
def test_formatting_speed_on_a_large_program() -> None:
    spec = importlib.util.spec_from_file_location("generated", ROOT / "bench" / "generated.py")
    assert spec is not None and spec.loader is not None
    generated = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generated)
    text: str = generated.linnet_program(20_000)
    source = SourceFile("<generated>", text)
    tree, _ = parse(source)
    assert tree is not None
    start = time.perf_counter()
    out = format_file(tree, source)
    elapsed = time.perf_counter() - start
    assert out.count("\n") >= 20_000
    assert 20_000 / elapsed > 10_000, f"{20_000 / elapsed:.0f} lines/s"


# ---------------------------------------------------------------- the layout engine


def test_group_prints_flat_when_it_fits_and_breaks_otherwise() -> None:
    def call(*args: str) -> doc.Doc:
        parts: list[doc.DocLike] = []
        for i, arg in enumerate(args):
            if i:
                parts.extend((",", LINE))
            parts.append(arg)
        return group("f(", indent(SOFTLINE, *parts, if_break(",")), SOFTLINE, ")")

    assert render(call("a", "b")) == "f(a, b)\n"
    exact = "x" * (doc.WIDTH - len("f(a, )"))
    assert render(call("a", exact)) == f"f(a, {exact})\n"
    assert render(call("a", exact + "x")) == f"f(\n    a,\n    {exact}x,\n)\n"


def test_text_after_a_group_counts_towards_its_fit() -> None:
    body = group("(", indent(SOFTLINE, "x" * 93), SOFTLINE, ")")
    assert render(concat(body, " -> R {")) == "(\n    " + "x" * 93 + "\n) -> R {\n"
    assert render(concat(body, " {")) == "(" + "x" * 93 + ") {\n"


def test_nested_groups_break_independently() -> None:
    inner = group("[", indent(SOFTLINE, "1,", LINE, "2"), SOFTLINE, "]")
    outer = group("f(", indent(SOFTLINE, "y" * 95, ",", LINE, inner), SOFTLINE, ")")
    assert render(outer) == "f(\n    " + "y" * 95 + ",\n    [1, 2]\n)\n"


def test_flat_never_breaks_and_hard_lines_force_enclosing_groups() -> None:
    long = group("a", LINE, "b" * 120)
    assert render(flat(long)) == "a " + "b" * 120 + "\n"
    assert render(group("x", LINE, "y", HARDLINE, "z")) == "x\ny\nz\n"


def test_blank_lines_collapse_and_lines_never_end_in_whitespace() -> None:
    d = concat(
        "a", BLANKLINE, BLANKLINE, HARDLINE, indent(HARDLINE, "b   "), HARDLINE, "c", BLANKLINE
    )
    assert render(d) == "a\n\n    b\nc\n"


def test_line_suffix_waits_for_the_end_of_the_line() -> None:
    d = group("f(", indent(SOFTLINE, "a", line_suffix(" // c"), ",", LINE, "b"), SOFTLINE, ")")
    assert render(concat(d, HARDLINE, "next")) == "f(a, b) // c\nnext\n"


def test_multi_line_text_keeps_its_continuation_lines() -> None:
    d = indent(HARDLINE, "/* one  \n  two\n*/", HARDLINE, "x")
    assert render(d) == "    /* one\n  two\n*/\n    x\n"


@pytest.mark.parametrize("module", [doc, fmt])
def test_docstring_examples(module: object) -> None:
    failures, tried = doctest.testmod(module)  # type: ignore[arg-type]
    assert tried > 0 and failures == 0
