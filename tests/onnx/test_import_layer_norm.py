"""ONNX `LayerNormalization` imports to a checking `std.nn.norm::layer_norm` call,
and std calls are never shadowed by a member, local or method of the same name.

- LayerNormalization over the last axis or several trailing axes, with and
  without bias, on 2-D to 4-D inputs with symbolic batch / sequence extents,
  imports to a `layer_norm` call (trailing axes flattened around it) and
  matches ONNX Runtime at two batch sizes; the `Mean` / `InvStdDev` outputs
  take the spelled-out path and match too.
- A model whose blocks have members named `softmax` and `relu` (like the std
  functions the translation calls in those blocks), a local named like a std
  function, and an entry named like one (`matmul`), imports under aliases and checks.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from import_support import STDLIB, close, imported, run_imported, run_onnxruntime

from linnet.pipeline import check_source
from linnet.sourcegen.module import format_module, unshadowed
from linnet.syntax.parser import parse_text

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

F32 = TensorProto.FLOAT


def _layer_norm_model(
    shape: list[int | str],
    axis: int,
    bias: bool,
    stats: bool = False,
    eps: float = 1e-5,
    dtype: type = np.float32,
) -> tuple[onnx.ModelProto, tuple[int, ...]]:
    """`y = LayerNormalization(x, ln.weight[, ln.bias])` with `x` of `shape` (strings are
    symbolic extents); the normalised (trailing) extents must be numbers."""
    tail = tuple(int(d) for d in shape[axis:])
    rng = np.random.default_rng(len(shape) * 10 + axis + 3 * bias)
    inits = [numpy_helper.from_array(rng.uniform(0.5, 1.5, tail).astype(dtype), "ln.weight")]
    inputs = ["x", "ln.weight"]
    if bias:
        inits.append(numpy_helper.from_array(rng.normal(size=tail).astype(dtype), "ln.bias"))
        inputs.append("ln.bias")
    outputs = ["y", "mean", "inv_std"] if stats else ["y"]
    node = helper.make_node("LayerNormalization", inputs, outputs, axis=axis, epsilon=eps)
    stat_shape = [*shape[:axis], *([1] * len(tail))] if axis >= 0 else None
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph(
        [node],
        "ln",
        [helper.make_tensor_value_info("x", elem, shape)],
        [helper.make_tensor_value_info("y", elem, shape)]
        + [helper.make_tensor_value_info(n, F32, stat_shape) for n in outputs[1:]],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model, tail


CASES = {
    "2d-last-axis-bias": (["batch", 8], -1, True),
    "3d-last-axis-no-bias": (["batch", "seq", 8], -1, False),
    "3d-two-axes-bias": (["batch", 4, 8], 1, True),
    "4d-three-axes-no-bias": (["batch", 3, 4, 5], 1, False),
    "4d-last-axis-bias": (["batch", "seq", 2, 6], 3, True),
}


def _concrete(shape: list[int | str], batch: int) -> tuple[int, ...]:
    return tuple(batch if d == "batch" else 3 if d == "seq" else int(d) for d in shape)


@pytest.mark.parametrize("case", sorted(CASES))
def test_layer_normalization_imports_to_the_std_call(case: str, tmp_path: Path) -> None:
    shape, axis, bias = CASES[case]
    model, tail = _layer_norm_model(shape, axis, bias)
    result = imported(model, tmp_path)
    assert "use std.nn.norm::{layer_norm}" in result.source
    assert result.source.count("layer_norm(") == 1
    assert re.search(r"pub entry forward<batch: Dim", result.source), result.source
    if len(tail) > 1:
        assert f"{int(np.prod(tail))}]" in result.source  # trailing axes flattened
    rng = np.random.default_rng(11)
    for batch in (1, 5):  # one source for every batch size
        x = (rng.normal(size=_concrete(shape, batch)) * 2 + 0.5).astype(np.float32)
        (expected,) = run_onnxruntime(model, {"x": x})
        (actual,) = run_imported(result, [x])
        close(actual, expected)


def test_f16_layer_normalization_imports_to_the_std_call(tmp_path: Path) -> None:
    """f16 in, statistics in f32 (the default `stash_type`), as `layer_norm` computes them."""
    model, _ = _layer_norm_model(["batch", "seq", 8], -1, True, dtype=np.float16)
    result = imported(model, tmp_path)
    assert "layer_norm(x, ln.weight, some(ln.bias), 1e-5)" in result.source
    x = np.random.default_rng(13).normal(size=(2, 3, 8)).astype(np.float16)
    (expected,) = run_onnxruntime(model, {"x": x})
    (actual,) = run_imported(result, [x])
    assert actual.dtype == np.float16
    close(actual, expected, rtol=2e-3, atol=2e-3)


def test_layer_normalization_statistics_outputs_are_spelled_out(tmp_path: Path) -> None:
    model, _ = _layer_norm_model(["batch", "seq", 6], 2, True, stats=True, eps=1e-3)
    result = imported(model, tmp_path)
    assert "layer_norm(" not in result.source  # the std op has no Mean / InvStdDev
    x = np.random.default_rng(12).normal(size=(2, 3, 6)).astype(np.float32)
    expected = run_onnxruntime(model, {"x": x})
    actual = run_imported(result, [x])
    assert len(actual) == 3
    for a, e in zip(actual, expected, strict=True):
        close(a, e)


# ---------------------------------------------------------------- shadowed std names


def _clashing_model(entry: str | None = None) -> onnx.ModelProto:
    """Two layers, each `x = Softmax(x @ layers.<i>.softmax.weight)`, then a root
    `relu` member and a Relu; a graph output named `sigmoid` that a Sigmoid reads."""
    rng = np.random.default_rng(21)
    inits = [
        numpy_helper.from_array(rng.normal(size=(6, 6)).astype(np.float32), name)
        for name in ("layers.0.softmax.weight", "layers.1.softmax.weight", "relu.weight")
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "layers.0.softmax.weight"], ["m0"]),
        helper.make_node("Softmax", ["m0"], ["s0"], axis=-1),
        helper.make_node("MatMul", ["s0", "layers.1.softmax.weight"], ["m1"]),
        helper.make_node("Softmax", ["m1"], ["s1"], axis=-1),
        helper.make_node("MatMul", ["s1", "relu.weight"], ["m2"]),
        helper.make_node("Relu", ["m2"], ["r"]),
        helper.make_node("Mul", ["r", "r"], ["sigmoid"]),
        helper.make_node("Sigmoid", ["sigmoid"], ["gate"]),
    ]
    graph = helper.make_graph(
        nodes,
        "clash",
        [helper.make_tensor_value_info("x", F32, ["batch", 6])],
        [
            helper.make_tensor_value_info("sigmoid", F32, ["batch", 6]),
            helper.make_tensor_value_info("gate", F32, ["batch", 6]),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    if entry is not None:
        helper.set_model_props(model, {"linnet.entry": entry})
    return model


@pytest.mark.parametrize("entry", [None, "matmul"])
def test_std_calls_are_not_shadowed_by_members_locals_or_methods(
    entry: str | None, tmp_path: Path
) -> None:
    model = _clashing_model(entry)
    result = imported(model, tmp_path)  # checked before anything is written
    source = result.source
    # The members keep their names; the std functions are imported under aliases.
    assert re.search(r"\bsub softmax: \w+\n", source) and re.search(r"\bsub relu: \w+\n", source)
    assert "sigmoid as sigmoid_fn" in source and "let gate = sigmoid_fn(sigmoid)" in source
    assert "softmax as softmax_fn" in source and re.search(r"= softmax_fn\(", source)
    assert "relu as relu_fn" in source and re.search(r"= relu_fn\(", source)
    assert not re.search(r"= (softmax|relu|sigmoid)\(", source)
    if entry is not None:  # the root's `matmul` method would take the layers' calls
        assert "pub entry matmul<" in source and "matmul as matmul_fn" in source
        assert not re.search(r"= matmul\(", source)
    x = np.random.default_rng(22).normal(size=(3, 6)).astype(np.float32)
    expected = run_onnxruntime(model, {"x": x})
    actual = run_imported(result, [x])
    for a, e in zip(actual, expected, strict=True):
        close(a, e)


def _errors(text: str) -> list[str]:
    program = check_source(text, "m.linnet", STDLIB)
    return [d.code for d in program.diagnostics if d.is_error]


def test_unshadowed_renames_an_import_a_declaration_would_shadow() -> None:
    """`unshadowed` on a file (the last guard of module assembly): imports named like a
    member, a parameter, a local and a method are aliased, with every bare call (in
    generated code, always a call of the import: methods are called through members)."""
    text = """module m

