"""Files written whole or not at all: a temporary file in the target's folder, then a rename.

Every writer of user files (SafeTensors, ONNX models and their data, imported
source, `bindings.json`, `linnet fmt`) goes through `atomic_write`, so no
reader ever sees half a file and a failed write leaves the earlier file as it
was.

Two choices are made here once:

- Permissions. The new file gets the mode the file it replaces had, or, for
  a new file, what `open()` would give (0o666 less the umask). `mkstemp`'s
  0o600 would make a saved checkpoint unreadable to the rest of a team.
- Durability. `durable=True` (source files, small JSON) fsyncs before the
  rename and renames over the old file: after a crash the path holds the
  old or the new file, complete. `durable=False` (weights: gigabytes) skips
  the fsync, as `safetensors`, `torch.save` and `onnx.save` do, and unlinks
  the old file before the rename: ext4 forces the whole new file to disk on
  a rename that replaces one (auto_da_alloc), which made saving over an
  earlier export several times slower. Readers still never see half a file;
  for a moment they may see none.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from linnet.errors import LinnetError

__all__ = ["atomic_write", "write_bytes"]


@contextmanager
def atomic_write(
    path: str | os.PathLike[str], *, durable: bool = True, shown: str | None = None
) -> Iterator[BinaryIO]:
    """A binary handle on a new file that replaces `path` when the block ends normally.

    An `OSError` (no space, no permission) becomes a `LinnetError` naming the
    file (as `shown`, when the caller resolved a path the user wrote another
    way); any failure removes the temporary file and leaves `path` untouched.
    The folder must exist.
    """
    target = Path(path)
    label = shown if shown is not None else str(target)
    folder = target.parent if str(target.parent) else Path(".")
    temporary = folder / f".{target.name}.{secrets.token_hex(4)}.tmp"
    try:
        mode = stat.S_IMODE(target.stat().st_mode)
    except OSError:
        mode = None  # a new file: open()'s default, 0o666 less the umask
    try:
        handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as exc:
        raise LinnetError(f"cannot write `{label}`: {exc.strerror or exc}") from None
    try:
        with os.fdopen(handle, "wb") as out:
            yield out
            out.flush()
            if durable:
                os.fsync(out.fileno())
        if mode is not None:
            os.chmod(temporary, mode)
        if durable:
            os.replace(temporary, target)
        else:
            target.unlink(missing_ok=True)
            os.rename(temporary, target)
    except BaseException as exc:
        temporary.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise LinnetError(f"cannot write `{label}`: {exc.strerror or exc}") from None
        raise


def write_bytes(
    path: str | os.PathLike[str], data: bytes, *, durable: bool = True, shown: str | None = None
) -> None:
    """`data` as the whole new content of `path` (see `atomic_write`)."""
    with atomic_write(path, durable=durable, shown=shown) as out:
        out.write(data)
