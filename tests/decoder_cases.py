"""Tiny decoders with random weights and their transformers twins, for batching tests.

Each a Linnet example bound to the same weights as a transformers model: the
Llama example (grouped-query attention, rotary positions), the GPT-2 example
(learned positions, tied head), and the Qwen2, Qwen3 and Phi-3 examples at
`family_support`'s small configs (q/k/v biases, per-head q/k norms, fused
projections). `Decoder` carries what a test
needs to load either on a backend and to compute reference logits; the models
are small enough (2 layers, H = 32) that lowering and running take well under a
second.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
LLAMA_SOURCE = ROOT / "examples" / "01-llama" / "src" / "lib.linnet"
GPT2_SOURCE = ROOT / "examples" / "gpt2" / "src" / "lib.linnet"

LLAMA_SIZES = {"Vocab": 61, "H": 32, "Heads": 4, "KvHeads": 2, "Inner": 48, "Layers": 2}
GPT2_SIZES = {"Vocab": 64, "Positions": 48, "H": 32, "Heads": 4, "Layers": 2}

Array = np.ndarray[Any, Any]


@dataclass
class Decoder:
    """A Linnet example and a transformers model holding the same weights."""

    name: str
    source: Path
    sizes: dict[str, object]
    weights: dict[str, Array]
    reference: Any

    @property
    def vocab(self) -> int:
        return int(str(self.sizes["Vocab"]))

    def generics(self, batch: int, max_seq: int) -> dict[str, object]:
        return {**self.sizes, "Batch": batch, "MaxSeq": max_seq}

    def logits(self, tokens: Array) -> Array:
        """transformers' logits `[S, Vocab]` of one whole sequence."""
        import torch

        ids = torch.from_numpy(np.asarray(tokens, np.int64)[None])
        with torch.no_grad():
            out: Array = self.reference(ids).logits[0].float().numpy()
        return out

    def generate(self, prompt: Array, new_tokens: int) -> list[int]:
        """transformers' greedy `generate(do_sample=False)` of `new_tokens` tokens."""
        import torch

        ids = torch.from_numpy(np.asarray(prompt, np.int64)[None])
        with torch.no_grad():
            out = self.reference.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                do_sample=False,
                max_new_tokens=new_tokens,
                eos_token_id=None,
                pad_token_id=0,
            )
        return [int(t) for t in out[0, ids.shape[1] :]]


def llama(seed: int = 0, vocab: int | None = None) -> Decoder:
    """The Llama example at `LLAMA_SIZES` (or another `vocab`) against `LlamaForCausalLM`
    (f32, eager)."""
    import torch
    import transformers

    sizes = LLAMA_SIZES if vocab is None else {**LLAMA_SIZES, "Vocab": vocab}
    config = transformers.LlamaConfig(
        vocab_size=sizes["Vocab"],
        hidden_size=sizes["H"],
        num_attention_heads=sizes["Heads"],
        num_key_value_heads=sizes["KvHeads"],
        head_dim=sizes["H"] // sizes["Heads"],
        intermediate_size=sizes["Inner"],
        num_hidden_layers=sizes["Layers"],
        max_position_embeddings=64,
        rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        initializer_range=0.15,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        attn_implementation="eager",
    )
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for name, value in model.named_parameters():
            if name.endswith("norm.weight"):
                value.add_(0.2 * torch.randn_like(value))
    weights = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    return Decoder("llama", LLAMA_SOURCE, {**sizes, "T": "f32"}, weights, model)


def gpt2(seed: int = 0) -> Decoder:
    """The GPT-2 example at `GPT2_SIZES` against `GPT2LMHeadModel` (tied head, eager)."""
    import importlib.util

    import torch
    import transformers

    spec = importlib.util.spec_from_file_location(
        "decoder_cases_gpt2_weights", ROOT / "examples" / "gpt2" / "make_weights.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sizes = dict(GPT2_SIZES)
    weights: dict[str, Array] = module.make_weights(sizes, seed)
    fields = module.hf_config(sizes)
    fields.pop("model_type")
    fields.pop("architectures")
    config = transformers.GPT2Config(**fields, attn_implementation="eager")
    model = transformers.GPT2LMHeadModel(config).eval()
    state = {k: torch.from_numpy(v) for k, v in weights.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all(k == "lm_head.weight" for k in missing), (missing, unexpected)
    model.tie_weights()
    return Decoder("gpt2", GPT2_SOURCE, {**sizes}, weights, model)


def family(name: str, seed: int = 0) -> Decoder:
    """The `name` example (qwen2, qwen3 or phi3) at `family_support`'s config against its
    transformers class (eager; norm weights and biases perturbed): the `state_dict` binds."""
    import family_support

    model = family_support.hf_model(name, seed)
    sizes = {k: v for k, v in family_support.CASES[name][1].items() if k != "MaxSeq"}
    weights = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    return Decoder(name, family_support.source(name), {**sizes, "T": "f32"}, weights, model)


def qwen2(seed: int = 0) -> Decoder:
    return family("qwen2", seed)


def qwen3(seed: int = 0) -> Decoder:
    return family("qwen3", seed)


def phi3(seed: int = 0) -> Decoder:
    return family("phi3", seed)


def prompts(vocab: int, lengths: list[int], seed: int) -> list[Array]:
    """Random prompts of the given lengths (i32)."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, n).astype(np.int32) for n in lengths]
