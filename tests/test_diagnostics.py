"""Rendering of diagnostics: the human text of language.md 16.3 and the JSON of 16.4."""

from __future__ import annotations

import json

from linnet.diagnostics import Diagnostic, Label, error, render_human, render_json
from linnet.source import SourceFile, Span

MIX = """\
module scratch.mix

pub fn mix<N: Dim>(a: Tensor[N; f16], b: Tensor[N; f32]) -> Tensor[N; f32] {
    return a * b
}
"""

ACC = """\
module scratch.acc

pub fn acc(x: f32) -> f32 {
    let total = x
    total = total + 1.0
    return total
}
"""


def span_of(file: SourceFile, needle: str, occurrence: int = 0, length: int | None = None) -> Span:
    start = -1
    for _ in range(occurrence + 1):
        start = file.text.index(needle, start + 1)
    return Span(file, start, start + (len(needle) if length is None else length))


def mix_diagnostic() -> Diagnostic:
    file = SourceFile("scratch/mix.linnet", MIX)
    return error(
        "E2103",
        "operands have different dtypes",
        span_of(file, "a * b"),
        notes=("the left operand is f16", "the right operand is f32"),
        help=("convert one side explicitly, e.g. cast<f32>(a)",),
    )


def test_first_example_of_16_3_exactly() -> None:
    expected = """\
error E2103: operands have different dtypes

  --> scratch/mix.linnet:4:12
   |
 4 |     return a * b
   |            ^^^^^
   |
   = note: the left operand is f16
   = note: the right operand is f32
   = help: convert one side explicitly, e.g. cast<f32>(a)
"""
    assert render_human([mix_diagnostic()], color=False) == expected


def test_second_example_of_16_3_with_a_secondary_label_on_an_earlier_line() -> None:
    file = SourceFile("scratch/acc.linnet", ACC)
    diagnostic = error(
        "E2108",
        "`total` cannot be assigned",
        span_of(file, "total", occurrence=1),
        related=(Label(span_of(file, "total"), "declared here without `var`"),),
        help=("declare it with `var`, or assign a `state` member of this block",),
    )
    expected = """\
error E2108: `total` cannot be assigned

  --> scratch/acc.linnet:5:5
   |
 4 |     let total = x
   |         ----- declared here without `var`
 5 |     total = total + 1.0
   |     ^^^^^
   |
   = help: declare it with `var`, or assign a `state` member of this block
"""
    assert render_human([diagnostic], color=False) == expected


def test_diagnostics_are_separated_by_one_empty_line() -> None:
    one = render_human([mix_diagnostic()], color=False)
    assert render_human([mix_diagnostic(), mix_diagnostic()], color=False) == one + "\n" + one
    assert render_human([], color=False) == ""


def test_no_location_prints_header_and_notes_only() -> None:
    diagnostic = error(
        "E5001",
        "pkg/linnet.toml: missing the [package] table",
        None,
        notes=("every package declares name, version and language",),
        help=("add a [package] table",),
    )
    assert render_human([diagnostic], color=False) == (
        "error E5001: pkg/linnet.toml: missing the [package] table\n"
        "   = note: every package declares name, version and language\n"
        "   = help: add a [package] table\n"
    )


def test_no_notes_means_no_closing_gutter_line_and_labels_follow_markers() -> None:
    file = SourceFile("a.linnet", "module a\n\nfn f() {\n}\n")
    diagnostic = error("E1201", "unknown name `f`", span_of(file, "f()", length=1), "not found")
    assert render_human([diagnostic], color=False) == (
        "error E1201: unknown name `f`\n"
        "\n"
        "  --> a.linnet:3:4\n"
        "   |\n"
        " 3 | fn f() {\n"
        "   |    ^ not found\n"
    )


def test_a_warning_uses_its_severity() -> None:
    file = SourceFile("a.linnet", "module a\nuse std.random\n")
    diagnostic = error("W1001", "unused import `random`", span_of(file, "std.random"))
    assert render_human([diagnostic], color=False).startswith("warning W1001: unused import")


