"""The quantised Llama example through `linnet.torch` on `linnet.native`'s kernels.

int8 rows and int4 groups of 128 (the decode path's shapes: one row per step,
the prompt's rows at prefill), against the same module with the kernels off
(`NATIVE_ROWS = 0`: every weight dequantised once, then `F.linear`, which
tests/quant/test_quantised_llama.py holds to the defining libraries' numbers):
the same greedy tokens, logits within f32 rounding, and no dequantised copy
made on the kernels' path. With `int8_activations=True` the kernels round the
activations as ONNX Runtime's `MatMulNBits` does at `accuracy_level=4`
(`load_model(int8_activations=True)`): the same tokens and logits as there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import llama_example
import numpy as np
import pytest
import torch

import linnet.torch
from linnet import native
from linnet.quant import quantize_checkpoint
from linnet.torch import natives_quant
from linnet.weights import read_safetensors

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "01-llama"
SIZES = {"Vocab": 96, "H": 128, "Heads": 4, "KvHeads": 2, "Inner": 256, "Layers": 2}
GENERICS = {**SIZES, "Batch": 1, "MaxSeq": 16, "T": "f32"}


def _quantised(floats: Any, bits: int, folder: Path) -> tuple[Path, Any]:
    """The example's source and checkpoint with every linear int8 or int4 (groups of 128)."""
    quantised = llama_example.script("quantised")
    target = folder / "q.safetensors"
    quantize_checkpoint(floats, target, patterns=quantised.PATTERNS, bits=bits, group=128)
    source = folder / "q.linnet"
    source.write_text(quantised.quantised_source(bits, 128))
    return source, read_safetensors(target)


def _decode(module: Any, prompt: torch.Tensor, steps: int) -> tuple[list[int], torch.Tensor]:
    """Greedy tokens and every step's logits (prefill's last row first)."""
    module.reset_state()
    with torch.no_grad():
        logits = module.run_entry("prefill", [prompt, 0])[:, -1]
        kept, seen = [], [logits]
        for position in range(prompt.shape[1], prompt.shape[1] + steps):
            token = logits.argmax(-1).to(torch.int32)
            kept.append(int(token[0]))
            logits = module.run_entry("decode", [token, position])
            seen.append(logits.reshape(1, -1))
    return kept, torch.cat(seen)


def _decode_onnx(model: Any, prompt: torch.Tensor, steps: int) -> tuple[list[int], torch.Tensor]:
    """`_decode` on a `linnet.onnx` model."""
    model.reset_state()
    logits = np.asarray(model.run_entry("prefill", [prompt.numpy(), 0]))[:, -1]
    kept, seen = [], [logits]
    for position in range(prompt.shape[1], prompt.shape[1] + steps):
        token = logits.argmax(-1).astype(np.int32)
        kept.append(int(token[0]))
        logits = np.asarray(model.run_entry("decode", [token, position]))
        seen.append(logits.reshape(1, -1))
    return kept, torch.from_numpy(np.concatenate(seen))


