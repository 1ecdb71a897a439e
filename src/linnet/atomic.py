"""Files written whole or not at all: a temporary file in the target's folder, then a rename.

Every writer of user files (SafeTensors, ONNX models and their data files,
`save_together`, imported sources, `bindings.json`, `linnet fmt`) goes through
this module, so no reader ever sees half a file, a failed or killed write
leaves the earlier file as it was, and the debris of a killed write goes away
with the next write.

One file (`atomic_write`, `write_bytes`):

1. Stale temporaries of earlier writes to the same target are removed (see
   below), then the new content goes to `.<name>.linnet-tmp-<pid>-<random>`
   in the target's folder (the same file system, so the rename is atomic).
2. `os.replace` renames it over the target. The target is never unlinked
   first: at every moment the path holds the old file or the new one,
   complete. (ext4 then flushes the new file at the rename, auto_da_alloc:
   slower than an unlink first, which left readers no file at all for a
   moment, and a `kill -9` in that gap no file for good.)
3. Any failure (an exception in the block, `OSError` from a full disk or
   `EFBIG` past `RLIMIT_FSIZE`) removes the temporary file; an `OSError`
   becomes a `LinnetError` naming the file.

Stale temporaries. A `kill -9` (or a power cut) skips step 3. The next write
to the same target removes `.<name>.linnet-tmp-<pid>-*` files whose process
is gone (no process with that id on this machine), and any older than
`STALE_AFTER` seconds before the write began (a process id reused since, or
a writer on another machine sharing the folder); a live writer's temporary
is left alone. Pending writes of other targets are never touched.

A model and its data file (`versioned_write`, `remove_unreferenced`). Two
files cannot be renamed together, and an ONNX model names its data file and
byte offsets in it: replacing `m.onnx` and `m.onnx.data` in place, in either
order, leaves a moment (forever, after a kill) in which the model points at
a missing or a foreign data file. So every save writes its data file under a
name of its own: `m.onnx.data` becomes `m.onnx.<version>.data` (16 random hex
digits, `versioned_name`), and then:

1. the data file is written (steps 1-3 above) and renamed to its versioned
   name, one no file has: no model points at it yet;
2. each model file, pointing at that name, is renamed over its target: a
   reader sees the old model with the old data file or the new model with
   the new one;
3. only then are earlier data files of the same family (the plain
   `m.onnx.data` of older versions and other `m.onnx.<version>.data`) removed,
   and only those no model in the folder refers to any more (a `*.onnx`
   file containing the data file's name) and last written before this save
   began (a concurrent save's new file is not ours to remove).

Why random versions and not a digest of the content: hashing the weights
while writing them (SHA-256, measured) made saving a 512 MiB model three to
ten times slower on a busy machine, for no gain in safety; a fresh name
never replaces a file, so no rename forces a flush either.

A kill before 2 leaves the old model and its data, plus an unreferenced new
data file (or a temporary) that the next save removes; a kill between 2 and 3
leaves the new model, complete, and an old data file the next save removes.
One data file may serve several models (`save_together`): each is renamed in
on its own and the old file goes once none refers to it. What is not
covered: a reader that loaded the old model file before step 2 but opens its
data file after step 3 finds it gone (ONNX Runtime opens both at once, at
session creation); two processes saving the same target at the same moment
(the last rename wins).

Two more choices are made here once:

- Permissions. The new file gets the mode the file it replaces had, or, for
  a new file, what `open()` would give (0o666 less the umask). `mkstemp`'s
  0o600 would make a saved checkpoint unreadable to the rest of a team.
- Durability. `durable=True` (source files, small JSON) fsyncs before the
  rename: after a power cut the path holds the old or the new file,
  complete. `durable=False` (weights: gigabytes) skips the fsync, as
  `safetensors`, `torch.save` and `onnx.save` do; a killed process still
  leaves the old or the new file (the page cache survives it).

Folders: `ensure_folder` creates an output folder with its parents, a
failure (no permission, a path through a file) a `LinnetError`.
"""

from __future__ import annotations

import mmap
import os
import re
import secrets
import stat
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import BinaryIO

from linnet.errors import LinnetError

__all__ = [
    "STALE_AFTER",
    "VersionedFile",
    "atomic_write",
    "ensure_folder",
    "remove_stale_temporaries",
    "remove_unreferenced",
    "versioned_name",
    "versioned_write",
    "write_bytes",
]

