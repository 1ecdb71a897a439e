"""Helpers for the checker tests: check a program text, list its findings.

Programs go through the real pipeline (lexer, parser, module loader, checker),
with the repository's standard library as the std root unless a test passes
its own (for cross-module cases).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from linnet.check.checker import check_graph
from linnet.check.modules import load_source
from linnet.check.program import CheckedProgram
from linnet.diagnostics import Diagnostic

ROOT = Path(__file__).resolve().parents[2]
STDLIB = ROOT / "stdlib"
LANGUAGE_MD = Path("/work/shared/docs/language.md")

Finding = tuple[str, int, int]


def check(text: str, std_root: Path | None = None) -> CheckedProgram:
    """Check `text` (dedented) as the root module `<input>`."""
    graph = load_source(textwrap.dedent(text).lstrip("\n"), "t.linnet", std_root or STDLIB)
    assert not graph.has_errors, [(d.code, d.message) for d in graph.diagnostics]
    return check_graph(graph)


def position(d: Diagnostic) -> tuple[int, int]:
    assert d.span is not None
    return d.span.file.line_col(d.span.start)


def findings(text: str, std_root: Path | None = None) -> list[Finding]:
    """Every diagnostic as (code, line, column), in the sorted order of 16.5."""
    return [(d.code, *position(d)) for d in check(text, std_root).diagnostics]


def errors_of(program: CheckedProgram) -> list[Diagnostic]:
    return [d for d in program.diagnostics if d.is_error]


def only(text: str, std_root: Path | None = None) -> Diagnostic:
    """The one diagnostic a program must produce."""
    diagnostics = check(text, std_root).diagnostics
    assert len(diagnostics) == 1, [(d.code, position(d), d.message) for d in diagnostics]
    return diagnostics[0]


def clean(text: str, std_root: Path | None = None) -> CheckedProgram:
    """Check a program that must produce no diagnostics at all (not even warnings)."""
    program = check(text, std_root)
    assert not program.diagnostics, [(d.code, position(d), d.message) for d in program.diagnostics]
    return program
