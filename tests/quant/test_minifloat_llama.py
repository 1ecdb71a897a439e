"""FP8 and MXFP4 quantisation (`quantize_checkpoint(scheme=...)`) and the Llama example on it.

FP8: our bytes are PyTorch's own `float8_e4m3fn` cast of `w / scale` (the
row scale `max|w| / 448`). MXFP4: our blocks are the OCP Microscaling
quantiser, written here again in f64 from the spec (shared exponent
`floor(log2 max|w|) - 2`, nearest E2M1 value with ties to the even code,
saturating at 6), and they decode, by transformers' gpt-oss dequantiser, to
the weights the reference model holds. The quantised Llama source through
`linnet.torch`, `load_model` and `linnet.jax` (the std body) must give the float example's logits on
those dequantised weights, within f32 rounding, while quantisation moves
them visibly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import linnet.onnx
import linnet.torch
from linnet.onnx.export.fused_quant import FOLD_MARK
from linnet.quant import quantize_checkpoint
from linnet.quant.minifloat import fp8_rows, mxfp4_blocks
from linnet.weights import read_safetensors, save_safetensors

Array = np.ndarray[Any, Any]
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6])


def torch_fp8(weight: Array) -> tuple[Array, Array]:
    """PyTorch's E4M3FN rows: bytes and f64 dequantised weights."""
    w = torch.from_numpy(weight.astype(np.float32))
    scale = w.abs().amax(dim=1, keepdim=True) / 448
    q = (w / scale).to(torch.float8_e4m3fn)
    return q.view(torch.uint8).numpy(), (q.double() * scale.double()).numpy()


def ocp_mxfp4(weight: Array) -> tuple[Array, Array]:
    """E2M1 codes `[Out, In]` and E8M0 bytes `[Out, In/32]` by the OCP MX v1.0 algorithm, f64."""
    w = weight.astype(np.float64).reshape(weight.shape[0], -1, 32)
    amax = np.abs(w).max(axis=-1)
    exponent = np.floor(np.log2(np.where(amax > 0, amax, 1.0))).astype(np.int64) - 2
    x = np.minimum(np.abs(w) / np.ldexp(1.0, exponent)[..., None], 6.0)
    distance = np.abs(x[..., None] - E2M1)  # [.., 32, 8]
    best = distance.min(axis=-1, keepdims=True)
    ties = distance == best
    # among equally near values the even code (mantissa bit 0) wins
    index = np.where(ties.sum(-1) > 1, np.argmax(ties & (np.arange(8) % 2 == 0), -1),
                     np.argmin(distance, -1))  # fmt: skip
    codes = index + 8 * (w < 0)  # signed zeros keep their sign, as a float cast does
    return codes.reshape(weight.shape).astype(np.uint8), (exponent + 127).astype(np.uint8)


def test_fp8_rows_are_torch_float8_e4m3fn() -> None:
    weight = np.random.default_rng(40).normal(0, 0.05, (12, 96)).astype(np.float32)
    q, scale = fp8_rows(weight)
    expected, _ = torch_fp8(weight)
    np.testing.assert_array_equal(q, expected)
    assert scale.shape == (12, 1)


def test_mxfp4_blocks_are_the_ocp_quantiser() -> None:
    rng = np.random.default_rng(41)
    weight = rng.normal(0, 0.05, (10, 128)).astype(np.float32)
    weight[0, :32] = np.arange(32) * 0.25  # exact halves: ties between E2M1 values
    weight[1, 32:64] = 0.0  # an all-zero block
    blocks, scales = mxfp4_blocks(weight)
    codes, exponents = ocp_mxfp4(weight)
    unpacked = np.stack([blocks & 15, blocks >> 4], axis=-1).reshape(10, 128)
    np.testing.assert_array_equal(unpacked, codes)
    zero_block = weight.reshape(10, 4, 32)[1, 1]
    assert not zero_block.any()
    exponents[1, 1] = scales[1, 1]  # log2(0) has no exponent: any scale encodes the zeros
    np.testing.assert_array_equal(scales, exponents)