use std.nn.activations::{relu, sigmoid, silu}
use std.nn.norm::{layer_norm}
use std.nn.softmax::{softmax}

pub block Inner {
    param weight: Tensor[4; f32]
    param softmax: Tensor[4; f32]
}

pub block Model {
    sub relu: Inner

    pub fn sigmoid(layer_norm: Tensor[4; f32]) -> Tensor[4; f32] {
        let silu_fn = silu(layer_norm)
        return silu_fn * relu(relu.weight)
    }

    pub entry forward(x: Tensor[4; f32]) -> Tensor[4; f32] {
        let silu = sigmoid(x)
        return softmax(silu + relu.softmax)
    }
}
"""
    parsed, problems = parse_text(text, "m.linnet")
    assert parsed is not None and not problems
    assert "E2106" in _errors(text)  # `relu` is a member, `silu` a local: not callable
    fixed = format_module(unshadowed(parsed))
    assert _errors(fixed) == [], fixed
    assert "relu as relu_fn" in fixed and "relu_fn(relu.weight)" in fixed
    assert "silu as silu_fn_2" in fixed and "let silu_fn = silu_fn_2(layer_norm)" in fixed
    assert "layer_norm as layer_norm_fn" in fixed  # a parameter's name
    assert "sigmoid as sigmoid_fn" in fixed and "let silu = sigmoid_fn(x)" in fixed
    # A member of a block without bodies shadows nothing: `softmax` keeps its name.
    assert "use std.nn.softmax::{softmax}" in fixed and "return softmax(silu" in fixed
    again, _ = parse_text(fixed, "m.linnet")
    assert again is not None and format_module(unshadowed(again)) == fixed
