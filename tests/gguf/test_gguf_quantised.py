"""`linnet.gguf.export` of the quantised Llama example: the integers go into GGUF blocks.

The float checkpoint is quantised by `quantize_checkpoint` (int4 groups of 32
with f16 scales, stored as the model's f32, and int8 rows with f32 scales) and, for the symmetric case, given zero points
of 8 (GPTQ / AWQ symmetric checkpoints import so). The file is read back
with the `gguf` package (llama.cpp's own Python reader and dequantisers):
Q4_0 blocks must dequantise to our weights bit for bit, Q8_0 blocks to our
integers times the f16-rounded row scale, Q4_1 blocks within the f16
rounding of `-zero * scale`. transformers' GGUF loader must then run the file
as linnet.torch runs the quantised source (exactly the same weights for
Q4_0), and a group that no block type holds is dequantised and written at
the outtype.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

import family_support as fs  # noqa: E402

import linnet.gguf  # noqa: E402
import linnet.torch as linnet_torch  # noqa: E402
from linnet.quant import quantize_checkpoint  # noqa: E402
from linnet.weights import read_safetensors, save_safetensors  # noqa: E402

Array = np.ndarray[Any, Any]
GENERICS = {**fs.generics("llama"), "H": 64, "Inner": 96, "HeadDim": 16}
HEADS = {"q_proj": 4, "k_proj": 2}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tokenizer")
    fs.save_tokenizer(folder)
    return folder


def quantised(
    tmp_path: Path, bits: int, group: int, symmetric: bool = False, scheme: str = "int"
) -> Path:
    """The quantised source (written beside) and its weights file."""
    from quant.test_quantised_llama import _module

    floats = _module("make_weights").make_weights(GENERICS, seed=11)
    save_safetensors(floats, tmp_path / "float.safetensors")
    path = tmp_path / "q.safetensors"
    patterns = _module("quantised").PATTERNS
    quantize_checkpoint(
        tmp_path / "float.safetensors", path, patterns=patterns, bits=bits, group=group,
        dtype="f16" if bits == 4 and scheme == "int" else None, scheme=scheme,
    )  # fmt: skip
    arrays = read_safetensors(path)
    for name, value in arrays.items():  # f16 values held as the model's T (f32), exactly
        if bits == 4 and scheme == "int" and name.endswith(".scale"):
            arrays[name] = value.astype(np.float32)
        if symmetric and name.endswith(".zero"):
            arrays[name] = np.full_like(value, 8)
    save_safetensors(arrays, path)
    source = _module("quantised").quantised_source(bits, group, scheme=scheme)
    (tmp_path / "q.linnet").write_text(source)
    return path


def ours(arrays: dict[str, Array], prefix: str) -> Array:
    """The std layouts' weight in f64, written from stdlib.md (not from the exporter)."""
    scale = arrays[f"{prefix}.scale"].astype(np.float64)
    weight = arrays[f"{prefix}.weight"]
    if weight.dtype == np.int8:
        return weight.astype(np.float64) * scale[:, None]
    q = np.stack([weight & 15, weight >> 4], axis=-1).reshape(*weight.shape[:2], -1)
    zero = arrays[f"{prefix}.zero"].astype(np.float64)[..., None]
    return ((q - zero) * scale[..., None]).reshape(weight.shape[0], -1)


def in_gguf_order(prefix: str, rows: Array) -> Array:
    kind = prefix.rsplit(".", 1)[-1]
    return linnet.gguf.permute_rows(rows, HEADS[kind]) if kind in HEADS else rows


def export_and_read(tmp_path: Path, weights: Path, tokenizer: Path, outtype: str) -> Any:
    path = tmp_path / "llama.gguf"
    linnet.gguf.export(
        tmp_path / "q.linnet", path, generics=GENERICS, weights=weights, outtype=outtype,
        tokenizer=tokenizer,
    )  # fmt: skip
    return path, {t.name: t for t in gguf.GGUFReader(path).tensors}


def quantised_logits(tmp_path: Path, weights: Path, tokens: Array) -> Array:
    module = linnet_torch.load(tmp_path / "q.linnet", generics=GENERICS, weights=weights)
    return fs.linnet_logits(module, tokens)