def test_non_adjacent_lines_are_separated_by_dots() -> None:
    lines = [f"line{i}" for i in range(1, 13)]
    file = SourceFile("far.linnet", "\n".join(lines) + "\n")
    diagnostic = error(
        "E1204",
        "duplicate item `x`",
        span_of(file, "line12"),
        "redefined here",
        related=(Label(span_of(file, "line2"), "first defined here"),),
    )
    assert render_human([diagnostic], color=False) == (
        "error E1204: duplicate item `x`\n"
        "\n"
        "  --> far.linnet:12:1\n"
        "   |\n"
        " 2 | line2\n"
        "   | ----- first defined here\n"
        "...\n"
        "12 | line12\n"
        "   | ^^^^^^ redefined here\n"
    )


def test_gutter_is_as_wide_as_the_largest_line_number() -> None:
    file = SourceFile("long.linnet", "x\n" * 120 + "target\n")
    diagnostic = error("E1201", "unknown name", span_of(file, "target"))
    text = render_human([diagnostic], color=False)
    assert text.splitlines()[2:6] == [
        "   --> long.linnet:121:1",
        "    |",
        "121 | target",
        "    | ^^^^^^",
    ]


def test_a_span_over_several_lines_is_marked_on_its_first_line_to_its_end() -> None:
    file = SourceFile("m.linnet", "let y = f(\n    a,\n)\n")
    start = file.text.index("f(")
    diagnostic = error("E2102", "bad arguments", Span(file, start, len(file.text) - 1))
    lines = render_human([diagnostic], color=False).splitlines()
    assert lines[4:] == [" 1 | let y = f(", "   |         ^^"]


def test_an_empty_span_gets_one_marker_and_empty_lines_end_at_the_bar() -> None:
    file = SourceFile("e.linnet", "module e\n\n")
    end = len(file.text) - 1
    diagnostic = error("E1101", "expected an item, found end of file", Span(file, end, end))
    lines = render_human([diagnostic], color=False).splitlines()
    assert lines[2:] == ["  --> e.linnet:2:1", "   |", " 2 |", "   | ^"]


def test_two_labels_on_one_line_each_get_a_marker_line_in_source_order() -> None:
    file = SourceFile("t.linnet", "let z = a + b\n")
    diagnostic = error(
        "E2207",
        "unproven broadcast",
        span_of(file, "b"),
        "[B]",
        related=(Label(span_of(file, "a"), "[A]"),),
    )
    lines = render_human([diagnostic], color=False).splitlines()
    assert lines[4:] == [" 1 | let z = a + b", "   |         - [A]", "   |             ^ [B]"]


def test_tabs_become_four_spaces_and_markers_follow() -> None:
    file = SourceFile("tab.linnet", "\tx\t= y\n")
    diagnostic = error("E1201", "unknown name `y`", span_of(file, "y"))
    lines = render_human([diagnostic], color=False).splitlines()
    # Column 6 counts code points; the marker sits under the expanded text.
    assert lines[2:] == [
        "  --> tab.linnet:1:6",
        "   |",
        " 1 |     x    = y",
        "   | " + " " * 11 + "^",
    ]


def test_control_characters_and_invalid_bytes_show_as_replacement_characters() -> None:
    file = SourceFile.from_bytes("bad.linnet", b"a\x01\xff\xfe b\x7f c\n")
    diagnostic = error("E1001", "invalid character", span_of(file, "c"))
    lines = render_human([diagnostic], color=False).splitlines()
    assert lines[2] == "  --> bad.linnet:1:9"
    assert lines[4] == " 1 | a\ufffd\ufffd\ufffd b\ufffd c"
    assert lines[5] == "   |         ^"


def test_labels_in_another_file_get_their_own_header() -> None:
    user = SourceFile("src/lib.linnet", "module pkg\n\nlet h = gate.forward(x)\n")
    other = SourceFile("src/gate.linnet", "module pkg.gate\n\nfn forward() {\n}\n")
    diagnostic = error(
        "E1203",
        "private item `forward`",
        span_of(user, "forward"),
        "private",
        related=(Label(span_of(other, "fn forward()", length=2), "declared here without `pub`"),),
    )
    assert render_human([diagnostic], color=False) == (
        "error E1203: private item `forward`\n"
        "\n"
        "  --> src/lib.linnet:3:14\n"
        "   |\n"
        " 3 | let h = gate.forward(x)\n"
        "   |              ^^^^^^^ private\n"
        "  ::: src/gate.linnet:3:1\n"
        "   |\n"
        " 3 | fn forward() {\n"
        "   | -- declared here without `pub`\n"
    )


