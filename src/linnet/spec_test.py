"""The conformance harness behind `linnet spec-test` (language.md Appendix C, 16.5).

In: a conformance directory with `manifest.toml`:

    version = 1
    [[case]]
    file = "invalid/e2103_bf16_plus_f32.linnet"   # relative to the directory
    expect = "error"                               # or "ok"
    code = "E2103"                                 # required for errors
    line = 4                                       # optional: the first error's
    column = 12                                    #   primary line and column

Out: a `SpecReport`. A valid case passes when no error is reported. An invalid
case passes when at least one error is reported, every error has the expected
code (16.5 compares error codes only; warnings never matter), and the first
error starts at `line`:`column` when those are given. When
`diagnostics/<case stem>.stderr` exists it must equal, byte for byte, the
human rendering (16.3, no colour) of the case's errors, with files named
relative to the conformance directory.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from linnet.diagnostics import CODES, Diagnostic, render_human
from linnet.errors import LinnetError
from linnet.records import field, record

MANIFEST = "manifest.toml"
SNAPSHOT_DIR = "diagnostics"
_CODE = re.compile(r"[EW]\d{4}\Z")


@record(frozen=True)
class Case:
    """One `[[case]]` of the manifest."""

    file: str
    expect: Literal["ok", "error"]
    code: str | None = None
    line: int | None = None
    column: int | None = None


@record
class SpecReport:
    """How many cases ran and, for each failed one, its file and the reason."""

    cases: int
    failures: list[tuple[str, str]] = field(default_factory=list)


def read_manifest(directory: Path) -> list[Case]:
    """The cases of `directory/manifest.toml`; a malformed manifest is a `LinnetError`."""
    import tomllib

    path = directory / MANIFEST
    try:
        data = tomllib.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise LinnetError(f"cannot read `{path}`: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise LinnetError(f"`{path}` is not valid TOML: {exc}") from None
    if data.get("version") != 1:
        raise LinnetError(f"`{path}`: `version = 1` is required")
    tables = data.get("case", [])
    if not isinstance(tables, list):
        raise LinnetError(f"`{path}`: cases are written as [[case]] tables")
    return [_read_case(path, number, table) for number, table in enumerate(tables, 1)]


def _read_case(path: Path, number: int, table: object) -> Case:
    def fail(problem: str) -> LinnetError:
        return LinnetError(f"`{path}`: case {number}: {problem}")

    if not isinstance(table, dict):
        raise fail("not a table")
    file = table.get("file")
    if not isinstance(file, str) or not file:
        raise fail("`file` must be a non-empty string")
    expect = table.get("expect")
    if expect not in ("ok", "error"):
        raise fail('`expect` must be "ok" or "error"')
    code = table.get("code")
    if expect == "error" and (not isinstance(code, str) or code not in CODES):
        raise fail('an error case needs `code`, a diagnostic code such as "E2103"')
    if code is not None and (not isinstance(code, str) or not _CODE.match(code)):
        raise fail('`code` must be a diagnostic code such as "E2103"')
    line, column = table.get("line"), table.get("column")
    for key, value in (("line", line), ("column", column)):
        if value is not None and (type(value) is not int or value < 1):
            raise fail(f"`{key}` must be a positive integer")
    return Case(file, expect, code, line, column)


def run_case(directory: Path, case: Case, std_root: Path | None) -> str | None:
    """Check one case; None when it passes, else the reason it failed."""
    from linnet.pipeline import check_paths

    path = directory / case.file
    if not path.is_file():
        return "no such file"
    try:
        program = check_paths([path], std_root, relative_to=directory)
    except LinnetError as exc:
        return exc.message
    errors = [d for d in program.diagnostics if d.is_error]
    reason = _expectation_failure(case, errors)
    if reason is None:
        reason = _snapshot_failure(directory, case, render_human(errors, color=False))
    return reason


def _expectation_failure(case: Case, errors: list[Diagnostic]) -> str | None:
    if case.expect == "ok":
        if errors:
            return f"expected no errors, got {_describe(errors[0])}"
        return None
    if not errors:
        return f"expected {case.code}, got no errors"
    for diagnostic in errors:
        if diagnostic.code != case.code:
            return f"expected only {case.code}, got {_describe(diagnostic)}"
    if case.line is not None or case.column is not None:
        span = errors[0].span
        if span is None:
            return f"expected the first error at {_where(case)}, got one without a location"
        line, column = span.file.line_col(span.start)
        if (case.line or line, case.column or column) != (line, column):
            return f"expected the first error at {_where(case)}, got {line}:{column}"
    return None


def _snapshot_failure(directory: Path, case: Case, rendered: str) -> str | None:
    snapshot = directory / SNAPSHOT_DIR / (Path(case.file).stem + ".stderr")
    if not snapshot.is_file():
        return None
    expected = snapshot.read_bytes()
    actual = rendered.encode("utf-8", "backslashreplace")
    if expected == actual:
        return None
    shown = snapshot.relative_to(directory)
    old, new = expected.decode("utf-8", "replace").split("\n"), rendered.split("\n")
    for number, (want, got) in enumerate(zip(old, new, strict=False), 1):
        if want != got:
            return f"output differs from {shown} at line {number}: expected {want!r}, got {got!r}"
    return f"output differs from {shown}: expected {len(old)} lines, got {len(new)}"


def _where(case: Case) -> str:
    line = "*" if case.line is None else str(case.line)
    column = "*" if case.column is None else str(case.column)
    return f"{line}:{column}"


def _describe(diagnostic: Diagnostic) -> str:
    where = ""
    if diagnostic.span is not None:
        line, column = diagnostic.span.file.line_col(diagnostic.span.start)
        where = f" at {diagnostic.span.file.path}:{line}:{column}"
    return f"{diagnostic.code}{where} ({diagnostic.message})"


def run_spec_tests(directory: Path, std_root: Path | None) -> SpecReport:
    """Run every case of a conformance directory, in manifest order.

    A bug that makes checking raise fails its case (with the exception named)
    instead of stopping the run, so one run lists every broken case.
    """
    cases = read_manifest(directory)
    report = SpecReport(len(cases))
    for case in cases:
        try:
            reason = run_case(directory, case, std_root)
        except Exception as exc:  # a linnet bug: report it against this case
            reason = f"internal error: {type(exc).__name__}: {exc}"
        if reason is not None:
            report.failures.append((case.file, reason))
    return report
