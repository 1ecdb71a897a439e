"""llama.cpp's side of the decode benchmarks: GGUF files of our weights, and greedy decoding.

Used by `bench/quant_decode.py` (run there, not alone). Each llama.cpp call
runs in a child process of its own (`python bench/llama_cpp_runs.py decode
...`), so that its model, mapped or repacked, leaves the parent's memory
alone and is gone when the child exits; the parent holds our models.

- `write_ggufs` writes the files with `linnet.gguf.export` (a throwaway BPE
  vocabulary: llama.cpp refuses a file without one): f32 from the float
  checkpoint; Q8_0 / Q4_0 from a quantised checkpoint when every quantised
  linear of it has that GGUF block form (`linnet.gguf.quantised`: the same
  integers, scales rounded to f16), else from the f32 file with llama.cpp's own
  `llama_model_quantize` (`pure`: every matrix, `output.weight` and the
  embedding too, gets the type, as our quantised checkpoints quantise
  `lm_head`; llama.cpp's default would keep `output.weight` at Q6_K). Each file
  says how it was made.
- `decode` (the child): `llama_cpp.Llama(n_threads=N, n_threads_batch=N)` with
  llama.cpp's defaults otherwise (f16 KV cache, its flash-attention choice),
  the prompt in one `eval`, then one `eval` per new token with the argmax of
  its logits (`llama_get_logits_ith`; no sampler), timed from the first new
  token on, as `bench/onnx_decode.py` times ours: one warm-up, then the median
  of `rounds`.

    python bench/llama_cpp_runs.py decode FILE.gguf --tokens 1,2,3 --new 32 --threads 2
    python bench/llama_cpp_runs.py quantize F32.gguf OUT.gguf --type q4_0
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
FTYPES = {"q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0", "q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0"}
BLOCK_NAMES = {"q8_0": "Q8_0", "q4_0": "Q4_0"}


def available() -> bool:
    return importlib.util.find_spec("llama_cpp") is not None


def write_vocabulary(folder: Path) -> Path:
    """A small BPE `tokenizer.json` (letters and a few merges); the exporter pads it to the
    model's vocabulary with unused tokens. Only the ids matter here: no text is tokenized."""
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    vocab = {c: i for i, c in enumerate(letters)}
    merges = []
    for first in letters[:4]:
        for second in letters[:4]:
            merges.append(f"{first} {second}")
            vocab[first + second] = len(vocab)
    folder.mkdir(parents=True, exist_ok=True)
    model = {"type": "BPE", "vocab": vocab, "merges": merges}
    (folder / "tokenizer.json").write_text(json.dumps({"model": model, "added_tokens": []}))
    return folder


def write_ggufs(
    folder: Path,
    generics: Mapping[str, object],
    f32: tuple[Path, Mapping[str, Any]],
    quantised: Mapping[str, tuple[Path, Mapping[str, Any]]],
) -> dict[str, tuple[Path, str]]:
    """GGUF files in `folder`: `f32` and each outtype of `quantised` (`q8_0`, `q4_0`: the
    source and weights of our checkpoint with that precision) -> (path, how it was made)."""
    import linnet.gguf
    from linnet.gguf.quantised import find_quantised

    vocabulary = write_vocabulary(folder / "vocabulary")
    source, weights = f32
    files = {"f32": (folder / "f32.gguf", "linnet.gguf.export of the float checkpoint")}
    linnet.gguf.export(
        source, files["f32"][0], generics=generics, weights=weights, outtype="f32",
        tokenizer=vocabulary, modelfile=False,
    )  # fmt: skip
    for outtype, (qsource, qweights) in quantised.items():
        path = folder / f"{outtype}.gguf"
        block = BLOCK_NAMES[outtype]
        linears = find_quantised(qweights)
        if linears and all(linear.direct == block for linear in linears.values()):
            linnet.gguf.export(
                qsource, path, generics=generics, weights=qweights, outtype=outtype,
                tokenizer=vocabulary, modelfile=False,
            )  # fmt: skip
            how = f"linnet.gguf.export from our quantised integers ({block} blocks, same integers)"
        else:
            kinds = sorted({f"{v.kind} {v.shape[0]}x{v.shape[1]}" for v in linears.values()
                            if v.direct != block})  # fmt: skip
            _child(["quantize", str(files["f32"][0]), str(path), "--type", outtype])
            how = (
                f"llama_model_quantize (pure) from the f32 file: not all our linears have a "
                f"{block} form (not: {', '.join(kinds)})"
            )
        files[outtype] = (path, how)
    return files