@pytest.mark.parametrize("bits", [8, 4])
def test_quantised_llama_decodes_the_same_on_the_kernels(
    tmp_path: Path, bits: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    if native.kernels() is None:
        pytest.skip(f"no native kernels: {native.status().reason}")
    floats = llama_example.script("make_weights").make_weights(GENERICS, seed=7)
    source, weights = _quantised(floats, bits, tmp_path)
    module = linnet.torch.load(source, generics=GENERICS, weights=weights)
    prompt = torch.from_numpy(np.random.default_rng(8).integers(0, 96, (1, 5)).astype(np.int32))

    natives_quant._cache.clear()
    tokens, logits = _decode(module, prompt, 8)
    assert not natives_quant._cache  # the kernels read the packed bytes: no f32 copy
    monkeypatch.setattr(natives_quant, "NATIVE_ROWS", 0)
    plain_tokens, plain_logits = _decode(module, prompt, 8)
    assert natives_quant._cache  # the dequantised path ran

    assert tokens == plain_tokens
    torch.testing.assert_close(logits, plain_logits, rtol=1e-4, atol=1e-4 * logits.abs().max())


@pytest.mark.parametrize("bits", [8, 4])
def test_int8_activations_decode_as_onnx_runtime_does(tmp_path: Path, bits: int) -> None:
    """`linnet.torch.load(..., int8_activations=True)` and `linnet.onnx.load_model(...,
    int8_activations=True)` (MatMulNBits at accuracy_level 4) run one function: the same
    greedy tokens and logits within f32 rounding of each other, while both are visibly
    off the exact function."""
    if native.kernels() is None:
        pytest.skip(f"no native kernels: {native.status().reason}")
    onnx = pytest.importorskip("linnet.onnx")
    floats = llama_example.script("make_weights").make_weights(GENERICS, seed=7)
    source, weights = _quantised(floats, bits, tmp_path)
    prompt = torch.from_numpy(np.random.default_rng(8).integers(0, 96, (1, 5)).astype(np.int32))
    _, exact = _decode(linnet.torch.load(source, generics=GENERICS, weights=weights), prompt, 8)
    fast = linnet.torch.load(source, generics=GENERICS, weights=weights, int8_activations=True)
    natives_quant._cache.clear()
    tokens, logits = _decode(fast, prompt, 8)
    assert not natives_quant._cache  # the kernels ran, on the packed bytes
    # generated code joins q/k/v and gate/up into one call, which keeps int8 activations
    compiled = linnet.torch.load(
        source, generics=GENERICS, weights=weights, int8_activations=True, compile=True
    )
    assert torch.equal(_decode(compiled, prompt, 8)[1], logits)
    peer = onnx.load_model(source, generics=GENERICS, weights=weights, int8_activations=True)
    peer_tokens, peer_logits = _decode_onnx(peer, prompt, 8)

    scale = float(exact.abs().max())
    assert tokens == peer_tokens
    # the same integers; only f32's combination order differs (measured 8e-7 and 1.4e-6 of
    # logits up to 3.4): a single activation rounded the other way would move a logit by
    # about 1e-3 (a step of a block's int8 scale times a weight)
    assert float((logits - peer_logits).abs().max()) <= 2e-5 * scale
    # half an int8 step per activation (at most 1/254 of its block's largest) compounds over
    # two layers: measured 1.4% of the largest logit off the exact function
    assert 1e-3 * scale < float((logits - exact).abs().max()) < 5e-2 * scale


@pytest.mark.parametrize("bits", [32, 8, 4])
def test_generated_decode_joins_linears_on_one_input_bitwise(
    tmp_path: Path, bits: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`compile=True`: the code generator joins q/k/v and gate/up (`codegen.join_calls`) into
    one native call each; the logits of prefill and decode are bitwise those of the code
    that makes each call alone."""
    from linnet.torch import codegen

    if native.kernels() is None:
        pytest.skip(f"no native kernels: {native.status().reason}")
    floats = llama_example.script("make_weights").make_weights(GENERICS, seed=7)
    source, weights = EXAMPLE / "src" / "lib.linnet", floats
    if bits != 32:
        source, weights = _quantised(floats, bits, tmp_path)
    prompt = torch.from_numpy(np.random.default_rng(8).integers(0, 96, (1, 5)).astype(np.int32))
    runs = []
    for joined in (True, False):
        monkeypatch.setattr(codegen, "JOIN_CALLS", joined)
        module = linnet.torch.load(source, generics=GENERICS, weights=weights, compile=True)
        runs.append(_decode(module, prompt, 6))
        text = module.generated_source("decode")
        assert (text.count("_many(") == 2 * SIZES["Layers"]) == joined, text
    assert runs[0][0] == runs[1][0]
    assert torch.equal(runs[0][1], runs[1][1])
