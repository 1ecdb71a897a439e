"""Benchmark: Linnet's OpenAI-compatible server (ONNX Runtime, PyTorch) against `transformers serve`.

One run, the same weights for every server: a random-initialised transformers
`LlamaForCausalLM` (default: 4 layers, H=512, 8 heads over 4 key/value heads,
a 32000-token vocabulary; `--shape tinyllama`: TinyLlama-1.1B's shape; `--shape tiny`
for the test) saved with
`save_pretrained` into a temporary folder, with a word-level tokenizer of exactly
32000 tokens (`w0` ... `w31999`, one token per word, so every server counts the
same tokens). Linnet serves the card `linnet.convert` writes for that folder
(`linnet serve CARD --backend onnx|torch --bind Batch=ROWS`); transformers serves
the folder itself (`transformers serve FOLDER --device cpu`, offline; add
`--peer-cb` for its continuous-batching mode too).

Each server runs as its own process on 127.0.0.1 (a free port), one at a time,
so they never compete for the cores, with the same `OMP_NUM_THREADS`. For each
concurrency C (default 1, 8, 32), C streaming clients (`openai.AsyncOpenAI`)
each ask for a greedy completion of `--new-tokens` tokens from a distinct
`--prompt-tokens`-word prompt, all at once; one warm-up round at each C first
(a few tokens, so no measured round pays for lowering a shape). Reported per
server and C: tokens (from the streams' usage), aggregate tokens/s (all tokens
over the round's wall time), its ratio to the same server's single stream, time
to first token p50/p99, and the ratio of the aggregate rate to the first peer
(`transformers serve`). Every client must get exactly `--new-tokens` tokens;
a server that fails to start or answer is reported with the reason.

    .venv/bin/python bench/serve.py [--shape small|tinyllama] [--clients 1,8,32]
        [--new-tokens 16] [--prompt-tokens 16] [--threads N] [--servers onnx,torch,transformers]
        [--peer-cb]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
VOCAB = 32000
SHAPES: dict[str, dict[str, int]] = {
    "small": {"hidden_size": 512, "intermediate_size": 1408, "num_hidden_layers": 4,
              "num_attention_heads": 8, "num_key_value_heads": 4},
    "tinyllama": {"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22,
                  "num_attention_heads": 32, "num_key_value_heads": 4},
    "tiny": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2},  # the test's
}  # fmt: skip


def write_folder(folder: Path, shape: str, context: int, seed: int = 0) -> None:
    """A random-initialised Llama of `shape` and a 32000-word tokenizer, as a transformers
    folder (no eos token: every completion runs to its `max_tokens`)."""
    import torch
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    config = transformers.LlamaConfig(
        vocab_size=VOCAB, max_position_embeddings=context, bos_token_id=None,
        eos_token_id=None, pad_token_id=None, tie_word_embeddings=False, **SHAPES[shape],
    )  # fmt: skip
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config).eval()
    model.generation_config.eos_token_id = None
    model.save_pretrained(folder)
    words = Tokenizer(models.WordLevel({f"w{i}": i for i in range(VOCAB)}, unk_token="w0"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    words.save(str(folder / "tokenizer.json"))
    config_text = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": context}
    (folder / "tokenizer_config.json").write_text(json.dumps(config_text))


@dataclass
class Stream:
    """One client's streamed completion."""

    tokens: int
    ttft: float
    end: float


@dataclass
class Round:
    server: str
    clients: int
    tokens: int
    seconds: float
    ttfts: list[float]

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_healthy(process: subprocess.Popen[bytes], url: str, log: Path, limit: float) -> None:
    deadline = time.monotonic() + limit
    while True:
        if process.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"exited with status {process.returncode}:\n{tail}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"not healthy after {limit:.0f} s")
        time.sleep(0.25)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def one_stream(client: Any, model: str, prompt: str, new_tokens: int, start: float) -> Stream:
    stream = await client.completions.create(
        model=model, prompt=prompt, max_tokens=new_tokens, temperature=0, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    first = None
    pieces = 0
    usage = None
    async for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage.completion_tokens
        if chunk.choices and chunk.choices[0].text:
            pieces += 1
            if first is None:
                first = time.perf_counter() - start
    tokens = usage if usage is not None else pieces
    return Stream(tokens, first if first is not None else float("nan"), time.perf_counter())


async def run_round(url: str, model: str, prompts: Sequence[str], new_tokens: int) -> list[Stream]:
    import openai

    # openai's own connection pool allows 1000 connections: every client streams at once
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="bench", max_retries=0,
                                timeout=600)  # fmt: skip
    try:
        start = time.perf_counter()
        return list(
            await asyncio.gather(
                *(one_stream(client, model, p, new_tokens, start) for p in prompts)
            )
        )
    finally:
        await client.close()


def prompts_for(clients: int, length: int, seed: int) -> list[str]:
    import numpy as np

    rng = np.random.default_rng(seed)
    return [" ".join(f"w{i}" for i in rng.integers(1, VOCAB, length)) for _ in range(clients)]


