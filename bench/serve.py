"""Benchmark: Linnet's OpenAI-compatible server (ONNX Runtime, PyTorch) against `transformers serve`
and llama.cpp's server.

One run, the same weights for every server: a random-initialised transformers
`LlamaForCausalLM` (default: 4 layers, H=512, 8 heads over 4 key/value heads,
a 32000-token vocabulary; `--shape tinyllama`: TinyLlama-1.1B's shape; `--shape tiny`
for the test) saved with
`save_pretrained` into a temporary folder, with a word-level tokenizer of exactly
32000 tokens (`w0` ... `w31999`, one token per word, so every server counts the
same tokens). Linnet serves the card `linnet.convert` writes for that folder
(`linnet serve CARD --backend onnx|torch --bind Batch=ROWS`); transformers serves
the folder itself (`transformers serve FOLDER --device cpu`, offline; add
`--peer-cb` for its continuous-batching mode too); llama.cpp (`--servers ...,llamacpp`)
serves an f32 GGUF that `linnet.gguf.export` writes from the card's weights, through
llama-cpp-python's `python -m llama_cpp.server` (`--llamacpp-path` puts its package
and the server's extra dependencies on that child's PYTHONPATH; the venv lacks four,
installed beside it with `pip install --no-deps --target DIR sse-starlette==3.7.1
starlette-context==0.5.1 pydantic-settings==2.16.3 python-dotenv==1.2.4`). The GGUF carries
a SentencePiece vocabulary of one character per token (`llama_piece`), so the prompt
that the other servers read as 16 words llama.cpp reads as the same 16 tokens (its
leading `▁` is token 1, then the same ids). llama-cpp-python's server runs one
request at a time (a lock around the model; it has no parallel-slot setting) and by
default ends a stream as soon as another request waits (`interrupt_requests`), so it
runs with `--interrupt_requests false`: concurrent streams queue and are served one
after another.

Each server runs as its own process on 127.0.0.1 (a free port), one at a time,
so they never compete for the cores or the memory, with the same `OMP_NUM_THREADS`.
The folder, card and GGUF are written by a child process first, so the benchmark's
own process never holds the weights. For each
concurrency C (default 1, 8, 32), C streaming clients (`openai.AsyncOpenAI`)
each ask for a greedy completion of `--new-tokens` tokens from a distinct
`--prompt-tokens`-token prompt, all at once; one warm-up round at each C first
(a few tokens, so no measured round pays for lowering a shape). Reported per
server and C: tokens (from the streams' usage), aggregate tokens/s (all tokens
over the round's wall time), its ratio to the same server's single stream, time
to first token p50/p99, the ratio of the aggregate rate to the first peer
(`transformers serve`), and the server's peak resident memory (the VmHWM of its
process tree, read before it stops); the load average is printed before and after
each server. Every client must get exactly `--new-tokens` tokens;
a server that fails to start or answer is reported with the reason.

    .venv/bin/python bench/serve.py [--shape small|tinyllama] [--clients 1,8,32]
        [--new-tokens 64] [--prompt-tokens 16] [--threads N]
        [--servers onnx,torch,transformers,llamacpp] [--llamacpp-path DIRS] [--peer-cb]
        [--keep DIR [--reuse]] [--prepack SHARE] [--torch-threads auto,1,2]

`--torch-threads` runs the torch server once per entry: `auto` (its default: each call
shape runs with 1 thread or `--threads`, whichever it measures faster,
`linnet.serve.threads`) or a count it is fixed at (`linnet serve --threads N`, shown
as `linnet serve (torch/N)`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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
SPACE_PIECE = 1  # llama.cpp's SentencePiece vocabulary: `▁`, which it puts before a prompt
FIRST_WORD = 2  # prompts use tokens from here on, each one character for llama.cpp
CJK, HANGUL, CJK_COUNT = 0x4E00, 0xAC00, 20992


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


def llama_piece(token: int) -> str:
    """The one character that token `token` (>= FIRST_WORD) is in llama.cpp's vocabulary."""
    index = token - FIRST_WORD
    return chr(CJK + index) if index < CJK_COUNT else chr(HANGUL + index - CJK_COUNT)


