"""`linnet serve` and `linnet generate`: a decoder, its tokenizer, text in and text out.

Both load a model card (`linnet serve CARD`, `linnet.nest`: a folder with a
`nest.toml`, or a transformers folder of a known family, converted on the fly)
or, without one, `--source FILE` (a `.linnet` file or package whose root block
has the `prefill_slots` / `decode_rows` entries, like examples/01-llama),
`--weights` (SafeTensors file or folder) and `--tokenizer DIR` (a folder with
`tokenizer.json`). With a card, `--weights` and `--tokenizer` override its own.
Generics come from the card, then `--generics FILE.json`, then `--bind G=V`
(the cache's `Batch` rows and `MaxSeq` positions among them); `--backend torch`
(default; `--device`; `--threads N` fixes every CPU call's intra-op threads, which
otherwise each call shape picks by measuring, `linnet.serve.threads`), `onnx` or `jax`
(`linnet.jax.load_model`, JAX's default device).

`serve` runs the OpenAI-compatible server (`linnet.serve.server`) on
`--host` (default 127.0.0.1: reachable from this machine only) and `--port`;
`--api-key KEY` or `$LINNET_API_KEY` requires `Authorization: Bearer KEY`;
`--warmup N` (default 256, 0: none) lowers every shape for prompts up to N
tokens before the server starts.
`generate` streams the completion of `--prompt` to stdout (`--chat` renders it
through the chat template first) and ends with the token count and tokens/s on
stderr.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from linnet.errors import LinnetError

BACKENDS = ("torch", "onnx", "jax")


def load_engine(
    source: Path,
    weights: Path | None,
    generics: Mapping[str, object],
    *,
    backend: str = "torch",
    device: str = "cpu",
    root: str | None = None,
    std: Path | None = None,
    prepack: float | None = None,
    threads: int | None = None,
    int8_activations: bool = False,
) -> Any:
    """An `Engine` over the model of `source` (a `.linnet` file or package, or a model
    card folder, which fills whatever is left None), on `backend`; `int8_activations` as
    `linnet.torch.load` / `load_model` take it (torch and onnx only)."""
    from linnet.serve import Engine

    model = _load(source, weights, generics, backend, device, root, std, int8_activations)
    return Engine(model, prepack=prepack, threads=threads)


def load_card_engine(
    card: Path,
    generics: Mapping[str, object],
    *,
    backend: str = "torch",
    device: str = "cpu",
    weights: Path | None = None,
    tokenizer: Path | None = None,
    prepack: float | None = None,
    threads: int | None = None,
    int8_activations: bool = False,
) -> tuple[Any, Any, str]:
    """(`Engine`, `Tokenizer`, the card's name) of a model card or a transformers folder
    (`linnet.nest.opened`); `weights` and `tokenizer` override the card's."""
    from linnet.nest import opened
    from linnet.serve import Engine
    from linnet.serve.tokenizer import Tokenizer

    with opened(card) as found:
        folder = tokenizer if tokenizer is not None else found.tokenizer
        if folder is None:
            raise LinnetError(f"the card {card} names no tokenizer; pass --tokenizer DIR")
        words = Tokenizer.from_folder(folder)
        model = _load(
            found.folder, weights, generics, backend, device, None, None, int8_activations
        )
        return Engine(model, prepack=prepack, threads=threads), words, found.name


def _load(source: Path, weights: Path | None, generics: Mapping[str, object], backend: str,
          device: str, root: str | None, std: Path | None,
          int8_activations: bool = False) -> Any:  # fmt: skip
    if backend not in BACKENDS:
        raise LinnetError(f"`--backend` takes `torch`, `onnx` or `jax`, not `{backend}`")
    if int8_activations and backend == "jax":
        raise LinnetError("`--int8-activations` needs `--backend torch` or `onnx` (JAX has none)")
    if backend == "torch":
        try:
            import linnet.torch as lt
        except ImportError:
            raise LinnetError(
                "`--backend torch` needs PyTorch (pip install 'linnet-lang[torch]')"
            ) from None
        return lt.load(source, generics=generics, weights=weights, root=root, std_root=std,
                       device=device, compile=True,
                       int8_activations=int8_activations)  # fmt: skip
    if backend == "jax":
        try:
            import linnet.jax as lj
        except ImportError:
            raise LinnetError(
                "`--backend jax` needs JAX (pip install 'linnet-lang[jax]')"
            ) from None
        return lj.load_model(source, generics=generics, weights=weights, root=root, std_root=std)
    from linnet.onnx.runtime.model import load_model

    providers = ["CUDAExecutionProvider"] if device.startswith("cuda") else None
    return load_model(source, generics=generics, weights=weights, root=root, std_root=std,
                      providers=providers, int8_activations=int8_activations)  # fmt: skip


def read_generics(path: str | None, binds: Mapping[str, str]) -> dict[str, object]:
    """`--generics FILE.json` (an object of generic values), overridden by `--bind G=V`."""
    generics: dict[str, object] = {}
    if path is not None:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise LinnetError(f"`--generics {path}`: {exc}") from None
        if not isinstance(data, dict):
            raise LinnetError(f"`--generics {path}` must hold a JSON object of generic values")
        generics.update(data)
    generics.update(binds)
    return generics


def run_serve(engine: Any, tokenizer: Any, *, host: str, port: int, api_key: str | None,
              name: str, warmup: int = 0) -> int:  # fmt: skip
    """Serve until interrupted; first, with `warmup` > 0, lower every shape the engine
    calls for prompts up to that many tokens (`Engine.warmup`), so no request waits for
    a compilation."""
    from linnet.serve.server import Server, serve

    key = api_key if api_key is not None else os.environ.get("LINNET_API_KEY") or None
    if warmup > 0:
        start = time.perf_counter()
        engine.warmup(range(1, min(warmup, engine.max_seq) + 1))
        sys.stderr.write(
            f"linnet serve: every shape for prompts up to {min(warmup, engine.max_seq)} tokens "
            f"lowered in {time.perf_counter() - start:.1f} s\n"
        )
    server = Server(engine, tokenizer, model_name=name, api_key=key)
    auth = "an API key required" if key else "no API key"
    sys.stderr.write(
        f"linnet serve: `{name}` on http://{host}:{port}/v1 ({engine.decoder.description}, "
        f"{engine.rows} rows x {engine.max_seq} positions, {auth})\n"
    )
    serve(server, host=host, port=port)
    return 0


def run_generate(engine: Any, tokenizer: Any, prompt: str, *, chat: bool, max_tokens: int,
                 temperature: float, seed: int | None) -> int:  # fmt: skip
    from linnet.serve import Request, TokenEvent

    if not engine.eos:
        engine.eos = tokenizer.eos_ids
    if chat:
        ids = tokenizer.encode_chat([{"role": "user", "content": prompt}])
    else:
        ids = tokenizer.encode(prompt)
    room = engine.max_seq - len(ids) + 1
    if room < 1:
        raise LinnetError(
            f"the prompt has {len(ids)} tokens; the model's MaxSeq is {engine.max_seq}"
        )
    stream = tokenizer.stream(ids)

    def show(event: TokenEvent) -> None:
        text = stream.push(list(event.tokens))
        if event.finished:
            text += stream.flush()
        sys.stdout.write(text)
        sys.stdout.flush()

    request = Request(ids, max_new_tokens=min(max_tokens, room), temperature=temperature,
                      seed=seed, on_token=show)  # fmt: skip
    start = time.perf_counter()
    (completion,), _ = engine.run([request])
    seconds = time.perf_counter() - start
    count = len(completion.tokens)
    sys.stdout.write("\n")
    rate = count / seconds if seconds > 0 else 0.0
    ttft = completion.ttft or 0.0
    sys.stderr.write(
        f"-- {count} tokens in {seconds:.2f} s ({rate:.1f} tokens/s), first token after "
        f"{ttft * 1000:.0f} ms, finish: {completion.finish_reason}\n"
    )
    return 0
