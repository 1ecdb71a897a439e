"""Tensor data into a GGUF file at about the speed of a file copy.

Stage: `linnet.gguf.export` (issue 13: a TinyLlama-sized export in at most 10 s
and 1 GB). Each tensor's bytes start at a multiple of the file's alignment and
are padded exactly as gguf-py's `GGUFWriter.write_tensor_data` pads them
(zeros up to the alignment before the tensor, `-nbytes % alignment` after), and
come by one of three paths:

- `copy`: bytes stored unchanged (an f32 tensor of an f32 checkpoint kept as
  f32, rows in place) go file to file in the kernel (`FileCopier`), never
  through this process;
- `convert`: an elementwise conversion (f16, bf16, Q8_0 blocks of 32) reads
  the source in chunks of `CHUNK_VALUES` into one reused buffer (`os.preadv`
  straight from the checkpoint file where the array is a view of its mapping:
  no page faults and nothing left resident) and writes each converted chunk;
  every output value (or block) depends on its own inputs only, so the bytes
  are those of converting the whole tensor at once;
- `write`: an array built whole (permuted or quantised tensors), written as it is.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from linnet.weights.safetensors import FileCopier, file_range

Array = np.ndarray[Any, Any]
CHUNK_VALUES = 1 << 20
"""f32 values per chunk (4 MB): big reads and writes, a few MB held."""


class TensorData:
    """Writes tensors' data, in order, after a GGUF header already in `out`."""

    def __init__(self, out: BinaryIO, copier: FileCopier, alignment: int) -> None:
        self.out = out
        self.copier = copier
        self.alignment = alignment
        self.buffer = np.empty(CHUNK_VALUES, np.float32)
        self.sources: dict[Path, int] = {}

    def close(self) -> None:
        for descriptor in self.sources.values():
            os.close(descriptor)
        self.sources.clear()

    def write(self, array: Array) -> None:
        """`array`'s bytes (C order)."""
        data = np.ascontiguousarray(array)
        self._pad_to_alignment()
        if data.nbytes:
            self.out.write(data.reshape(-1).view(np.uint8).data)
        self._pad_after(data.nbytes)

    def copy(self, array: Array) -> bool:
        """`array`'s bytes copied from its file by the kernel; False (nothing written) when
        it is not a view of a SafeTensors file's mapping."""
        origin = file_range(array)
        if origin is None:
            return False
        self._pad_to_alignment()
        if not self.copier.copy(origin[0], origin[1], array.nbytes):
            self.out.write(np.ascontiguousarray(array).reshape(-1).view(np.uint8).data)
        self._pad_after(array.nbytes)
        return True

    def convert(self, array: Array, convert: Callable[[Array], Array]) -> None:
        """`convert` of `array`'s values (as f32, C order) chunk by chunk; `convert` maps a
        1-D f32 chunk (a multiple of 32 values but for the last) to its output array."""
        self._pad_to_alignment()
        written = 0
        for chunk in self._chunks(array):
            data = convert(chunk)
            self.out.write(data.reshape(-1).view(np.uint8).data)
            written += data.nbytes
        self._pad_after(written)

    def _chunks(self, array: Array) -> Iterator[Array]:
        """`array`'s values, C order, as f32 chunks of at most `CHUNK_VALUES` in `buffer`."""
        size = int(array.size)
        origin = file_range(array) if array.dtype == np.float32 else None
        if origin is not None:
            source = self._descriptor(origin[0])
            for start in range(0, size, CHUNK_VALUES):
                chunk = self.buffer[: min(CHUNK_VALUES, size - start)]
                _read_exactly(source, chunk, origin[1] + start * 4, origin[0])
                yield chunk
            return
        flat = np.ascontiguousarray(array, dtype=np.float32).reshape(-1)
        for start in range(0, size, CHUNK_VALUES):
            part = flat[start : start + CHUNK_VALUES]
            chunk = self.buffer[: part.size]
            np.copyto(chunk, part)
            yield chunk

    def _descriptor(self, path: Path) -> int:
        descriptor = self.sources.get(path)
        if descriptor is None:
            descriptor = self.sources[path] = os.open(path, os.O_RDONLY)
        return descriptor

    def _pad_to_alignment(self) -> None:
        self._zeros(-self.out.tell() % self.alignment)

    def _pad_after(self, nbytes: int) -> None:
        self._zeros(-nbytes % self.alignment)

    def _zeros(self, count: int) -> None:
        if count:
            self.out.write(bytes(count))


def _read_exactly(descriptor: int, chunk: Array, offset: int, path: Path) -> None:
    view = chunk.view(np.uint8).data
    done = 0
    while done < len(view):
        step = os.preadv(descriptor, [view[done:]], offset + done)
        if step == 0:
            raise OSError(f"{path}: ends before byte {offset + len(view)}")
        done += step