def decode_in_child(
    path: Path, tokens: list[int], new: int, threads: int, rounds: int
) -> dict[str, Any]:
    """`decode` in a child process: {"seconds", "tokens", "bytes", "load_s"}."""
    return _child(decode_arguments(path, tokens, new, threads, rounds))


def decode_arguments(
    path: Path, tokens: list[int], new: int, threads: int, rounds: int
) -> list[str]:
    """A peer script's `decode` command line (this one's and `genai_runs.py`'s)."""
    return ["decode", str(path), "--tokens", ",".join(map(str, tokens)), "--new", str(new),
            "--threads", str(threads), "--rounds", str(rounds)]  # fmt: skip


def add_decode_command(commands: Any, path: str) -> None:
    """The `decode` subcommand whose command line `decode_arguments` writes, its file or folder
    argument called `path` (`commands`: an argparse `add_subparsers` result)."""
    decode = commands.add_parser("decode")
    decode.add_argument(path, type=Path)
    decode.add_argument("--tokens", required=True, help="the prompt's token ids, comma-separated")
    decode.add_argument("--new", type=int, default=32)
    decode.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    decode.add_argument("--rounds", type=int, default=2)


def run_child(script: Path, peer: str, arguments: list[str]) -> dict[str, Any]:
    """`python -X faulthandler SCRIPT ARGUMENTS`: the JSON of its last line of output, or a
    RuntimeError naming `peer`, the exit code and the end of its stderr."""
    done = subprocess.run(
        [sys.executable, "-X", "faulthandler", str(script), *arguments],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        # a negative code is a signal (a crash inside the peer: faulthandler's trace above)
        why = f"exit code {done.returncode}"
        raise RuntimeError(f"{peer} child {arguments[0]} failed ({why}): {done.stderr[-800:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _child(arguments: list[str]) -> dict[str, Any]:
    return run_child(Path(__file__), "llama.cpp", arguments)


def weight_bytes(path: Path) -> int:
    """Bytes of the tensors a decode step reads: all but the token embedding table."""
    import gguf

    reader = gguf.GGUFReader(path)
    return sum(int(t.n_bytes) for t in reader.tensors if t.name != "token_embd.weight")


def _quantize(source: Path, target: Path, outtype: str) -> dict[str, Any]:
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, FTYPES[outtype])
    params.nthread = len(os.sched_getaffinity(0))
    params.pure = True
    start = time.perf_counter()
    code = llama_cpp.llama_model_quantize(
        str(source).encode(), str(target).encode(), ctypes.byref(params)
    )
    if code != 0:
        raise RuntimeError(f"llama_model_quantize returned {code}")
    return {"seconds": time.perf_counter() - start}


def _decode(path: Path, prompt: list[int], new: int, threads: int, rounds: int) -> dict[str, Any]:
    import llama_cpp

    start = time.perf_counter()
    model = llama_cpp.Llama(
        str(path), n_ctx=len(prompt) + new, n_threads=threads, n_threads_batch=threads,
        verbose=False,
    )  # fmt: skip
    load_s = time.perf_counter() - start
    vocab = model.n_vocab()

    def argmax() -> int:
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(model.ctx, -1), (vocab,))
        return int(logits.argmax())

    def run() -> tuple[list[int], float]:
        model.reset()
        model.eval(prompt)
        kept = [argmax()]
        start = time.perf_counter()
        for _ in range(new - 1):
            model.eval([kept[-1]])
            kept.append(argmax())
        return kept, time.perf_counter() - start

    kept, _ = run()  # warm-up (pages the mapped file in, repacks)
    seconds = statistics.median(run()[1] for _ in range(rounds))
    return {"seconds": seconds, "tokens": kept, "bytes": weight_bytes(path), "load_s": load_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    add_decode_command(commands, "path")
    quantize = commands.add_parser("quantize")
    quantize.add_argument("source", type=Path)
    quantize.add_argument("target", type=Path)
    quantize.add_argument("--type", choices=sorted(FTYPES), required=True)
    args = parser.parse_args()
    if args.command == "decode":
        prompt = [int(t) for t in args.tokens.split(",")]
        result = _decode(args.path, prompt, args.new, args.threads, args.rounds)
    else:
        result = _quantize(args.source, args.target, args.type)
    print(json.dumps(result))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    main()
