"""SafeTensors files in and out, with NumPy only (the `weights` stage's file format).

Stage: below `weights.py`; nothing here knows about Linnet paths. In: a file
path. Out: a `SafeTensorsFile` whose header was validated strictly and whose
tensors are NumPy arrays memory-mapped from the file, so a multi-gigabyte
checkpoint is never copied into memory. The writer goes the other way,
atomically (a temporary file in the same folder, then a rename).

The format (https://github.com/huggingface/safetensors, and language.md 12.9
"SafeTensors is the first-class format"): 8 bytes little-endian `u64` header
length N; N bytes of UTF-8 JSON, an object mapping tensor names to
`{"dtype", "shape", "data_offsets": [begin, end]}` plus an optional
`"__metadata__"` object of strings, padded with spaces so that 8 + N is a
multiple of 8; then the byte buffer, offsets relative to its start, tensors
row-major little-endian. Pickle is never involved.

Validation is strict: every problem of a malformed file is a `LinnetError`
naming the file (and the tensor), never a NumPy or JSON traceback. Unlike the
Rust reader we accept gaps between tensors (harmless), but never overlaps.
Dtypes the format knows but Linnet has no type for (`F8_*`, `F6_*`, `F4`,
`C64`) are accepted in the header (a checkpoint may carry tensors a model
does not use) and fail with a clear error only when such a tensor is read.
"""

from __future__ import annotations

import itertools
import json
import mmap
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np

from linnet.atomic import atomic_write
from linnet.errors import LinnetError
from linnet.records import record

# SafeTensors dtype name -> Linnet dtype name (language.md 5.1).
ST_TO_LINNET: dict[str, str] = {
    "BOOL": "bool",
    "I8": "i8",
    "I16": "i16",
    "I32": "i32",
    "I64": "i64",
    "U8": "u8",
    "U16": "u16",
    "U32": "u32",
    "U64": "u64",
    "F16": "f16",
    "BF16": "bf16",
    "F32": "f32",
    "F64": "f64",
}
LINNET_TO_ST: dict[str, str] = {v: k for k, v in ST_TO_LINNET.items()}


class _NumpyDtypes(Mapping[str, "np.dtype[np.generic]"]):
    """Linnet dtype name -> NumPy dtype. bf16's comes from ml_dtypes, imported when bf16
    is first asked for: the import costs about a second, which a checkpoint without
    bf16 (and a file copy it is measured against) need not pay."""

    def __init__(self, eager: Mapping[str, np.dtype[np.generic]]) -> None:
        self._known = dict(eager)
        self._names = (*eager, "bf16")

    def __getitem__(self, name: str) -> np.dtype[np.generic]:
        if name == "bf16" and name not in self._known:
            import ml_dtypes

            self._known[name] = np.dtype(ml_dtypes.bfloat16)
        return self._known[name]

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


# Linnet dtype name -> NumPy dtype (bf16 through ml_dtypes).
NUMPY_DTYPES: Mapping[str, np.dtype[np.generic]] = _NumpyDtypes(
    {
        "bool": np.dtype(np.bool_),
        "i8": np.dtype(np.int8),
        "i16": np.dtype(np.int16),
        "i32": np.dtype(np.int32),
        "i64": np.dtype(np.int64),
        "u8": np.dtype(np.uint8),
        "u16": np.dtype(np.uint16),
        "u32": np.dtype(np.uint32),
        "u64": np.dtype(np.uint64),
        "f16": np.dtype(np.float16),
        "f32": np.dtype(np.float32),
        "f64": np.dtype(np.float64),
    }
)

# Dtypes the format defines that Linnet has no type for: bits per element, so
# their byte ranges can still be validated.
UNSUPPORTED_BITS: dict[str, int] = {
    "F8_E4M3": 8,
    "F8_E4M3FNUZ": 8,
    "F8_E5M2": 8,
    "F8_E5M2FNUZ": 8,
    "F8_E8M0": 8,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "F4": 4,
    "C64": 64,
}

