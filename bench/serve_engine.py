"""Benchmark: `linnet.serve.Engine` aggregate decoding rate at 1, 8 and 16 concurrent requests.

The Llama example (examples/01-llama) with seeded random weights, 4 layers,
H=512 by default (`--small`: H=64, 2 layers), a 16-row KV cache. For each
concurrency C, C greedy requests of `--new` tokens from `--prompt`-token prompts
run together through `Engine.run` on `linnet.torch` (generated source) and on
ONNX Runtime; the table shows the aggregate tokens/s, its ratio to C = 1 (the
gain of batching the rows into one `decode_rows` call), and the median TTFT.
Shapes are lowered first (`Engine.warmup`), so no row times a compilation.

    .venv/bin/python bench/serve_engine.py [--small] [--threads N] [--prompt 16] [--new 32]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "01-llama"


def make_weights(config: dict[str, object]) -> dict[str, Any]:
    spec = importlib.util.spec_from_file_location(
        "bench_llama_weights", EXAMPLE / "make_weights.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    weights: dict[str, Any] = module.make_weights(config, 0)
    return weights


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--new", type=int, default=32)
    args = parser.parse_args()

    import torch

    import linnet.torch as lt
    from linnet.onnx.runtime.model import load_model
    from linnet.serve import Engine, Request

    torch.set_num_threads(args.threads)
    h, layers = (64, 2) if args.small else (512, 4)
    config: dict[str, object] = {"Vocab": 2048, "H": h, "Heads": 8, "KvHeads": 4,
                                 "Inner": h * 11 // 4, "Layers": layers, "Batch": 16,
                                 "MaxSeq": args.prompt + args.new, "T": "f32"}  # fmt: skip
    weights = make_weights(config)
    source = EXAMPLE / "src" / "lib.linnet"
    backends = {
        "linnet.torch": lambda: lt.load(source, generics=config, weights=weights, compile=True),
        "onnx runtime": lambda: load_model(source, generics=config, weights=weights),
    }
    rng = np.random.default_rng(0)
    print(f"Llama H={h}, {layers} layers, vocab 2048, 16 rows; prompts {args.prompt} tokens, "
          f"{args.new} new tokens each, greedy; {args.threads} torch thread(s)")  # fmt: skip
    print(f"{'backend':14} {'requests':>8} {'tokens/s':>10} {'vs 1':>6} {'TTFT p50':>10}")
    for name, load in backends.items():
        engine = Engine(load())
        engine.warmup(prompt_lengths=[args.prompt])
        single = 0.0
        for concurrency in (1, 8, 16):
            prompts = rng.integers(0, 2048, (concurrency, args.prompt))
            requests = [Request(p, max_new_tokens=args.new, temperature=0) for p in prompts]
            completions, stats = engine.run(requests)
            rate = stats.tokens_per_second
            single = single or rate
            ttft = statistics.median(c.ttft or 0.0 for c in completions)
            print(f"{name:14} {concurrency:>8} {rate:>10.0f} {rate / single:>5.1f}x "
                  f"{ttft * 1000:>8.0f} ms")  # fmt: skip
            engine.reset()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