def write_llama_vocab(folder: Path) -> None:
    """A SentencePiece `tokenizer.model` of VOCAB pieces for the GGUF: `<unk>`, `▁`, then one
    CJK or Hangul character per token, and no bos/eos added. llama.cpp's SentencePiece
    tokenizer splits text into characters and merges only pairs in the vocabulary (none
    here), so a string of `llama_piece`s is exactly those tokens after the `▁` it adds."""
    from sentencepiece import sentencepiece_model_pb2 as spm

    model = spm.ModelProto()
    model.trainer_spec.model_type = spm.TrainerSpec.BPE
    model.trainer_spec.vocab_size = VOCAB
    for token in range(VOCAB):
        piece = model.pieces.add()
        piece.score = -1.0
        if token == 0:
            piece.piece, piece.type, piece.score = "<unk>", spm.ModelProto.SentencePiece.UNKNOWN, 0
        else:
            piece.piece = "\u2581" if token == SPACE_PIECE else llama_piece(token)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.model").write_bytes(model.SerializeToString())
    settings = {"add_bos_token": False, "add_eos_token": False}
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))


def prepare(base: Path, shape: str, context: int, gguf: bool) -> None:
    """The transformers folder, Linnet's card and (with `gguf`) the f32 GGUF under `base`."""
    from linnet.card import read_card
    from linnet.convert import convert

    folder = base / "hf-llama"
    write_folder(folder, shape, context)
    convert(folder, output=base / "card", context=context)
    if gguf:
        import linnet.gguf

        write_llama_vocab(base / "llama-vocab")
        card = read_card(base / "card")
        linnet.gguf.export(
            card.source, base / "bench.gguf", generics=card.generics, weights=card.weights,
            bindings=card.bindings, root=card.root, outtype="f32",
            tokenizer=base / "llama-vocab", modelfile=False,
        )  # fmt: skip


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
    peak_rss: int = 0  # bytes, the server's, filled in once it has served every round

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds


@dataclass
class Server:
    """How to start one server and talk to it."""

    command: list[str]
    model: str
    health: str = "/health"
    llama_text: bool = False  # prompts as `llama_piece`s, not words
    pythonpath: str = ""  # extra PYTHONPATH entries for its process


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
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"not healthy after {limit:.0f} s")
        time.sleep(0.25)


def tree(pid: int) -> list[int]:
    """`pid` and its descendants (Linux /proc)."""
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                pending.extend(int(c) for c in task.read_text().split())
    return found


