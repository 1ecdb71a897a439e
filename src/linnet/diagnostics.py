"""Diagnostics: the code registry, the `Diagnostic` record, and its renderings.

Used by `syntax/` and `check/` alike, so it sits below both. Stages collect
diagnostics instead of raising; a `Diagnostic` carries a stable code (section
16.2 of language.md), a severity, a one-line message, a primary span with an
optional label, secondary labelled spans, notes and help lines.

Rendering follows section 16.3 (human, rustc style) and 16.4 (JSON).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from linnet.records import record
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
    "E2124": "misplaced yield or scan",
    "E2125": "invalid gradient clause",
    "E2126": "kernel reference or call",
    "E2127": "kernel rule violation",
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


@record(frozen=True)
class Label:
    """A secondary location with its own text ("first defined here")."""

    span: Span
    text: str = ""


@record(frozen=True)
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


# --- Human rendering (section 16.3) ---------------------------------------------------
#
# Layout of one diagnostic (G = gutter width, the digits of the largest line
# number shown, at least 2):
#
#     error E2108: `total` cannot be assigned
#
#       --> scratch/acc.linnet:5:5
#        |
#      4 |     let total = x
#        |         ----- declared here without `var`
#      5 |     total = total + 1.0
#        |     ^^^^^
#        |
#        = help: declare it with `var`, or assign a `state` member of this block
#
# Labels in a second file get `::: path:line:col` and a gutter line of their own.

_RESET = "\x1b[0m"
_BOLD = "\x1b[1m"
_GUTTER = "\x1b[1;34m"
_SEVERITY_STYLE: dict[str, str] = {
    "error": "\x1b[1;31m",
    "warning": "\x1b[1;33m",
    "note": "\x1b[1;32m",
}


def _shown_char(ch: str) -> str:
    """How one source character is shown (16.3): a tab as 4 spaces, unprintables as U+FFFD.

    Control characters (C0, DEL, C1) and lone surrogates, which is what invalid
    bytes become under `surrogateescape` decoding, would garble a terminal.
    """
    if ch == "\t":
        return "    "
    code = ord(ch)
    if code < 0x20 or 0x7F <= code <= 0x9F or 0xD800 <= code <= 0xDFFF:
        return "\ufffd"
    return ch


def _shown_line(text: str) -> tuple[str, list[int]]:
    """The shown form of a source line and the display column of each code point.

    `columns[i]` is where character `i` starts on screen; one extra entry holds
    the width of the whole line, so a span ending at the line end has a column.
    """
    if text.isascii() and text.isprintable():
        return text, list(range(len(text) + 1))
    pieces = [_shown_char(ch) for ch in text]
    columns = [0]
    for piece in pieces:
        columns.append(columns[-1] + len(piece))
    return "".join(pieces), columns


class _Mark:
    """One span to underline: `^` when primary, `-` when secondary, then its label.

    A plain class: this module is imported by every command, and a dataclass
    costs import time that only rendering would use.
    """

    __slots__ = ("primary", "span", "text")

    def __init__(self, span: Span, primary: bool, text: str) -> None:
        self.span = span
        self.primary = primary
        self.text = text


class _Paint:
    """Wraps text in an ANSI style, or returns it unchanged when colour is off."""

    __slots__ = ("enabled",)

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __call__(self, style: str, text: str) -> str:
        return f"{style}{text}{_RESET}" if self.enabled and text else text


def _marks_by_file(diagnostic: Diagnostic, primary: Span) -> list[list[_Mark]]:
    """The labels grouped by file, the primary span's file first, each group in source order."""
    groups: dict[int, list[_Mark]] = {id(primary.file): [_Mark(primary, True, diagnostic.label)]}
    for label in diagnostic.related:
        groups.setdefault(id(label.span.file), []).append(_Mark(label.span, False, label.text))
    for group in groups.values():
        # A stable sort keeps the primary first when a secondary starts at the same offset.
        group.sort(key=lambda mark: mark.span.start)
    return list(groups.values())


def _underline(mark: _Mark, line_text: str, columns: list[int], line_start: int) -> str:
    """Spaces up to the mark's first column, then at least one marker character.

    A span running over several lines is marked on its first line only, up to
    that line's end (16.3).
    """
    span = mark.span
    first = span.start - line_start
    last = min(span.end - line_start, len(line_text))

    def column(offset: int) -> int:
        if offset <= len(line_text):
            return columns[offset]
        return columns[-1] + offset - len(line_text)

    begin = column(first)
    width = max(1, column(max(first, last)) - begin)
    return " " * begin + ("^" if mark.primary else "-") * width


