"""Outlining: a stack of identical layers becomes a method and a `static for`."""

from __future__ import annotations

import numpy as np
from source_support import REGISTRY, graph, node

from linnet.pipeline import check_source
from linnet.sourcegen.graph import TensorInfo
from linnet.sourcegen.layout import Layout
from linnet.sourcegen.module import assemble, format_module
from linnet.sourcegen.outline import outline
from linnet.sourcegen.translate import translate


def _x(name: str) -> TensorInfo:
    return TensorInfo(name, "f32", ("batch", 4))


def _layers(count: int, *, odd_one: bool = False) -> tuple[str, list[str]]:
    nodes = [node("Sigmoid", ["x"], ["gate"])]  # an invariant, read by every layer
    inits: dict[str, np.ndarray] = {}
    h = "x"
    for i in range(count):
        op = "Sub" if odd_one and i == count - 1 else "Add"
        nodes += [
            node("Mul", [h, f"layers.{i}.scale"], [f"m{i}"]),
            node(op, [f"m{i}", f"layers.{i}.bias"], [f"a{i}"]),
            node("Mul", [f"a{i}", "gate"], [f"h{i}"]),
        ]
        inits[f"layers.{i}.scale"] = np.full(4, i + 1.0, np.float32)
        inits[f"layers.{i}.bias"] = np.full(4, 0.5 * i, np.float32)
        h = f"h{i}"
    nodes.append(node("Sigmoid", [h], ["y"]))
    g = graph(nodes, [_x("x")], [_x("y")], initializers=inits)
    layout = Layout.plan([(n, a.shape, "f32") for n, a in inits.items()], {})
    t = translate(g, REGISTRY, layout)
    done = outline(t, layout)
    methods = {d.type_name: [d.method] for d in done}
    text = format_module(assemble(t, layout, module_name="m", methods=methods))
    errors = [d for d in check_source(text, "m.linnet").diagnostics if d.is_error]
    assert not errors, (text, errors)
    return text, [d.type_name for d in done]


def test_identical_layers_become_a_method_and_a_loop() -> None:
    text, outlined = _layers(3)
    assert outlined == ["Layer"]
    assert "static for layer in layers {" in text
    assert "hidden = layer.forward(hidden, sigmoid_" in text or "layer.forward(hidden" in text
    assert "pub fn forward<batch: Dim>(" in text and "hidden: Tensor[batch, 4; f32]," in text
    assert "layers[" not in text


def test_layers_that_differ_stay_inline() -> None:
    text, outlined = _layers(3, odd_one=True)
    assert outlined == []
    assert "layers[2].bias" in text
