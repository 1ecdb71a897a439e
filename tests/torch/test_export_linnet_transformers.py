"""transformers models (tiny random configs) through `linnet.torch.export_linnet`.

Each import runs on `linnet.torch` bound to the weights written under the
model's own state_dict paths and must equal the model in eager PyTorch (1e-5);
the Llama import must read like examples/01-llama (std calls, one layer
method in a `static for`, block types named after the module classes).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers
from test_export_linnet import check, imported

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "onnx"))
from torch_exports import randomize


class Output(torch.nn.Module):
    """`model(*inputs).<key>`, holding the model's children so paths read `model.layers.0...`."""

    def __init__(self, model: Any, key: str) -> None:
        super().__init__()
        for name, child in model.named_children():
            self.add_module(name, child)
        self._call = model.__call__
        self._key = key

    def forward(self, *inputs: torch.Tensor) -> Any:
        return getattr(self._call(*inputs), self._key)


def _decoder(model_cls: Any, config_cls: Any, **extra: Any) -> Any:
    config = config_cls(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, vocab_size=60,
                        max_position_embeddings=64, use_cache=False, **extra)  # fmt: skip
    return model_cls(config)


def _build(kind: str) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    gen = torch.Generator().manual_seed(7)
    ids = torch.randint(0, 50, (2, 7), generator=gen)
    pixels = torch.randn(2, 3, 16, 16, generator=gen)
    if kind == "llama":
        return Output(_decoder(transformers.LlamaForCausalLM, transformers.LlamaConfig),
                      "logits"), (ids,)  # fmt: skip
    if kind == "qwen2":
        return Output(_decoder(transformers.Qwen2ForCausalLM, transformers.Qwen2Config),
                      "logits"), (ids,)  # fmt: skip
    if kind == "qwen3":
        return Output(_decoder(transformers.Qwen3ForCausalLM, transformers.Qwen3Config,
                               head_dim=8), "logits"), (ids,)  # fmt: skip
    if kind == "phi3":
        return Output(_decoder(transformers.Phi3ForCausalLM, transformers.Phi3Config,
                               pad_token_id=0), "logits"), (ids,)  # fmt: skip
    if kind == "gpt2":
        config = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=32, vocab_size=50,
                                         n_positions=16, use_cache=False)  # fmt: skip
        return Output(transformers.GPT2LMHeadModel(config), "logits"), (ids,)
    if kind == "bert":
        bert = transformers.BertConfig(vocab_size=60, hidden_size=32, num_hidden_layers=2,
                                       num_attention_heads=4, intermediate_size=64,
                                       max_position_embeddings=32)  # fmt: skip
        mask = torch.ones(2, 7, dtype=torch.int64)
        mask[1, 5:] = 0  # right padding: masked keys in the second row
        return Output(transformers.BertModel(bert), "last_hidden_state"), (ids, mask)
    if kind == "vit":
        vit = transformers.ViTConfig(image_size=16, patch_size=4, num_channels=3, hidden_size=32,
                                     num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64)  # fmt: skip
        return Output(transformers.ViTModel(vit), "last_hidden_state"), (pixels,)
    if kind == "clip_text":
        text = transformers.CLIPTextConfig(vocab_size=60, hidden_size=32, intermediate_size=64,
                                           num_hidden_layers=2, num_attention_heads=4,
                                           max_position_embeddings=16)  # fmt: skip
        return Output(transformers.CLIPTextModel(text), "last_hidden_state"), (ids,)
    assert kind == "clip_vision"
    vision = transformers.CLIPVisionConfig(image_size=16, patch_size=4, hidden_size=32,
                                           intermediate_size=64, num_hidden_layers=2,
                                           num_attention_heads=4)  # fmt: skip
    return Output(transformers.CLIPVisionModel(vision), "last_hidden_state"), (pixels,)


KINDS = ["llama", "qwen2", "qwen3", "phi3", "gpt2", "bert", "vit", "clip_text", "clip_vision"]


@pytest.mark.parametrize("kind", KINDS)
def test_transformers_model_imports_and_matches(kind: str, tmp_path: Path) -> None:
    module, inputs = _build(kind)
    module.eval()
    randomize(module, 5)
    result = imported(module, inputs, tmp_path)
    check(module, inputs, result)
    assert "static for" in result.source, result.source


def test_llama_reads_like_the_example(tmp_path: Path) -> None:
    module, inputs = _build("llama")
    module.eval()
    randomize(module, 3)
    result = imported(module, inputs, tmp_path)
    text = result.source
    for call in ("rms_norm(", "silu(", "grouped_attention(", "causal_mask<7, 7>()", "rope("):
        assert call in text, call
    assert "sub layers: [LlamaDecoderLayer; 2]" in text and "pub block LlamaModel" in text
    assert text.count("static for") == 1 and "fn forward(" in text
    assert "sub q_proj: StdLinear<32, 32, f32>" in text
    check(module, inputs, result)


DECODERS = ["llama", "qwen2", "qwen3", "phi3", "gpt2"]
SIZES = [(1, 1), (3, 5), (2, 11)]  # (batch, sequence) pairs, none the example's (2, 7)


@pytest.mark.parametrize(
    "kind", [k if k in ("llama", "gpt2") else pytest.param(k, marks=pytest.mark.slow)
             for k in DECODERS],
)  # fmt: skip
def test_decoder_imports_with_dynamic_batch_and_sequence(kind: str, tmp_path: Path) -> None:
    """`dynamic=[{0: "B", 1: "S"}]`: the arange/compare causal mask over a symbolic
    length is proven causal, rope tables are computed from `iota(S)` once for every
    layer, and the import equals the module at three (B, S) it was not captured at."""
    module, inputs = _build(kind)
    module.eval()
    randomize(module, 5)
    result = imported(module, inputs, tmp_path, dynamic=[{0: "B", 1: "S"}])
    text = result.source
    assert "entry forward<B: Dim, S: Dim>(inputs_0: Tensor[B, S; i64])" in text, text
    assert "causal_mask<S, S>()" in text and text.count("static for") == 1, text
    gen = torch.Generator().manual_seed(11)
    for batch, length in SIZES:
        ids = torch.randint(0, 50, (batch, length), generator=gen)
        check(module, (ids,), result)


def test_dynamic_sequence_only_keeps_the_batch(tmp_path: Path) -> None:
    module, inputs = _build("qwen3")
    module.eval()
    randomize(module, 2)
    result = imported(module, inputs, tmp_path, dynamic=[{1: "S"}])
    assert "entry forward<S: Dim>(inputs_0: Tensor[2, S; i64])" in result.source
    assert "fn forward<S: Dim>(" in result.source  # the layer method is generic too
    for length in (1, 4, 13):
        ids = torch.randint(0, 50, (2, length), generator=torch.Generator().manual_seed(length))
        check(module, (ids,), result)