def test_colour_only_when_asked() -> None:
    plain = render_human([mix_diagnostic()], color=False)
    coloured = render_human([mix_diagnostic()], color=True)
    assert "\x1b[" not in plain
    assert "\x1b[1;31merror E2103\x1b[0m" in coloured
    # Removing the escape codes gives back the plain text.
    import re

    assert re.sub(r"\x1b\[[0-9;]*m", "", coloured) == plain


# -- JSON (16.4) -----------------------------------------------------------------------


def test_json_document_of_16_4() -> None:
    document = json.loads(render_json([mix_diagnostic()]))
    assert document == {
        "version": 1,
        "diagnostics": [
            {
                "code": "E2103",
                "severity": "error",
                "message": "operands have different dtypes",
                "label": "",
                "location": {
                    "file": "scratch/mix.linnet",
                    "start": {"line": 4, "column": 12, "offset": 108},
                    "end": {"line": 4, "column": 17, "offset": 113},
                },
                "related": [],
                "notes": ["the left operand is f16", "the right operand is f32"],
                "help": ["convert one side explicitly, e.g. cast<f32>(a)"],
            }
        ],
        "summary": {"errors": 1, "warnings": 0},
    }
    assert list(document["diagnostics"][0]) == [
        "code", "severity", "message", "label", "location", "related", "notes", "help",
    ]  # fmt: skip


def test_json_offsets_are_bytes_and_columns_are_code_points() -> None:
    text = "module u\n// größe → ü\nlet x = y\n"
    file = SourceFile("u.linnet", text)
    span = span_of(file, "y")
    document = json.loads(render_json([error("E1201", "unknown name `y`", span, "not found")]))
    location = document["diagnostics"][0]["location"]
    prefix = text[: span.start].encode("utf-8")
    assert span.start != len(prefix)  # the comment really shifts byte offsets
    assert location["start"] == {"line": 3, "column": 9, "offset": len(prefix)}
    assert location["end"] == {"line": 3, "column": 10, "offset": len(prefix) + 1}
    assert document["diagnostics"][0]["label"] == "not found"


def test_json_related_null_location_and_summary() -> None:
    file = SourceFile("scratch/acc.linnet", ACC)
    assigned = error(
        "E2108",
        "`total` cannot be assigned",
        span_of(file, "total", occurrence=1),
        related=(Label(span_of(file, "total"), "declared here without `var`"),),
    )
    manifest = error("E5001", "linnet.toml: missing the [package] table", None)
    unused = error("W1002", "unused local `t`", span_of(file, "x", occurrence=1))
    document = json.loads(render_json([manifest, assigned, unused]))
    first, second, third = document["diagnostics"]
    assert first["location"] is None
    assert second["related"] == [
        {
            "location": {
                "file": "scratch/acc.linnet",
                "start": {"line": 4, "column": 9, "offset": ACC.index("total")},
                "end": {"line": 4, "column": 14, "offset": ACC.index("total") + 5},
            },
            "message": "declared here without `var`",
        }
    ]
    assert third["severity"] == "warning"
    assert document["summary"] == {"errors": 2, "warnings": 1}
    assert json.loads(render_json([])) == {
        "version": 1,
        "diagnostics": [],
        "summary": {"errors": 0, "warnings": 0},
    }


def test_json_is_ascii_and_replaces_undecodable_bytes() -> None:
    file = SourceFile.from_bytes("b.linnet", b"module b\nx \xff\n")
    span = Span(file, file.text.index("\udcff"), file.text.index("\udcff") + 1)
    rendered = render_json([error("E1001", "invalid character \udcff", span)])
    assert rendered.isascii()
    document = json.loads(rendered)
    assert document["diagnostics"][0]["message"] == "invalid character \ufffd"
    assert document["diagnostics"][0]["location"]["end"]["offset"] == 12