# The Rust reader's limit (safetensors MAX_HEADER_SIZE); a larger length field
# is a corrupt or hostile file, not a model.
MAX_HEADER_BYTES = 100_000_000
MAX_HEADER_DEPTH = 3
"""`{"name": {"shape": [...]}}`: the deepest a valid header nests (metadata: two)."""
METADATA_KEY = "__metadata__"


def linnet_dtype_of(array: np.ndarray) -> str:
    """The Linnet dtype name of a NumPy array, or a LinnetError if it has none."""
    native = array.dtype if array.dtype.isnative else array.dtype.newbyteorder("=")
    for name in NUMPY_DTYPES:
        # an array of bf16 has imported ml_dtypes already; others need not import it
        if (name != "bf16" or "ml_dtypes" in sys.modules) and native == NUMPY_DTYPES[name]:
            return name
    raise LinnetError(f"arrays of NumPy dtype `{array.dtype}` have no Linnet dtype")


@record(frozen=True)
class StoredTensor:
    """One header entry: where a tensor's bytes are, before anything is read.

    `dtype` is the SafeTensors name (`F32`, `BF16`, `F8_E4M3` ...); `begin`
    and `end` are absolute byte offsets in `file`.
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    file: Path
    begin: int
    end: int

    @property
    def linnet_dtype(self) -> str | None:
        """The Linnet dtype, or None for a dtype Linnet does not support."""
        return ST_TO_LINNET.get(self.dtype)


class SafeTensorsFile:
    """A validated SafeTensors file; tensors are memory-mapped on first read.

    >>> import numpy as np, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "w.safetensors")
    >>> save_safetensors({"w": np.arange(6, dtype=np.float32).reshape(2, 3)}, path)
    >>> f = SafeTensorsFile(path)
    >>> f.tensors["w"].shape, f.tensors["w"].dtype
    ((2, 3), 'F32')
    >>> float(f.load("w").sum())
    15.0
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.tensors, self.metadata, self.data_start = _read_header(self.path)
        self._map: _FileMap | None = None

    def load(self, name: str) -> np.ndarray:
        """The tensor `name` as a read-only array backed by the file's memory map."""
        stored = self.tensors.get(name)
        if stored is None:
            raise LinnetError(f"{self.path}: no tensor named `{name}`")
        linnet = stored.linnet_dtype
        if linnet is None:
            raise LinnetError(
                f"{self.path}: tensor `{name}` has dtype {stored.dtype}, which Linnet does not "
                f"support (supported: {', '.join(ST_TO_LINNET)})"
            )
        dtype = NUMPY_DTYPES[linnet]
        count = int(np.prod(stored.shape, dtype=np.int64))
        if count == 0:
            return np.zeros(stored.shape, dtype)
        array = np.frombuffer(self._mapped(), dtype=dtype, count=count, offset=stored.begin)
        if sys.byteorder != "little" and dtype.itemsize > 1:  # pragma: no cover - LE hosts
            unsigned = np.dtype(f"<u{dtype.itemsize}")
            array = array.view(unsigned).astype(unsigned.newbyteorder("=")).view(dtype)
        return array.reshape(stored.shape)

    def _mapped(self) -> _FileMap:
        if self._map is None:
            try:
                with self.path.open("rb") as handle:
                    # The mapping outlives the descriptor; arrays keep it alive.
                    self._map = _FileMap(handle.fileno(), 0, access=mmap.ACCESS_READ)
                    self._map.path = self.path
            except OSError as error:
                raise LinnetError(f"{self.path}: cannot map the file: {error}") from None
        return self._map


class _FileMap(mmap.mmap):
    """A read-only file mapping that remembers its file, so that a writer can copy an
    unchanged tensor's bytes file to file (`file_range`) instead of through memory."""

    path: Path


