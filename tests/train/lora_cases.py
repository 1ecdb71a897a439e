"""Shared cases for the LoRA, PEFT and DPO tests: a transformers model and its Linnet twin.

The models are the small Llama and GPT-2 of `family_support` (random seeded
weights, eager attention); the Linnet module loads the transformers
`state_dict` unchanged (the example paths are the transformers names), trainable.
`peft_twin` wraps a copy of the transformers model with PEFT adapters on the
same modules, holding the same `lora_A`/`lora_B` values as the Linnet adapters.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import family_support as fs
import torch

import linnet.torch as lt
from linnet.train.lora import LoraAdapter

# The modules adapted per family (GPT-2's Conv1D stores [in, out]: fan_in_fan_out).
PATTERNS = {
    "llama": ["*.q_proj.weight", "*.v_proj.weight", "*.down_proj.weight"],
    "gpt2": ["*.c_attn.weight", "*.mlp.c_fc.weight"],
}
FAN_IN_FAN_OUT = {"llama": False, "gpt2": True}


def hf_model(family: str, seed: int = 0) -> Any:
    return fs.hf_model(family, seed)


def linnet_twin(hf: Any, family: str, *, compile: bool = True, batch: int = 1) -> lt.LinnetModule:
    """The Linnet example holding `hf`'s weights (GPT-2's tied head is read from wte)."""
    weights = {
        name: value.detach().clone()
        for name, value in hf.state_dict().items()
        if not (family == "gpt2" and name == "lm_head.weight")
    }
    return lt.load(
        fs.source(family),
        generics=fs.generics(family, batch),
        weights=weights,
        trainable=True,
        compile=compile,
    )


def randomise(adapters: Sequence[LoraAdapter], seed: int, scale: float = 0.3) -> None:
    """Nonzero `lora_A` and `lora_B` (a fresh adapter's B is zero, hiding the update)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for adapter in adapters:
            adapter.lora_A.copy_(scale * torch.randn(adapter.lora_A.shape, generator=g))
            adapter.lora_B.copy_(scale * torch.randn(adapter.lora_B.shape, generator=g))


def peft_twin(hf: Any, adapters: Sequence[LoraAdapter], **options: Any) -> Any:
    """A PEFT model over a copy of `hf`, adapting the same modules with the same values."""
    import peft

    first = adapters[0]
    config = peft.LoraConfig(
        r=first.rank,
        lora_alpha=first.alpha,
        target_modules=[a.path.removesuffix(".weight") for a in adapters],
        fan_in_fan_out=first.fan_in_fan_out,
        **options,
    )
    model = peft.get_peft_model(copy.deepcopy(hf), config)
    with torch.no_grad():
        for adapter in adapters:
            layer = peft_layer(model, adapter.path)
            layer.lora_A["default"].weight.copy_(adapter.lora_A)
            layer.lora_B["default"].weight.copy_(adapter.lora_B)
    return model


def peft_layer(model: Any, path: str) -> Any:
    return model.base_model.model.get_submodule(path.removesuffix(".weight"))


def tokens(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    return torch.from_numpy(fs.tokens_of(shape, seed))


def gap(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """max |actual - expected| relative to max |expected|."""
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    scale = float(expected.abs().max()) or 1.0
    return float((actual.detach() - expected.detach()).abs().max()) / scale


def hf_tokenizer(folder: Path) -> Any:
    """The small BPE tokenizer of `family_support`, saved in `folder` and read back by
    transformers offline (what the TRL trainers take as `processing_class`)."""
    import os

    import transformers

    fs.save_tokenizer(folder)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return transformers.AutoTokenizer.from_pretrained(folder)