def measure(name: str, command: list[str], model: str, args: argparse.Namespace,
            env: dict[str, str], logs: Path) -> list[Round]:  # fmt: skip
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = logs / f"{name}.log"
    with log.open("wb") as sink:
        process = subprocess.Popen([*command, "--port", str(port)], stdout=sink,
                                   stderr=subprocess.STDOUT, env=env)  # fmt: skip
    rounds: list[Round] = []
    try:
        wait_healthy(process, url, log, args.start_limit)
        for clients in args.clients:
            warm = prompts_for(clients, args.prompt_tokens, seed=clients + 1000)
            asyncio.run(run_round(url, model, warm, args.warm_tokens))
            prompts = prompts_for(clients, args.prompt_tokens, seed=clients)
            start = time.perf_counter()
            streams = asyncio.run(run_round(url, model, prompts, args.new_tokens))
            seconds = max(s.end for s in streams) - start
            short = [s.tokens for s in streams if s.tokens != args.new_tokens]
            if short:
                raise RuntimeError(f"{len(short)} stream(s) got {short[:4]} tokens, not "
                                   f"{args.new_tokens}")  # fmt: skip
            total = sum(s.tokens for s in streams)
            rounds.append(Round(name, clients, total, seconds, [s.ttft for s in streams]))
            print(f"  {name:22} {clients:>3} clients: {total / seconds:8.1f} tokens/s",
                  flush=True)  # fmt: skip
    finally:
        stop(process)
    return rounds


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def table(results: dict[str, list[Round] | str], peer: str | None) -> str:
    head = (f"{'server':24} {'clients':>7} {'tokens':>7} {'tokens/s':>9} {'vs 1':>6} "
            f"{'TTFT p50':>9} {'TTFT p99':>9} {'vs peer':>8}")  # fmt: skip
    lines = [head, "-" * len(head)]
    peer_rates = {}
    if peer is not None and isinstance(results.get(peer), list):
        peer_rates = {r.clients: r.rate for r in results[peer]}  # type: ignore[union-attr]
    for name, rounds in results.items():
        if isinstance(rounds, str):
            lines.append(f"{name:24} failed: {rounds}")
            continue
        single = next((r.rate for r in rounds if r.clients == 1), None)
        for r in rounds:
            gain = f"{r.rate / single:5.1f}x" if single else "     -"
            versus = r.rate / peer_rates[r.clients] if r.clients in peer_rates else None
            shown = f"{versus:7.2f}x" if versus is not None else "       -"
            lines.append(
                f"{name:24} {r.clients:>7} {r.tokens:>7} {r.rate:>9.1f} {gain} "
                f"{statistics.median(r.ttfts) * 1000:>7.0f}ms "
                f"{percentile(r.ttfts, 0.99) * 1000:>7.0f}ms {shown}"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="small")
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--warm-tokens", type=int, default=2)
    parser.add_argument("--prompt-tokens", type=int, default=16)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--servers", default="onnx,torch,transformers")
    parser.add_argument("--peer-cb", action="store_true",
                        help="also run transformers serve --continuous-batching")  # fmt: skip
    parser.add_argument("--start-limit", type=float, default=240.0)
    parser.add_argument("--keep", type=Path, help="keep the folder, card and logs here")
    args = parser.parse_args(argv)
    args.clients = [int(c) for c in args.clients.split(",")]
    rows = max(args.clients)
    context = 64 * -(-(args.prompt_tokens + args.new_tokens + 1) // 64)
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(ROOT / "src"),
           "TOKENIZERS_PARALLELISM": "false"}  # fmt: skip
    shape = SHAPES[args.shape]
    print(f"Llama {args.shape}: {shape['num_hidden_layers']} layers, H={shape['hidden_size']}, "
          f"{shape['num_attention_heads']}/{shape['num_key_value_heads']} heads, vocab {VOCAB}, "
          f"f32; prompts {args.prompt_tokens} tokens, {args.new_tokens} new tokens per stream, "
          f"greedy; Linnet: {rows} cache rows x {context} positions; OMP_NUM_THREADS="
          f"{args.threads} on {os.cpu_count()} cores", flush=True)  # fmt: skip

    temp = tempfile.mkdtemp(prefix="linnet-bench-serve-")
    base = args.keep or Path(temp)
    try:
        folder, card, logs = base / "hf-llama", base / "card", base / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        write_folder(folder, args.shape, context)
        from linnet.convert import convert

        convert(folder, output=card, context=context)
        linnet = [sys.executable, "-m", "linnet", "serve", str(card), "--bind", f"Batch={rows}",
                  "--name", "bench"]  # fmt: skip
        transformers_cli = [str(VENV_BIN / "transformers"), "serve", str(folder), "--host",
                            "127.0.0.1", "--device", "cpu", "--log-level", "warning"]  # fmt: skip
        servers: dict[str, tuple[list[str], str]] = {}
        chosen = args.servers.split(",")
        if "transformers" in chosen:
            servers["transformers serve"] = (transformers_cli, str(folder))
            if args.peer_cb:
                servers["transformers serve --cb"] = (
                    [*transformers_cli, "--continuous-batching"], str(folder))  # fmt: skip
        if "onnx" in chosen:
            servers["linnet serve (onnx)"] = ([*linnet, "--backend", "onnx"], "bench")
        if "torch" in chosen:
            servers["linnet serve (torch)"] = ([*linnet, "--backend", "torch"], "bench")
        results: dict[str, list[Round] | str] = {}
        for name, (command, model) in servers.items():
            try:
                results[name] = measure(name, command, model, args, env, logs)
            except Exception as error:  # report the server's failure and go on
                results[name] = f"{type(error).__name__}: {error}"
                print(f"  {name}: {results[name]}", flush=True)
        peer = "transformers serve" if "transformers serve" in results else None
        print()
        print(table(results, peer))
    finally:
        if args.keep is None:
            shutil.rmtree(temp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
