"""Writing an import's weights as SafeTensors, copying file ranges in the kernel.

Stage: the importers' last step, after the generated source has checked. In:
the stored tensors the source reads, each an in-memory array or a byte range
of a file (an ONNX model's external data). Out: one SafeTensors file, written
by `linnet.atomic.atomic_write` (a reader never sees half a file).

Why not `linnet.weights.save_safetensors`: an imported model's weights are
already bytes in a file. Copying them with `os.copy_file_range` moves no data
through Python (the kernel copies, or shares blocks where the file system
can) and keeps the importer's memory flat: measured on a 4.4 GB TinyLlama
export, half the time of reading and writing the same bytes. The header is
padded with spaces so the data starts on a 4096-byte boundary, which keeps
page-aligned source ranges page-aligned in the copy. The format is the same
(`linnet.weights.read_safetensors` and the safetensors library read it).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from linnet.atomic import atomic_write, ensure_folder
from linnet.errors import LinnetError
from linnet.progress import Progress
from linnet.records import record
from linnet.weights.safetensors import LINNET_TO_ST

_ALIGN = 4096
_CHUNK = 1 << 26


@record(frozen=True)
class FileRange:
    """`length` bytes of `path` from `offset`: a tensor's payload left in its file."""

    path: Path
    offset: int
    length: int


@record(frozen=True)
class StoredTensor:
    """One tensor to write: its name, Linnet dtype, shape and payload."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    data: np.ndarray | FileRange


def write_safetensors(target: Path, tensors: Sequence[StoredTensor]) -> None:
    """Write `tensors` to `target` as SafeTensors (see the module docstring)."""
    ordered = sorted(
        tensors,
        key=lambda t: (
            (0, str(t.data.path), t.data.offset) if isinstance(t.data, FileRange) else (1, "", 0)
        ),
    )
    header: dict[str, object] = {}
    offset = 0
    for t in ordered:
        size = t.data.length if isinstance(t.data, FileRange) else t.data.nbytes
        if t.dtype not in LINNET_TO_ST:
            raise LinnetError(f"tensor `{t.name}` has dtype {t.dtype}, which SafeTensors lacks")
        header[t.name] = {
            "dtype": LINNET_TO_ST[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    encoded = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    encoded += b" " * (-(8 + len(encoded)) % _ALIGN)
    folder = target.parent if str(target.parent) else Path(".")
    ensure_folder(folder, what="weights folder")
    with atomic_write(target, durable=False) as out:
        out.write(len(encoded).to_bytes(8, "little"))
        out.write(encoded)
        out.flush()
        position = 8 + len(encoded)
        with Progress(f"writing {target.name}", offset, "B") as bar:
            for t in ordered:
                start = position
                if isinstance(t.data, FileRange):
                    _copy_range(t.data, out.fileno(), position)
                    position += t.data.length
                else:
                    arr = np.ascontiguousarray(t.data)
                    out.seek(position)
                    if arr.size:
                        out.write(arr.reshape(-1).view(np.uint8).data)
                    out.flush()
                    position += arr.nbytes
                bar.update(position - start)
        out.truncate(position)


def _copy_range(source: FileRange, out_fd: int, position: int) -> None:
    with open(source.path, "rb") as handle:
        if source.offset + source.length > os.fstat(handle.fileno()).st_size:
            raise LinnetError(
                f"{source.path}: ends before the {source.length} bytes a tensor needs"
            )
        done = 0
        while done < source.length:
            want = min(_CHUNK * 16, source.length - done)
            try:
                n = os.copy_file_range(
                    handle.fileno(), out_fd, want, source.offset + done, position + done
                )
            except OSError:
                n = _copy_plain(
                    handle.fileno(), out_fd, want, source.offset + done, position + done
                )
            if n <= 0:
                raise LinnetError(f"{source.path}: short read at byte {source.offset + done}")
            done += n


def _copy_plain(src: int, dst: int, count: int, src_at: int, dst_at: int) -> int:
    """The same copy through a buffer, where the kernel cannot copy between the files."""
    done = 0
    while done < count:
        chunk = os.pread(src, min(_CHUNK, count - done), src_at + done)
        if not chunk:
            break
        os.pwrite(dst, chunk, dst_at + done)
        done += len(chunk)
    return done
