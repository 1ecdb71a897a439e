"""Training Linnet models on PyTorch: packed data, the training loop, schedules, checkpoints.

- `Example(tokens, learned=None)`, `Example.prompted(prompt, completion)`: token
  sequences and which of their tokens are learned (`linnet.train.data`).
- `pack(examples, tokens, *, max_length=None, together=1)`: `Batch`es of exactly
  `tokens` positions, examples packed end to end and never split, padding weighted 0.
- `train(model, batches, *, optimizer, ...) -> History`: the loop, with gradient
  accumulation, global-norm clipping, a schedule, data parallelism under
  `torchrun` and checkpoints with exact resume (`linnet.train.loop`).
- `cosine_schedule(optimizer, warmup, total, floor=0.1)`.
- `packed_loss`, `packed_log_probs`, `packed_hidden`: a model's training entries
  (`loss_packed`, `log_probs_packed`, `hidden_packed`) on one batch.
- LoRA adapters (`add_lora`, `merge_lora`, `linnet.train.lora`), their PEFT files
  (`save_lora`, `load_lora`, `linnet.train.peft`), preference training
  (`linnet.train.dpo`) and GRPO sampling with `linnet.serve.Engine`
  (`linnet.train.grpo`).

The model is a `linnet.torch.load(..., trainable=True)` module of a decoder whose
root declares the `*_packed` entries (the Llama and GPT-2 examples do).

>>> batches = list(pack([Example([1, 2, 3]), Example.prompted([4], [5, 6])], 8))
>>> b = batches[0]
>>> b.tokens.tolist(), b.segments.tolist()
([1, 2, 3, 4, 5, 6, 0, 0], [0, 0, 0, 1, 1, 1, 2, 2])
>>> b.targets.tolist(), b.weights.tolist()
([2, 3, 0, 5, 6, 0, 0, 0], [1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0])
"""

from __future__ import annotations

from linnet.train.data import Batch, Example, pack
from linnet.train.entries import packed_hidden, packed_log_probs, packed_loss
from linnet.train.loop import History, Step, train
from linnet.train.lora import add_lora, lora_adapters, merge_lora, remove_lora
from linnet.train.peft import load_lora, save_lora
from linnet.train.schedule import CosineSchedule, cosine_schedule

__all__ = [
    "Batch",
    "CosineSchedule",
    "Example",
    "History",
    "Step",
    "add_lora",
    "cosine_schedule",
    "load_lora",
    "lora_adapters",
    "merge_lora",
    "pack",
    "packed_hidden",
    "packed_log_probs",
    "packed_loss",
    "remove_lora",
    "save_lora",
    "train",
]
