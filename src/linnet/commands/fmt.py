"""`linnet fmt`: rewrite files in the canonical style, check them, or filter stdin (18.2).

In: paths (directories searched like `check`) or `-`. The formatter itself is
`linnet.syntax.format.format_source`; this module decides what happens to its
result:

- in place, each changed file is replaced atomically (a temporary file in the
  same directory, then `os.replace`), so an interrupted run never leaves a
  half-written source; the file's permission bits are kept, and a symlink is
  followed so the link stays a link;
- `--check` writes nothing and prints `would reformat <path>` per file;
- a file with syntax errors is reported and left untouched (exit 1).
"""

from __future__ import annotations

import sys
from pathlib import Path

from linnet.atomic import write_bytes
from linnet.source import SourceFile

STDIN_NAME = "<stdin>"


def format_paths(paths: list[Path], check: bool, color: bool) -> int:
    """Format every source under `paths`; returns the exit status (1 if any file failed or,
    with `check`, would change)."""
    from linnet.check.modules import find_sources

    status = 0
    for path in find_sources(paths):
        try:
            data = path.read_bytes()
        except OSError as exc:
            sys.stderr.write(f"linnet: cannot read `{path}`: {exc.strerror or exc}\n")
            status = 1
            continue
        formatted = _format(SourceFile.from_bytes(str(path), data), color)
        if formatted is None:
            status = 1
            continue
        if formatted == data:
            continue
        if check:
            sys.stderr.write(f"would reformat {path}\n")
            status = 1
        else:
            write_atomically(path, formatted)
            sys.stderr.write(f"reformatted {path}\n")
    return status


def format_stdin(check: bool, color: bool) -> int:
    """`fmt -`: formatted stdin on stdout; with `check`, only the status (and a note)."""
    buffer = getattr(sys.stdin, "buffer", None)
    data = buffer.read() if buffer is not None else sys.stdin.read().encode("utf-8")
    formatted = _format(SourceFile.from_bytes(STDIN_NAME, data), color)
    if formatted is None:
        return 1
    if check:
        if formatted != data:
            sys.stderr.write(f"would reformat {STDIN_NAME}\n")
            return 1
        return 0
    sys.stdout.write(formatted.decode("utf-8"))
    return 0


def _format(source: SourceFile, color: bool) -> bytes | None:
    """The formatted bytes, or None after printing the syntax errors that prevent it."""
    from linnet.diagnostics import render_human
    from linnet.syntax.format import format_source

    formatted, diagnostics = format_source(source)
    if formatted is None:
        errors = [d for d in diagnostics if d.is_error] or diagnostics
        sys.stderr.write(render_human(errors, color=color))
        return None
    return formatted.encode("utf-8", "surrogateescape")


def write_atomically(path: Path, data: bytes) -> None:
    """Replace the file at `path` with `data` in one rename; `LinnetError` if it cannot."""
    write_bytes(path.resolve(), data, shown=str(path))  # a symlink's target is rewritten
