"""`import_quantized` on GPTQ (v1, v2, act-order), AWQ-GEMM and gpt-oss MXFP4 checkpoint folders.

No library that defines these formats installs here without compiling CUDA
(`gptqmodel`, `autoawq`), so the checkpoints are built here from the formats'
definitions: known 4-bit values, zero points, f16 scales and group indices
are packed into `qweight` / `qzeros` as AutoGPTQ and AutoAWQ pack them (GPTQ
along input rows, v1 storing the zero point minus one; AWQ along output
columns in the order `[0, 2, 4, 6, 1, 3, 5, 7]`), next to transformers'
`config.json` with its `quantization_config`. The reference weights are
`(q - zero) * scale` of those known values in NumPy f64. After the import the
std body (`dequantize_int4_groups`, NumPy reference interpreter, columns
moved back by `order`) must give those weights exactly, and the Llama
example with `Int4GroupLinear` projections (`lm_head` left float, as such
checkpoints keep it) the logits of transformers' `LlamaForCausalLM` (eager)
holding the dequantised weights, through `linnet.torch` and `load_model`.
gpt-oss' MXFP4 experts are copied as they are and must dequantise (std body)
to what transformers' own gpt-oss dequantiser gives.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from stdlib.stdlib_support import StdCases

import linnet.onnx
import linnet.torch
from linnet.errors import LinnetError
from linnet.gguf.quantised import dequantized
from linnet.quant import import_quantized
from linnet.weights import read_safetensors, save_safetensors

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

Array = np.ndarray[Any, Any]
SIZES = {"Vocab": 64, "H": 64, "Heads": 4, "KvHeads": 2, "Inner": 96, "Layers": 2}
GROUP = 32
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]

DEQUANTIZE = """module cases

use std.quant::{dequantize_int4_groups}

pub entry groups<Out: Dim, G: Dim, Half: Dim, T: Float>(
    packed: Tensor[Out, G, Half; u8],
    scale: Tensor[Out, G; T],
    zero: Tensor[Out, G; u8],
) -> Tensor[Out, G * (2 * Half); T] {
    return dequantize_int4_groups(packed, scale, zero)
}
"""

MXFP4 = """module cases

use std.quant::{dequantize_mxfp4}

