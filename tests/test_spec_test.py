"""The conformance harness (Appendix C, 16.5): manifest reading, pass/fail rules, snapshots."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from linnet import spec_test
from linnet.diagnostics import render_human
from linnet.errors import LinnetError
from linnet.pipeline import check_paths
from linnet.spec_test import Case, read_manifest, run_case, run_spec_tests

VALID = """\
module valid.scale

pub fn scale<N: Dim>(x: Tensor[N; f32]) -> Tensor[N; f32] {
    return x * 2.0
}
"""

# Two syntax errors of one code, the first at 4:16.
TWO_E1101 = """\
module invalid.syntax

pub fn f(x: f32) -> f32 {
    return x + )
}

pub fn g(x: f32) -> f32 {
    return x + )
}
"""

NO_MODULE = "pub fn f() {}\n"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    root = tmp_path / "conformance"
    write(root / "valid" / "scale.linnet", VALID)
    write(root / "invalid" / "syntax.linnet", TWO_E1101)
    write(root / "invalid" / "no_module.linnet", NO_MODULE)
    (tmp_path / "std").mkdir()
    return root


def case(file: str, expect: str = "error", code: str | None = None, **where: int) -> Case:
    return Case(file, expect, code, where.get("line"), where.get("column"))  # type: ignore[arg-type]


def test_a_valid_case_passes_without_errors(suite: Path, tmp_path: Path) -> None:
    assert run_case(suite, case("valid/scale.linnet", "ok"), tmp_path / "std") is None


def test_a_valid_case_with_errors_fails(suite: Path, tmp_path: Path) -> None:
    reason = run_case(suite, case("invalid/syntax.linnet", "ok"), tmp_path / "std")
    assert reason is not None
    assert reason.startswith("expected no errors, got E1101 at invalid/syntax.linnet:4:16 (")


def test_an_invalid_case_needs_errors_of_only_the_expected_code(
    suite: Path, tmp_path: Path
) -> None:
    std = tmp_path / "std"
    assert run_case(suite, case("invalid/syntax.linnet", code="E1101"), std) is None
    reason = run_case(suite, case("invalid/syntax.linnet", code="E2103"), std)
    assert reason is not None and reason.startswith("expected only E2103, got E1101 at ")
    reason = run_case(suite, case("valid/scale.linnet", code="E2103"), std)
    assert reason == "expected E2103, got no errors"


def test_the_first_error_location(suite: Path, tmp_path: Path) -> None:
    std = tmp_path / "std"
    assert (
        run_case(suite, case("invalid/syntax.linnet", code="E1101", line=4, column=16), std) is None
    )
    assert run_case(suite, case("invalid/syntax.linnet", code="E1101", line=4), std) is None
    reason = run_case(suite, case("invalid/syntax.linnet", code="E1101", line=8, column=16), std)
    assert reason == "expected the first error at 8:16, got 4:16"
    reason = run_case(suite, case("invalid/syntax.linnet", code="E1101", column=3), std)
    assert reason == "expected the first error at *:3, got 4:16"


def test_missing_case_file(suite: Path, tmp_path: Path) -> None:
    assert (
        run_case(suite, case("invalid/nope.linnet", code="E1101"), tmp_path / "std")
        == "no such file"
    )


def test_snapshots_compare_byte_for_byte(suite: Path, tmp_path: Path) -> None:
    std = tmp_path / "std"
    the_case = case("invalid/syntax.linnet", code="E1101")
    program = check_paths([suite / the_case.file], std, relative_to=suite)
    rendered = render_human([d for d in program.diagnostics if d.is_error], color=False)
    assert "  --> invalid/syntax.linnet:4:16\n" in rendered  # relative to the suite
    snapshot = write(suite / "diagnostics" / "syntax.stderr", rendered)
    assert run_case(suite, the_case, std) is None

    snapshot.write_bytes(rendered.encode() + b"\n")
    reason = run_case(suite, the_case, std)
    assert reason is not None and reason.startswith("output differs from diagnostics/syntax.stderr")

    lines = rendered.split("\n")
    lines[0] = lines[0] + " (old wording)"
    snapshot.write_text("\n".join(lines))
    reason = run_case(suite, the_case, std)
    assert reason is not None and "at line 1: expected" in reason


def test_fixture_packages_resolve_their_imports(suite: Path, tmp_path: Path) -> None:
    pkg = suite / "fixtures" / "pkg"
    write(pkg / "linnet.toml", '[package]\nname = "pkg"\nversion = "0.1.0"\nlanguage = "0.1"\n')
    write(pkg / "src" / "lib.linnet", "module pkg\n\nuse crate.missing::{x}\n")
    reason = run_case(
        suite, case("fixtures/pkg/src/lib.linnet", code="E1202", line=3, column=5), tmp_path / "std"
    )
    assert reason is None


def manifest(suite: Path, text: str) -> None:
    write(suite / "manifest.toml", text)


def test_run_spec_tests_counts_and_lists_failures(suite: Path, tmp_path: Path) -> None:
    manifest(
        suite,
        "version = 1\n"
        '[[case]]\nfile = "valid/scale.linnet"\nexpect = "ok"\n'
        '[[case]]\nfile = "invalid/no_module.linnet"\nexpect = "error"\ncode = "E1102"\n'
        '[[case]]\nfile = "invalid/syntax.linnet"\nexpect = "error"\ncode = "E1102"\n',
    )
    report = run_spec_tests(suite, tmp_path / "std")
    assert report.cases == 3
    assert [file for file, _ in report.failures] == ["invalid/syntax.linnet"]


def test_a_crash_fails_only_its_case(
    suite: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest(suite, 'version = 1\n[[case]]\nfile = "valid/scale.linnet"\nexpect = "ok"\n')

    def crash(*args: object, **kwargs: object) -> str | None:
        raise RuntimeError("checker bug")

    monkeypatch.setattr(spec_test, "run_case", crash)
    report = run_spec_tests(suite, tmp_path / "std")
    assert report.failures == [("valid/scale.linnet", "internal error: RuntimeError: checker bug")]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("version = 2\n", "`version = 1` is required"),
        ("version = 1\ncase = 3\n", "[[case]] tables"),
        ('version = 1\n[[case]]\nexpect = "ok"\n', "case 1: `file` must be a non-empty string"),
        (
            'version = 1\n[[case]]\nfile = "a"\nexpect = "maybe"\n',
            '`expect` must be "ok" or "error"',
        ),
        ('version = 1\n[[case]]\nfile = "a"\nexpect = "error"\n', "an error case needs `code`"),
        ('version = 1\n[[case]]\nfile = "a"\nexpect = "error"\ncode = "E9999"\n', "needs `code`"),
        (
            'version = 1\n[[case]]\nfile = "a"\nexpect = "ok"\nline = 0\n',
            "`line` must be a positive",
        ),
        ("version = [\n", "not valid TOML"),
    ],
)
def test_malformed_manifests(suite: Path, text: str, problem: str) -> None:
    manifest(suite, text)
    with pytest.raises(LinnetError, match=re.escape(problem)):
        read_manifest(suite)


def test_a_missing_manifest(tmp_path: Path) -> None:
    with pytest.raises(LinnetError, match="cannot read"):
        read_manifest(tmp_path)


def test_the_manifest_cases_are_read_in_order(suite: Path) -> None:
    manifest(
        suite,
        'version = 1\n[[case]]\nfile = "b"\nexpect = "error"\ncode = "E2103"\nline = 4\ncolumn = 12\n'
        '[[case]]\nfile = "a"\nexpect = "ok"\n',
    )
    assert read_manifest(suite) == [Case("b", "error", "E2103", 4, 12), Case("a", "ok")]
