"""`linnet init [DIR]`: create a package (language.md 4.7).

Writes `DIR/linnet.toml` (name, version 0.1.0, language 0.1, an empty
`[dependencies]`) and, when absent, `DIR/src/lib.linnet` holding a minimal
module. An existing `linnet.toml` stops the command before anything is
written; the manifest is created exclusively, so a concurrent `init` cannot be
overwritten either.
"""

from __future__ import annotations

import os
from pathlib import Path

from linnet.atomic import atomic_write, ensure_folder
from linnet.check.package import (
    LANGUAGE_VERSION,
    MANIFEST_NAME,
    RESERVED_DEPENDENCY_NAMES,
    is_identifier,
)
from linnet.errors import LinnetError
from linnet.syntax.tokens import KEYWORDS, RESERVED

FALLBACK_NAME = "model"

MANIFEST_TEMPLATE = """\
[package]
name = "{name}"
version = "0.1.0"
language = "{language}"

[dependencies]
"""

LIB_TEMPLATE = """\
module {name}

pub fn identity<N: Dim>(x: Tensor[N; f32]) -> Tensor[N; f32] {{
    return x
}}
"""


def package_name(directory: Path) -> str:
    """The directory's name with `-`, space and `.` turned into `_` (4.7).

    Falls back to `model` when the result is not a usable identifier: not
    `[A-Za-z_][A-Za-z0-9_]*`, `std`/`crate`, or a keyword or reserved word
    (which could not follow `module`).
    """
    raw = Path(os.path.abspath(directory)).name
    name = raw.replace("-", "_").replace(" ", "_").replace(".", "_")
    unusable = (
        not is_identifier(name)
        or name in RESERVED_DEPENDENCY_NAMES
        or name in KEYWORDS
        or name in RESERVED
    )
    return FALLBACK_NAME if unusable else name


def init_package(directory: Path) -> str:
    """Create the package files in `directory`; returns the package name."""
    manifest = directory / MANIFEST_NAME
    if manifest.exists():
        raise LinnetError(f"`{manifest}` already exists; nothing was written")
    if directory.exists() and not directory.is_dir():
        raise LinnetError(f"`{directory}` exists and is not a directory")
    name = package_name(directory)
    lib = directory / "src" / "lib.linnet"
    ensure_folder(lib.parent)
    text = MANIFEST_TEMPLATE.format(name=name, language=LANGUAGE_VERSION)
    try:
        with atomic_write(manifest, exclusive=True) as out:
            out.write(text.encode("utf-8"))
    except FileExistsError:
        raise LinnetError(f"`{manifest}` already exists; nothing was written") from None
    try:
        with atomic_write(lib, exclusive=True) as out:
            out.write(LIB_TEMPLATE.format(name=name).encode("utf-8"))
    except FileExistsError:
        pass  # 4.7: an existing lib.linnet is kept as it is
    return name
