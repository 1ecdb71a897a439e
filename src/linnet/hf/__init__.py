"""Hugging Face folders out of Linnet: `export` writes config.json, generation_config.json,
the weights under transformers' names and the tokenizer files (`linnet.hf.folder`), for
the families of `linnet.hf.families` (llama, qwen2, qwen3, phi3, gpt2).
"""

from __future__ import annotations

from linnet.hf.folder import Exported, export

__all__ = ["Exported", "export"]
