"""Training Linnet models on the PyTorch backend (`linnet.train`).

Importing it imports torch. LoRA adapters (`add_lora`, `merge_lora`,
`linnet.train.lora`), their PEFT files (`save_lora`, `load_lora`,
`linnet.train.peft`) and preference training (`linnet.train.dpo`).
"""

from __future__ import annotations

from linnet.train.lora import add_lora, lora_adapters, merge_lora, remove_lora
from linnet.train.peft import load_lora, save_lora

__all__ = ["add_lora", "load_lora", "lora_adapters", "merge_lora", "remove_lora", "save_lora"]
