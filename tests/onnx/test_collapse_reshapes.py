"""`linnet.onnx.runtime.graph.collapse_reshapes`: a `Reshape` of a `Reshape` reads the first
one's data, the graph computes the same values, and a shape with a copied (0) size stays."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from linnet.onnx.runtime.graph import collapse_reshapes


def _graph(second_shape: list[int], first_also_read: bool = False) -> onnx.ModelProto:
    """x [24] -> Reshape [2, 3, 4] (r1) -> Reshape `second_shape` (y); z is y again, or, with
    `first_also_read`, -r1 (so r1 stays read after the collapse)."""
    ints = TensorProto.INT64
    z = (
        helper.make_node("Neg", ["r1"], ["z"])
        if first_also_read
        else helper.make_node("Identity", ["y"], ["z"])
    )
    nodes = [
        helper.make_node("Constant", [], ["s1"], value=helper.make_tensor("s1", ints, [3], [2, 3, 4])),
        helper.make_node("Constant", [], ["s2"], value=helper.make_tensor("s2", ints, [len(second_shape)], second_shape)),
        helper.make_node("Reshape", ["x", "s1"], ["r1"]),
        helper.make_node("Reshape", ["r1", "s2"], ["y"]),
        z,
    ]  # fmt: skip
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [24])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "z")]
    graph = helper.make_graph(nodes, "g", [x], outs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run(model: onnx.ModelProto) -> list[np.ndarray[Any, Any]]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return list(session.run(None, {"x": np.arange(24, dtype=np.float32)}))


def _reshapes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if n.op_type == "Reshape"]


def test_a_reshape_of_a_reshape_reads_the_first_ones_data() -> None:
    model = _graph([4, 6])
    before = _run(model)
    assert collapse_reshapes(model.graph)
    reshapes = _reshapes(model)
    assert len(reshapes) == 1 and reshapes[0].input[0] == "x"
    for a, b in zip(before, _run(model), strict=True):
        assert a.shape == b.shape and np.array_equal(a, b)


def test_the_first_reshape_stays_while_read() -> None:
    model = _graph([4, 6], first_also_read=True)
    before = _run(model)
    assert collapse_reshapes(model.graph)
    reshapes = _reshapes(model)
    assert len(reshapes) == 2 and reshapes[1].input[0] == "x"
    for a, b in zip(before, _run(model), strict=True):
        assert a.shape == b.shape and np.array_equal(a, b)


def test_a_copied_size_keeps_the_chain() -> None:
    model = _graph([0, 12])  # 0 copies r1's first size (2): not x's (24)
    assert not collapse_reshapes(model.graph)
    assert _run(model)[0].shape == (2, 12)
