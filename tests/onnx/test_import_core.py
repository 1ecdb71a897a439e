"""`import_onnx` itself: its result, files, refusals, generic dims, folding, weights.

Each model is built with `onnx.helper`, imported, and (where it computes
something) run on `linnet.torch` against ONNX Runtime on the same model.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from import_support import close, imported, run_imported, run_onnxruntime
from onnx import TensorProto, helper, numpy_helper

from linnet.errors import LinnetError
from linnet.onnx.importer.api import import_onnx
from linnet.weights import read_safetensors


def _model(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    initializers: dict[str, np.ndarray] | None = None,
    opset: int = 20,
    metadata: dict[str, str] | None = None,
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        inputs,
        outputs,
        [numpy_helper.from_array(a, n) for n, a in (initializers or {}).items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    for k, v in (metadata or {}).items():
        model.metadata_props.add(key=k, value=v)
    return model


def _f32(name: str, shape: list[object]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _dense() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    return _model(
        [
            helper.make_node("Mul", ["x", "encoder.layers.0.scale"], ["a"]),
            helper.make_node("Add", ["a", "encoder.layers.0.shift"], ["b"]),
            helper.make_node("Mul", ["b", "encoder.layers.1.scale"], ["c"]),
            helper.make_node("Add", ["c", "encoder.layers.1.shift"], ["d"]),
            helper.make_node("Relu", ["d"], ["y"]),
        ],
        [_f32("x", ["batch", 4])],
        [_f32("y", ["batch", 4])],
        {
            f"encoder.layers.{i}.{k}": rng.normal(size=4).astype(np.float32)
            for i in range(2)
            for k in ("scale", "shift")
        },
    )


def test_result_source_and_files(tmp_path: Path) -> None:
    result = imported(_dense(), tmp_path, "dense")
    assert (tmp_path / "dense.linnet").read_text() == result.source
    assert result.source.startswith("module dense\n")
    assert "pub entry forward<batch: Dim>(x: Tensor[batch, 4; f32])" in result.source
    assert "sub layers: [Layer; 2]" in result.source
    assert result.parameters == {n: n for n in result.parameters}
    assert result.bindings == {}
    stored = read_safetensors(tmp_path / "weights" / "model.safetensors")
    assert set(stored) == set(result.parameters)
    assert json.loads((tmp_path / "weights" / "bindings.json").read_text()) == {}
    assert not list(tmp_path.rglob(".*.linnet-tmp-*"))
    x = np.random.default_rng(1).normal(size=(3, 4)).astype(np.float32)
    (expected,) = run_onnxruntime(_dense(), {"x": x})
    (actual,) = run_imported(result, [x])
    close(actual, expected)


def test_a_path_with_external_data_imports(tmp_path: Path) -> None:
    model = _dense()
    path = tmp_path / "m.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, size_threshold=0)
    result = import_onnx(path, output=tmp_path / "out.linnet", weights=tmp_path / "w")
    stored = read_safetensors(tmp_path / "w" / "model.safetensors")
    for init in _dense().graph.initializer:  # the saved model now points at its data file
        assert stored[init.name].tobytes() == numpy_helper.to_array(init).tobytes()
    assert result.source.startswith("module out\n")


def test_unmapped_nodes_are_all_named_and_nothing_is_written(tmp_path: Path) -> None:
    model = _model(
        [
            helper.make_node("Frobnicate", ["x"], ["a"], domain="com.example", name="frob"),
            helper.make_node("Relu", ["a"], ["b"]),
            helper.make_node("NoSuchOp", ["b"], ["y"], name="mystery"),
        ],
        [_f32("x", [2])],
        [_f32("y", [2])],
    )
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    with pytest.raises(LinnetError) as info:
        import_onnx(model, output=tmp_path / "m.linnet", weights=tmp_path / "w")
    message = str(info.value)
    assert "`frob` (com.example::Frobnicate)" in message
    assert "`mystery` (NoSuchOp)" in message
    assert not (tmp_path / "m.linnet").exists() and not (tmp_path / "w").exists()


def test_shape_computations_fold_into_dimensions(tmp_path: Path) -> None:
    # y = reshape(x, [shape(x)[0], shape(x)[1] * 2, 2]) via Shape/Gather/Unsqueeze/Concat.
    ints = {"zero": np.array(0, np.int64), "one": np.array(1, np.int64)}
    model = _model(
        [
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
            helper.make_node("Gather", ["s", "one"], ["n"], axis=0),
            helper.make_node("Mul", ["n", "two"], ["n2"]),
            helper.make_node("Unsqueeze", ["b", "axes"], ["b1"]),
            helper.make_node("Unsqueeze", ["n2", "axes"], ["n1"]),
            helper.make_node("Concat", ["b1", "n1", "two1"], ["target"], axis=0),
            helper.make_node("Reshape", ["x", "target"], ["y"]),
        ],
        [_f32("x", ["batch", "seq", 4])],
        [_f32("y", ["batch", None, 2])],
        {
            **ints,
            "two": np.array(2, np.int64),
            "two1": np.array([2], np.int64),
            "axes": np.array([0], np.int64),
        },
    )
    result = imported(model, tmp_path)
    assert "reshape(x, [batch, 2 * seq, 2])" in result.source
    assert "Shape" not in result.source and "shape" not in result.source.replace("reshape", "")
    x = np.random.default_rng(2).normal(size=(2, 3, 4)).astype(np.float32)
    (expected,) = run_onnxruntime(model, {"x": x})
    (actual,) = run_imported(result, [x])
    close(actual, expected)


def test_exported_paths_come_back_with_bindings(tmp_path: Path) -> None:
    w = np.arange(4, dtype=np.float32)
    model = _model(
        [helper.make_node("Mul", ["x", "param0"], ["y"])],
        [_f32("x", ["n", 4])],
        [_f32("y", ["n", 4])],
        {"param0": w},
        metadata={"linnet.path.param0": "blocks.0.norm.weight", "linnet.entry": "forward"},
    )
    result = imported(model, tmp_path)
    assert result.parameters == {"blocks.0.norm.weight": "param0"}
    assert result.bindings == {"blocks.0.norm.weight": "param0"}
    saved = json.loads((tmp_path / "weights" / "bindings.json").read_text())
    assert saved == {"blocks.0.norm.weight": "param0"}
    assert (
        read_safetensors(tmp_path / "weights" / "model.safetensors")["param0"].tobytes()
        == w.tobytes()
    )


def test_recoveries_are_listed_in_notes(tmp_path: Path) -> None:
    model = _model(
        [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])],
        [_f32("x", ["n", 4])],
        [_f32("y", ["n", 4])],
    )
    result = imported(model, tmp_path)
    assert "silu(x)" in result.source
    assert any(n.startswith("recovered `silu`") for n in result.notes)
