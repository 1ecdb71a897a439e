"""Shared pieces of the `linnet.jax.train` tests: a small Llama on JAX and on PyTorch.

The models are the Llama example (tests/decoder_cases.py sizes, or one
layer for the checks that compare JAX runs with each other, whose cost is
XLA's compile of the training step), loaded by `linnet.jax.load_source` and
`linnet.torch.load(..., trainable=True)` from the same seeded weights; the
data are `linnet.train.pack`ed random examples.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from linnet.train import Batch, Example, pack

ROOT = Path(__file__).resolve().parents[2]
LLAMA = ROOT / "examples" / "01-llama" / "src" / "lib.linnet"
SMALL = {"Vocab": 29, "H": 16, "Heads": 2, "KvHeads": 1, "Inner": 24, "Layers": 1}


def examples(vocab: int, count: int, seed: int, longest: int = 12) -> list[Example]:
    """Random examples of 2..`longest` tokens; every third learns only its completion."""
    rng = np.random.default_rng(seed)
    found = []
    for index in range(count):
        tokens = rng.integers(0, vocab, int(rng.integers(2, longest + 1)))
        if index % 3 == 2:
            cut = int(rng.integers(1, len(tokens)))
            found.append(Example.prompted(tokens[:cut], tokens[cut:]))
        else:
            found.append(Example(tokens))
    return found


def small_examples(count: int = 12, seed: int = 12) -> list[Example]:
    return examples(int(SMALL["Vocab"]), count, seed, longest=8)


def small_batches(count: int = 24, seed: int = 3, tokens: int = 16) -> list[Batch]:
    return list(pack(small_examples(count, seed), tokens))


def small_weights(seed: int = 0) -> dict[str, np.ndarray]:
    from linnet.pipeline import load_model

    rng = np.random.default_rng(seed)
    bound = load_model(LLAMA, generics=small_generics())
    return {
        path: (rng.standard_normal(spec.type.shape) * 0.2).astype(np.float32)
        for path, spec in bound.tensors.items()
        if spec.kind == "param" and not spec.optional
    }


def small_generics(dtype: str = "f32") -> dict[str, object]:
    return {**SMALL, "Batch": 1, "MaxSeq": 16, "T": dtype}


def small_model(
    weights: dict[str, np.ndarray] | None = None, entry: str = "loss_packed", dtype: str = "f32"
) -> Any:
    """The one-layer Llama on JAX (`load_source`), its params in `dtype`."""
    import linnet.jax as lj

    return lj.load_source(
        LLAMA,
        generics=small_generics(dtype),
        weights=weights or small_weights(),
        entry=entry,
        cast_dtype=dtype != "f32",
    )


def torch_model(decoder: Any) -> Any:
    """A `tests/decoder_cases.py` decoder on PyTorch, trainable (`linnet.torch.load`)."""
    import linnet.torch as lt

    return lt.load(
        decoder.source, generics=decoder.generics(1, 16), weights=decoder.weights, trainable=True
    )
