"""Checkpoint sources (weights_checkpoint): one file, shards with an index, a folder, arrays.

Shards are written with the reference `safetensors.numpy.save_file` and an
index in the Hugging Face layout (`weight_map`).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy

from linnet.errors import LinnetError
from linnet.weights.checkpoint import INDEX_NAME, open_checkpoint


def _shards(folder: Path, *, index: bool = True) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    first = {"a.weight": rng.standard_normal((2, 3)), "b.weight": rng.standard_normal(4)}
    second = {"c.weight": rng.integers(0, 9, (5,)).astype(np.int32)}
    safetensors.numpy.save_file(first, str(folder / "model-00001-of-00002.safetensors"))
    safetensors.numpy.save_file(second, str(folder / "model-00002-of-00002.safetensors"))
    if index:
        weight_map = {name: "model-00001-of-00002.safetensors" for name in first}
        weight_map |= {name: "model-00002-of-00002.safetensors" for name in second}
        (folder / INDEX_NAME).write_text(
            json.dumps({"metadata": {"total_size": 76}, "weight_map": weight_map})
        )
    return first | second


@pytest.mark.parametrize("via", ["folder", "index", "folder-without-index"])
def test_sharded_checkpoint(tmp_path: Path, via: str) -> None:
    expected = _shards(tmp_path, index=via != "folder-without-index")
    source = tmp_path / INDEX_NAME if via == "index" else tmp_path
    checkpoint = open_checkpoint(source)
    assert set(checkpoint.tensors) == set(expected)
    assert checkpoint.tensors["c.weight"].file.name == "model-00002-of-00002.safetensors"
    assert checkpoint.folder == tmp_path
    for name, array in expected.items():
        got = checkpoint.load(name)
        assert got.dtype == array.dtype
        np.testing.assert_array_equal(got, array)


def test_single_file_and_arrays(tmp_path: Path) -> None:
    path = tmp_path / "one.safetensors"
    safetensors.numpy.save_file({"w": np.arange(3.0)}, str(path))
    checkpoint = open_checkpoint(path)
    assert checkpoint.label == str(path) and checkpoint.folder == tmp_path
    np.testing.assert_array_equal(checkpoint.load("w"), np.arange(3.0))
    arrays = open_checkpoint({"x": np.ones(2, np.float16), "z": np.zeros(1, np.complex64)})
    assert arrays.tensors["x"].dtype == "F16" and arrays.tensors["x"].linnet_dtype == "f16"
    assert arrays.folder is None
    with pytest.raises(LinnetError, match=r"`z`.*complex64"):
        arrays.load("z")
    with pytest.raises(LinnetError, match="no tensor named `q`"):
        arrays.load("q")


def test_duplicate_names_across_shards_name_both_files(tmp_path: Path) -> None:
    safetensors.numpy.save_file({"w": np.ones(2)}, str(tmp_path / "x.safetensors"))
    safetensors.numpy.save_file({"w": np.zeros(2)}, str(tmp_path / "y.safetensors"))
    with pytest.raises(LinnetError) as info:
        open_checkpoint(tmp_path)
    message = str(info.value)
    assert "`w`" in message and "x.safetensors" in message and "y.safetensors" in message


def test_index_problems(tmp_path: Path) -> None:
    _shards(tmp_path)
    index = tmp_path / INDEX_NAME
    data = json.loads(index.read_text())
    data["weight_map"]["a.weight"] = "model-00002-of-00002.safetensors"
    data["weight_map"]["ghost"] = "model-00001-of-00002.safetensors"
    index.write_text(json.dumps(data))
    with pytest.raises(LinnetError) as info:
        open_checkpoint(tmp_path)
    message = str(info.value)
    assert str(index) in message
    assert "`a.weight` is listed in model-00002-of-00002.safetensors" in message
    assert "it is in model-00001-of-00002.safetensors" in message
    assert "`ghost`" in message

    data["weight_map"] = {"a.weight": "gone.safetensors"}
    index.write_text(json.dumps(data))
    with pytest.raises(LinnetError, match=r"not found.*gone\.safetensors"):
        open_checkpoint(tmp_path)
    data["weight_map"] = {"a.weight": "../escape.safetensors"}
    index.write_text(json.dumps(data))
    with pytest.raises(LinnetError, match="relative to the index"):
        open_checkpoint(index)
    index.write_text(json.dumps({"weight_map": [1]}))
    with pytest.raises(LinnetError, match="weight_map"):
        open_checkpoint(index)
    index.write_text("{not json")
    with pytest.raises(LinnetError, match="invalid JSON"):
        open_checkpoint(index)


def test_missing_sources(tmp_path: Path) -> None:
    with pytest.raises(LinnetError, match="no such file"):
        open_checkpoint(tmp_path / "nope.safetensors")
    with pytest.raises(LinnetError, match=r"no model\.safetensors\.index\.json"):
        open_checkpoint(tmp_path)


def test_a_list_of_sources_reads_as_one_checkpoint(tmp_path: Path) -> None:
    expected = _shards(tmp_path)
    extra = {"rope_factors": np.arange(6, dtype=np.float32).reshape(2, 3)}
    checkpoint = open_checkpoint([tmp_path, extra])
    assert set(checkpoint.tensors) == set(expected) | {"rope_factors"}
    np.testing.assert_array_equal(checkpoint.load("c.weight"), expected["c.weight"])
    np.testing.assert_array_equal(checkpoint.load("rope_factors"), extra["rope_factors"])
    assert checkpoint.folder == tmp_path
    with pytest.raises(LinnetError, match=r"`a.weight` is stored in both .* and arrays in memory"):
        open_checkpoint([tmp_path, {"a.weight": np.zeros(2, np.float32)}])
    with pytest.raises(LinnetError, match="an empty list of checkpoints"):
        open_checkpoint([])
