"""SafeTensors reading and writing (weights_safetensors) against the `safetensors` package.

The reference implementations are the `safetensors` package's NumPy and
PyTorch writers and readers: every dtype round-trips bit for bit both ways,
and malformed files (hand-built headers) give `LinnetError`s naming the file.
"""

from __future__ import annotations

import json
import mmap
import os
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy
import safetensors.torch
import torch

from linnet.errors import LinnetError
from linnet.weights.safetensors import (
    MAX_HEADER_BYTES,
    ST_TO_LINNET,
    SafeTensorsFile,
    read_safetensors,
    save_safetensors,
)

NUMPY_TYPES = {
    "bool": np.bool_,
    "i8": np.int8,
    "i16": np.int16,
    "i32": np.int32,
    "i64": np.int64,
    "u8": np.uint8,
    "u16": np.uint16,
    "u32": np.uint32,
    "u64": np.uint64,
    "f16": np.float16,
    "bf16": ml_dtypes.bfloat16,
    "f32": np.float32,
    "f64": np.float64,
}


def _random(dtype: type, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Random bit patterns (including NaN payloads, infinities, negative zero)."""
    item = np.dtype(dtype).itemsize
    rng = np.random.default_rng(seed)
    if np.dtype(dtype) == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    raw = rng.integers(0, 256, size=(*shape, item), dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


def _bits(array: np.ndarray) -> bytes:
    return np.ascontiguousarray(array).tobytes()


def _all_dtypes() -> dict[str, np.ndarray]:
    shapes = [(3, 5), (7,), (), (2, 0, 3), (2, 3, 4)]
    return {
        f"t.{name}": _random(dtype, shapes[i % len(shapes)], seed=i)
        for i, (name, dtype) in enumerate(NUMPY_TYPES.items())
    }


def test_reads_files_written_by_safetensors_numpy(tmp_path: Path) -> None:
    tensors = {k: v for k, v in _all_dtypes().items() if k != "t.bf16"}  # numpy writer: no bf16
    path = tmp_path / "ref.safetensors"
    safetensors.numpy.save_file(tensors, str(path), metadata={"format": "np"})
    file = SafeTensorsFile(path)
    assert file.metadata == {"format": "np"}
    assert set(file.tensors) == set(tensors)
    for name, expected in tensors.items():
        got = file.load(name)
        assert got.dtype == expected.dtype and got.shape == expected.shape, name
        assert _bits(got) == _bits(expected), name


def test_reads_files_written_by_safetensors_torch_bf16(tmp_path: Path) -> None:
    gen = torch.Generator().manual_seed(0)
    tensors = {
        "w.bf16": torch.randn(4, 6, generator=gen).to(torch.bfloat16),
        "w.f16": torch.randn(3, generator=gen).to(torch.float16),
        "w.f32": torch.randn(2, 2, generator=gen),
        "w.i64": torch.arange(5),
        "w.bool": torch.tensor([True, False, True]),
        "w.u16": torch.tensor([0, 1, 65535], dtype=torch.uint16),
        "w.scalar": torch.tensor(2.5, dtype=torch.bfloat16),
    }
    path = tmp_path / "torch.safetensors"
    safetensors.torch.save_file(tensors, str(path))
    read = read_safetensors(path)
    for name, tensor in tensors.items():
        got = read[name]
        assert got.shape == tuple(tensor.shape), name
        if tensor.dtype == torch.bfloat16:
            assert got.dtype == ml_dtypes.bfloat16
            assert _bits(got) == tensor.view(torch.int16).numpy().tobytes(), name
        else:
            assert _bits(got) == tensor.numpy().tobytes(), name


def test_our_writer_is_read_back_by_safetensors(tmp_path: Path) -> None:
    tensors = _all_dtypes()
    path = tmp_path / "ours.safetensors"
    save_safetensors(tensors, path, metadata={"origin": "linnet"})
    # The package's own validating reader (Rust) accepts it, bit for bit.
    with safetensors.safe_open(str(path), framework="pt") as handle:
        assert handle.metadata() == {"origin": "linnet"}
        assert set(handle.keys()) == set(tensors)
        for name, expected in tensors.items():
            got = handle.get_tensor(name)
            assert tuple(got.shape) == expected.shape, name
            raw = got.view(torch.int16) if got.dtype == torch.bfloat16 else got
            assert raw.numpy().tobytes() == _bits(expected), name
    numpy_back = safetensors.numpy.load_file(str(path))
    assert _bits(numpy_back["t.f64"]) == _bits(tensors["t.f64"])
    # And by ourselves: the round trip is exact for every dtype.
    ours = read_safetensors(path)
    for name, expected in tensors.items():
        assert ours[name].dtype == expected.dtype and _bits(ours[name]) == _bits(expected), name


def test_writer_layout_is_aligned_and_padded(tmp_path: Path) -> None:
    path = tmp_path / "a.safetensors"
    save_safetensors(
        {"a": np.ones(3, np.int8), "b": np.ones(5, np.float64), "c": np.ones(1, np.float16)}, path
    )
    raw = path.read_bytes()
    length = int.from_bytes(raw[:8], "little")
    assert (8 + length) % 8 == 0
    header = json.loads(raw[8 : 8 + length])
    for entry in header.values():
        itemsize = {"I8": 1, "F64": 8, "F16": 2}[entry["dtype"]]
        assert (8 + length + entry["data_offsets"][0]) % itemsize == 0
    file = SafeTensorsFile(path)
    assert all(file.load(n).flags.aligned for n in "abc")


def test_writer_converts_big_endian_and_noncontiguous(tmp_path: Path) -> None:
    big = np.arange(6, dtype=">i4").reshape(2, 3)
    strided = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
    path = tmp_path / "e.safetensors"
    save_safetensors({"big": big, "strided": strided}, path)
    back = safetensors.numpy.load_file(str(path))
    np.testing.assert_array_equal(back["big"], big)
    np.testing.assert_array_equal(back["strided"], strided)


def test_writer_is_atomic_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    save_safetensors({"x": np.zeros(2, np.float32)}, path)
    before = path.read_bytes()
    # An unsupported dtype fails before the target is touched.
    with pytest.raises(LinnetError, match=r"w\.safetensors.*`bad`.*complex128"):
        save_safetensors({"x": np.ones(2, np.float32), "bad": np.zeros(2, np.complex128)}, path)
    assert path.read_bytes() == before
    # A folder that does not exist is a LinnetError naming the target.
    with pytest.raises(LinnetError, match="missing"):
        save_safetensors({"x": np.zeros(1, np.float32)}, tmp_path / "missing" / "w.safetensors")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.safetensors"]


def test_tensors_are_memory_mapped_not_copied(tmp_path: Path) -> None:
    path = tmp_path / "big.safetensors"
    big = np.arange(4 << 20, dtype=np.float32)  # 16 MiB
    save_safetensors({"big": big, "small": np.ones(3, np.float32)}, path)
    got = SafeTensorsFile(path).load("big")
    np.testing.assert_array_equal(got, big)
    assert not got.flags.writeable and not got.flags.owndata
    base: object = got
    while isinstance(base, np.ndarray):
        base = base.base
    # The base chain ends in the file's mmap, so no copy of the data was made.
    mapped = base.obj if isinstance(base, memoryview) else base
    assert isinstance(mapped, mmap.mmap)
    assert len(mapped) == os.path.getsize(path)
    whole = np.frombuffer(mapped, dtype=np.uint8)
    assert np.shares_memory(got, whole)


def _write_raw(path: Path, header: object, data: bytes = b"", *, raw: bytes | None = None) -> Path:
    encoded = raw if raw is not None else json.dumps(header).encode()
    path.write_bytes(len(encoded).to_bytes(8, "little") + encoded + data)
    return path


MALFORMED = {
    "truncated length": (None, b"", b"\x05\x00"),
    "bad json": (None, b"", b'{"a": '),
    "not an object": (None, b"", b"[1, 2]"),
    "bad dtype": ({"a": {"dtype": "F12", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4, None),
    "negative shape": (
        {"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}},
        b"\0" * 4,
        None,
    ),
    "out of bounds": (
        {"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}},
        b"\0" * 8,
        None,
    ),
    "size mismatch": (
        {"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}},
        b"\0" * 8,
        None,
    ),
    "overlap": (
        {
            "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
            "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},
        },
        b"\0" * 12,
        None,
    ),
    "reversed offsets": (
        {"a": {"dtype": "F32", "shape": [0], "data_offsets": [4, 0]}},
        b"\0" * 4,
        None,
    ),
    "bad metadata": ({"__metadata__": {"k": 1}}, b"", None),
    "duplicate key": (None, b"", b'{"__metadata__": {}, "__metadata__": {}}'),
    "not utf8": (None, b"", b'{"\xff": 1}'),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_headers_name_the_file(tmp_path: Path, case: str) -> None:
    header, data, raw = MALFORMED[case]
    path = tmp_path / f"{case.replace(' ', '_')}.safetensors"
    if case == "truncated length":
        path.write_bytes(raw or b"")
    else:
        _write_raw(path, header, data, raw=raw)
    with pytest.raises(LinnetError) as info:
        SafeTensorsFile(path)
    assert str(path) in str(info.value)
    # The reference reader rejects every one of these too.
    with pytest.raises(Exception):  # noqa: B017 - any error of the reference reader
        safetensors.numpy.load_file(str(path))


def test_a_deeply_nested_header_is_refused_without_recursion(tmp_path: Path) -> None:
    depth = 100_000
    deep = _write_raw(
        tmp_path / "deep.safetensors", None, raw=b'{"a": ' + b"[" * depth + b"]" * depth + b"}"
    )
    with pytest.raises(LinnetError, match=r"deep\.safetensors: .*nested 100001 levels deep"):
        SafeTensorsFile(deep)
    # brackets inside names do not count; a valid header's three levels pass
    quoted = {'a[[[[{{"': {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}
    path = _write_raw(tmp_path / "quoted.safetensors", quoted, b"\0" * 4)
    assert list(SafeTensorsFile(path).tensors) == ['a[[[[{{"']
    # one level more than a valid header: refused by the reference reader too
    path = _write_raw(tmp_path / "four.safetensors", None, raw=b'{"a": {"shape": [[1]]}}')
    with pytest.raises(LinnetError, match="nested 4 levels deep"):
        SafeTensorsFile(path)
    with pytest.raises(Exception):  # noqa: B017 - any error of the reference reader
        safetensors.numpy.load_file(str(path))


def test_truncated_data_and_header_length(tmp_path: Path) -> None:
    good = tmp_path / "good.safetensors"
    save_safetensors({"w": np.ones(16, np.float32)}, good)
    raw = good.read_bytes()
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(raw[:-4])
    with pytest.raises(LinnetError, match=r"cut\.safetensors.*past the end"):
        SafeTensorsFile(cut)
    short = tmp_path / "short.safetensors"
    short.write_bytes(raw[:20])
    with pytest.raises(LinnetError, match=r"short\.safetensors.*truncated"):
        SafeTensorsFile(short)
    huge = tmp_path / "huge.safetensors"
    huge.write_bytes((MAX_HEADER_BYTES + 1).to_bytes(8, "little") + b"{}")
    with pytest.raises(LinnetError, match=r"huge\.safetensors.*limit"):
        SafeTensorsFile(huge)


def test_unsupported_dtypes_fail_only_when_read(tmp_path: Path) -> None:
    path = tmp_path / "f8.safetensors"
    safetensors.torch.save_file(
        {"q": torch.zeros(4, dtype=torch.float8_e4m3fn), "s": torch.ones(2)}, str(path)
    )
    file = SafeTensorsFile(path)
    assert file.tensors["q"].dtype == "F8_E4M3" and file.tensors["q"].linnet_dtype is None
    np.testing.assert_array_equal(file.load("s"), np.ones(2, np.float32))
    with pytest.raises(LinnetError, match=r"f8\.safetensors.*`q`.*F8_E4M3.*not support"):
        file.load("q")
    with pytest.raises(LinnetError, match="no tensor named `zz`"):
        file.load("zz")


def test_gaps_between_tensors_are_accepted(tmp_path: Path) -> None:
    header = {
        "a": {"dtype": "I32", "shape": [1], "data_offsets": [0, 4]},
        "b": {"dtype": "I32", "shape": [1], "data_offsets": [8, 12]},
    }
    data = np.array([7, -1, 9], np.int32).tobytes()
    path = _write_raw(tmp_path / "gap.safetensors", header, data)
    read = read_safetensors(path)
    assert int(read["a"][0]) == 7 and int(read["b"][0]) == 9


def _streamed_copy(source: Path, target: Path) -> None:
    """`save_safetensors_streamed` of every tensor of `source`, read memory-mapped."""
    from linnet.weights.safetensors import save_safetensors_streamed

    file = SafeTensorsFile(source)
    items = [(n, ST_TO_LINNET[t.dtype], t.shape) for n, t in file.tensors.items()]
    save_safetensors_streamed(target, items, file.load, {"format": "pt"})


def _count_kernel_copies(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record the byte count of every `os.copy_file_range` call from now on."""
    calls: list[int] = []
    real = os.copy_file_range

    def counted(*args: int) -> int:
        calls.append(args[2])
        return real(*args)

    monkeypatch.setattr(os, "copy_file_range", counted)
    return calls


def test_streamed_tensors_of_a_mapped_file_are_copied_file_to_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unchanged tensors of a mapped checkpoint go through `os.copy_file_range` (no pass
    through memory); where the kernel refuses (another file system, EXDEV), the bytes are
    written as before, and the two files are identical either way."""
    if not hasattr(os, "copy_file_range"):
        pytest.skip("no os.copy_file_range on this platform")
    rng = np.random.default_rng(4)
    tensors = {
        "a.weight": rng.standard_normal((64, 33)).astype(np.float32),
        "b.bias": rng.standard_normal(7).astype(np.float16),
        "c.bf16": rng.standard_normal((5, 3)).astype(ml_dtypes.bfloat16),
        "d.ids": np.arange(9, dtype=np.int64),
    }
    save_safetensors(tensors, tmp_path / "source.safetensors", {"format": "pt"})
    calls = _count_kernel_copies(monkeypatch)
    _streamed_copy(tmp_path / "source.safetensors", tmp_path / "copied.safetensors")
    # the tensors lie back to back in the source, in this order: one copy of the data section
    assert calls == [sum(t.nbytes for t in tensors.values())]

    def refused(*args: int) -> int:
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(os, "copy_file_range", refused)
    _streamed_copy(tmp_path / "source.safetensors", tmp_path / "written.safetensors")
    source = (tmp_path / "source.safetensors").read_bytes()
    assert (tmp_path / "copied.safetensors").read_bytes() == source
    assert (tmp_path / "written.safetensors").read_bytes() == source
    read = read_safetensors(tmp_path / "copied.safetensors")
    for name, value in tensors.items():
        np.testing.assert_array_equal(read[name], value)


def test_runs_of_adjacent_tensors_are_copied_whole_and_the_rest_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tensor left out, one from memory and a kept order split the copies into runs of
    tensors adjacent in the source; the file equals the one written all from memory."""
    if not hasattr(os, "copy_file_range"):
        pytest.skip("no os.copy_file_range on this platform")
    from linnet.weights.safetensors import save_safetensors_streamed

    rng = np.random.default_rng(5)
    tensors = {f"t{i}": rng.standard_normal((3, 5 + i)).astype(np.float32) for i in range(6)}
    save_safetensors(tensors, tmp_path / "source.safetensors")
    file = SafeTensorsFile(tmp_path / "source.safetensors")
    mapped = {name: file.load(name) for name in ("t0", "t1", "t3", "t4")}
    arrays = {**mapped, "extra": np.arange(7, dtype=np.float32)}
    items = [(n, "f32", a.shape) for n, a in arrays.items()]
    calls = _count_kernel_copies(monkeypatch)
    out = tmp_path / "runs.safetensors"
    save_safetensors_streamed(out, items, arrays.__getitem__, keep_order=True)
    pairs = [("t0", "t1"), ("t3", "t4")]
    assert calls == [mapped[a].nbytes + mapped[b].nbytes for a, b in pairs]
    memory = tmp_path / "memory.safetensors"
    save_safetensors_streamed(memory, items, lambda n: np.array(arrays[n]), keep_order=True)
    assert out.read_bytes() == memory.read_bytes()
    assert list(read_safetensors(out)) == list(arrays)  # the order given
    default = tmp_path / "default.safetensors"
    save_safetensors_streamed(default, items, arrays.__getitem__)
    assert list(read_safetensors(default)) == sorted(arrays)  # save_safetensors' order


def test_a_partial_copy_is_undone_before_the_bytes_are_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not hasattr(os, "copy_file_range"):
        pytest.skip("no os.copy_file_range on this platform")
    tensors = {"a": np.arange(4096, dtype=np.float32), "b": np.ones(100, np.float32)}
    save_safetensors(tensors, tmp_path / "source.safetensors", {"format": "pt"})
    real = os.copy_file_range
    state = {"calls": 0}

    def halfway(source: int, target: int, count: int, offset: int | None = None) -> int:
        state["calls"] += 1
        if state["calls"] == 2:
            raise OSError(5, "I/O error")
        return real(source, target, min(count, 1000), offset)

    monkeypatch.setattr(os, "copy_file_range", halfway)
    _streamed_copy(tmp_path / "source.safetensors", tmp_path / "out.safetensors")
    assert (tmp_path / "out.safetensors").read_bytes() == (
        tmp_path / "source.safetensors"
    ).read_bytes()
