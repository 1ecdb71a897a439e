"""Write small random BERT weights under transformers' checkpoint names.

    python examples/bert/make_weights.py [--out out/bert] [--seed 0]

writes `model.safetensors` (the tensors of `BertModel.save_pretrained`, pooler
included, with the checkpoint's `attention.self.*` names that `bindings.json` maps),
`config.json` (a `BertConfig`: erf GELU, LayerNorm eps 1e-12, so
`BertModel.from_pretrained(out)` loads the same model) and `generics.json` (the
Linnet generics of `Bert`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from linnet.weights import save_safetensors

# The Linnet generics of `Bert` (src/lib.linnet); `T` keeps its default f32.
GENERICS: dict[str, int] = {
    "Vocab": 100,
    "H": 32,
    "NumHeads": 4,
    "Inner": 64,
    "Layers": 2,
    "MaxPos": 24,
    "TypeVocab": 2,
}


def hf_config(generics: dict[str, int]) -> dict[str, object]:
    """The matching `BertConfig` fields (no dropout)."""
    return {
        "model_type": "bert",
        "architectures": ["BertModel"],
        "vocab_size": generics["Vocab"],
        "hidden_size": generics["H"],
        "num_attention_heads": generics["NumHeads"],
        "intermediate_size": generics["Inner"],
        "num_hidden_layers": generics["Layers"],
        "max_position_embeddings": generics["MaxPos"],
        "type_vocab_size": generics["TypeVocab"],
        "hidden_act": "gelu",
        "layer_norm_eps": 1e-12,
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
        "pad_token_id": 0,
    }


def make_weights(generics: dict[str, int] = GENERICS, seed: int = 0) -> dict[str, np.ndarray]:
    """Random f32 weights by checkpoint name, for the given generics."""
    rng = np.random.default_rng(seed)
    h, inner = generics["H"], generics["Inner"]

    def normal(*shape: int, scale: float, base: float = 0.0) -> np.ndarray:
        return (base + scale * rng.standard_normal(shape)).astype(np.float32)

    def linear(name: str, n_in: int, n_out: int) -> dict[str, np.ndarray]:
        return {
            f"{name}.weight": normal(n_out, n_in, scale=1.5 * n_in**-0.5),
            f"{name}.bias": normal(n_out, scale=0.1),
        }

    def norm(name: str) -> dict[str, np.ndarray]:
        return {
            f"{name}.weight": normal(h, scale=0.1, base=1.0),
            f"{name}.bias": normal(h, scale=0.1),
        }

    out = {
        "embeddings.word_embeddings.weight": normal(generics["Vocab"], h, scale=0.5),
        "embeddings.position_embeddings.weight": normal(generics["MaxPos"], h, scale=0.5),
        "embeddings.token_type_embeddings.weight": normal(generics["TypeVocab"], h, scale=0.5),
    }
    out |= norm("embeddings.LayerNorm")
    for i in range(generics["Layers"]):
        p = f"encoder.layer.{i}"
        for part in ("query", "key", "value"):
            out |= linear(f"{p}.attention.self.{part}", h, h)
        out |= linear(f"{p}.attention.output.dense", h, h)
        out |= norm(f"{p}.attention.output.LayerNorm")
        out |= linear(f"{p}.intermediate.dense", h, inner)
        out |= linear(f"{p}.output.dense", inner, h)
        out |= norm(f"{p}.output.LayerNorm")
    out |= linear("pooler.dense", h, h)
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
    parser.add_argument("--out", type=Path, default=Path("out/bert"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    path = write(args.out, seed=args.seed)
    print(f"wrote {path} and config.json, generics.json next to it")


if __name__ == "__main__":
    main()
