"""Kernels substituted for standard-library calls, each checked against the unfused graph.

`fused=True` maps `std.nn.norm::rms_norm` to ONNX Runtime's
`SimplifiedLayerNormalization`; by default (`natives=True`) softmax, sigmoid
and silu become the standard `Softmax`/`Sigmoid` operators. Each substituted
graph must agree with the graph that inlines the canonical body (both run in
ONNX Runtime) and with the NumPy reference; where a kernel does not apply
(a runtime `eps`) the body is inlined.
"""

from __future__ import annotations

import math
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
use std.nn.activations::{sigmoid, silu, gelu, gelu_erf}
use std.nn.norm::{layer_norm}
use std.nn.rope::{rope}
use std.nn.attention::{attention, grouped_attention}

pub entry norm<B: Dim, H: Dim, T: Float>(x: Tensor[B, H; T], w: Tensor[H; T]) -> Tensor[B, H; T] {
    return rms_norm(x, w, 1e-6)
}

pub entry norm_eps<H: Dim>(x: Tensor[2, H; f32], w: Tensor[H; f32], eps: f32) -> Tensor[2, H; f32] {
    return rms_norm(x, w, eps)
}

pub entry activations<H: Dim, T: Float>(x: Tensor[3, H; T]) -> (Tensor[3, H; T], Tensor[3, H; T], Tensor[3, H; T]) {
    return (softmax(x), sigmoid(x), silu(x))
}

pub entry gelus<N: Dim, T: Float>(x: Tensor[N; T]) -> (Tensor[N; T], Tensor[N; T]) {
    return (gelu_erf(x), gelu(x))
}

pub entry norms<H: Dim, T: Float>(x: Tensor[3, H; T], w: Tensor[H; T], b: Tensor[H; T]) -> (Tensor[3, H; T], Tensor[3, H; T]) {
    return (layer_norm(x, w, some(b), 1e-6), layer_norm(x, w))
}

pub entry norm_runtime_eps<H: Dim>(x: Tensor[3, H; f32], w: Tensor[H; f32], eps: f32) -> Tensor[3, H; f32] {
    return layer_norm(x, w, none, eps)
}

pub entry rotate<B: Dim, H: Dim, S: Dim, D: Dim, T: Float>(
    x: Tensor[B, H, S, D; T],
    angles: Tensor[S, D / 2; f32],
) -> Tensor[B, H, S, D; T]
where D % 2 == 0 {
    let full = concat(angles, angles, axis = -1)
    return rope(x, cast<T>(cos(full)), cast<T>(sin(full)))
}

pub entry rotate_tables<B: Dim, H: Dim, S: Dim, D: Dim>(
    x: Tensor[B, H, S, D; f32],
    cos_table: Tensor[S, D; f32],
    sin_table: Tensor[S, D; f32],
) -> Tensor[B, H, S, D; f32]
where D % 2 == 0 {
    return rope(x, cos_table, sin_table)
}

