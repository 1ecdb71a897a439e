"""Every public std item has a test here: the `use` lines of tests/stdlib name them all.

The public items are read from the stdlib sources (`pub op|fn|block|const`) and
must match the table in stdlib/README.md, so a new item without a test, or a
README row out of date, fails this file.
"""

from __future__ import annotations

import re
from pathlib import Path

from stdlib_support import STDLIB

HERE = Path(__file__).resolve().parent

PUBLIC = re.compile(r"^pub\s+(?:op|fn|block|const)\s+(\w+)", re.MULTILINE)
MODULE = re.compile(r"^module\s+([\w.]+)", re.MULTILINE)
USE = re.compile(r"use\s+(std(?:\.\w+)*)::\{([^}]*)\}")


def public_items() -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for path in STDLIB.rglob("*.linnet"):
        text = path.read_text()
        module = MODULE.search(text)
        assert module is not None, path
        found |= {(module.group(1), name) for name in PUBLIC.findall(text)}
    return found


def readme_items() -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for line in (STDLIB / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`std."):
            continue
        module = cells[0].strip("`")
        for segment in cells[2].split(";"):
            if segment.strip().startswith("private"):
                continue
            found |= {(module, name) for name in re.findall(r"`(\w+)`", segment)}
    return found


def items_used_by_tests() -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for path in HERE.glob("test_std_*.py"):
        for module, names in USE.findall(path.read_text()):
            found |= {(module, n.strip()) for n in names.split(",") if n.strip()}
    return found


def test_readme_lists_every_public_item() -> None:
    assert readme_items() == public_items()


def test_every_public_item_is_called_by_a_test() -> None:
    items = public_items()
    assert len(items) > 60
    missing = sorted(items - items_used_by_tests())
    assert not missing, missing
