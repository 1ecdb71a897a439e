"""Pattern recovery: decomposed chains become std calls; other constants stay as written."""

from __future__ import annotations

import math

import numpy as np
import pytest
from source_support import graph, lower, node

from linnet.sourcegen.graph import TensorInfo

F32 = "f32"


def _x(name: str = "x", shape: tuple[object, ...] = ("batch", 8)) -> TensorInfo:
    return TensorInfo(name, F32, shape)  # type: ignore[arg-type]


def _c(value: float) -> np.ndarray:
    return np.array(value, dtype=np.float32)


def test_silu_is_recovered() -> None:
    g = graph(
        [node("Sigmoid", ["x"], ["s"]), node("Mul", ["x", "s"], ["y"])],
        [_x()],
        [_x("y")],
        value_info=[_x("s")],
    )
    text, _, notes = lower(g)
    assert "silu(x)" in text and "use std.nn.activations::{silu}" in text
    assert any("recovered `silu`" in n for n in notes)


def test_mul_of_another_value_and_its_sigmoid_stays() -> None:
    g = graph(
        [node("Sigmoid", ["x"], ["s"]), node("Mul", ["z", "s"], ["y"])],
        [_x(), _x("z")],
        [_x("y")],
        value_info=[_x("s")],
    )
    text, _, notes = lower(g)
    assert "silu" not in text and not any("silu" in n for n in notes)


def _rms_graph(exponent: float, eps: float = 1e-6) -> object:
    nodes = [
        node("Pow", ["x", "two"], ["sq"]),
        node("ReduceMean", ["sq"], ["ms"], axes=[-1], keepdims=1),
        node("Add", ["ms", "eps"], ["var"]),
        node("Sqrt", ["var"], ["rt"]),
        node("Reciprocal", ["rt"], ["inv"]),
        node("Mul", ["x", "inv"], ["n"]),
        node("Mul", ["norm.weight", "n"], ["y"]),
    ]
    vi = [_x(n) for n in ("sq", "n")] + [
        TensorInfo(n, F32, ("batch", 1)) for n in ("ms", "var", "rt", "inv")
    ]
    return graph(
        nodes,
        [_x()],
        [_x("y")],
        initializers={"norm.weight": np.linspace(0.5, 1.5, 8, dtype=np.float32)},
        constants={"two": _c(exponent), "eps": _c(eps)},
        value_info=[*vi, TensorInfo("norm.weight", F32, (8,))],
    )


def test_rms_norm_is_recovered_with_its_epsilon() -> None:
    text, _, notes = lower(_rms_graph(2.0))  # type: ignore[arg-type]
    assert "rms_norm(x, norm.weight, 1e-6)" in text
    assert any("recovered `rms_norm`" in n for n in notes)


def test_rms_norm_with_another_exponent_stays_as_written() -> None:
    with pytest.raises(AssertionError, match="only squares"):
        lower(_rms_graph(3.0))  # type: ignore[arg-type]
    # The chain is not recovered (the test registry refuses cubes: no std call was made).


def _gelu_graph(cubic: float) -> object:
    c = math.sqrt(2 / math.pi)
    nodes = [
        node("Mul", ["x", "x"], ["x2"]),
        node("Mul", ["x2", "x"], ["x3"]),
        node("Mul", ["x3", "k"], ["kx3"]),
        node("Add", ["x", "kx3"], ["inner"]),
        node("Mul", ["inner", "c"], ["arg"]),
        node("Tanh", ["arg"], ["t"]),
        node("Add", ["t", "one"], ["t1"]),
        node("Mul", ["x", "half"], ["hx"]),
        node("Mul", ["hx", "t1"], ["y"]),
    ]
    vi = [_x(n) for n in ("x2", "x3", "kx3", "inner", "arg", "t", "t1", "hx")]
    consts = {"k": _c(cubic), "c": _c(c), "one": _c(1.0), "half": _c(0.5)}
    return graph(nodes, [_x()], [_x("y")], constants=consts, value_info=vi)


def test_tanh_gelu_is_recovered() -> None:
    text, _, _ = lower(_gelu_graph(0.044715))  # type: ignore[arg-type]
    assert "gelu(x)" in text


def test_gelu_with_another_constant_stays_as_written() -> None:
    text, _, notes = lower(_gelu_graph(0.05))  # type: ignore[arg-type]
    assert "gelu" not in text and "tanh(" in text
    assert not any("gelu" in n for n in notes)


def test_softmax_spelled_out_is_recovered() -> None:
    nodes = [
        node("ReduceMax", ["x"], ["m"], axes=[-1], keepdims=1),
        node("Sub", ["x", "m"], ["d"]),
        node("Exp", ["d"], ["e"]),
        node("ReduceSum", ["e"], ["s"], axes=[-1], keepdims=1),
        node("Div", ["e", "s"], ["y"]),
    ]
    vi = [_x("d"), _x("e"), TensorInfo("m", F32, ("batch", 1)), TensorInfo("s", F32, ("batch", 1))]
    text, _, notes = lower(graph(nodes, [_x()], [_x("y")], value_info=vi))
    assert "softmax(x)" in text
    assert any("recovered `softmax`" in n for n in notes)