pub entry grouped<B: Dim, H: Dim, Hk: Dim, Q: Dim, K: Dim, D: Dim, T: Float>(
    q: Tensor[B, H, Q, D; T],
    k: Tensor[B, Hk, K, D; T],
    v: Tensor[B, Hk, K, D; T],
    mask: Tensor[Q, K; bool],
) -> (Tensor[B, H, Q, D; T], Tensor[B, H, Q, D; T])
where
    Hk > 0,
    H % Hk == 0
{
    return (grouped_attention(q, k, v, 0.35, some(mask)), grouped_attention(q, k, v, 0.35))
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


def _kernels(exported: ExportedModel) -> list[str]:
    return sorted(n.op_type for n in exported.model.graph.node if n.op_type != "Constant")


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_gelu_forms_as_the_standard_gelu_operator(dtype: str) -> None:
    x = np.concatenate([np.linspace(-9, 9, 181), [0.0, -0.5, 0.5]]).astype(numpy_dtype(dtype))
    fn = _function("gelus", [TensorType(x.shape, dtype)], {"T": dtype})
    native, plain = _compare(fn, [x], dtype)
    nodes = [n for n in native.model.graph.node if n.op_type == "Gelu"]
    forms = sorted(next(a.s for a in n.attribute if a.name == "approximate") for n in nodes)
    assert forms == [b"none", b"tanh"]
    assert "Gelu" not in _op_types(plain)


def test_gelu_erf_native_is_within_the_stdlib_bound_of_exact_gelu() -> None:
    """stdlib.md: Phi within 7.5e-8; with f32 rounding, |y - x Phi(x)| <= |x| (7.5e-8 + 2 ulp(1))."""
    torch = pytest.importorskip("torch")
    x = np.linspace(-12, 12, 2401).astype(np.float32)
    exact = np.array([v * 0.5 * math.erfc(-v / math.sqrt(2.0)) for v in x.astype(np.float64)])
    fn = _function("gelus", [TensorType(x.shape, "f32")], {"T": "f32"})
    (native, _), _ = run_onnx(export_ir(fn), [x])
    (body, _), _ = run_onnx(export_ir(fn, natives=False), [x])
    bound = np.abs(x) * (7.5e-8 + 2.4e-7) + 1e-7
    assert np.all(np.abs(native - exact) <= bound)
    assert np.all(np.abs(body - exact) <= bound)
    torch_gelu = torch.nn.functional.gelu(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(native, torch_gelu, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_layer_norm_as_layer_normalization(dtype: str) -> None:
    rng = np.random.default_rng(7)
    x = (rng.normal(size=(3, 16)) * 3 + 1).astype(numpy_dtype(dtype))
    w = rng.uniform(0.5, 1.5, 16).astype(numpy_dtype(dtype))
    b = rng.normal(size=16).astype(numpy_dtype(dtype))
    types = [TensorType(x.shape, dtype), TensorType(w.shape, dtype), TensorType(b.shape, dtype)]
    native, plain = _compare(_function("norms", types, {"T": dtype}), [x, w, b], dtype, fused=True)
    nodes = [n for n in native.model.graph.node if n.op_type == "LayerNormalization"]
    assert sorted(len(n.input) for n in nodes) == [2, 3]
    eps = sorted(next(a.f for a in n.attribute if a.name == "epsilon") for n in nodes)
    assert eps == [pytest.approx(1e-6), pytest.approx(1e-5)]
    assert "LayerNormalization" not in _op_types(plain)


def test_layer_norm_with_a_runtime_eps_is_inlined() -> None:
    x = np.random.default_rng(8).normal(size=(3, 8)).astype(np.float32)
    w = np.ones(8, np.float32)
    types = [TensorType(x.shape, "f32"), TensorType(w.shape, "f32"), TensorType((), "f32")]
    fn = _function("norm_runtime_eps", types, {})
    exported = export_ir(fn, fused=True)
    assert "LayerNormalization" not in _op_types(exported)
    eps = np.array(1e-5, np.float32)
    (y,), _ = run_onnx(exported, [x, w, eps])
    (e,), _ = run_function(fn, {}, {}, [x, w, eps])
    assert_close(y, e, "f32")


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_rope_as_rotary_embedding(dtype: str) -> None:
    rng = np.random.default_rng(9)
    x = rng.normal(size=(2, 3, 5, 8)).astype(numpy_dtype(dtype))
    angles = rng.uniform(-6, 6, (5, 4)).astype(np.float32)
    types = [TensorType(x.shape, dtype), TensorType(angles.shape, "f32")]
    fn = _function("rotate", types, {"T": dtype})
    fused, plain = _compare(fn, [x, angles], dtype, fused=True)
    assert "RotaryEmbedding" in _op_types(fused)
    assert "RotaryEmbedding" not in _op_types(plain)
    if dtype == "f32":
        (a,), _ = run_onnx(fused, [x, angles])
        (b,), _ = run_onnx(plain, [x, angles])
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_rope_with_tables_of_unknown_halves_is_inlined() -> None:
    """Tables given as inputs may have unequal halves, which the contrib kernel cannot express."""
    rng = np.random.default_rng(10)
    x = rng.normal(size=(1, 2, 3, 4)).astype(np.float32)
    cos_table, sin_table = rng.normal(size=(2, 3, 4)).astype(np.float32)
    fn = _function(
        "rotate_tables", [TensorType(x.shape, "f32"), *[TensorType((3, 4), "f32")] * 2], {}
    )
    exported = export_ir(fn, fused=True)
    assert "RotaryEmbedding" not in _op_types(exported)
    (y,), _ = run_onnx(exported, [x, cos_table, sin_table])
    (e,), _ = run_function(fn, {}, {}, [x, cos_table, sin_table])
    assert_close(y, e, "f32")


def _attention_inputs(
    rng: np.random.Generator, shape: tuple[int, int, int, int, int, int], dtype: str
) -> list[np.ndarray]:
    b, h, hk, q, k, d = shape
    mask = np.arange(k)[None, :] <= np.arange(q)[:, None] + (k - q) - 1
    mask[0, :] = False  # a fully masked row averages the values
    arrays = [rng.normal(size=s) for s in [(b, h, q, d), (b, hk, k, d), (b, hk, k, d)]]
    return [a.astype(numpy_dtype(dtype)) for a in arrays] + [mask]


def _grouped(shape: tuple[int, int, int, int, int, int], dtype: str) -> Function:
    b, h, hk, q, k, d = shape
    types = [TensorType(s, dtype) for s in [(b, h, q, d), (b, hk, k, d), (b, hk, k, d)]]
    return _function("grouped", [*types, TensorType((q, k), "bool")], {"T": dtype})


@pytest.mark.parametrize(
    ("shape", "kernel"),
    [
        ((2, 4, 2, 5, 5, 8), "GroupQueryAttention"),  # no past
        ((2, 4, 1, 1, 7, 8), "GroupQueryAttention"),  # decode over a cache
        ((1, 4, 2, 3, 7, 8), "GroupQueryAttention"),  # one row, prefill over a cache
        ((2, 4, 2, 3, 7, 8), "MultiHeadAttention"),  # GQA's CPU kernel: no past with B, Q > 1
        ((2, 4, 2, 3, 7, 4), "MultiHeadAttention"),  # GQA's CPU kernel: head size % 8
        ((1, 2, 2, 6, 3, 8), "MultiHeadAttention"),  # more queries than keys
    ],
)
def test_attention_as_contrib_kernels(
    shape: tuple[int, int, int, int, int, int], kernel: str
) -> None:
    inputs = _attention_inputs(np.random.default_rng(11), shape, "f32")
    fused, plain = _compare(_grouped(shape, "f32"), inputs, "f32", fused=True)
    assert _kernels(fused).count(kernel) == 2
    assert not {"GroupQueryAttention", "MultiHeadAttention"} & _op_types(plain)
    got, _ = run_onnx(fused, inputs)
    base, _ = run_onnx(plain, inputs)
    for a, b in zip(got, base, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_f16_attention_keeps_the_body() -> None:
    """-1e30 is no f16 bias: f16 attention is inlined, and still matches the reference."""
    shape = (1, 2, 1, 3, 4, 8)
    inputs = _attention_inputs(np.random.default_rng(12), shape, "f16")
    fused, _ = _compare(_grouped(shape, "f16"), inputs, "f16", fused=True)
    assert not {"GroupQueryAttention", "MultiHeadAttention"} & _op_types(fused)


def _llama(entry: str, generics: dict[str, object], fused: bool) -> ExportedModel:
    root = Path(__file__).resolve().parents[2]
    source = root / "examples" / "01-llama" / "src" / "lib.linnet"
    return export_model(
        source, generics=generics, entry=entry, std_root=root / "stdlib", fused=fused
    )


@pytest.mark.parametrize(("heads", "batch"), [(4, 1), (4, 2), (8, 1)])
def test_fused_llama_prefill_and_decode_match_the_plain_export(heads: int, batch: int) -> None:
    """Head size 8 (GQA) or 4 (MHA); the cache after prefill + decode agrees at 1e-5 f32."""
    generics = {"Vocab": 11, "H": 32, "Heads": heads, "KvHeads": 2, "Inner": 16, "Layers": 2,
                "Batch": batch, "MaxSeq": 8}  # fmt: skip
    rng = np.random.default_rng(13)
    prefill = [_llama("prefill", {**generics, "S": 3}, fused) for fused in (True, False)]
    decode = [_llama("decode", generics, fused) for fused in (True, False)]
    assert {"RotaryEmbedding", "SimplifiedLayerNormalization"} <= _op_types(prefill[0])
    assert {"GroupQueryAttention", "MultiHeadAttention"} & _op_types(decode[0])
    weights = {
        io.path or "": rng.normal(0, 0.3, io.type.shape).astype(np.float32)
        for io in prefill[0].inputs
        if io.role == "param"
    }
    zeros = {
        io.path or "": np.zeros(io.type.shape, np.float32)
        for io in prefill[0].inputs
        if io.role == "state"
    }
    tokens = rng.integers(0, 11, (batch, 3)).astype(np.int32)
    token = rng.integers(0, 11, (batch,)).astype(np.int32)
    outputs = []
    for pre, dec in zip(prefill, decode, strict=True):
        (a,), state = run_onnx(pre, [tokens, np.int32(1)], weights, zeros)
        (b,), state = run_onnx(dec, [token, np.int32(4)], weights, state)
        outputs.append((a, b, state))
    (fa, fb, fstate), (pa, pb, pstate) = outputs
    for got, want in [(fa, pa), (fb, pb), *[(fstate[k], pstate[k]) for k in pstate]]:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))
    (e,), _ = run_function(prefill[1].function, weights, zeros, [tokens, np.int32(1)])
    assert_close(fa, e, "f32", scale=4.0)
