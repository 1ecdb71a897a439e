"""Text in, text out: a continuous-batching engine, tokenizers and an OpenAI-compatible server.

- `Engine(model)` over a `linnet.torch.load` module, a `linnet.onnx.load_model`
  or a `linnet.jax.load_model` model whose root block has the `prefill_slots` and `decode_rows` entries (the
  Llama and GPT-2 examples): `submit`, `step`, `cancel`, `run`, `reset`,
  `warmup`, `load_weights`, `copy_weights`.
- `Request` / `Completion` / `TokenEvent` / `Stats`: token ids in and out.
- `Tokenizer.from_folder(dir)`: a model folder's `tokenizer.json` and
  `tokenizer_config.json` (chat template included); `TextStream` turns tokens into
  text without ever splitting a UTF-8 character.
- `linnet.serve.server`: the HTTP server (`linnet serve`), imported on its own
  since it needs FastAPI and uvicorn (the `serve` extra).
"""

from __future__ import annotations

from linnet.serve.engine import Engine
from linnet.serve.requests import Completion, Request, Stats, TokenEvent, TokenLogprob

__all__ = ["Completion", "Engine", "Request", "Stats", "TokenEvent", "TokenLogprob"]
