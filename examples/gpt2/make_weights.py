"""Write small random GPT-2 weights under transformers' checkpoint names.

    python examples/gpt2/make_weights.py [--out out/gpt2] [--seed 0]

writes `model.safetensors` (the tensors `GPT2LMHeadModel.save_pretrained` writes:
`transformer.*`, Conv1D weights `[In, Out]`, no `lm_head.weight` since the head is
tied) and `config.json` (a `GPT2Config`, so `GPT2LMHeadModel.from_pretrained(out)`
loads the same model) and `generics.json` (the Linnet generics of `Gpt2`).

The weights are seeded and scaled so that every layer changes the hidden state a
lot: with the tied head, weak layers make a random GPT-2 repeat its last token,
and greedy decoding would then test little. The config has no `eos_token_id`, so
`generate` always produces the number of tokens asked for.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from linnet.weights import save_safetensors

# The Linnet generics of `Gpt2` (src/lib.linnet); `Inner` and `MaxSeq` keep their
# defaults `4 * H` and `Positions`.
GENERICS: dict[str, int] = {
    "Batch": 1,
    "Vocab": 64,
    "Positions": 32,
    "H": 32,
    "Heads": 4,
    "Layers": 2,
}


def hf_config(generics: dict[str, int]) -> dict[str, object]:
    """The matching `GPT2Config` fields (no dropout, tanh GELU, LayerNorm eps 1e-5)."""
    return {
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        "vocab_size": generics["Vocab"],
        "n_positions": generics["Positions"],
        "n_embd": generics["H"],
        "n_layer": generics["Layers"],
        "n_head": generics["Heads"],
        "n_inner": generics.get("Inner"),
        "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "bos_token_id": None,
        "eos_token_id": None,
        "tie_word_embeddings": True,
    }


def make_weights(generics: dict[str, int] = GENERICS, seed: int = 0) -> dict[str, np.ndarray]:
    """Random f32 weights by checkpoint name, for the given generics."""
    rng = np.random.default_rng(seed)
    vocab, positions, h = generics["Vocab"], generics["Positions"], generics["H"]
    inner = generics.get("Inner", 4 * h)

    def normal(*shape: int, scale: float, base: float = 0.0) -> np.ndarray:
        return (base + scale * rng.standard_normal(shape)).astype(np.float32)

    def conv1d(name: str, n_in: int, n_out: int) -> dict[str, np.ndarray]:
        return {
            f"{name}.weight": normal(n_in, n_out, scale=2.0 * n_in**-0.5),
            f"{name}.bias": normal(n_out, scale=0.1),
        }

    def norm(name: str) -> dict[str, np.ndarray]:
        return {
            f"{name}.weight": normal(h, scale=0.1, base=1.0),
            f"{name}.bias": normal(h, scale=0.1),
        }

    out = {
        "transformer.wte.weight": normal(vocab, h, scale=0.5),
        "transformer.wpe.weight": normal(positions, h, scale=0.5),
    }
    for i in range(generics["Layers"]):
        p = f"transformer.h.{i}"
        out |= norm(f"{p}.ln_1")
        out |= conv1d(f"{p}.attn.c_attn", h, 3 * h)
        out |= conv1d(f"{p}.attn.c_proj", h, h)
        out |= norm(f"{p}.ln_2")
        out |= conv1d(f"{p}.mlp.c_fc", h, inner)
        out |= conv1d(f"{p}.mlp.c_proj", inner, h)
    out |= norm("transformer.ln_f")
    return out


def write(out: Path, generics: dict[str, int] = GENERICS, seed: int = 0) -> Path:
    """Write the three files into `out` (created if needed); returns the weights file."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "model.safetensors"
    save_safetensors(make_weights(generics, seed), path, metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(hf_config(generics), indent=2) + "\n")
    (out / "generics.json").write_text(json.dumps(generics, indent=2) + "\n")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/gpt2"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    path = write(args.out, seed=args.seed)
    print(f"wrote {path} and config.json, generics.json next to it")


if __name__ == "__main__":
    main()
