"""requirements.lock agrees with pyproject.toml, and the venv is what the lock says."""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import lock  # noqa: E402


def _requirements() -> list[Requirement]:
    tables = lock.dependency_tables()
    found = [Requirement(r) for r in tables["build-system"]]  # type: ignore[union-attr]
    found += [Requirement(r) for r in tables["dependencies"]]  # type: ignore[union-attr]
    for extra in tables["optional-dependencies"].values():  # type: ignore[union-attr]
        found += [Requirement(r) for r in extra if not r.startswith("linnet-lang")]
    return found


def test_the_lock_was_made_from_this_pyproject() -> None:
    header = [
        line for line in lock.LOCK.read_text().splitlines() if line.startswith(lock.DIGEST_PREFIX)
    ]
    assert header == [lock.DIGEST_PREFIX + lock.digest()], (
        "pyproject.toml's dependencies changed since requirements.lock was made: run `make lock`"
    )


def test_every_requirement_is_pinned_and_satisfied() -> None:
    pins = lock.read_pins()
    problems = []
    for req in _requirements():
        version = pins.get(lock.canonical(req.name))
        if version is None:
            problems.append(f"{req} has no pin")
        elif not req.specifier.contains(version, prereleases=True):
            problems.append(f"{req} is not satisfied by the pin {req.name}=={version}")
    assert not problems, "\n".join(problems)


def test_pins_are_exact_and_unique() -> None:
    lines = [ln.strip() for ln in lock.LOCK.read_text().splitlines() if ln.strip() and ln[0] != "#"]
    names = [lock.canonical(ln.split("==")[0]) for ln in lines]
    assert len(names) == len(set(names))
    assert all(ln.count("==") == 1 and ";" not in ln and " " not in ln for ln in lines)


@pytest.mark.skipif(
    not (ROOT / ".venv").exists() or Path(sys.prefix).resolve() != (ROOT / ".venv").resolve(),
    reason="runs in the project's own .venv, the one `make` builds from the lock",
)
def test_the_venv_holds_exactly_the_locked_versions() -> None:
    wrong = []
    for name, version in lock.read_pins().items():
        try:
            got = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            wrong.append(f"{name}=={version} is not installed")
            continue
        if got != version:
            wrong.append(f"{name}: locked {version}, installed {got}")
    assert not wrong, "\n".join(wrong)


def test_the_digest_sees_a_changed_dependency(tmp_path: Path) -> None:
    changed = tmp_path / "pyproject.toml"
    changed.write_text(lock.PYPROJECT.read_text().replace('"numpy>=1.26"', '"numpy>=1.27"'))
    assert lock.digest(changed) != lock.digest()