@pytest.mark.parametrize(
    ("bits", "symmetric", "kind"), [(4, True, "Q4_0"), (4, False, "Q4_1"), (8, False, "Q8_0")]
)
def test_quantised_linears_are_gguf_blocks_of_their_integers(
    tmp_path: Path, tokenizer: Path, bits: int, symmetric: bool, kind: str
) -> None:
    weights = quantised(tmp_path, bits, 32, symmetric)
    arrays = read_safetensors(weights)
    path, stored = export_and_read(tmp_path, weights, tokenizer, "f32")
    assert stored["token_embd.weight"].tensor_type.name == "F32"  # the outtype: floats only
    assert stored["output_norm.weight"].tensor_type.name == "F32"
    for prefix, name in [
        ("model.layers.0.self_attn.q_proj", "blk.0.attn_q.weight"),
        ("model.layers.1.self_attn.k_proj", "blk.1.attn_k.weight"),
        ("model.layers.1.mlp.down_proj", "blk.1.ffn_down.weight"),
        ("lm_head", "output.weight"),
    ]:
        tensor = stored[name]
        assert tensor.tensor_type.name == kind
        got = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float64)
        expected = in_gguf_order(prefix, ours(arrays, prefix))
        assert got.shape == expected.shape
        if kind == "Q4_0":  # f16 scales, zero points 8: the very same weights
            np.testing.assert_array_equal(got, expected)
        elif kind == "Q8_0":  # the same integers; the row scale rounded to f16
            q = in_gguf_order(prefix, arrays[f"{prefix}.weight"].astype(np.float64))
            half = in_gguf_order(prefix, arrays[f"{prefix}.scale"].astype(np.float16))
            np.testing.assert_array_equal(got, q * half.astype(np.float64)[:, None])
            assert np.abs(got - expected).max() <= 2**-11 * np.abs(expected).max()
        else:  # d exact (f16 scales); m = f16(-zero * scale)
            zero = in_gguf_order(prefix, arrays[f"{prefix}.zero"].astype(np.float64))
            scale = in_gguf_order(prefix, arrays[f"{prefix}.scale"].astype(np.float64))
            bound = np.repeat(2**-11 * zero * scale, 32, axis=1)
            assert (np.abs(got - expected) <= bound).all()
            assert not np.array_equal(got, expected)  # Q4_1's m really is rounded
    tokens = fs.tokens_of((1, 8), seed=12)
    reference = transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, attn_implementation="eager"
    ).eval()
    gap = np.abs(fs.hf_logits(reference, tokens) - quantised_logits(tmp_path, weights, tokens))
    assert gap.max() <= (1e-4 if kind == "Q4_0" else 2e-2)


def test_other_groups_are_dequantised_then_written_at_the_outtype(
    tmp_path: Path, tokenizer: Path
) -> None:
    weights = quantised(tmp_path, 4, 16)
    arrays = read_safetensors(weights)
    _, stored = export_and_read(tmp_path, weights, tokenizer, "q8_0")
    tensor = stored["blk.0.ffn_up.weight"]
    assert tensor.tensor_type.name == "Q8_0"
    assert "blk.0.ffn_up.scale" not in stored and "blk.0.ffn_up.zero" not in stored
    dequantised = ours(arrays, "model.layers.0.mlp.up_proj").astype(np.float32)
    qtype = tensor.tensor_type
    expected = gguf.quants.dequantize(gguf.quants.quantize(dequantised, qtype), qtype)
    np.testing.assert_array_equal(gguf.quants.dequantize(tensor.data, qtype), expected)


def test_mxfp4_blocks_are_copied_and_fp8_dequantised(tmp_path: Path, tokenizer: Path) -> None:
    from linnet.quant.minifloat import decode_fp8, mxfp4_values

    weights = quantised(tmp_path, 4, 32, scheme="mxfp4")
    arrays = read_safetensors(weights)
    path, stored = export_and_read(tmp_path, weights, tokenizer, "f32")
    for prefix, name in [("model.layers.0.self_attn.q_proj", "blk.0.attn_q.weight"),
                         ("model.layers.1.mlp.down_proj", "blk.1.ffn_down.weight")]:  # fmt: skip
        tensor = stored[name]
        assert tensor.tensor_type.name == "MXFP4"
        got = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        weight, scale = arrays[f"{prefix}.weight"], arrays[f"{prefix}.scale"]
        expected = mxfp4_values(in_gguf_order(prefix, weight), in_gguf_order(prefix, scale))
        np.testing.assert_array_equal(got, expected)
    tokens = fs.tokens_of((1, 8), seed=13)
    reference = transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, attn_implementation="eager"
    ).eval()
    gap = np.abs(fs.hf_logits(reference, tokens) - quantised_logits(tmp_path, weights, tokens))
    assert gap.max() <= 1e-4

    fp8 = tmp_path / "fp8"
    fp8.mkdir()
    weights = quantised(fp8, 4, 32, scheme="fp8")
    arrays = read_safetensors(weights)
    _, stored = export_and_read(fp8, weights, tokenizer, "f16")
    tensor = stored["blk.0.ffn_gate.weight"]
    assert tensor.tensor_type.name == "F16"  # no E4M3 in GGUF: the exact weight at the outtype
    prefix = "model.layers.0.mlp.gate_proj"
    exact = decode_fp8(arrays[f"{prefix}.weight"]) * arrays[f"{prefix}.scale"]
    got = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
    np.testing.assert_array_equal(got, exact.astype(np.float16).astype(np.float32))