def peak_rss(pid: int) -> int:
    """The sum of the peak resident sizes (VmHWM) of `pid`'s process tree, in bytes; 0 where
    /proc does not tell."""
    total = 0
    for member in tree(pid):
        try:
            status = Path(f"/proc/{member}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                total += int(line.split()[1]) * 1024
    return total


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


def prompts_for(clients: int, length: int, seed: int, llama_text: bool = False) -> list[str]:
    """`clients` random prompts of `length` tokens: words, or for llama.cpp the same tokens
    as `llama_piece`s after its `▁` (which stands for the first token)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    drawn = [rng.integers(FIRST_WORD, VOCAB, length) for _ in range(clients)]
    if llama_text:
        return ["".join(llama_piece(int(i)) for i in ids[1:]) for ids in drawn]
    return [" ".join(f"w{i}" for i in ids) for ids in drawn]


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def measure(name: str, server: Server, args: argparse.Namespace, env: dict[str, str],
            logs: Path) -> list[Round]:  # fmt: skip
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = logs / f"{name.replace(' ', '_').replace('/', '-')}.log"
    if server.pythonpath:
        env = {**env, "PYTHONPATH": os.pathsep.join([server.pythonpath, env["PYTHONPATH"]])}
    print(f"  {name}: load average {load_average()}", flush=True)
    started = time.perf_counter()
    with log.open("wb") as sink:
        process = subprocess.Popen([*server.command, "--port", str(port)], stdout=sink,
                                   stderr=subprocess.STDOUT, env=env)  # fmt: skip
    rounds: list[Round] = []
    try:
        wait_healthy(process, url + server.health, log, args.start_limit)
        print(f"  {name:22} ready in {time.perf_counter() - started:.1f} s", flush=True)
        for clients in args.clients:
            warm = prompts_for(clients, args.prompt_tokens, clients + 1000, server.llama_text)
            asyncio.run(run_round(url, server.model, warm, args.warm_tokens))
            prompts = prompts_for(clients, args.prompt_tokens, clients, server.llama_text)
            start = time.perf_counter()
            streams = asyncio.run(run_round(url, server.model, prompts, args.new_tokens))
            seconds = max(s.end for s in streams) - start
            short = [s.tokens for s in streams if s.tokens != args.new_tokens]
            if short:
                raise RuntimeError(f"{len(short)} stream(s) got {short[:4]} tokens, not "
                                   f"{args.new_tokens}")  # fmt: skip
            total = sum(s.tokens for s in streams)
            rounds.append(Round(name, clients, total, seconds, [s.ttft for s in streams]))
            print(f"  {name:22} {clients:>3} clients: {total / seconds:8.1f} tokens/s",
                  flush=True)  # fmt: skip
        peak = peak_rss(process.pid)
        for r in rounds:
            r.peak_rss = peak
    finally:
        stop(process)
    peak = rounds[0].peak_rss if rounds else 0
    print(f"  {name}: load average {load_average()} after; peak RSS {peak / 2**30:.2f} GiB",
          flush=True)  # fmt: skip
    return rounds


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def table(results: dict[str, list[Round] | str], peer: str | None) -> str:
    head = (f"{'server':24} {'clients':>7} {'tokens':>7} {'tokens/s':>9} {'vs 1':>6} "
            f"{'TTFT p50':>9} {'TTFT p99':>9} {'vs peer':>8} {'peak RSS':>9}")  # fmt: skip
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
                f"{percentile(r.ttfts, 0.99) * 1000:>7.0f}ms {shown} "
                f"{r.peak_rss / 2**30:>6.2f}GiB"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="small")
    parser.add_argument("--clients", default="1,8,32")
    # a served completion is rarely shorter: with a handful of new tokens per request
    # the rounds time the prompts' prefill more than the generation (at the TinyLlama
    # shape, 8 new tokens left 8 streams at 2-3x one stream's rate, prefill-bound)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--warm-tokens", type=int, default=2)
    parser.add_argument("--prompt-tokens", type=int, default=16)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--servers", default="transformers,onnx,torch",
                        help="any of onnx, torch, transformers, llamacpp, run in this order")  # fmt: skip
    parser.add_argument("--peer-cb", action="store_true",
                        help="also run transformers serve --continuous-batching")  # fmt: skip
    parser.add_argument("--llamacpp-path", default=os.environ.get("LLAMACPP_PYTHONPATH", ""),
                        help="PYTHONPATH entries for llama_cpp.server's process (the "
                             "llama-cpp-python package and the server's dependencies)")  # fmt: skip
    parser.add_argument("--prepack", help="`linnet serve --prepack SHARE` for the onnx server")
    parser.add_argument("--torch-threads", default="auto",
                        help="torch server runs: auto (measured per call shape) and/or "
                             "fixed counts, e.g. auto,1,2")  # fmt: skip
    parser.add_argument("--start-limit", type=float, default=240.0)
    parser.add_argument("--keep", type=Path, help="keep the folder, card and logs here")
    parser.add_argument("--reuse", action="store_true",
                        help="with --keep: serve the folder and card an earlier run with "
                             "the same --shape and lengths kept there, without writing them")  # fmt: skip
    parser.add_argument("--prepare", type=Path, help=argparse.SUPPRESS)  # the child's job
    args = parser.parse_args(argv)
    args.clients = [int(c) for c in args.clients.split(",")]
    rows = max(args.clients)
    context = 64 * -(-(args.prompt_tokens + args.new_tokens + 1) // 64)
    chosen = args.servers.split(",")
    unknown = sorted(set(chosen) - {"onnx", "torch", "transformers", "llamacpp"})
    if unknown:
        parser.error(f"unknown server(s) {', '.join(unknown)}")
    if args.reuse and args.keep is None:
        parser.error("--reuse needs --keep DIR (the folder to reuse)")
    torch_threads = args.torch_threads.split(",")
    if any(t != "auto" and not (t.isdigit() and int(t) > 0) for t in torch_threads):
        parser.error("--torch-threads takes `auto` and thread counts, e.g. auto,1,2")
    if args.prepare is not None:
        prepare(args.prepare, args.shape, context, "llamacpp" in chosen)
        return 0
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
        # a child writes the weights, so this process never holds them
        forwarded = list(argv if argv is not None else sys.argv[1:])
        if not (args.reuse and (card / "nest.toml").exists()):
            subprocess.run([sys.executable, __file__, *forwarded, "--prepare", str(base)],
                           check=True, env=env)  # fmt: skip
        # its warm-up lowers the prompt widths the rounds use (the whole cache's, at the
        # TinyLlama shape, would cost minutes of prefill nobody measures)
        linnet = [sys.executable, "-m", "linnet", "serve", str(card), "--bind", f"Batch={rows}",
                  "--name", "bench", "--warmup", str(args.prompt_tokens)]  # fmt: skip
        transformers_cli = [str(VENV_BIN / "transformers"), "serve", str(folder), "--host",
                            "127.0.0.1", "--device", "cpu", "--log-level", "warning"]  # fmt: skip
        llamacpp = [sys.executable, "-m", "llama_cpp.server", "--model", str(base / "bench.gguf"),
                    "--model_alias", "bench", "--host", "127.0.0.1", "--n_ctx", str(context),
                    "--n_threads", str(args.threads), "--n_threads_batch", str(args.threads),
                    "--logits_all", "false", "--interrupt_requests", "false",
                    "--verbose", "false"]  # fmt: skip
        servers: dict[str, Server] = {}  # in the order --servers names them
        for kind in chosen:
            if kind == "transformers":
                servers["transformers serve"] = Server(transformers_cli, str(folder))
                if args.peer_cb:
                    servers["transformers serve --cb"] = Server(
                        [*transformers_cli, "--continuous-batching"], str(folder))  # fmt: skip
            elif kind == "onnx":
                extra = ["--prepack", args.prepack] if args.prepack else []
                servers["linnet serve (onnx)"] = Server([*linnet, "--backend", "onnx", *extra],
                                                        "bench")  # fmt: skip
            elif kind == "torch":
                for count in torch_threads:
                    fixed = [] if count == "auto" else ["--threads", count]
                    name = "torch" if count == "auto" else f"torch/{count}"
                    servers[f"linnet serve ({name})"] = Server(
                        [*linnet, "--backend", "torch", *fixed], "bench")  # fmt: skip
            else:
                servers["llama.cpp server"] = Server(llamacpp, "bench", health="/v1/models",
                                                     llama_text=True,
                                                     pythonpath=args.llamacpp_path)  # fmt: skip
        results: dict[str, list[Round] | str] = {}
        for name, server in servers.items():
            try:
                results[name] = measure(name, server, args, env, logs)
            except Exception as error:  # report the server's failure and go on
                results[name] = f"{type(error).__name__}: {error}"
                print(f"  {name}: {results[name]}", flush=True)
        peer = "transformers serve" if "transformers serve" in results else None
        print()
        print(f"Every server, every stream: a {args.prompt_tokens}-token prompt, "
              f"{args.new_tokens} new tokens (greedy); tokens/s over the round's wall time")  # fmt: skip
        print(table(results, peer))
    finally:
        if args.keep is None:
            shutil.rmtree(temp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
