"""The tiny model the node pack tests run, its weights on disk, and a card for it.

`Tiny<C, K>` has what the nodes must handle: `forward` (a `[B, C, H, W]` image
to `[B, K]` logits, a 1x1 channel mix summed over the pixels, plus a bias),
`invert` (an image-to-image entry), `add` (a stateful running sum), and
`repeat<N>` (an entry generic no input determines, and two results).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from linnet.card import write_card
from linnet.weights import save_safetensors

PACK = Path(__file__).resolve().parents[2] / "integrations" / "comfyui" / "linnet_comfyui"

SOURCE = """module tiny_vision

pub block Tiny<C: Dim, K: Dim> {
    param mix: Tensor[K, C; f32]
    param bias: Tensor[K; f32]
    state total: Tensor[K; f32]

    pub entry forward<B: Dim, H: Dim, W: Dim>(image: Tensor[B, C, H, W; f32]) -> Tensor[B, K; f32] {
        let logits[b, k] = sum[c, h, w] image[b, c, h, w] * mix[k, c]
        return logits + bias
    }

    pub entry invert<B: Dim, H: Dim, W: Dim>(image: Tensor[B, C, H, W; f32]) -> Tensor[B, C, H, W; f32] {
        return 1.0 - image
    }

    pub entry add(x: Tensor[K; f32]) -> Tensor[K; f32] {
        total = total + x
        return total
    }

    pub entry repeat<N: Dim>(x: Tensor[K; f32]) -> (Tensor[N, K; f32], Tensor[K; f32]) {
        let y[n, k] = fill<f32>([N, K], 1.0)[n, k] * x[k]
        return (y, x * 2.0)
    }
}
"""

GENERICS = {"C": 3, "K": 5}
Array = np.ndarray[Any, Any]


def weights(seed: int = 0) -> dict[str, Array]:
    rng = np.random.default_rng(seed)
    k, c = GENERICS["K"], GENERICS["C"]
    return {
        "mix": rng.standard_normal((k, c)).astype(np.float32),
        "bias": rng.standard_normal(k).astype(np.float32),
    }


def model_folder(folder: Path) -> dict[str, str]:
    """The source, weights and a card under `folder`; the paths as the widgets take them."""
    folder.mkdir(parents=True, exist_ok=True)
    source = folder / "tiny.linnet"
    source.write_text(SOURCE, encoding="utf-8")
    save_safetensors(weights(), folder / "tiny.safetensors")
    card = folder / "card"
    card.mkdir(exist_ok=True)
    fields = {"name": "tiny-vision", "source": "../tiny.linnet", "root": "Tiny",
              "entry": "forward", "weights": "../tiny.safetensors"}  # fmt: skip
    write_card(card, fields, GENERICS)
    return {
        "source": str(source),
        "weights": str(folder / "tiny.safetensors"),
        "generics": json.dumps(GENERICS),
        "card": str(card),
    }


def reference_logits(image_bhwc: Array, w: dict[str, Array]) -> Array:
    """`forward` in NumPy f64 from a ComfyUI image `[B, H, W, C]`."""
    x = np.asarray(image_bhwc, np.float64)
    mixed = np.einsum("bhwc,kc->bk", x, w["mix"].astype(np.float64))
    out: Array = mixed + w["bias"].astype(np.float64)
    return out
