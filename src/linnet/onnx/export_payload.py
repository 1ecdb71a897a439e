"""Weight payloads kept out of the protobuf until they are needed: written straight to disk.

Stage: between `export_assemble` (which declares each embedded weight as an
initializer holding only its name, type and dims) and `ExportedModel`
(`.model`, `.save`). In: the skeleton `ModelProto` and the weight arrays by
initializer name (`Payload`). Out: the arrays put into the message as
`raw_data` (`materialize`, for a caller that wants a complete in-memory
model), or a `<file>.data` written from the arrays with the message
pointing into it (`write_external`).

Why: a protobuf `bytes` field only takes a `bytes` object, so embedding a
weight costs a full copy held by the message, and writing the message with
onnx's external-data helper then copies it again and reads it back from
disk to restore the message. Writing each array's own buffer (a memory map
of the checkpoint, usually) to the data file reads it once and copies
nothing, so an export holds about the weight bytes at its peak, not twice
that.

Offsets in the data file: tensors of at least `ALIGN_THRESHOLD` bytes start
on a multiple of `PAGE_ALIGN` (64 KiB, the mapping granularity of every
platform ONNX Runtime memory-maps external data on, and the most padding
onnx allows), smaller ones on a multiple of `SMALL_ALIGN`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx

INLINE_LIMIT = 1024
"""Weights smaller than this many bytes are embedded at once (as onnx's `size_threshold`)."""
ALIGN_THRESHOLD = 2**20
PAGE_ALIGN = 2**16
SMALL_ALIGN = 64

Payload = Mapping[str, np.ndarray[Any, Any]]
"""Little-endian C-contiguous arrays (see `export_graph.little_endian`) by initializer name."""


def pending_initializers(
    model: onnx.ModelProto, payload: Payload
) -> Iterator[tuple[onnx.TensorProto, np.ndarray[Any, Any]]]:
    """The main graph's initializers whose data is still in `payload`, in graph order."""
    for tensor in model.graph.initializer:
        array = payload.get(tensor.name)
        if array is not None:
            yield tensor, array


def materialize(model: onnx.ModelProto, payload: Payload) -> None:
    """Put every pending array into its initializer's `raw_data` (one copy each)."""
    for tensor, array in pending_initializers(model, payload):
        tensor.raw_data = array.tobytes()


def payload_bytes(payload: Payload) -> int:
    return sum(int(array.nbytes) for array in payload.values())


def raw_view(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The bytes of a C-contiguous array as a flat `uint8` view (bf16 has no buffer format)."""
    return array.reshape(-1).view(np.uint8)


def _aligned(offset: int, size: int) -> int:
    step = PAGE_ALIGN if size >= ALIGN_THRESHOLD else SMALL_ALIGN
    return -(-offset // step) * step


def write_external(model: onnx.ModelProto, payload: Payload, target: Path) -> None:
    """Write `model` to `target` and the payload to `<target name>.data` beside it.

    Each pending initializer points into the data file while the message is
    serialised, and is a bare declaration again afterwards, so `model` and
    `payload` are unchanged and a later `materialize` or save still works.
    """
    location = f"{target.name}.data"
    data_path = target.with_name(location)
    # A new file, not a truncated one: ext4 flushes a truncated-and-rewritten
    # file to disk on close (auto_da_alloc), which made saving over an
    # earlier export several times slower.
    data_path.unlink(missing_ok=True)
    pointed: list[onnx.TensorProto] = []
    try:
        with open(data_path, "wb") as data:
            offset = 0
            for tensor, array in pending_initializers(model, payload):
                start = _aligned(offset, int(array.nbytes))
                if start > offset:
                    data.write(bytes(start - offset))
                data.write(raw_view(array))  # type: ignore[arg-type]
                offset = start + int(array.nbytes)
                _point(tensor, location, start, int(array.nbytes))
                pointed.append(tensor)
        target.write_bytes(model.SerializeToString())
    finally:
        for tensor in pointed:
            del tensor.external_data[:]
            tensor.data_location = onnx.TensorProto.DEFAULT


def _point(tensor: onnx.TensorProto, location: str, offset: int, length: int) -> None:
    tensor.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key = key
        entry.value = value
