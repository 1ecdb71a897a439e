"""Embedded weights written straight from their arrays (`linnet.onnx.export.payload`).

The exported file is read back by onnx (`checker`, `load` with its external
data) and run by ONNX Runtime from disk, and its results are compared with
the NumPy interpreter; the in-memory `.model` must stay complete and equal
to what a save through onnx's own writer produces. tracemalloc (which sees
NumPy's allocations) checks that export and save copy no weight.
"""

from __future__ import annotations

import re
import tracemalloc
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import onnx
import onnx.checker
from export_support import normalized, run_onnx
from onnx import numpy_helper

from linnet.ir.core import Builder, Function, TensorType
from linnet.ir.interp import run_function
from linnet.onnx import export_ir
from linnet.onnx.export.payload import PAGE_ALIGN, SMALL_ALIGN

Array = np.ndarray[Any, Any]


def _mlp(width: int, dtype: str = "f32") -> Function:
    """x @ w1 -> * gain -> @ w2: two big weights and a small one."""
    b = Builder.for_function([("x", TensorType((2, width), dtype))])
    w1 = b.param("w1", TensorType((width, width), dtype))
    gain = b.param("gain", TensorType((width,), dtype))
    w2 = b.param("w2", TensorType((width, width), dtype))
    h = b.contract(b.args[0], w1, lhs_contract=[1], rhs_contract=[0])
    h = b.binary("mul", h, b.broadcast(gain, [2, width]))
    out = b.contract(h, w2, lhs_contract=[1], rhs_contract=[0])
    return b.finish_function("mlp", [out])


def _weights(width: int, dtype: Any = np.float32) -> dict[str, Array]:
    rng = np.random.default_rng(0)
    return {
        "w1": (rng.normal(size=(width, width)) / width).astype(dtype),
        "gain": rng.normal(size=(width,)).astype(dtype),
        "w2": (rng.normal(size=(width, width)) / width).astype(dtype),
    }


def _session(path: Path) -> Any:
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def test_saved_with_external_data_runs_like_the_interpreter(tmp_path: Path) -> None:
    fn, weights = _mlp(600), _weights(600)  # w1, w2 past 1 MiB: page-aligned
    x = np.random.default_rng(1).normal(size=(2, 600)).astype(np.float32)
    exported = export_ir(fn, weights=weights)
    path = exported.save(tmp_path / "mlp.onnx", external_data=True)
    (data,) = [p.name for p in tmp_path.iterdir() if p.name != "mlp.onnx"]
    assert re.fullmatch(r"mlp\.onnx\.[0-9a-f]{16}\.data", data)
    onnx.checker.check_model(str(path), full_check=True)

    stored = onnx.load(str(path), load_external_data=False)
    offsets = {}
    for tensor in stored.graph.initializer:
        assert tensor.data_location == onnx.TensorProto.EXTERNAL and not tensor.raw_data
        info = {e.key: e.value for e in tensor.external_data}
        assert info["location"] == data
        offsets[tensor.name] = int(info["offset"])
    assert offsets["param0"] % PAGE_ALIGN == 0 and offsets["param2"] % PAGE_ALIGN == 0
    assert offsets["param1"] % SMALL_ALIGN == 0

    loaded = onnx.load(str(path))
    arrays = {t.name: numpy_helper.to_array(t) for t in loaded.graph.initializer}
    for io in exported.by_role("param"):
        np.testing.assert_array_equal(arrays[io.name], weights[io.path or ""])

    expected, _ = run_function(fn, weights, {}, [x])
    (actual,) = _session(path).run(None, {"x": x})
    np.testing.assert_allclose(actual, expected[0], rtol=1e-5, atol=1e-6)
    # the in-memory model is complete, and equal to the one on disk
    assert normalized(exported.model) == normalized(loaded)
    results, _ = run_onnx(exported, [x])
    np.testing.assert_allclose(results[0], expected[0], rtol=1e-5, atol=1e-6)


