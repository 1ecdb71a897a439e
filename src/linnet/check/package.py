"""Packages: reading and validating `linnet.toml` (language.md 4.5).

Stage: module loading. In: the directory that holds a `linnet.toml`. Out: a
`Package` (its directory, name and path dependencies) plus one E5001 per rule
of 4.5 the manifest breaks. E5001 has no source location; its message names the
file and the problem.

Reading a manifest only reads that file and checks that each path dependency is
a directory with a `linnet.toml` of its own (4.6: loading never runs code).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from linnet.diagnostics import Diagnostic, error
from linnet.records import field, record

MANIFEST_NAME = "linnet.toml"
LANGUAGE_VERSION = "0.1"  # 4.5: the only language version this toolchain implements
RESERVED_DEPENDENCY_NAMES = frozenset({"std", "crate"})
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@record(frozen=True)
class Package:
    """A validated package. `dependencies` holds only the entries that passed 4.5."""

    root: Path
    name: str | None
    dependencies: dict[str, Path] = field(default_factory=dict)
    valid: bool = True

    @property
    def manifest(self) -> Path:
        return self.root / MANIFEST_NAME

    @property
    def source_dir(self) -> Path:
        return self.root / "src"


def is_identifier(text: str) -> bool:
    return _IDENTIFIER.match(text) is not None


def read_package(root: Path, shown: Callable[[Path], str]) -> tuple[Package, list[Diagnostic]]:
    """Validate `root/linnet.toml` against every rule of 4.5.

    `shown` turns a path into the text diagnostics print for it. All problems
    are reported, not only the first, so one run shows everything to fix.
    """
    manifest = root / MANIFEST_NAME
    problems: list[str] = []
    data = _load_toml(manifest, problems)
    name: str | None = None
    dependencies: dict[str, Path] = {}
    if data is not None:
        name = _check_package_table(data, problems)
        dependencies = _check_dependencies(data, root, problems)
    prefix = shown(manifest)
    diagnostics = [error("E5001", f"{prefix}: {problem}", None) for problem in problems]
    return Package(root, name, dependencies, valid=not problems), diagnostics


def _load_toml(manifest: Path, problems: list[str]) -> dict[str, object] | None:
    import tomllib  # NOTE: lazy; loose files never read a manifest

    try:
        data = manifest.read_bytes()
    except OSError as exc:
        problems.append(f"cannot read the manifest: {exc.strerror or exc}")
        return None
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        problems.append("the manifest is not valid UTF-8")
    except tomllib.TOMLDecodeError as exc:
        # tomllib's message ends with "(at line L, column C)", as 4.5 asks.
        problems.append(f"not valid TOML: {exc}")
    return None


def _check_package_table(data: dict[str, object], problems: list[str]) -> str | None:
    """`[package]` with string `name` (non-empty), `version` and `language` = "0.1"."""
    table = data.get("package")
    if table is None:
        problems.append("missing the [package] table")
        return None
    if not isinstance(table, dict):
        problems.append("`package` must be a table ([package])")
        return None
    values: dict[str, str] = {}
    for key in ("name", "version", "language"):
        value = table.get(key)
        if value is None:
            problems.append(f"[package] is missing `{key}`")
        elif not isinstance(value, str):
            problems.append(f"[package] `{key}` must be a string")
        else:
            values[key] = value
    name = values.get("name")
    if name == "":
        problems.append("[package] `name` must not be empty")
        name = None
    language = values.get("language")
    if language is not None and language != LANGUAGE_VERSION:
        problems.append(
            f'unsupported language version "{language}" '
            f'(this toolchain implements "{LANGUAGE_VERSION}")'
        )
    return name


def _check_dependencies(
    data: dict[str, object], root: Path, problems: list[str]
) -> dict[str, Path]:
    """`[dependencies]`: identifier keys (not std/crate), each exactly `{ path = "<dir>" }`."""
    table = data.get("dependencies")
    if table is None:
        return {}
    if not isinstance(table, dict):
        problems.append("`dependencies` must be a table ([dependencies])")
        return {}
    found: dict[str, Path] = {}
    for key, value in table.items():
        problem = _dependency_problem(key, value, root)
        if problem is not None:
            problems.append(problem)
            continue
        assert isinstance(value, dict)
        found[key] = (root / value["path"]).resolve()
    return found


def _dependency_problem(key: str, value: object, root: Path) -> str | None:
    if not is_identifier(key):
        return f"dependency name `{key}` is not an identifier ([A-Za-z_][A-Za-z0-9_]*)"
    if key in RESERVED_DEPENDENCY_NAMES:
        return f"`{key}` cannot name a dependency (it is a reserved import root)"
    if not isinstance(value, dict) or set(value) != {"path"}:
        return (
            f'dependency `{key}` must be exactly {{ path = "<relative dir>" }} '
            "(other sources are not supported yet)"
        )
    path = value["path"]
    if not isinstance(path, str) or not path:
        return f"dependency `{key}`: `path` must be a non-empty string"
    if Path(path).is_absolute():
        return f"dependency `{key}`: `path` must be relative to the manifest's directory"
    target = root / path
    if not (target / MANIFEST_NAME).is_file():
        return f"dependency `{key}`: `{path}` is not a directory with its own {MANIFEST_NAME}"
    return None
