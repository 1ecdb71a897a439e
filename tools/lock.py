"""The dependency lock: what `make` installs, pinned, and how it is checked against pyproject.toml.

`requirements.lock` lists every distribution that `make venv` installs (the `dev`
extra's whole dependency tree, ruff and mypy included, and the build backend that
the editable install of this project needs), one `name==version` a line. Its
header carries a digest of pyproject.toml's dependency tables, so a change there
without a new lock is caught by `tests/test_lock.py`, which also checks that every
requirement of pyproject.toml is satisfied by a pin.

    python tools/lock.py lock      # `make lock`: the lock updated for pyproject.toml's changes
    python tools/lock.py lock --upgrade   # every package resolved afresh
    python tools/lock.py digest    # the digest of pyproject.toml's dependencies

`lock` builds a throw-away venv from pyproject.toml alone (no lock), installs the
`dev` extra and the build backend with pip, and writes the lock from what got installed.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements.lock"
PYPROJECT = ROOT / "pyproject.toml"
DIGEST_PREFIX = "# pyproject-dependencies-sha256: "
# pip comes with every venv and does the installing; everything it installs is pinned.
UNLOCKED = frozenset({"pip"})
PROJECT = "linnet-lang"


def canonical(name: str) -> str:
    """PEP 503 normalised name: `Ml_Dtypes` and `ml-dtypes` are one distribution."""
    import re

    return re.sub(r"[-_.]+", "-", name).lower()


def dependency_tables(pyproject: Path = PYPROJECT) -> dict[str, object]:
    """Every table of pyproject.toml that decides what gets installed."""
    data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    project = data["project"]
    return {
        "build-system": data.get("build-system", {}).get("requires", []),
        "dependencies": project.get("dependencies", []),
        "optional-dependencies": project.get("optional-dependencies", {}),
        "requires-python": project.get("requires-python", ""),
    }


def digest(pyproject: Path = PYPROJECT) -> str:
    text = json.dumps(dependency_tables(pyproject), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def read_pins(lock: Path = LOCK) -> dict[str, str]:
    """`{canonical name: version}` of every pin in the lock."""
    pins: dict[str, str] = {}
    for line in lock.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep:
            raise ValueError(f"{lock.name}: `{line}` is not a `name==version` pin")
        pins[canonical(name)] = version.strip()
    return pins


def installed(python: str) -> dict[str, str]:
    """`{name: version}` installed in the venv of `python`, without this project itself."""
    out = subprocess.run(
        [python, "-m", "pip", "list", "--format=json", "--exclude-editable"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    found = {row["name"]: row["version"] for row in json.loads(out)}
    return {
        n: v for n, v in found.items() if canonical(n) not in UNLOCKED and canonical(n) != PROJECT
    }


def write(python: str) -> None:
    pins = installed(python)
    lines = [
        "# The lock of every package `make` installs. Regenerate with `make lock`;",
        "# tests/test_lock.py fails when pyproject.toml and this file disagree.",
        f"{DIGEST_PREFIX}{digest()}",
    ]
    lines += [f"{name}=={pins[name]}" for name in sorted(pins, key=canonical)]
    tmp = LOCK.with_name(LOCK.name + ".tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tmp.replace(LOCK)
    print(f"{LOCK.name}: {len(pins)} packages pinned")


def lock(upgrade: bool = False) -> None:
    """Resolve pyproject.toml in a throw-away venv and write the lock.

    Unless `upgrade`, the current lock's pins are constraints: a package already locked
    keeps its version, and only what is new (or no longer satisfies pyproject.toml) is
    resolved afresh, so adding one dependency does not move every other one.
    """
    import tempfile

    build = dependency_tables()["build-system"]
    assert isinstance(build, list)
    with tempfile.TemporaryDirectory(prefix="linnet-lock-") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        python = str(venv / "bin" / "python")
        pip = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        if not upgrade and LOCK.exists():
            constraints = Path(tmp) / "constraints.txt"
            constraints.write_text(_kept_pins(), encoding="utf-8")
            pip += ["-c", str(constraints)]
        subprocess.run([*pip, *build], check=True)
        subprocess.run([*pip, "-e", f"{ROOT}[dev]"], check=True)
        write(python)


def _kept_pins() -> str:
    """The current pins that still satisfy every requirement of pyproject.toml naming them."""
    from packaging.requirements import Requirement

    tables = dependency_tables()
    wanted: list[str] = [*tables["build-system"], *tables["dependencies"]]  # type: ignore[misc]
    for extra in tables["optional-dependencies"].values():  # type: ignore[union-attr]
        wanted += extra
    reqs = [Requirement(r) for r in wanted if not r.startswith(PROJECT)]
    kept = []
    for name, version in read_pins().items():
        if all(
            r.specifier.contains(version, prereleases=True)
            for r in reqs
            if canonical(r.name) == name
        ):
            kept.append(f"{name}=={version}")
    return "\n".join(kept) + "\n"


def main(argv: list[str]) -> int:
    if argv in (["lock"], ["lock", "--upgrade"]):
        lock(upgrade=argv == ["lock", "--upgrade"])
        return 0
    if argv == ["digest"]:
        print(digest())
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
