"""Tiny transformers models exported to ONNX by `torch.onnx.export`, for the importer's tests.

Each export costs seconds (the dynamo exporter most), so the tests share them:
tests/onnx/conftest.py exports each model that several tests read once per
session. The builders seed every parameter (`randomize`) so that exporters
cannot merge equal weights and the imported model is checked against
PyTorch on values that differ (`import_support.check_logits`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import transformers


@dataclass(frozen=True)
class TorchExport:
    """An ONNX file written by torch and the eval-mode model it came from (the reference)."""

    path: Path
    model: Any


def randomize(model: torch.nn.Module, seed: int) -> None:
    """Distinct random values for every parameter, so exporters cannot merge equal ones."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.2)


def tiny_gpt2(seed: int = 1, attention: str | None = None) -> Any:
    """GPT-2 with 2 layers of width 32; `attention="eager"` for the spelled-out softmax path."""
    config = transformers.GPT2Config(
        n_layer=2, n_head=4, n_embd=32, vocab_size=50, n_positions=16, use_cache=False
    )
    if attention is not None:
        config._attn_implementation = attention
    model = transformers.GPT2LMHeadModel(config).eval()
    randomize(model, seed)
    return model


def tiny_llama(seed: int = 2) -> Any:
    """Llama with 2 layers of width 32 and grouped attention (4 heads, 2 key/value heads)."""
    config = transformers.LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=60,
        max_position_embeddings=64,
        use_cache=False,
    )
    model = transformers.LlamaForCausalLM(config).eval()
    randomize(model, seed)
    return model


class _LogitsWithMask(torch.nn.Module):
    """`model(input_ids, attention_mask)` to logits, holding the model's own children
    (not the model itself), so the exported names read `transformer.h.0...`."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        for name, child in model.named_children():
            self.add_module(name, child)
        self._call = model.__call__

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Any:
        return self._call(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)[0]


def export_torchscript(model: Any, path: Path, opset: int) -> Path:
    """The TorchScript exporter (`dynamo=False`): inputs `input_ids` and `attention_mask`,
    output `logits`, batch and sequence dynamic."""
    example = torch.randint(0, model.config.vocab_size, (2, 7), generator=torch.Generator())
    axes = {0: "batch", 1: "seq"}
    torch.onnx.export(
        _LogitsWithMask(model).eval(),
        (example, torch.ones(2, 7, dtype=torch.int64)),
        str(path),
        input_names=["input_ids", "attention_mask"],
        output_names=["logits"],
        dynamic_axes={"input_ids": axes, "attention_mask": axes, "logits": axes},
        dynamo=False,
        opset_version=opset,
    )
    return path


def export_dynamo(model: Any, path: Path, max_seq: int) -> Path:
    """The dynamo exporter (`dynamo=True`): input `input_ids` (batch, and 2..`max_seq`
    tokens, dynamic), output `logits`."""
    example = torch.randint(0, model.config.vocab_size, (2, 7), generator=torch.Generator())
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq", min=2, max=max_seq)
    torch.onnx.export(
        model,
        (example,),
        str(path),
        input_names=["input_ids"],
        output_names=["logits"],
        dynamic_shapes={"input_ids": {0: batch, 1: seq}},
        dynamo=True,
    )
    return path
