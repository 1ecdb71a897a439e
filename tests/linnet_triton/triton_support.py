"""Models for the Triton tests: the tiny transformer and a small Llama, with in-process references.

The tiny transformer (examples/03-tiny-transformer, `forward<B, S>`) is the
stateless model; the Llama example at the sizes of `decoder_cases` is the
decoder. `greedy` is the reference a served decoder must match: the example's
own `prefill` and `decode` entries on `linnet.torch` with one cache row, run in
this process (the served model uses `prefill_slots` / `decode_rows` instead).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np
from decoder_cases import LLAMA_SIZES

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "examples" / "03-tiny-transformer"
TINY_SOURCE = TINY / "src"
LLAMA_SOURCE = ROOT / "examples" / "01-llama" / "src" / "lib.linnet"
LLAMA_GENERICS: dict[str, object] = {**LLAMA_SIZES, "Batch": 2, "MaxSeq": 24}

Array = np.ndarray[Any, Any]


def _weights_script(example: Path) -> Any:
    """An example's `make_weights.py`, under a module name of its own."""
    name = f"make_weights_{example.name.replace('-', '_')}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, example / "make_weights.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def tiny_generics() -> dict[str, object]:
    return dict(_weights_script(TINY).GENERICS)


def tiny_weights(folder: Path) -> Path:
    out: Path = _weights_script(TINY).make_weights(folder / "tiny.safetensors", seed=3)
    return out


def llama_weights() -> dict[str, Array]:
    script = _weights_script(LLAMA_SOURCE.parents[1])
    weights: dict[str, Array] = script.make_weights(LLAMA_GENERICS, seed=7)
    return weights


def tiny_reference(weights: Path, ids: Array) -> Array:
    """linnet.torch's logits of the tiny transformer."""
    import linnet.torch

    module = linnet.torch.load(TINY_SOURCE, generics=tiny_generics(), weights=weights)
    out: Array = module.run_entry("forward", [ids]).detach().numpy()
    return out


class GreedyReference:
    """In-process greedy decoding with the example's `prefill` and `decode` (one cache row)."""

    def __init__(self, weights: dict[str, Array]) -> None:
        import linnet.torch

        generics = {**LLAMA_GENERICS, "Batch": 1}
        self.module = linnet.torch.load(LLAMA_SOURCE, generics=generics, weights=weights)

    def tokens(self, prompt: list[int], new: int) -> list[int]:
        import torch

        self.module.reset_state()
        ids = torch.tensor([prompt], dtype=torch.int32)
        with torch.no_grad():
            logits = self.module.run_entry("prefill", [ids, 0])
            out = [int(logits[0, -1].argmax())]
            for position in range(len(prompt), len(prompt) + new - 1):
                step = torch.tensor([out[-1]], dtype=torch.int32)
                logits = self.module.run_entry("decode", [step, position])
                out.append(int(logits[0].argmax()))
        return out