def test_the_same_files_as_through_onnx_writer(tmp_path: Path) -> None:
    """A save before and one after `.model` (onnx's writer) store the same model."""
    weights = _weights(64)
    lazy = export_ir(_mlp(64), weights=weights)
    lazy.save(tmp_path / "lazy.onnx", external_data=True)
    eager = export_ir(_mlp(64), weights=weights)
    assert eager.model.graph.initializer[0].raw_data  # put into the message now
    eager.save(tmp_path / "eager.onnx", external_data=True)
    first, second = onnx.load(str(tmp_path / "lazy.onnx")), onnx.load(str(tmp_path / "eager.onnx"))
    assert normalized(first) == normalized(second)
    # a tensor under 1 KiB stays in the message either way
    small = onnx.load(str(tmp_path / "lazy.onnx"), load_external_data=False).graph.initializer[1]
    assert small.data_location == onnx.TensorProto.DEFAULT and len(small.raw_data) == 64 * 4


def test_saving_again_over_the_same_files(tmp_path: Path) -> None:
    weights = _weights(64)
    exported = export_ir(_mlp(64), weights=weights)
    exported.save(tmp_path / "m.onnx", external_data=True)
    first = sorted(p.name for p in tmp_path.iterdir())
    exported.save(tmp_path / "m.onnx", external_data=True)
    second = sorted(p.name for p in tmp_path.iterdir())
    assert len(second) == 2 and second != first  # a new data file; the old one went
    size = (tmp_path / second[1]).stat().st_size
    exported.save(tmp_path / "m.onnx")  # small: one file, the weights put in the message
    assert size >= 2 * 64 * 64 * 4
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]  # the data file nothing reads went
    loaded = onnx.load(str(tmp_path / "m.onnx"))
    assert all(t.data_location == onnx.TensorProto.DEFAULT for t in loaded.graph.initializer)
    np.testing.assert_array_equal(numpy_helper.to_array(loaded.graph.initializer[2]), weights["w2"])


def test_bf16_weights_keep_their_bit_patterns(tmp_path: Path) -> None:
    weights = _weights(32, ml_dtypes.bfloat16)
    exported = export_ir(_mlp(32, "bf16"), weights=weights, provider="cuda")
    exported.save(tmp_path / "bf16.onnx", external_data=True)
    loaded = onnx.load(str(tmp_path / "bf16.onnx"))
    stored = loaded.graph.initializer[0]
    assert stored.data_type == onnx.TensorProto.BFLOAT16
    bits = np.frombuffer(stored.raw_data, np.uint16).reshape(tuple(stored.dims))
    np.testing.assert_array_equal(bits, weights["w1"].view(np.uint16))


def test_export_and_save_copy_no_weight(tmp_path: Path) -> None:
    """Weights from a memory map go to the data file without a copy in memory."""
    width = 1024  # two 4 MiB weights
    mapped: dict[str, Array] = {}
    for name, array in _weights(width).items():
        np.save(tmp_path / f"{name}.npy", array)
        mapped[name] = np.load(tmp_path / f"{name}.npy", mmap_mode="r")
    fn = _mlp(width)
    tracemalloc.start()
    try:
        exported = export_ir(fn, weights=mapped)
        exported.save(tmp_path / "m.onnx", external_data=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < width * width * 4 // 4, peak  # a quarter of one weight
    loaded = onnx.load(str(tmp_path / "m.onnx"))
    np.testing.assert_array_equal(numpy_helper.to_array(loaded.graph.initializer[2]), mapped["w2"])


def test_session_takes_the_weights_without_putting_them_in_the_message(tmp_path: Path) -> None:
    """`.session()` hands pending weights to ONNX Runtime as OrtValues over the arrays."""
    width = 1024  # two 4 MiB weights
    mapped: dict[str, Array] = {}
    for name, array in _weights(width).items():
        np.save(tmp_path / f"{name}.npy", array)
        mapped[name] = np.load(tmp_path / f"{name}.npy", mmap_mode="r")
    fn = _mlp(width)
    exported = export_ir(fn, weights=mapped)
    tracemalloc.start()
    try:
        session = exported.session("cpu")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < width * width * 4 // 4, peak  # no weight copied on the Python side
    assert not exported._model.graph.initializer[0].raw_data  # still out of the message
    x = np.random.default_rng(2).normal(size=(2, width)).astype(np.float32)
    expected, _ = run_function(fn, mapped, {}, [x])
    (actual,) = session.run(None, {"x": x})
    np.testing.assert_allclose(actual, expected[0], rtol=1e-4, atol=1e-5)