def file_range(array: np.ndarray) -> tuple[Path, int] | None:
    """(file, byte offset) of `array`'s bytes when it is a C-contiguous little-endian
    view of a SafeTensors file's mapping (as `SafeTensorsFile.load` returns it), else None."""
    base: object = array
    while isinstance(base, np.ndarray | memoryview):
        base = base.base if isinstance(base, np.ndarray) else base.obj
    if not isinstance(base, _FileMap) or not array.flags.c_contiguous or array.size == 0:
        return None
    if array.dtype.byteorder == ">" or (array.dtype.byteorder == "=" and sys.byteorder != "little"):
        return None
    start = np.frombuffer(base, dtype=np.uint8).ctypes.data
    offset = int(array.ctypes.data) - int(start)
    if offset < 0 or offset + array.nbytes > len(base):
        return None
    return base.path, offset


def release_mapped(array: np.ndarray) -> None:
    """Drop the resident pages of the file mapping behind `array` (if it is memory-mapped).

    Streaming writers call this after each tensor: the pages are clean and file
    backed, so they are read again from the page cache if touched later, and the
    process's resident set stays near one tensor instead of the whole checkpoint.
    """
    base: object = array
    while isinstance(base, np.ndarray | memoryview):
        base = base.base if isinstance(base, np.ndarray) else base.obj
    if isinstance(base, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
        base.madvise(mmap.MADV_DONTNEED)


def read_safetensors(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Every tensor of a file by name, memory-mapped (read-only, not copied)."""
    file = SafeTensorsFile(path)
    return {name: file.load(name) for name in file.tensors}


def _read_header(path: Path) -> tuple[dict[str, StoredTensor], dict[str, str], int]:
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise LinnetError(
                    f"{path}: not a SafeTensors file: {size} bytes, shorter than the 8-byte "
                    "header length"
                )
            length = int.from_bytes(prefix, "little")
            if length > MAX_HEADER_BYTES:
                raise LinnetError(
                    f"{path}: corrupt SafeTensors header: length field says {length} bytes "
                    f"(the limit is {MAX_HEADER_BYTES})"
                )
            if 8 + length > size:
                raise LinnetError(
                    f"{path}: truncated SafeTensors file: the header needs {length} bytes "
                    f"but only {size - 8} follow the length field"
                )
            raw = handle.read(length)
    except OSError as error:
        raise LinnetError(f"{path}: cannot read the file: {error}") from None
    header = _parse_json(path, raw)
    data_start = 8 + length
    tensors, metadata = _validate(path, header, data_start, size - data_start)
    return tensors, metadata, data_start


def _parse_json(path: Path, raw: bytes) -> dict[str, object]:
    def no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
        result: dict[str, object] = {}
        for key, value in pairs:
            if key in result:
                raise LinnetError(f"{path}: corrupt SafeTensors header: key `{key}` appears twice")
            result[key] = value
        return result

    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise LinnetError(f"{path}: corrupt SafeTensors header: not UTF-8 ({error})") from None
    if not text.startswith("{"):
        raise LinnetError(f"{path}: corrupt SafeTensors header: it must start with `{{`")
    depth = _nesting(raw)
    if depth > MAX_HEADER_DEPTH:
        raise LinnetError(
            f"{path}: corrupt SafeTensors header: JSON nested {depth} levels deep "
            f"(a SafeTensors header nests at most {MAX_HEADER_DEPTH})"
        )
    try:
        header = json.loads(text, object_pairs_hook=no_duplicates)
    except json.JSONDecodeError as error:
        raise LinnetError(f"{path}: corrupt SafeTensors header: invalid JSON ({error})") from None
    except RecursionError:  # pragma: no cover - _nesting refuses these first
        raise LinnetError(f"{path}: corrupt SafeTensors header: nested too deeply") from None
    if not isinstance(header, dict):  # pragma: no cover - a `{` start makes it an object
        raise LinnetError(f"{path}: corrupt SafeTensors header: not a JSON object")
    return header


_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')


def _nesting(raw: bytes) -> int:
    """How deep the brackets of a JSON text nest, strings left out (vectorised: no recursion)."""
    structure = np.frombuffer(_STRING.sub(b'""', raw), np.uint8)
    if structure.size == 0:
        return 0
    opens = (structure == ord("{")) | (structure == ord("["))
    closes = (structure == ord("}")) | (structure == ord("]"))
    return int(np.cumsum(opens.astype(np.int64) - closes).max())


def _validate(
    path: Path, header: dict[str, object], data_start: int, data_size: int
) -> tuple[dict[str, StoredTensor], dict[str, str]]:
    metadata = _validate_metadata(path, header.get(METADATA_KEY, {}))
    tensors: dict[str, StoredTensor] = {}
    for name, entry in header.items():
        if name != METADATA_KEY:
            tensors[name] = _validate_entry(path, name, entry, data_start, data_size)
    # Non-overlapping: sorted by start, each must begin at or after the previous end.
    ordered = sorted(tensors.values(), key=lambda t: (t.begin, t.end))
    for before, after in itertools.pairwise(ordered):
        if after.begin < before.end:
            raise LinnetError(
                f"{path}: corrupt SafeTensors header: tensors `{before.name}` and "
                f"`{after.name}` overlap (bytes {before.begin - data_start}..{before.end - data_start}"
                f" and {after.begin - data_start}..{after.end - data_start})"
            )
    return tensors, metadata


def _validate_metadata(path: Path, metadata: object) -> dict[str, str]:
    if not isinstance(metadata, dict) or not all(
        isinstance(value, str) for value in metadata.values()
    ):
        raise LinnetError(
            f"{path}: corrupt SafeTensors header: `{METADATA_KEY}` must map strings to strings"
        )
    return dict(metadata)


def _validate_entry(
    path: Path, name: str, entry: object, data_start: int, data_size: int
) -> StoredTensor:
    where = f"{path}: corrupt SafeTensors header: tensor `{name}`"
    if not isinstance(entry, dict):
        raise LinnetError(f"{where}: entry is not an object")
    dtype = entry.get("dtype")
    if not isinstance(dtype, str) or (dtype not in ST_TO_LINNET and dtype not in UNSUPPORTED_BITS):
        raise LinnetError(f"{where}: unknown dtype {json.dumps(dtype)}")
    shape = entry.get("shape")
    if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
        raise LinnetError(f"{where}: shape must be a list of non-negative integers")
    offsets = entry.get("data_offsets")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(_is_count(o) for o in offsets)
        or offsets[0] > offsets[1]
    ):
        raise LinnetError(f"{where}: data_offsets must be [begin, end] with 0 <= begin <= end")
    begin, end = offsets
    if end > data_size:
        raise LinnetError(
            f"{where}: data_offsets [{begin}, {end}] run past the end of the data "
            f"({data_size} bytes; the file may be truncated)"
        )
    bits = UNSUPPORTED_BITS.get(dtype) or NUMPY_DTYPES[ST_TO_LINNET[dtype]].itemsize * 8
    count = 1
    for dim in shape:
        count *= dim
    expected = (count * bits + 7) // 8
    if end - begin != expected:
        raise LinnetError(
            f"{where}: {end - begin} bytes stored but {dtype} {shape} needs {expected}"
        )
    return StoredTensor(name, dtype, tuple(shape), path, data_start + begin, data_start + end)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def save_safetensors(
    tensors: Mapping[str, np.ndarray],
    path: str | os.PathLike[str],
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Write `tensors` to `path` as SafeTensors, atomically.

    The data goes to a temporary file in the same folder and is then renamed
    to `path` (`linnet.atomic.atomic_write`, not fsynced, as `safetensors`
    itself does not), so a reader never sees half a checkpoint.
    Tensors are laid out largest element size first (then by name), which
    with the 8-byte header padding keeps every tensor aligned to its element
    size, as the reference writer does.
    """
    target = Path(path)
    header, arrays = _header_for(target, tensors, metadata)
    encoded = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    encoded += b" " * (-(8 + len(encoded)) % 8)
    with atomic_write(target, durable=False) as handle:
        handle.write(len(encoded).to_bytes(8, "little"))
        handle.write(encoded)
        for array in arrays:
            if array.size:
                handle.write(array.reshape(-1).view(np.uint8).data)


def save_safetensors_streamed(
    path: str | os.PathLike[str],
    tensors: Sequence[tuple[str, str, tuple[int, ...]]],
    load: Callable[[str], np.ndarray],
    metadata: Mapping[str, str] | None = None,
    *,
    keep_order: bool = False,
    page_phase: bool = False,
) -> int:
    """Write `(name, linnet dtype, shape)` tensors to `path`, reading each with `load(name)`
    only when its bytes are due, so a checkpoint larger than memory streams through.

    The layout is `save_safetensors`'s (largest element size first, then by name),
    or with `keep_order` the order given, where that keeps every tensor aligned to its
    element size (else the usual layout); the header is built from the declared
    dtypes and shapes, and each loaded array must match them. Arrays that are a
    SafeTensors file's mapping (`file_range`) are copied from that file by the kernel
    (`FileCopier`), tensors lying back to back in one file with one copy (a whole data
    section, when the order is the file's); others are written from memory. With
    `page_phase`, the header is padded with spaces (as the format allows) so that the
    first tensor's bytes lie at the same offset within a page as in the file it is
    copied from: the kernel then copies whole pages, where a shifted copy splits each
    page over two (measured: about a fifth more CPU for 4.4 GB). Atomic
    (`linnet.atomic`); returns the data bytes written.
    """
    target = Path(path)
    header: dict[str, object] = {}
    if metadata:
        header[METADATA_KEY] = dict(metadata)
    order = _layout(tensors, keep_order)
    offset = 0
    for name, dtype, shape in order:
        size = int(np.prod(shape, dtype=np.int64)) * NUMPY_DTYPES[dtype].itemsize
        header[name] = {
            "dtype": LINNET_TO_ST[dtype],
            "shape": list(shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    encoded = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    first = load(order[0][0]) if page_phase and order else None
    phase = None if first is None else file_range(np.asarray(first))
    if phase is not None and phase[1] % 8 == 0:
        encoded += b" " * ((phase[1] - 8 - len(encoded)) % mmap.PAGESIZE)
    else:
        encoded += b" " * (-(8 + len(encoded)) % 8)
    with atomic_write(target, durable=False) as handle, FileCopier(handle) as copier:
        handle.write(len(encoded).to_bytes(8, "little"))
        handle.write(encoded)
        run = _Run(handle, copier)
        for index, (name, dtype, shape) in enumerate(order):
            loaded = first if index == 0 and first is not None else load(name)
            array = np.asarray(loaded)
            want = NUMPY_DTYPES[dtype].newbyteorder("<")
            if tuple(array.shape) != tuple(shape) or array.dtype.newbyteorder("<") != want:
                raise LinnetError(
                    f"{target}: tensor `{name}` is {array.dtype} {list(array.shape)}, "
                    f"declared {dtype} {list(shape)}"
                )
            if array.size == 0:
                continue
            origin = file_range(array) if copier.usable else None
            if origin is not None and run.extend(origin[0], origin[1], array):
                continue
            run.flush()
            if origin is not None:
                run.start(origin[0], origin[1], array)
            else:
                array = np.asarray(array, dtype=want, order="C")
                handle.write(array.reshape(-1).view(np.uint8).data)
                release_mapped(loaded)
        run.flush()
    return offset


def _layout(
    tensors: Sequence[tuple[str, str, tuple[int, ...]]], keep_order: bool
) -> list[tuple[str, str, tuple[int, ...]]]:
    """The order of the tensors in the file: as given (`keep_order`) when each then starts
    at a multiple of its element size, else largest element size first, then by name."""
    if keep_order:
        offset = 0
        for _, dtype, shape in tensors:
            itemsize = NUMPY_DTYPES[dtype].itemsize
            if offset % itemsize:
                break
            offset += int(np.prod(shape, dtype=np.int64)) * itemsize
        else:
            return list(tensors)
    return sorted(tensors, key=lambda t: (-NUMPY_DTYPES[t[1]].itemsize, t[0]))


class _Run:
    """Arrays whose bytes lie back to back in one file, due next in the output: copied
    with one `FileCopier.copy` when the run ends, or written from memory where the
    kernel refuses."""

    def __init__(self, out: BinaryIO, copier: FileCopier) -> None:
        self.out = out
        self.copier = copier
        self.arrays: list[np.ndarray] = []
        self.path = Path()
        self.begin = self.end = 0

    def start(self, path: Path, offset: int, array: np.ndarray) -> None:
        self.path, self.begin, self.end = path, offset, offset + array.nbytes
        self.arrays = [array]

    def extend(self, path: Path, offset: int, array: np.ndarray) -> bool:
        """Add `array` if its bytes follow the run's in the same file."""
        if not self.arrays or path != self.path or offset != self.end:
            return False
        self.arrays.append(array)
        self.end += array.nbytes
        return True

    def flush(self) -> None:
        if not self.arrays:
            return
        if not self.copier.copy(self.path, self.begin, self.end - self.begin):
            for array in self.arrays:
                self.out.write(array.reshape(-1).view(np.uint8).data)
        for array in self.arrays:
            release_mapped(array)
        self.arrays = []


class FileCopier:
    """Copies byte ranges of source files onto the end of an open output, in the kernel
    (`os.copy_file_range`: no pass through this process's memory, and a reflink where
    the file system shares extents). `copy` returns False where that is not possible
    (another OS, a file system without it), and the caller writes the bytes itself."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.sources: dict[Path, int] = {}
        self.usable = hasattr(os, "copy_file_range")

    def __enter__(self) -> FileCopier:
        return self

    def __exit__(self, *exc: object) -> None:
        for descriptor in self.sources.values():
            os.close(descriptor)

    def copy(self, path: Path, offset: int, count: int) -> bool:
        if not self.usable:
            return False
        source = self.sources.get(path)
        if source is None:
            source = self.sources[path] = os.open(path, os.O_RDONLY)
        self.out.flush()
        target = self.out.fileno()
        position = os.lseek(target, 0, os.SEEK_CUR)
        done = 0
        try:
            while done < count:
                step = os.copy_file_range(source, target, count - done, offset + done)
                if step == 0:
                    raise OSError(f"{path}: ends before byte {offset + count}")
                done += step
        except OSError:
            if done:  # undo the partial copy; the caller writes the whole tensor
                os.lseek(target, position, os.SEEK_SET)
                os.ftruncate(target, position)
            self.usable = False
            return False
        finally:
            self.out.seek(0, os.SEEK_END)  # the buffered writer's position, resynchronised
        return True


def _header_for(
    target: Path, tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None
) -> tuple[dict[str, object], list[np.ndarray]]:
    header: dict[str, object] = {}
    if metadata:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise LinnetError(f"{target}: SafeTensors metadata must map strings to strings")
        header[METADATA_KEY] = dict(metadata)
    prepared: list[tuple[str, str, np.ndarray]] = []
    for name, value in tensors.items():
        if not isinstance(name, str) or not name or name == METADATA_KEY:
            raise LinnetError(f"{target}: invalid tensor name {name!r}")
        array = np.asarray(value)
        try:
            linnet = linnet_dtype_of(array)
        except LinnetError as error:
            raise LinnetError(f"{target}: tensor `{name}`: {error.message}") from None
        # Little-endian, C-contiguous bytes (a big-endian input is converted).
        # NOTE: not np.ascontiguousarray, which turns a rank-0 array into shape [1].
        array = np.asarray(array, dtype=NUMPY_DTYPES[linnet].newbyteorder("<"), order="C")
        prepared.append((name, LINNET_TO_ST[linnet], array))
    prepared.sort(key=lambda item: (-item[2].dtype.itemsize, item[0]))
    offset = 0
    for name, dtype, array in prepared:
        header[name] = {
            "dtype": dtype,
            "shape": list(array.shape),
            "data_offsets": [offset, offset + array.nbytes],
        }
        offset += array.nbytes
    return header, [array for _, _, array in prepared]
