"""Benchmark: batch-1 greedy decoding of quantised Llamas through `linnet.jax.load_model`.

One Llama (examples/01-llama; its quantised variants from
examples/01-llama/quantised.py, every projection and `lm_head` quantised by
`linnet.quant.quantize_checkpoint`) with seeded random weights decodes
greedily through `linnet.jax.load_model` (StableHLO on XLA, KV caches
donated), each precision two ways in alternating rounds:

- `dequantize=True` (the default): each `std.quant` weight dequantised once at
  load (`linnet.jax.dequantize`), every step a plain f32 linear;
- `dequantize=False`: the std bodies, which unpack and scale every weight on
  every step inside XLA.

Both must produce the same tokens (checked). f32 runs once as the baseline.
Tokens/s is the median over rounds of the decode steps after the prefill.

    .venv/bin/python bench/jax_quant_decode.py [--shape small|medium] [--new 32] [--rounds 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
EXAMPLE = ROOT / "examples" / "01-llama"
SHAPES = {
    "small": {"Vocab": 256, "H": 64, "Heads": 4, "KvHeads": 2, "Inner": 176, "Layers": 2},
    "medium": {"Vocab": 8192, "H": 1024, "Heads": 16, "KvHeads": 4, "Inner": 2816, "Layers": 4},
}
Array = np.ndarray[Any, Any]


def _module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_llama_{name}", EXAMPLE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def decode(model: Any, prompt: Array, new: int) -> tuple[list[int], float]:
    """Greedy tokens and the seconds of the `new - 1` decode steps after the prefill."""
    import jax

    model.reset_state()
    logits = model.run_entry("prefill", [prompt, np.int32(0)])
    token = np.asarray(logits)[:, -1].argmax(-1).astype(np.int32)
    kept = [int(token[0])]
    start = time.perf_counter()
    for position in range(prompt.shape[1], prompt.shape[1] + new - 1):
        out = model.run_entry("decode", [token, np.int32(position)])
        token = np.asarray(jax.block_until_ready(out)).argmax(-1).astype(np.int32)
        kept.append(int(token[0]))
    return kept, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="small")
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    import linnet.jax as lj
    from linnet.quant import quantize_checkpoint
    from linnet.weights import save_safetensors

    sizes = SHAPES[args.shape]
    group = 16 if args.shape == "small" else 128
    generics = {**sizes, "Batch": 1, "MaxSeq": args.prompt + args.new, "T": "f32"}
    quantised = _module("quantised")
    prompt = np.random.default_rng(1).integers(0, sizes["Vocab"], (1, args.prompt))
    prompt = prompt.astype(np.int32)
    print(f"# shape {args.shape} {sizes}, int4 group {group}, load {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="jax-quant-") as tmp:
        folder = Path(tmp)
        floats = _module("make_weights").make_weights(generics, seed=0)
        save_safetensors(floats, folder / "f32.safetensors")
        del floats
        runs: dict[str, dict[str, Any]] = {"f32": {}}
        runs["f32"]["f32"] = lj.load_model(
            EXAMPLE / "src" / "lib.linnet", generics=generics, weights=folder / "f32.safetensors"
        )
        for bits in (8, 4):
            name = f"int{bits}"
            quantize_checkpoint(
                folder / "f32.safetensors", folder / f"{name}.safetensors",
                patterns=quantised.PATTERNS, bits=bits, group=group,
            )  # fmt: skip
            source = folder / f"{name}.linnet"
            source.write_text(quantised.quantised_source(bits, group))
            runs[name] = {
                how: lj.load_model(
                    source,
                    generics=generics,
                    weights=folder / f"{name}.safetensors",
                    dequantize=how == "dequantized once",
                )
                for how in ("dequantized once", "std body per step")
            }
        seconds: dict[tuple[str, str], list[float]] = {}
        for model_runs in runs.values():  # compile every entry first
            for model in model_runs.values():
                decode(model, prompt, 3)
        for _ in range(args.rounds):
            for name, model_runs in runs.items():
                tokens: list[int] | None = None
                for how, model in model_runs.items():
                    kept, took = decode(model, prompt, args.new)
                    seconds.setdefault((name, how), []).append(took)
                    if tokens is not None and kept != tokens:
                        raise SystemExit(f"{name}: {how} decoded other tokens than the other way")
                    tokens = kept
        print(f"{'weights':8} {'path':20} {'tokens/s':>9}")
        for (name, how), took in seconds.items():
            rate = (args.new - 1) / statistics.median(took)
            print(f"{name:8} {how:20} {rate:9.1f}")
    print(f"# load average after: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
