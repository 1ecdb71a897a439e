"""Training Linnet models on JAX: SFT with optax, checkpoints, LoRA, FSDP over a mesh.

The JAX counterpart of `linnet.train` (PyTorch), on the same data
(`linnet.train.Example`, `pack`, `Batch`), the same training entries of the
model (`loss_packed`, `log_probs_packed`) and the same numbers:

- `train(model, batches, *, optimizer, ...) -> (params, History)`: one jitted
  step per optimizer step, accumulation as a `lax.scan`, global-norm
  clipping, f32 master weights, `trainable` path globs, FSDP over a
  `jax.sharding.Mesh`, rematerialisation (per layer: `remat=True` or
  `LayerRemat`), checkpoints with exact resume
  (`linnet.jax.train.loop`);
- `save_checkpoint`, `load_checkpoint`, `save_weights`
  (`linnet.jax.train.checkpoint`);
- LoRA: `add_lora`, `merge_lora`, `save_lora`, `load_lora` -> `LoraModel`,
  PyTorch's initialisation for a seed and the PEFT files
  (`linnet.jax.train.lora`).

The model is `linnet.jax.load_source(...)` (any entry of a decoder whose
block declares the `*_packed` entries; the Llama and GPT-2 examples do) or
`linnet.jax.load_model(...)`. The data side is `linnet.train`'s, which
needs torch installed (the `torch` extra).
"""

from __future__ import annotations

from linnet.jax.remat import LayerRemat
from linnet.jax.train.checkpoint import load_checkpoint, save_checkpoint, save_weights
from linnet.jax.train.loop import train
from linnet.jax.train.lora import LoraModel, add_lora, load_lora, merge_lora, save_lora
from linnet.train.data import Batch, Example, pack
from linnet.train.loop import History, Step

__all__ = [
    "Batch",
    "Example",
    "History",
    "LayerRemat",
    "LoraModel",
    "Step",
    "add_lora",
    "load_checkpoint",
    "load_lora",
    "merge_lora",
    "pack",
    "save_checkpoint",
    "save_lora",
    "save_weights",
    "train",
]
