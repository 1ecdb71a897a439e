"""The conformance corpus (language.md Appendix C) under tests/conformance.

Every `[[case]]` of `tests/conformance/manifest.toml` runs through
`linnet.spec_test.run_case` with the repository's standard library as the std
root, exactly as `linnet spec-test --std stdlib tests/conformance` would. The
other tests keep the corpus honest: every error code of section 16.2 (warnings
excepted) has an invalid case, every case file is listed, every listed file
exists, and the verbatim copies of the language reference's `linnet` blocks
still match the reference. The shipped examples (examples/) must check cleanly
too, and `tiny` must have the parameter paths its README and section 1.5 list.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from linnet.diagnostics import CODES
from linnet.spec_test import SNAPSHOT_DIR, Case, read_manifest, run_case

CONFORMANCE = Path(__file__).parent / "conformance"
STD_ROOT = Path(__file__).parents[1] / "stdlib"
EXAMPLES = Path(__file__).parents[1] / "examples"
LANGUAGE_MD = Path("/work/shared/docs/language.md")
SPEC_COPY_MARK = "copied verbatim"

CASES = read_manifest(CONFORMANCE)


@pytest.mark.parametrize("case", CASES, ids=[case.file for case in CASES])
def test_case(case: Case) -> None:
    reason = run_case(CONFORMANCE, case, STD_ROOT)
    assert reason is None, f"{case.file}: {reason}"


def test_every_error_code_has_an_invalid_case() -> None:
    # 16.2: every E code (W codes are lints, never spec-test errors, 16.5).
    wanted = {code for code in CODES if code.startswith("E")}
    covered = {case.code for case in CASES if case.expect == "error" and case.code is not None}
    assert sorted(wanted - covered) == []
    assert sorted(covered - wanted) == []


def test_every_case_file_is_listed() -> None:
    listed = {case.file for case in CASES}
    on_disk = {
        path.relative_to(CONFORMANCE).as_posix()
        for folder in ("valid", "invalid")
        for path in (CONFORMANCE / folder).rglob("*.linnet")
    }
    assert sorted(on_disk - listed) == []


def test_listed_files_exist_once_and_match_their_folder() -> None:
    files = [case.file for case in CASES]
    assert len(files) == len(set(files)), "a file is listed twice"
    for case in CASES:
        assert (CONFORMANCE / case.file).is_file(), case.file
        if case.file.startswith("valid/"):
            assert case.expect == "ok", case.file
        if case.file.startswith("invalid/"):
            assert case.expect == "error", case.file


def test_error_cases_name_a_location() -> None:
    # Only manifest errors (E5001) have no source location (4.5, 16.4).
    for case in CASES:
        if case.expect != "error":
            continue
        if case.code == "E5001":
            assert case.line is None and case.column is None, case.file
        else:
            assert case.line is not None and case.column is not None, case.file


def test_invalid_file_names_start_with_their_code() -> None:
    for case in CASES:
        if case.file.startswith("invalid/") and case.code is not None:
            name = Path(case.file).name
            assert name.startswith(case.code.lower() + "_"), case.file


def test_snapshots_belong_to_exactly_one_case() -> None:
    # The harness finds a snapshot by the case file's stem, so the stem must be unique.
    stems: dict[str, list[str]] = {}
    for case in CASES:
        stems.setdefault(Path(case.file).stem, []).append(case.file)
    snapshots = sorted((CONFORMANCE / SNAPSHOT_DIR).glob("*.stderr"))
    assert snapshots, "the corpus keeps a few rendered-output snapshots"
    for snapshot in snapshots:
        owners = stems.get(snapshot.stem, [])
        assert len(owners) == 1, f"{snapshot.name} matches {owners}"
        owner = next(case for case in CASES if case.file == owners[0])
        assert owner.expect == "error", snapshot.name


def _spec_blocks(text: str) -> list[str]:
    return re.findall(r"```linnet\n(.*?)```", text, re.DOTALL)


def _spec_copies() -> dict[str, str]:
    copies: dict[str, str] = {}
    for path in sorted(CONFORMANCE.rglob("*.linnet")):
        text = path.read_bytes().decode("utf-8", "replace")
        first, _, rest = text.partition("\n")
        if SPEC_COPY_MARK in first:
            copies[path.relative_to(CONFORMANCE).as_posix()] = rest
    return copies


def test_spec_copies_are_listed_as_valid() -> None:
    valid = {case.file for case in CASES if case.expect == "ok"}
    copies = _spec_copies()
    assert len(copies) == 17
    assert sorted(set(copies) - valid) == []


@pytest.mark.skipif(
    not LANGUAGE_MD.is_file(), reason="the language reference is not on this machine"
)
def test_every_spec_block_is_copied_verbatim() -> None:
    blocks = _spec_blocks(LANGUAGE_MD.read_text(encoding="utf-8"))
    copies = sorted(_spec_copies().values())
    assert copies == sorted(blocks)


EXAMPLE_FILES = sorted(EXAMPLES.glob("*/src/**/*.linnet"))


@pytest.mark.parametrize(
    "path", EXAMPLE_FILES, ids=[p.relative_to(EXAMPLES).as_posix() for p in EXAMPLE_FILES]
)
def test_example_checks_cleanly(path: Path) -> None:
    from linnet.pipeline import check_paths

    program = check_paths([path], STD_ROOT)
    errors = [d for d in program.diagnostics if d.is_error]
    assert errors == []


def test_tiny_example_parameter_paths() -> None:
    # Section 1.5: the parameter paths of `Mlp` (array positions as `[*]`, 12.7).
    from linnet.pipeline import check_paths

    program = check_paths([EXAMPLES / "tiny" / "src" / "lib.linnet"], STD_ROOT)
    (root,) = program.graph.roots
    blocks = {block.name: block for block in program.manifest(root)}
    mlp = blocks["Mlp"]
    assert mlp.generics == ["H", "Inner", "Depth", "Classes", "T"]
    listed = [(e.path, e.kind, e.shape, e.repeat, e.optional) for e in mlp.entries]
    assert listed == [
        ("input.weight", "param", ["Inner", "H"], [], False),
        ("input.bias", "param", ["Inner"], [], True),
        ("hidden[*].weight", "param", ["Inner", "Inner"], ["Depth"], False),
        ("hidden[*].bias", "param", ["Inner"], ["Depth"], True),
        ("output.weight", "param", ["Classes", "Inner"], [], False),
        ("output.bias", "param", ["Classes"], [], True),
    ]
