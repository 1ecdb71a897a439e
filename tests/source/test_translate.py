"""The translation driver: refusals, constants, facts, fallbacks, module assembly."""

from __future__ import annotations

import numpy as np
from source_support import REGISTRY, graph, lower, node

from linnet.sourcegen.graph import TensorInfo
from linnet.sourcegen.layout import Layout
from linnet.sourcegen.translate import translate


def _x(name: str, shape: tuple[object, ...]) -> TensorInfo:
    return TensorInfo(name, "f32", shape)  # type: ignore[arg-type]


def test_every_unmapped_node_is_listed() -> None:
    g = graph(
        [
            node("Frobnicate", ["x"], ["a"]),
            node("Add", ["a", "x"], ["b"]),
            node("Twiddle", ["b"], ["y"]),
        ],
        [_x("x", ("n",))],
        [_x("y", ("n",))],
    )
    t = translate(g, REGISTRY, Layout.plan([], {}))
    ops = [r.node.op for r in t.refusals]
    # The unmapped nodes are both reported, even the one downstream of the first.
    assert ops == ["Frobnicate", "Twiddle"]


def test_generic_dims_and_broadcast_facts() -> None:
    g = graph(
        [node("Add", ["x", "z"], ["y"])],
        [_x("x", ("batch", "seq")), _x("z", ("batch", "len"))],
        [_x("y", ("batch", "seq"))],
    )
    text, _t, _ = lower(g)
    assert "pub entry forward<batch: Dim, seq: Dim, len: Dim>" in text
    assert "where seq == len" in text or "where len == seq" in text


def test_constants_become_fill_iota_or_members() -> None:
    g = graph(
        [
            node("Add", ["x", "ones"], ["a"]),
            node("Add", ["a", "ramp"], ["b"]),
            node("Mul", ["b", "table"], ["y"]),
        ],
        [_x("x", (2, 3))],
        [_x("y", (2, 3))],
        constants={
            "ones": np.ones((2, 3), np.float32),
            "ramp": np.arange(3, dtype=np.float32),
            "table": np.array([[1, 2, 3], [4, 5, 6]], np.float32),
        },
    )
    text, t, _ = lower(g)
    assert "fill<f32>([2, 3], 1.0)" in text
    assert "iota<f32>(3)" in text
    assert "param constant: Tensor[2, 3; f32]" in text
    assert any(use.array is not None for use in t.stored.values())


def test_a_recovered_pattern_falls_back_when_the_std_op_cannot_take_it() -> None:
    # Shape inference claims the weight is [8]; the stored tensor is [1, 8], which
    # std rms_norm does not take: the translator refuses and the chain is kept.
    nodes = [
        node("Mul", ["x", "x"], ["sq"]),
        node("ReduceMean", ["sq"], ["ms"], axes=[-1], keepdims=1),
        node("Add", ["ms", "eps"], ["var"]),
        node("Sqrt", ["var"], ["rt"]),
        node("Div", ["x", "rt"], ["n"]),
        node("Mul", ["n", "w"], ["y"]),
    ]
    vi = [_x("sq", ("b", 8)), _x("n", ("b", 8)), _x("w", (8,))] + [
        _x(n, ("b", 1)) for n in ("ms", "var", "rt")
    ]
    g = graph(
        nodes,
        [_x("x", ("b", 8))],
        [_x("y", ("b", 8))],
        initializers={"w": np.ones((1, 8), np.float32)},
        constants={"eps": np.array(1e-5, np.float32)},
        value_info=vi,
    )
    text, _, notes = lower(g)
    assert "rms_norm" not in text
    assert any(n.startswith("kept as written: `rms_norm`") for n in notes)