pub entry experts<E: Dim, Out: Dim, G: Dim>(
    blocks: Tensor[E, Out, G, 16; u8],
    scales: Tensor[E, Out, G; u8],
) -> Tensor[E, Out, G * 32; f32] {
    return dequantize_mxfp4<E, Out, G, f32>(blocks, scales)
}
"""


def pack_words(values: Array, axis_order: list[int] | None = None) -> Array:
    """Eight 4-bit values per int32 along the last axis of `values` (`[..., 8W]` -> `[..., W]`):
    value `8c + j` at bits `4j` (GPTQ), or value `8c + order[j]` at bits `4j` (AWQ)."""
    order = axis_order or list(range(8))
    words = np.zeros((*values.shape[:-1], values.shape[-1] // 8), np.uint32)
    for j, k in enumerate(order):
        words |= (values[..., k::8].astype(np.uint32) & 15) << np.uint32(4 * j)
    return words.view(np.int32)


class Linear:
    """Known 4-bit values of one linear `[Out, In]` and the weight they stand for."""

    def __init__(self, rng: np.random.Generator, out: int, width: int, act_order: bool) -> None:
        groups = width // GROUP
        self.q = rng.integers(0, 16, (width, out))  # [In, Out], as both formats hold it
        self.zero = rng.integers(1, 16, (groups, out))  # 1..15: storable in GPTQ v1 too
        self.scales = (np.abs(rng.normal(0.0, 0.02, (groups, out))) + 0.002).astype(np.float16)
        self.g_idx = np.arange(width) // GROUP
        if act_order:
            self.g_idx = np.empty(width, np.int64)
            self.g_idx[rng.permutation(width)] = np.arange(width) // GROUP
        z = self.zero[self.g_idx].astype(np.float64)
        s = self.scales[self.g_idx].astype(np.float64)
        self.weight = ((self.q - z) * s).T  # [Out, In], exact in f32

    def gptq(self, v1: bool) -> dict[str, Array]:
        stored = self.zero - 1 if v1 else self.zero
        return {
            "qweight": pack_words(self.q.T).T.copy(),  # along the inputs: [In/8, Out]
            "qzeros": pack_words(stored),
            "scales": self.scales,
            "g_idx": self.g_idx.astype(np.int32),
        }

    def awq(self) -> dict[str, Array]:
        return {
            "qweight": pack_words(self.q, AWQ_ORDER),  # along the outputs: [In, Out/8]
            "qzeros": pack_words(self.zero, AWQ_ORDER),
            "scales": self.scales,
        }


def quant_config(kind: str) -> dict[str, Any]:
    if kind == "awq":
        return {"quant_method": "awq", "bits": 4, "group_size": GROUP, "version": "gemm",
                "zero_point": True}  # fmt: skip
    return {"quant_method": "gptq", "bits": 4, "group_size": GROUP, "sym": False,
            "desc_act": kind == "gptq-act-order",
            "checkpoint_format": "gptq_v2" if kind == "gptq-v2" else "gptq"}  # fmt: skip


def write_folder(folder: Path, kind: str, seed: int) -> tuple[Any, dict[str, Linear]]:
    """A quantised checkpoint folder of a tiny Llama, and transformers' model holding the
    dequantised weights; returns the model and the linears by prefix."""
    from examples.test_llama import hf_model

    model = hf_model(SIZES, seed=seed)
    rng = np.random.default_rng(seed)
    arrays: dict[str, Array] = {}
    linears: dict[str, Linear] = {}
    state = model.state_dict()
    for name, value in state.items():
        if not name.endswith("_proj.weight"):
            arrays[name] = value.numpy().copy()
            continue
        prefix = name.removesuffix(".weight")
        out, width = value.shape
        linear = Linear(rng, out, width, act_order=kind == "gptq-act-order")
        linears[prefix] = linear
        packed = linear.awq() if kind == "awq" else linear.gptq(v1=kind != "gptq-v2")
        arrays.update({f"{prefix}.{role}": tensor for role, tensor in packed.items()})
        state[name].copy_(torch.from_numpy(linear.weight.astype(np.float32)))
    folder.mkdir()
    save_safetensors(arrays, folder / "model.safetensors")
    config = {**model.config.to_dict(), "quantization_config": quant_config(kind)}
    (folder / "config.json").write_text(json.dumps(config))
    return model, linears


@pytest.mark.parametrize("kind", ["gptq", "gptq-v2", "gptq-act-order", "awq"])
def test_import_gives_the_format_weights_and_transformers_logits(tmp_path: Path, kind: str) -> None:
    from quant.test_quantised_llama import _module

    model, linears = write_folder(tmp_path / "hf", kind, seed=7)
    out = tmp_path / "ours.safetensors"
    done = import_quantized(tmp_path / "hf", out, dtype="f32")
    assert done == sorted(linears)
    ours = read_safetensors(out)
    assert "lm_head.weight" in ours and not any(n.endswith("qweight") for n in ours)
    cases = StdCases(DEQUANTIZE)
    for prefix in ("model.layers.0.self_attn.k_proj", "model.layers.1.mlp.down_proj"):
        inputs = [ours[f"{prefix}.weight"], ours[f"{prefix}.scale"], ours[f"{prefix}.zero"]]
        (got,) = cases.run("groups", inputs)["numpy"]
        order = ours.get(f"{prefix}.order")
        assert (order is not None) == (kind == "gptq-act-order")
        weight = np.empty_like(got)
        weight[:, order if order is not None else slice(None)] = got
        np.testing.assert_array_equal(weight, linears[prefix].weight.astype(np.float32))
        # the GGUF exporter's dequantisation (for groups no block type holds) agrees
        parts = [ours.get(f"{prefix}.{role}") for role in ("weight", "scale", "zero", "order")]
        np.testing.assert_array_equal(dequantized("int4_groups", *parts), weight)

    tokens = np.random.default_rng(8).integers(0, SIZES["Vocab"], (1, 9)).astype(np.int32)
    with torch.no_grad():
        expected = model(torch.from_numpy(tokens.astype(np.int64))).logits.numpy()
    source = tmp_path / "q.linnet"
    source.write_text(_module("quantised").quantised_source(4, GROUP, lm_head=False))
    generics = {**SIZES, "Batch": 1, "MaxSeq": 16, "T": "f32"}
    module = linnet.torch.load(source, generics=generics, weights=out)
    with torch.no_grad():
        got_torch = module(torch.from_numpy(tokens)).numpy()
    np.testing.assert_allclose(got_torch, expected, atol=1e-4)
    if kind in ("gptq-act-order", "awq"):
        onnx_model = linnet.onnx.load_model(source, generics=generics, weights=out)
        got_onnx = np.asarray(onnx_model.run_entry("forward", [tokens]))
        kernels = {n.op_type for s in onnx_model.sessions for n in s.proto.graph.node}
        assert "MatMulNBits" in kernels
        np.testing.assert_allclose(got_onnx, expected, atol=2e-4)


def _folder(tmp_path: Path, quant: dict[str, Any], arrays: dict[str, Array]) -> Path:
    folder = tmp_path / "hf"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"quantization_config": quant}))
    save_safetensors(arrays, folder / "model.safetensors")
    return folder


def test_refusals(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    linear = Linear(rng, 16, 64, act_order=False)
    gptq = {f"p.{k}": v for k, v in linear.gptq(v1=True).items()}
    out = tmp_path / "out.safetensors"

    def refused(quant: dict[str, Any], arrays: dict[str, Array], message: str) -> None:
        folder = _folder(tmp_path, quant, arrays)
        with pytest.raises(LinnetError, match=message):
            import_quantized(folder, out)
        assert not out.exists()

    base = quant_config("gptq")
    refused({**base, "bits": 8}, gptq, "only 4-bit gptq")
    refused({**base, "quant_method": "bitsandbytes"}, gptq, "not one Linnet imports")
    refused({**base, "checkpoint_format": "marlin"}, gptq, "checkpoint_format `marlin`")
    refused({**quant_config("awq"), "version": "gemv"}, gptq, "AWQ version `gemv`")
    refused(base, {"x.weight": np.ones((2, 2), np.float32)}, r"no `\*.qweight` tensors")
    missing = {k: v for k, v in gptq.items() if k != "p.qzeros"}
    refused(base, missing, "has no `p.qzeros`")
    refused(base, {**gptq, "p.qweight": gptq["p.qweight"].astype(np.int64)}, "not I32")
    refused(base, {**gptq, "p.scales": np.ones((3, 16), np.float16)}, "scale groups")
    refused({**base, "group_size": 64}, gptq, "group_size is 64")
    spill = {**gptq, "p.qzeros": pack_words(np.full((2, 16), 15))}
    refused(base, spill, "nibble of 15")
    uneven = {**gptq, "p.g_idx": np.zeros(64, np.int32)}
    refused(base, uneven, "exactly 32 inputs in each")
    folder = tmp_path / "bare"
    folder.mkdir()
    with pytest.raises(LinnetError, match=r"no config\.json"):
        import_quantized(folder, out)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(LinnetError, match="no `quantization_config`"):
        import_quantized(folder, out)


def test_cli_quantize_import(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from linnet.cli import main

    linear = Linear(np.random.default_rng(2), 16, 64, act_order=True)
    gptq = {f"p.{k}": v for k, v in linear.gptq(v1=False).items()}
    folder = _folder(tmp_path, quant_config("gptq-v2"), gptq)
    out = tmp_path / "out.safetensors"
    assert main(["quantize", str(folder), "-o", str(out), "--import", "--scale-dtype", "f32"]) == 0
    assert "imported 1 quantised linears" in capsys.readouterr().out
    ours = read_safetensors(out)
    assert sorted(ours) == ["p.order", "p.scale", "p.weight", "p.zero"]
    assert ours["p.scale"].dtype == np.float32
    assert main(["quantize", str(tmp_path), "-o", str(out), "--import"]) == 1


def test_gpt_oss_mxfp4_experts_import_as_transformers_reads_them(tmp_path: Path) -> None:
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    from linnet.quant.minifloat import mxfp4_blocks

    rng = np.random.default_rng(9)
    experts = rng.normal(0, 0.05, (3, 48, 64)).astype(np.float32)  # [E, Out, In]
    blocks, scales = mxfp4_blocks(experts)
    name = "model.layers.0.mlp.experts.gate_up_proj"
    arrays = {f"{name}_blocks": blocks, f"{name}_scales": scales,
              f"{name}_bias": np.zeros((3, 48), np.float32)}  # fmt: skip
    folder = _folder(tmp_path, {"quant_method": "mxfp4"}, arrays)
    out = tmp_path / "out.safetensors"
    assert import_quantized(folder, out) == [name]
    ours = read_safetensors(out)
    expected = convert_moe_packed_tensors(
        torch.from_numpy(blocks), torch.from_numpy(scales), dtype=torch.float32
    ).transpose(1, 2)  # transformers keeps gpt-oss experts [E, In, Out]
    cases = StdCases(MXFP4)
    (got,) = cases.run("experts", [ours[f"{name}_blocks"], ours[f"{name}_scales"]])["numpy"]
    np.testing.assert_array_equal(got, expected.numpy())
    refused = _folder(tmp_path, {"quant_method": "mxfp4"}, {f"{name}_blocks": blocks})
    with pytest.raises(LinnetError, match=r"has no `.*_scales`"):
        import_quantized(refused, out)