def transformers_mxfp4(blocks: Array, scales: Array) -> Array:
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    out = convert_moe_packed_tensors(
        torch.from_numpy(np.array(blocks[None])),
        torch.from_numpy(np.array(scales[None])),
        dtype=torch.float32,
    )
    result: Array = out[0].T.double().numpy()
    return result


@pytest.mark.parametrize("scheme", ["fp8", "mxfp4"])
def test_quantised_llama_matches_the_dequantised_weights(tmp_path: Path, scheme: str) -> None:
    from quant.test_quantised_llama import GENERICS, SIZES, _float_logits, _module

    floats = _module("make_weights").make_weights(GENERICS, seed=42)
    save_safetensors(floats, tmp_path / "float.safetensors")
    patterns = _module("quantised").PATTERNS
    quantize_checkpoint(
        tmp_path / "float.safetensors", tmp_path / "q.safetensors", patterns=patterns,
        scheme=scheme,
    )  # fmt: skip
    stored = read_safetensors(tmp_path / "q.safetensors")
    reference = dict(floats)
    for path, weight in floats.items():
        if not (path.endswith("_proj.weight") or path == "lm_head.weight"):
            continue
        prefix = path.removesuffix(".weight")
        if scheme == "fp8":
            q, dequantised = torch_fp8(weight)
            np.testing.assert_array_equal(stored[path], q)
        else:
            dequantised = transformers_mxfp4(stored[path], stored[f"{prefix}.scale"])
        reference[path] = dequantised.astype(np.float32)
    source = tmp_path / "q.linnet"
    source.write_text(_module("quantised").quantised_source(4, 32, scheme=scheme))
    tokens = np.random.default_rng(43).integers(0, SIZES["Vocab"], (1, 9)).astype(np.int32)
    expected = _float_logits(reference, tokens)
    exact = _float_logits(floats, tokens)
    module = linnet.torch.load(source, generics=GENERICS, weights=tmp_path / "q.safetensors")
    with torch.no_grad():
        got_torch = module(torch.from_numpy(tokens)).numpy()
    onnx_model = linnet.onnx.load_model(
        source, generics=GENERICS, weights=tmp_path / "q.safetensors"
    )
    got_onnx = np.asarray(onnx_model.run_entry("forward", [tokens]))
    # decoded by lookup tables behind a fold mark: constants ONNX Runtime folds at load
    (session,) = onnx_model.sessions
    assert "lm_head.weight" in session.constant_paths
    marks = [n for n in session.proto.graph.node if n.name.startswith(FOLD_MARK)]
    assert len(marks) == 7 * GENERICS["Layers"] + 1
    pytest.importorskip("jax")
    import linnet.jax as linnet_jax

    jax_forward = linnet_jax.load_source(
        source, generics=GENERICS, weights=tmp_path / "q.safetensors"
    )
    got_jax = np.asarray(jax_forward(tokens))
    quantisation_error = np.abs(exact - expected).max()
    assert quantisation_error > 1e-3
    for got in (got_torch, got_onnx, got_jax):
        assert np.abs(got - expected).max() <= 2e-4 * max(1.0, np.abs(expected).max())
        assert np.abs(got - expected).max() < quantisation_error / 20


def test_cli_quantize_scheme(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from linnet.cli import main

    weight = np.random.default_rng(44).normal(0, 0.1, (8, 64)).astype(np.float32)
    save_safetensors({"p.weight": weight}, tmp_path / "f.safetensors")
    out = tmp_path / "q.safetensors"
    args = ["quantize", str(tmp_path / "f.safetensors"), "-o", str(out), "--pattern", "p.weight"]
    assert main([*args, "--scheme", "mxfp4"]) == 0
    assert "quantised 1 weights to mxfp4" in capsys.readouterr().out
    stored = read_safetensors(out)
    assert stored["p.weight"].shape == (8, 2, 16) and stored["p.scale"].dtype == np.uint8
    assert main([*args, "--scheme", "fp4"]) == 1
    assert "unknown scheme `fp4`" in capsys.readouterr().err
