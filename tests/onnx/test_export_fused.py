"""Kernels substituted for standard-library calls, each checked against the unfused graph.

`fused=True` maps `std.nn.norm::rms_norm` to ONNX Runtime's
`SimplifiedLayerNormalization`; by default (`natives=True`) softmax, sigmoid
and silu become the standard `Softmax`/`Sigmoid` operators. Each substituted
graph must agree with the graph that inlines the canonical body (both run in
ONNX Runtime) and with the NumPy reference; where a kernel does not apply
(a runtime `eps`) the body is inlined.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from backend_cases import assert_close
from export_support import checked, run_onnx, validate

from linnet.ir.core import Function, TensorType, numpy_dtype
from linnet.ir.interp import run_function
from linnet.ir.lower import lower_function
from linnet.ir.passes import optimize
from linnet.onnx import ExportedModel, export_ir, export_model

OPS = """
module t

use std.nn.norm::{rms_norm}
use std.nn.softmax::{softmax}
use std.nn.activations::{sigmoid, silu}

pub entry norm<B: Dim, H: Dim, T: Float>(x: Tensor[B, H; T], w: Tensor[H; T]) -> Tensor[B, H; T] {
    return rms_norm(x, w, 1e-6)
}

pub entry norm_eps<H: Dim>(x: Tensor[2, H; f32], w: Tensor[H; f32], eps: f32) -> Tensor[2, H; f32] {
    return rms_norm(x, w, eps)
}

pub entry activations<H: Dim, T: Float>(x: Tensor[3, H; T]) -> (Tensor[3, H; T], Tensor[3, H; T], Tensor[3, H; T]) {
    return (softmax(x), sigmoid(x), silu(x))
}
"""


def _function(name: str, types: list[TensorType], generics: dict[str, object]) -> Function:
    program = checked(OPS)
    return optimize(lower_function(program, program.graph.roots[0], name, types, generics=generics))


def _op_types(exported: ExportedModel) -> set[str]:
    return {n.op_type for n in exported.model.graph.node}


def _compare(
    fn: Function, inputs: list[np.ndarray], dtype: str, **options: bool
) -> tuple[ExportedModel, ExportedModel]:
    """Run the substituted and the inlined export; both must match each other and the reference."""
    expected, _ = run_function(fn, {}, {}, inputs)
    substituted = export_ir(fn, **options)
    plain = export_ir(fn, natives=False, fused=False)
    validate(substituted, contrib=bool(options.get("fused")))
    got, _ = run_onnx(substituted, inputs)
    baseline, _ = run_onnx(plain, inputs)
    for a, b, e in zip(got, baseline, expected, strict=True):
        assert_close(a, b, dtype, scale=2.0)
        assert_close(a, e, dtype, scale=2.0)
    return substituted, plain


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_rms_norm_as_simplified_layer_normalization(dtype: str) -> None:
    rng = np.random.default_rng(5)
    x = rng.normal(size=(4, 16)).astype(numpy_dtype(dtype))
    w = rng.uniform(0.5, 1.5, 16).astype(numpy_dtype(dtype))
    types = [TensorType(x.shape, dtype), TensorType(w.shape, dtype)]
    fn = _function("norm", types, {"T": dtype})
    fused, plain = _compare(fn, [x, w], dtype, fused=True)
    assert "SimplifiedLayerNormalization" in _op_types(fused)
    assert "SimplifiedLayerNormalization" not in _op_types(plain)
    node = next(n for n in fused.model.graph.node if n.op_type == "SimplifiedLayerNormalization")
    eps = next(a.f for a in node.attribute if a.name == "epsilon")
    assert eps == pytest.approx(1e-6)


def test_rms_norm_with_a_runtime_eps_is_inlined() -> None:
    x = np.ones((2, 8), np.float32)
    w = np.ones(8, np.float32)
    types = [TensorType(x.shape, "f32"), TensorType(w.shape, "f32"), TensorType((), "f32")]
    fn = _function("norm_eps", types, {})
    exported = export_ir(fn, fused=True)
    assert "SimplifiedLayerNormalization" not in _op_types(exported)
    (y,), _ = run_onnx(exported, [x, w, np.array(1e-5, np.float32)])
    np.testing.assert_allclose(y, np.ones((2, 8)), rtol=1e-5)


def test_fused_kernels_are_off_by_default() -> None:
    fn = _function("norm", [TensorType((2, 4), "f32"), TensorType((4,), "f32")], {"T": "f32"})
    assert "SimplifiedLayerNormalization" not in _op_types(export_ir(fn))


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_softmax_sigmoid_silu_as_standard_operators(dtype: str) -> None:
    x = (np.random.default_rng(6).normal(size=(3, 7)) * 4).astype(numpy_dtype(dtype))
    fn = _function("activations", [TensorType(x.shape, dtype)], {"T": dtype})
    native, plain = _compare(fn, [x], dtype)
    assert {"Softmax", "Sigmoid"} <= _op_types(native)
    assert not {"Softmax", "Sigmoid"} & _op_types(plain)


def test_fused_llama_matches_the_plain_export() -> None:
    source = Path(__file__).resolve().parents[2] / "examples" / "01-llama" / "src" / "lib.linnet"
    generics = {"Vocab": 11, "H": 8, "Heads": 2, "KvHeads": 1, "Inner": 16, "Layers": 2,
                "Batch": 1, "MaxSeq": 8, "B": 2, "S": 5}  # fmt: skip
    std = Path(__file__).resolve().parents[2] / "stdlib"
    fused = export_model(source, generics=generics, std_root=std, fused=True)
    plain = export_model(source, generics=generics, std_root=std, natives=False)
    assert "SimplifiedLayerNormalization" in _op_types(fused)
    rng = np.random.default_rng(2)
    weights = {
        io.path or "": rng.normal(0, 0.3, io.type.shape).astype(np.float32)
        for io in fused.inputs
        if io.role == "param"
    }
    tokens = rng.integers(0, 11, (2, 5)).astype(np.int32)
    (a,), _ = run_onnx(fused, [tokens], weights)
    (b,), _ = run_onnx(plain, [tokens], weights)
    (e,), _ = run_function(plain.function, weights, {}, [tokens])
    assert_close(a, b, "f32", scale=4.0)
    assert_close(a, e, "f32", scale=4.0)
