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
    try:
        lib.parent.mkdir(parents=True, exist_ok=True)
        with manifest.open("x", encoding="utf-8", newline="\n") as out:
            out.write(MANIFEST_TEMPLATE.format(name=name, language=LANGUAGE_VERSION))
    except FileExistsError:
        raise LinnetError(f"`{manifest}` already exists; nothing was written") from None
    except OSError as exc:
        raise LinnetError(f"cannot write `{manifest}`: {exc.strerror or exc}") from None
    try:
        with lib.open("x", encoding="utf-8", newline="\n") as out:
            out.write(LIB_TEMPLATE.format(name=name))
    except FileExistsError:
        pass  # 4.7: an existing lib.linnet is kept as it is
    except OSError as exc:
        raise LinnetError(f"cannot write `{lib}`: {exc.strerror or exc}") from None
    return name
