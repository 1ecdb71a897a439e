"""Weight payloads kept out of the protobuf until they are needed: written straight to disk.

Stage: between `assemble` (which declares each embedded weight as an
initializer holding only its name, type and dims) and `ExportedModel`
(`.model`, `.save`). In: the skeleton `ModelProto` and the weight arrays by
initializer name (`Payload`). Out: the arrays put into the message as
`raw_data` (`materialize`, for a caller that wants a complete in-memory
model), or a data file written from the arrays with the message pointing
into it (`write_external`), or one data file shared by several entries
exported from the same arrays (`write_shared`; `SharedData` takes them one
at a time and writes in a thread meanwhile). Each save writes its data
file under a new name (`m.onnx.<version>.data`) so that a model and its
data file are replaced without a reader ever seeing one point at the
other's predecessor: `linnet.atomic` documents the protocol. `write_inline` writes
a whole model through the same writer.

Why: a protobuf `bytes` field only takes a `bytes` object, so embedding a
weight costs a full copy held by the message, and writing the message with
onnx's external-data helper then copies it again and reads it back from
disk to restore the message. Writing each array's own buffer (a memory map
of the checkpoint, usually) to the data file reads it once and copies
nothing, so an export holds about the weight bytes at its peak, not twice
that. An array that is a SafeTensors file's mapping (`file_range`) is copied
file to file by the kernel (`FileCopier`): its pages are never mapped into
this process, which halves the CPU time of the copy (measured: 0.29 s of
system time per GiB against 0.67-0.83 s writing from the mapping) and keeps
them out of the resident set.

Offsets in the data file: tensors of at least `ALIGN_THRESHOLD` bytes start
on a multiple of `PAGE_ALIGN` (64 KiB, the mapping granularity of every
platform ONNX Runtime memory-maps external data on, and the most padding
onnx allows), smaller ones on a multiple of `SMALL_ALIGN`.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from linnet.atomic import atomic_write, remove_unreferenced, versioned_write
from linnet.errors import LinnetError
from linnet.progress import Progress
from linnet.weights.safetensors import FileCopier, file_range

INLINE_LIMIT = 1024
"""Weights smaller than this many bytes are embedded at once (as onnx's `size_threshold`)."""
ALIGN_THRESHOLD = 2**20
PAGE_ALIGN = 2**16
SMALL_ALIGN = 64

Payload = Mapping[str, np.ndarray[Any, Any]]
"""Little-endian C-contiguous arrays (see `graph.little_endian`) by initializer name."""


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


def write_inline(model: onnx.ModelProto, target: Path) -> None:
    """Write `model` whole to `target`; data files of an earlier save beside it go.

    The data files go only once nothing refers to them (`linnet.atomic.remove_unreferenced`).
    """
    started = time.time()
    with atomic_write(target, durable=False) as out:
        out.write(model.SerializeToString())
    remove_unreferenced(_data_base(target), (), _referrers(target.parent, [target]), started)


def write_external(
    model: onnx.ModelProto, payload: Payload, target: Path, *, message_tensors: bool = False
) -> Path:
    """Write `model` to `target` and its weights to a data file beside it; the data file's path.

    The data file is `<target name>.<version>.data` (`linnet.atomic.versioned_name`
    of `<target name>.data`, a new name for every save). Each pending initializer points into it while
    the message is serialised, and is a bare declaration again afterwards, so
    `model` and `payload` are unchanged and a later `materialize` or save
    still works. With `message_tensors`, tensors already in the message
    (initializers and constant attributes, of at least `INLINE_LIMIT` bytes)
    go to the data file too, as onnx's external-data writer would put them,
    and are back in the message afterwards.
    """
    return write_shared([(model, payload, target)], _data_base(target), message_tensors)


def _data_base(target: Path) -> Path:
    return target.with_name(f"{target.name}.data")


def _referrers(folder: Path, targets: Sequence[Path]) -> list[Path]:
    """The files that may point into a data file in `folder`: its models and `targets`."""
    return sorted({*folder.glob("*.onnx"), *targets})


def write_shared(
    models: Sequence[tuple[onnx.ModelProto, Payload, Path]],
    data_path: Path,
    message_tensors: bool = False,
) -> Path:
    """Write each model to its path and every distinct pending array once to one data file.

    The data file is `data_path` under a new versioned name
    (`linnet.atomic.versioned_write`); its path is returned. Entries
    exported from the same arrays (a `prefill` and a `decode` of one
    checkpoint) share them: an array is the same as one already written when
    it is the very same memory (address, byte count and dtype), which also
    covers tied weights. Every model file must sit in `data_path`'s folder
    (external data locations are relative to the model file).

    The order is `linnet.atomic`'s protocol for a model and its data file:
    the data file under its new name, then each model renamed over its
    target, then earlier data files of `data_path`'s family that no model in
    the folder refers to any more are removed. A reader never sees a model
    pointing at a missing or foreign data file; weights are not fsynced.
    `SharedData` does the same one model at a time, writing in a thread.
    """
    shared = SharedData(data_path, message_tensors=message_tensors)
    for model, payload, target in models:
        shared.add(model, payload, target)
    return shared.finish()


def _check_folder(target: Path, data_path: Path) -> None:
    if target.parent.resolve() != data_path.parent.resolve():
        raise LinnetError(
            f"cannot save `{target}` with external data in `{data_path}`: "
            "the model files and their data file must share one folder"
        )


_Key = tuple[int, int, str]
_DONE = None
"""The end of the queue of `SharedData`'s writer: every byte is queued (or it is aborted)."""


class _Aborted(Exception):
    """Raised inside the writer to drop its temporary file (`SharedData.abort`)."""


class SharedData:
    """`write_shared`, model by model: the layout decided as each is added, bytes written after.

    `add` places each pending array of a model (or finds it already placed)
    at once, so the data file's layout is the same whenever its bytes get
    written; `finish` writes what is left, points the models into the file
    and renames them in (the order of `write_shared`); `abort` leaves
    nothing behind. With `background`, a thread writes the data file while
    the caller goes on (exporting the next entry, say): the bytes are written
    by the kernel with the GIL released, so the caller's CPU work hides behind
    the disk; an error of the writer (a full disk) is raised by `finish` as
    `write_shared` raises it. Each model is read by the caller's thread only;
    the writer reads the arrays, which must not change until `finish`.
    """

    def __init__(
        self, data_path: Path, *, message_tensors: bool = False, background: bool = False
    ) -> None:
        self.data_path = data_path
        self.started = time.time()
        self._message_tensors = message_tensors
        self._models: list[tuple[onnx.ModelProto, Path]] = []
        self._written: dict[_Key, int] = {}
        self._placed: list[tuple[onnx.TensorProto, int, int]] = []
        self._moved: list[tuple[onnx.TensorProto, bytes]] = []
        self._offset = 0
        self._queue: queue.SimpleQueue[tuple[int, Any, int] | None] = queue.SimpleQueue()
        self._queued = 0
        self._path: Path | None = None
        self._error: BaseException | None = None
        self._aborted = threading.Event()
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(target=self._run, name="linnet-save", daemon=True)
            self._thread.start()

    def add(self, model: onnx.ModelProto, payload: Payload, target: Path) -> None:
        """Place `model`'s pending arrays (and message tensors) and queue their bytes."""
        _check_folder(target, self.data_path)
        if any(model is seen for seen, _ in self._models):  # one entry under two names
            self._models.append((model, target))
            return
        self._models.append((model, target))
        chunks: list[tuple[onnx.TensorProto, Any, _Key]] = []
        for tensor, array in pending_initializers(model, payload):
            key = (int(array.__array_interface__["data"][0]), int(array.nbytes), array.dtype.str)
            chunks.append((tensor, array, key))
        if self._message_tensors:
            for tensor in _message_tensors(model.graph):
                raw = tensor.raw_data
                self._moved.append((tensor, raw))
                chunks.append((tensor, raw, (id(raw), len(raw), "raw")))
        for tensor, buffer, key in chunks:
            size = key[1]
            start = self._written.get(key)
            if start is None:
                start = _aligned(self._offset, size)
                self._queue.put((start - self._offset, buffer, size))
                self._queued += size
                self._offset = start + size
                self._written[key] = start
            self._placed.append((tensor, start, size))

    def finish(self) -> Path:
        """Write the rest of the data file, then the models; the data file's path."""
        self._queue.put(_DONE)
        if self._thread is None:
            self._write()
        else:
            self._thread.join()
            if self._error is not None:
                raise self._error
        assert self._path is not None
        location = self._path.name
        try:
            for tensor, _ in self._moved:
                tensor.ClearField("raw_data")
            for tensor, start, size in self._placed:
                _point(tensor, location, start, size)
            for model, target in self._models:
                with atomic_write(target, durable=False) as out:
                    out.write(model.SerializeToString())
        finally:
            for tensor, _, _ in self._placed:
                del tensor.external_data[:]
                tensor.data_location = onnx.TensorProto.DEFAULT
            for tensor, raw in self._moved:
                tensor.raw_data = raw
        targets = [target for _, target in self._models]
        folder = self.data_path.parent
        remove_unreferenced(self.data_path, [self._path], _referrers(folder, targets), self.started)
        return self._path

    def abort(self) -> None:
        """Stop writing and remove the unfinished data file (the models were never written)."""
        if self._thread is not None:
            self._aborted.set()  # checked before each array: what is still queued is dropped
            self._queue.put(_DONE)
            self._thread.join()

    def _run(self) -> None:
        try:
            self._write()
        except BaseException as error:  # handed to `finish` in the caller's thread
            self._error = error

    def _write(self) -> None:
        total = None if self._thread is not None else self._queued
        with (
            versioned_write(self.data_path, durable=False) as data,
            FileCopier(data.handle) as copier,
            Progress(f"writing {self.data_path.name}", total, "B") as bar,
        ):
            while True:
                item = self._queue.get()
                if self._aborted.is_set():
                    raise _Aborted
                if item is _DONE:
                    break
                padding, buffer, size = item
                if padding:
                    data.write(bytes(padding))
                if not isinstance(buffer, np.ndarray):
                    data.write(buffer)
                elif (origin := file_range(buffer)) is None or not copier.copy(*origin, size):
                    data.write(raw_view(buffer).data)
                bar.update(size)
        self._path = data.path


def _message_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """Tensors of `graph` and its subgraphs holding at least `INLINE_LIMIT` bytes of `raw_data`."""
    tensors: list[onnx.TensorProto] = list(graph.initializer)
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                tensors.append(attribute.t)
            tensors.extend(attribute.tensors)
            if attribute.HasField("g"):
                yield from _message_tensors(attribute.g)
            for subgraph in attribute.graphs:
                yield from _message_tensors(subgraph)
    for tensor in tensors:
        if tensor.HasField("raw_data") and len(tensor.raw_data) >= INLINE_LIMIT:
            yield tensor


PENDING_LOCATION = "linnet-pending-weights"
"""The external-data location of weights handed to ONNX Runtime as OrtValues, not read."""


def serialize_pending(model: onnx.ModelProto, payload: Payload) -> bytes:
    """`model` serialised with each pending initializer marked as external data.

    ONNX Runtime validates an initializer that has neither data nor an
    external location, but takes the data of an external one from
    `SessionOptions.add_external_initializers` without opening its file: the
    location only has to be there. `model` is unchanged afterwards.
    """
    pointed: list[onnx.TensorProto] = []
    try:
        for tensor, array in pending_initializers(model, payload):
            _point(tensor, PENDING_LOCATION, 0, int(array.nbytes))
            pointed.append(tensor)
        serialized: bytes = model.SerializeToString()
        return serialized
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
