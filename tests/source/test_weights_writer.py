"""The importers' SafeTensors writer: file ranges copied by the kernel, arrays written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from linnet.errors import LinnetError
from linnet.sourcegen.weights import FileRange, StoredTensor, write_safetensors
from linnet.weights import read_safetensors


def test_ranges_and_arrays_read_back_exactly(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    big = rng.normal(size=(64, 33)).astype(np.float32)
    ids = np.arange(7, dtype=np.int64)
    blob = tmp_path / "blob.data"
    padding = b"\x00" * 100
    blob.write_bytes(padding + big.tobytes() + ids.tobytes())
    tensors = [
        StoredTensor("layers.0.weight", "f32", big.shape, FileRange(blob, 100, big.nbytes)),
        StoredTensor("ids", "i64", ids.shape, FileRange(blob, 100 + big.nbytes, ids.nbytes)),
        StoredTensor("mask", "bool", (2, 2), np.array([[True, False], [False, True]])),
        StoredTensor("scale", "f32", (1,), np.array([0.5], np.float32)),
    ]
    target = tmp_path / "w" / "model.safetensors"
    write_safetensors(target, tensors)
    back = read_safetensors(target)
    np.testing.assert_array_equal(back["layers.0.weight"], big)
    np.testing.assert_array_equal(back["ids"], ids)
    np.testing.assert_array_equal(back["mask"], tensors[2].data)  # type: ignore[arg-type]
    np.testing.assert_array_equal(back["scale"], [0.5])
    # The data starts on a page boundary, and the reference library reads the file too.
    header_len = int.from_bytes(target.read_bytes()[:8], "little")
    assert (8 + header_len) % 4096 == 0
    safetensors = pytest.importorskip("safetensors.numpy")
    loaded = safetensors.load_file(str(target))
    np.testing.assert_array_equal(loaded["layers.0.weight"], big)
    assert not list(target.parent.glob(".*.linnet-tmp-*"))


def test_a_short_source_file_is_an_error_and_nothing_is_written(tmp_path: Path) -> None:
    blob = tmp_path / "blob.data"
    blob.write_bytes(b"\x00" * 10)
    target = tmp_path / "model.safetensors"
    with pytest.raises(LinnetError, match="ends before"):
        write_safetensors(target, [StoredTensor("w", "f32", (4,), FileRange(blob, 0, 16))])
    assert not target.exists() and not list(tmp_path.glob(".*.linnet-tmp-*"))
