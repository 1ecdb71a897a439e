"""Saving exported models: one file, or the tensors beside it past the 2 GB protobuf limit.

The decision is unit-tested with a small `limit`; the real >2 GB export
(a 2.1 GB embedding table) is slow-marked (`make test-slow`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from export_support import run_onnx

from linnet.ir.core import Builder, Function, TensorType
from linnet.onnx import export_ir
from linnet.onnx.export.result import PROTOBUF_LIMIT, needs_external_data, tensor_bytes


def _embedding(rows: int, width: int) -> Function:
    b = Builder.for_function([("ids", TensorType((2,), "i32"))])
    table = b.param("table", TensorType((rows, width), "f32"))
    return b.finish_function("lookup", [b.gather(table, b.args[0], 0)])


def _data_file(folder: Path, model: str) -> Path:
    """The one data file of `model`: `<model>.<16 hex digits of its version>.data`."""
    (found,) = [
        p for p in folder.iterdir() if re.fullmatch(rf"{model}\.[0-9a-f]{{16}}\.data", p.name)
    ]
    return found


def _session_from(path: Path) -> Any:
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def test_small_models_are_one_file(tmp_path: Path) -> None:
    table = np.arange(12, dtype=np.float32).reshape(6, 2)
    exported = export_ir(_embedding(6, 2), weights={"table": table})
    assert tensor_bytes(exported.model) == table.nbytes
    assert not needs_external_data(exported.model)
    path = exported.save(tmp_path / "small.onnx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small.onnx"]
    out = _session_from(path).run(None, {"ids": np.array([5, 1], np.int32)})[0]
    np.testing.assert_array_equal(out, table[[5, 1]])


def test_past_the_limit_tensors_go_to_a_data_file(tmp_path: Path) -> None:
    table = np.random.default_rng(0).normal(size=(256, 8)).astype(np.float32)
    exported = export_ir(_embedding(256, 8), weights={"table": table})
    limit = table.nbytes + 64 * 2**20 - 1  # the payload plus the margin no longer fits
    assert needs_external_data(exported.model, limit)
    path = exported.save(tmp_path / "big.onnx", limit=limit)
    data = _data_file(tmp_path, "big.onnx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.onnx", data.name]
    assert data.stat().st_size >= table.nbytes
    stored = onnx.load(str(path), load_external_data=False)
    assert stored.graph.initializer[0].data_location == onnx.TensorProto.EXTERNAL
    out = _session_from(path).run(None, {"ids": np.array([255, 0], np.int32)})[0]
    np.testing.assert_array_equal(out, table[[255, 0]])
    # the in-memory model is complete again after the save
    restored = exported.model.graph.initializer[0]
    assert restored.data_location == onnx.TensorProto.DEFAULT and restored.raw_data
    results, _ = run_onnx(exported, [np.array([3, 4], np.int32)])
    np.testing.assert_array_equal(results[0], table[[3, 4]])


def test_external_data_on_request(tmp_path: Path) -> None:
    table = np.ones((512, 4), np.float32)
    exported = export_ir(_embedding(512, 4), weights={"table": table})
    exported.save(tmp_path / "m.onnx", external_data=True)
    assert _data_file(tmp_path, "m.onnx").exists()


@pytest.mark.slow
def test_a_model_over_two_gigabytes(tmp_path: Path) -> None:
    rows = PROTOBUF_LIMIT // (4 * 1024) + 1024  # just over 2 GB of f32
    table = np.zeros((rows, 1024), np.float32)
    table[-1] = 7.0
    exported = export_ir(_embedding(rows, 1024), weights={"table": table})
    assert needs_external_data(exported.model)
    path = exported.save(tmp_path / "huge.onnx")
    assert _data_file(tmp_path, "huge.onnx").stat().st_size > PROTOBUF_LIMIT
    assert path.stat().st_size < 2**20
    out = _session_from(path).run(None, {"ids": np.array([rows - 1, 0], np.int32)})[0]
    assert out[0, 0] == 7.0 and out[1, 0] == 0.0
