"""Blocks from dotted names: sub arrays, shared block types, renamed paths."""

from __future__ import annotations

from linnet.sourcegen import build
from linnet.sourcegen.graph import Graph, Node
from linnet.sourcegen.layout import Layout, name_anonymous


def _layer(i: int, hidden: int = 4) -> list[tuple[str, tuple[int, ...], str]]:
    return [
        (f"blocks.{i}.attn.qkv.weight", (3 * hidden, hidden), "f32"),
        (f"blocks.{i}.attn.qkv.bias", (3 * hidden,), "f32"),
        (f"blocks.{i}.norm.weight", (hidden,), "f32"),
    ]


def test_numbered_children_with_one_structure_become_an_array() -> None:
    layout = Layout.plan([*_layer(0), *_layer(1), *_layer(2), ("head.weight", (2, 4), "f32")], {})
    blocks = layout.root.children["blocks"]
    assert not isinstance(blocks, type(None)) and getattr(blocks, "array", False)
    assert layout.paths["blocks.2.attn.qkv.weight"] == "blocks.2.attn.qkv.weight"
    assert build.text(layout.expr("blocks.2.attn.qkv.weight")) == "blocks[2].attn.qkv.weight"
    assert layout.renamed == {}


def test_children_that_differ_are_not_an_array() -> None:
    layers = [*_layer(0), *_layer(1, hidden=8)]
    layout = Layout.plan(layers, {})
    assert layout.paths["blocks.1.norm.weight"] == "blocks.block_1.norm.weight"
    assert layout.renamed["blocks.block_1.norm.weight"] == "blocks.1.norm.weight"


def test_names_that_are_not_paths_are_renamed() -> None:
    layout = Layout.plan([("onnx::MatMul_12", (2, 2), "f32"), ("fc.max.weight", (2,), "f32")], {})
    assert layout.paths["onnx::MatMul_12"] == "onnx_MatMul_12"
    assert layout.paths["fc.max.weight"] == "fc.max_.weight"
    assert set(layout.renamed.values()) == {"onnx::MatMul_12", "fc.max.weight"}


def test_exported_paths_win_over_stored_names() -> None:
    layout = Layout.plan([("param0", (2,), "f32")], {"param0": "layers.0.norm.weight"})
    assert layout.paths["param0"] == "layers.0.norm.weight"
    assert build.text(layout.expr("param0")) == "layers[0].norm.weight"
    assert layout.renamed == {"layers.0.norm.weight": "param0"}


def test_a_stored_scalar_is_read_as_its_only_element() -> None:
    layout = Layout.plan([("scale", (), "f32")], {})
    assert build.text(layout.expr("scale")) == "scale[0]"


def test_anonymous_tensors_are_named_after_the_module_reading_them() -> None:
    import numpy as np

    g = Graph(
        "g",
        [],
        [],
        [
            Node("MatMul", "", "", ("x", "val_3"), ("y",), scope="model.layers.0.q_proj"),
            Node("MatMul", "", "", ("y", "val_9"), ("z",), scope="model.layers.1.q_proj"),
        ],
        {"val_3": np.zeros((2, 2), np.float32), "val_9": np.zeros((2, 2), np.float32)},
    )
    named, notes = name_anonymous(g)
    assert named == {
        "val_3": "model.layers.0.q_proj.weight_t",
        "val_9": "model.layers.1.q_proj.weight_t",
    }
    assert len(notes) == 2
