"""Diagnostics: the code registry, the `Diagnostic` record, and its renderings.

Used by `syntax/` and `check/` alike, so it sits below both. Stages collect
diagnostics instead of raising; a `Diagnostic` carries a stable code (section
16.2 of language.md), a severity, a one-line message, a primary span with an
optional label, secondary labelled spans, notes and help lines.

Rendering follows section 16.3 (human, rustc style) and 16.4 (JSON).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from linnet.source import Span

Severity = Literal["error", "warning", "note"]

# Every code of language.md 16.2 with its short name. A code is never reused.
CODES: dict[str, str] = {
    "E1001": "invalid character",
    "E1002": "unterminated comment",
    "E1003": "invalid string",
    "E1004": "reserved identifier",
    "E1005": "invalid number",
    "E1101": "unexpected token",
    "E1102": "missing module declaration",
    "E1103": "unsupported syntax",
    "E1201": "unknown name",
    "E1202": "unknown module",
    "E1203": "private item",
    "E1204": "duplicate item",
    "E1205": "duplicate name",
    "E1206": "import cycle",
    "E1207": "prelude name redeclared",
    "E1208": "wrong kind of name",
    "E2101": "type mismatch",
    "E2102": "bad arguments",
    "E2103": "dtype mismatch",
    "E2104": "invalid operand",
    "E2105": "literal out of range",
    "E2106": "not callable",
    "E2107": "unknown member",
    "E2108": "cannot assign",
    "E2109": "assignment changes type",
    "E2110": "cannot infer",
    "E2111": "bad generic arguments",
    "E2112": "dtype constraint",
    "E2113": "none without context",
    "E2114": "condition not bool",
    "E2115": "branch mismatch",
    "E2116": "logical operand not bool",
    "E2117": "invalid pattern",
    "E2118": "non-exhaustive match",
    "E2119": "recursion",
    "E2120": "missing or misplaced return",
    "E2121": "invalid static for",
    "E2122": "cyclic definition",
    "E2123": "not compile-time",
    "E2190": "not implemented",
    "E2201": "incompatible index extents",
    "E2202": "shape mismatch",
    "E2203": "reshape count",
    "E2204": "rank mismatch",
    "E2205": "divisor not positive",
    "E2206": "constraint unsatisfied",
    "E2207": "unproven broadcast",
    "E2208": "negative dimension",
    "E2209": "invalid index or slice",
    "E2210": "invalid axis",
    "E3101": "unbound index",
    "E3102": "unused reduction index",
    "E3103": "output index without domain",
    "E3104": "invalid in index notation",
    "E3105": "duplicate index",
    "E3106": "pack index misuse",
    "E4101": "invalid member type",
    "E4102": "parameter payload",
    "E5001": "invalid manifest",
    "W1001": "unused import",
    "W1002": "unused local",
    "W1003": "unused member",
}


@dataclass(frozen=True, slots=True)
class Label:
    """A secondary location with its own text ("first defined here")."""

    span: Span
    text: str = ""


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One finding. `span` is None only for findings without a position (E5001)."""

    code: str
    message: str
    span: Span | None
    label: str = ""
    related: tuple[Label, ...] = ()
    notes: tuple[str, ...] = ()
    help: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.code not in CODES:
            raise ValueError(f"unregistered diagnostic code {self.code}")

    @property
    def severity(self) -> Severity:
        return "warning" if self.code.startswith("W") else "error"

    @property
    def is_error(self) -> bool:
        return self.severity == "error"


def error(
    code: str,
    message: str,
    span: Span | None,
    label: str = "",
    *,
    related: tuple[Label, ...] = (),
    notes: tuple[str, ...] = (),
    help: tuple[str, ...] = (),
) -> Diagnostic:
    """Shorthand used by every stage: `error("E2103", "...", span, notes=(...))`."""
    return Diagnostic(code, message, span, label, related, notes, help)


def sort_key(diagnostic: Diagnostic) -> tuple[str, int, int]:
    """Order of 16.5: by file, then by start offset."""
    span = diagnostic.span
    if span is None:
        return ("", -1, 0)
    return (span.file.path, span.start, span.end)