STALE_AFTER = 3600.0
"""Seconds after which a temporary of a process that still seems alive is stale."""
_TMP_MARK = ".linnet-tmp-"
_VERSION_BYTES = 8


def _folder(target: Path) -> Path:
    return target.parent if str(target.parent) else Path(".")


def temporary_name(target: Path) -> Path:
    """`.<name>.linnet-tmp-<pid>-<random>` beside `target`."""
    return _folder(target) / f".{target.name}{_TMP_MARK}{os.getpid()}-{secrets.token_hex(4)}"


def _process_gone(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # it exists (another user's process, say)
    return False


def remove_stale_temporaries(target: str | os.PathLike[str], started: float) -> list[Path]:
    """Remove what killed writes to `target` left (see the module docstring); the removed paths.

    `started` is when the current write began (`time.time()`).
    """
    path = Path(target)
    prefix = f".{path.name}{_TMP_MARK}"
    pattern = re.compile(re.escape(prefix) + r"(\d+)-[0-9a-f]+")
    removed: list[Path] = []
    try:
        entries = list(os.scandir(_folder(path)))
    except OSError:
        return removed
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if match is None:
            continue
        try:
            mtime = entry.stat(follow_symlinks=False).st_mtime
        except OSError:
            continue
        pid = int(match.group(1))
        alive = pid == os.getpid() or not _process_gone(pid)
        if alive and mtime >= started - STALE_AFTER:
            continue
        try:
            os.unlink(entry.path)
        except OSError:
            continue
        removed.append(Path(entry.path))
    return removed


def _error(label: str, exc: OSError) -> LinnetError:
    return LinnetError(f"cannot write `{label}`: {exc.strerror or exc}")


@contextmanager
def atomic_write(
    path: str | os.PathLike[str],
    *,
    durable: bool = True,
    shown: str | None = None,
    exclusive: bool = False,
) -> Iterator[BinaryIO]:
    """A binary handle on a new file that replaces `path` when the block ends normally.

    An `OSError` (no space, `EFBIG`, no permission) becomes a `LinnetError`
    naming the file (as `shown`, when the caller resolved a path the user
    wrote another way); any failure removes the temporary file and leaves
    `path` untouched. The folder must exist. With `exclusive`, an existing
    `path` is never replaced: the finished file is linked in under its name
    (`os.link` fails if the name exists) and `FileExistsError` is raised.
    """
    target = Path(path)
    with _temporary(target, durable=durable, shown=shown) as (temporary, out):
        yield out
    if exclusive:
        _link_in(temporary, target, shown)
    else:
        _rename_in(temporary, target, shown)


def write_bytes(
    path: str | os.PathLike[str], data: bytes, *, durable: bool = True, shown: str | None = None
) -> None:
    """`data` as the whole new content of `path` (see `atomic_write`)."""
    with atomic_write(path, durable=durable, shown=shown) as out:
        out.write(data)


@contextmanager
def _temporary(
    target: Path, *, durable: bool, shown: str | None
) -> Iterator[tuple[Path, BinaryIO]]:
    """A written, closed temporary for `target` with `target`'s mode, ready to rename.

    On any failure inside (or while closing), the temporary is removed.
    """
    label = shown if shown is not None else str(target)
    remove_stale_temporaries(target, time.time())
    temporary = temporary_name(target)
    try:
        mode: int | None = stat.S_IMODE(target.stat().st_mode)
    except OSError:
        mode = None  # a new file: open()'s default, 0o666 less the umask
    try:
        handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as exc:
        raise _error(label, exc) from None
    try:
        with os.fdopen(handle, "wb") as out:
            yield temporary, out
            out.flush()
            if durable:
                os.fsync(out.fileno())
        if mode is not None:
            os.chmod(temporary, mode)
    except BaseException as exc:
        _unlink_quietly(temporary)
        if isinstance(exc, OSError):
            raise _error(label, exc) from None
        raise


def _rename_in(temporary: Path, target: Path, shown: str | None) -> None:
    try:
        os.replace(temporary, target)
    except BaseException as exc:
        _unlink_quietly(temporary)
        if isinstance(exc, OSError):
            raise _error(shown if shown is not None else str(target), exc) from None
        raise


def _link_in(temporary: Path, target: Path, shown: str | None) -> None:
    """`temporary` under the name `target` unless that exists (`FileExistsError`)."""
    try:
        os.link(temporary, target)
    except FileExistsError:
        raise
    except OSError as exc:
        raise _error(shown if shown is not None else str(target), exc) from None
    finally:
        _unlink_quietly(temporary)


def _unlink_quietly(path: Path) -> None:
    with suppress(OSError):
        os.unlink(path)


def versioned_name(base: str, version: str) -> str:
    """`m.onnx.data` -> `m.onnx.<version>.data`; a name without a suffix gets `.<version>`."""
    stem, dot, suffix = base.rpartition(".")
    if not dot or not stem:
        return f"{base}.{version}"
    return f"{stem}.{version}.{suffix}"


def _versions_pattern(base: str) -> re.Pattern[str]:
    stem, dot, suffix = base.rpartition(".")
    hexes = f"[0-9a-f]{{{2 * _VERSION_BYTES}}}"
    if not dot or not stem:
        return re.compile(re.escape(base) + r"\." + hexes)
    return re.compile(re.escape(stem) + r"\." + hexes + r"\." + re.escape(suffix))


@contextmanager
def versioned_write(
    base: str | os.PathLike[str], *, durable: bool = False, shown: str | None = None
) -> Iterator[VersionedFile]:
    """Write a file that ends up under a name no file had: `versioned_name(base, <version>)`.

    The version is 16 random hex digits, drawn again in the unlikely case the
    name exists. The temporary is named after `base` (so the next write of
    `base` cleans up after a killed one); `.path` of the handle is the final
    path once the block has ended. Failures are handled as in `atomic_write`.
    """
    target = Path(base)
    with _temporary(target, durable=durable, shown=shown) as (temporary, out):
        versioned = VersionedFile(out)
        yield versioned
    while True:
        final = target.with_name(versioned_name(target.name, secrets.token_hex(_VERSION_BYTES)))
        if not os.path.lexists(final):
            break
    _rename_in(temporary, final, shown)
    versioned.path = final


class VersionedFile:
    """The handle `versioned_write` yields: a binary file; `.path` is set at the end."""

    def __init__(self, out: BinaryIO) -> None:
        self._out = out
        self.path: Path | None = None

    def write(self, data: bytes | bytearray | memoryview) -> int:
        return self._out.write(data)

    @property
    def handle(self) -> BinaryIO:
        """The open file, for a writer that copies into it in the kernel (`FileCopier`)."""
        return self._out


def remove_unreferenced(
    base: str | os.PathLike[str], keep: Iterable[Path], referrers: Iterable[Path], started: float
) -> list[Path]:
    """Remove earlier versions of `base` that no referrer names any more; the removed paths.

    Versions: `base` itself and every `versioned_name(base, <version>)` beside
    it, except those in `keep`, last modified before `started`, that no file
    in `referrers` contains the name of (a byte search: a model stores its
    data file's name verbatim, so a false match only keeps a file). Stale
    temporaries of `base` go too.
    """
    path = Path(base)
    folder = _folder(path)
    remove_stale_temporaries(path, started)
    kept = {p.name for p in keep}
    pattern = _versions_pattern(path.name)
    try:
        names = [
            n for n in os.listdir(folder) if n == path.name or pattern.fullmatch(n) is not None
        ]
    except OSError:
        return []
    candidates = []
    for name in names:
        if name in kept:
            continue
        try:
            info = os.lstat(folder / name)
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode) and info.st_mtime < started:
            candidates.append(name)
    if not candidates:
        return []
    referenced = _named_in(candidates, referrers)
    removed: list[Path] = []
    for name in candidates:
        if name in referenced:
            continue
        try:
            os.unlink(folder / name)
        except OSError:
            continue
        removed.append(folder / name)
    return removed


def _named_in(names: list[str], files: Iterable[Path]) -> set[str]:
    """Those of `names` that occur in any of `files` (unreadable files name everything)."""
    found: set[str] = set()
    for file in files:
        try:
            with open(file, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                if size == 0:
                    continue
                with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as content:
                    found.update(n for n in names if content.find(n.encode("utf-8")) >= 0)
        except FileNotFoundError:
            continue
        except (OSError, ValueError):
            return set(names)
        if len(found) == len(names):
            break
    return found


def ensure_folder(path: str | os.PathLike[str], *, what: str = "folder") -> Path:
    """`path` as a folder, created with its parents if needed; a failure is a `LinnetError`."""
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise LinnetError(f"cannot create the {what} `{folder}`: a file has that name") from None
    except OSError as exc:
        raise LinnetError(f"cannot create the {what} `{folder}`: {exc.strerror or exc}") from None
    return folder