def _snippet(group: list[_Mark], gutter: int, paint: _Paint, style: str) -> list[str]:
    """The numbered source lines of one file, each followed by the marker lines of its labels."""
    file = group[0].span.file
    by_line: dict[int, list[tuple[_Mark, int]]] = {}
    for mark in group:
        line, column = file.line_col(mark.span.start)
        by_line.setdefault(line, []).append((mark, mark.span.start - column + 1))
    bar = paint(_GUTTER, " " * gutter + " |")
    out: list[str] = []
    previous = -1
    for line in sorted(by_line):
        if previous >= 0 and line != previous + 1:
            out.append("...")
        previous = line
        raw = file.line_text(line)
        shown, columns = _shown_line(raw)
        number = paint(_GUTTER, str(line).rjust(gutter) + " |")
        out.append(f"{number} {shown}" if shown else number)
        for mark, line_start in by_line[line]:
            marker = _underline(mark, raw, columns, line_start)
            indent = len(marker) - len(marker.lstrip(" "))
            mark_style = style if mark.primary else _GUTTER
            text = " " * indent + paint(mark_style, marker[indent:])
            if mark.text:
                text += " " + paint(mark_style, mark.text)
            out.append(f"{bar} {text}")
    return out


def _render_one(diagnostic: Diagnostic, paint: _Paint) -> str:
    """One diagnostic, ending with a newline."""
    style = _SEVERITY_STYLE[diagnostic.severity]
    lines = [
        paint(style, f"{diagnostic.severity} {diagnostic.code}")
        + paint(_BOLD, f": {diagnostic.message}")
    ]
    gutter = 2
    span = diagnostic.span
    if span is not None:
        groups = _marks_by_file(diagnostic, span)
        largest = max(m.span.file.line_col(m.span.start)[0] for g in groups for m in g)
        gutter = max(2, len(str(largest)))
        bar = paint(_GUTTER, " " * gutter + " |")
        lines.append("")
        for index, group in enumerate(groups):
            first = group[0].span if index else span
            line, column = first.file.line_col(first.start)
            arrow = "-->" if index == 0 else ":::"
            lines.append(
                paint(_GUTTER, " " * gutter + arrow) + f" {first.file.path}:{line}:{column}"
            )
            lines.append(bar)
            lines.extend(_snippet(group, gutter, paint, style))
        if diagnostic.notes or diagnostic.help:
            lines.append(bar)
    equals = paint(_GUTTER, " " * gutter + " =")
    for kind, texts in (("note", diagnostic.notes), ("help", diagnostic.help)):
        continuation = "\n" + " " * (gutter + 4 + len(kind) + 1)
        lines.extend(
            f"{equals} {paint(_BOLD, kind + ':')} {text.replace(chr(10), continuation)}"
            for text in texts
        )
    return "\n".join(lines) + "\n"


def render_human(diagnostics: Sequence[Diagnostic], *, color: bool) -> str:
    """Diagnostics as the text of section 16.3, one empty line between two of them.

    Each rendered diagnostic ends with a newline; no diagnostics give "". With
    `color`, severities, gutters and markers carry ANSI styles; without it the
    text has no escape codes (what redirected output must look like).
    """
    paint = _Paint(color)
    return "\n".join(_render_one(d, paint) for d in diagnostics)


# --- JSON rendering (section 16.4) ----------------------------------------------------


def _clean(text: str) -> str:
    """Lone surrogates (undecodable bytes) become U+FFFD so the JSON is valid Unicode."""
    if text.isascii():
        return text
    return "".join("\ufffd" if 0xD800 <= ord(ch) <= 0xDFFF else ch for ch in text)


def _position(span: Span, offset: int) -> dict[str, int]:
    line, column = span.file.line_col(offset)
    return {"line": line, "column": column, "offset": span.file.byte_offset(offset)}


def _location(span: Span | None) -> dict[str, object] | None:
    """16.4: the file as loaded, 1-based line/column (code points), 0-based byte offsets."""
    if span is None:
        return None
    return {
        "file": _clean(span.file.path),
        "start": _position(span, span.start),
        "end": _position(span, span.end),
    }


def diagnostic_json(diagnostic: Diagnostic) -> dict[str, object]:
    """One diagnostic as the JSON object of 16.4 (fields in the documented order)."""
    return {
        "code": diagnostic.code,
        "severity": diagnostic.severity,
        "message": _clean(diagnostic.message),
        "label": _clean(diagnostic.label),
        "location": _location(diagnostic.span),
        "related": [
            {"location": _location(label.span), "message": _clean(label.text)}
            for label in diagnostic.related
        ],
        "notes": [_clean(note) for note in diagnostic.notes],
        "help": [_clean(text) for text in diagnostic.help],
    }


def render_json(diagnostics: Sequence[Diagnostic], failure: str | None = None) -> str:
    """The one JSON document of 16.4, compact like the reference's, without a final newline.

    ASCII-only (non-ASCII text is escaped), so it survives any output encoding.
    `failure` is why the check could not run at all (a path that does not
    exist, a folder without sources): it goes into an added `error` field
    (16.4: adding fields keeps the version) and counts as one error, so a
    `--json` caller always gets a document to read.
    """
    import json  # NOTE: lazy; the human path of `linnet check` never needs it

    errors = sum(1 for d in diagnostics if d.severity == "error")
    warnings = sum(1 for d in diagnostics if d.severity == "warning")
    document: dict[str, object] = {
        "version": 1,
        "diagnostics": [diagnostic_json(d) for d in diagnostics],
        "summary": {"errors": errors + (failure is not None), "warnings": warnings},
    }
    if failure is not None:
        document["error"] = _clean(failure)
    return json.dumps(document, separators=(",", ":"))
