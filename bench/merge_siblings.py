"""Benchmark: batch-1 decode with and without merged sibling products, alternated in one process.

`linnet.onnx.runtime.siblings` merges the weight-only products that read the
same activation (a Llama layer's q/k/v and gate/up `MatMulNBits`) into one
kernel; `linnet.onnx.runtime.session.MERGE_SIBLINGS` switches it. This loads
the Llama example (seeded random weights, a `bench/quant_decode.py` shape,
quantised as that bench does) twice through `linnet.onnx.load_model`, merge
off and on, and decodes greedily with both in alternated rounds (the order
rotated each round). Per decode step it keeps the wall time, and prints the
10th, 25th and 50th percentiles of each side (a busy machine's preemptions
land in the upper tail) and the median tokens/s of whole rounds, with the load
average, and whether both sides chose the same tokens.

    .venv/bin/python bench/merge_siblings.py [--shape medium|tinyllama|small]
        [--variants int4,int8] [--rounds 6] [--new 32] [--exact]

`int4` (group 128) and `int8` run with `int8_activations=True` unless `--exact`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

import decode_profile  # noqa: E402  (bench/, the script's own folder, is on the path)
import quant_decode  # noqa: E402


def decode(model: Any, prompt: np.ndarray[Any, Any], new: int) -> tuple[list[int], list[float]]:
    """Greedy tokens and the wall seconds of each of the new - 1 decode steps."""
    model.reset_state()
    token = model.place(model.run_entry("prefill", [prompt, 0], argmax=True)[:, -1], "i32")
    kept, seconds = [token], []
    for position in range(prompt.shape[1], prompt.shape[1] + new - 1):
        start = time.perf_counter()
        token = model.run_entry("decode", [token, position], argmax=True, keep_on_device=True)
        seconds.append(time.perf_counter() - start)
        kept.append(token)
    return [int(t.numpy()[0]) for t in kept], seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=["medium", "small", "tinyllama"], default="medium")
    parser.add_argument("--variants", default="int4,int8")
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--exact", action="store_true", help="no int8_activations")
    args = parser.parse_args()

    import linnet.onnx
    import linnet.onnx.runtime.session as session
    from linnet.ir.core import TensorType

    make_weights = quant_decode.file_module(
        "llama_make_weights", quant_decode.EXAMPLE / "make_weights.py"
    )
    sizes = quant_decode.SHAPES[args.shape]
    generics = {**sizes, "Batch": 1, "MaxSeq": args.prompt + args.new, "T": "f32"}
    floats = make_weights.make_weights(generics, seed=0)
    prompt = np.random.default_rng(1).integers(0, sizes["Vocab"], (1, args.prompt), np.int32)
    scalar = TensorType((), "i32")
    print(f"# Llama {sizes}, batch 1, prompt {args.prompt}, {args.new} new tokens; "
          f"{args.rounds} alternated rounds; {os.cpu_count()} cores")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="merge-siblings-") as scratch:
        for name in args.variants.split(","):
            source, weights = decode_profile.variant(name, floats, Path(scratch), args.shape)
            int8 = name != "f32" and not args.exact
            models = {}
            for merge in (False, True):
                session.MERGE_SIBLINGS = merge
                model = linnet.onnx.load_model(
                    source, generics=generics, weights=weights, int8_activations=int8
                )
                model.prepare("prefill", [TensorType(prompt.shape, "i32"), scalar], argmax=True)
                model.prepare("decode", [TensorType((1,), "i32"), scalar], argmax=True)
                decode(model, prompt, args.new)  # warm-up
                models[merge] = model
            session.MERGE_SIBLINGS = True
            steps: dict[bool, list[float]] = {False: [], True: []}
            rates: dict[bool, list[float]] = {False: [], True: []}
            tokens: dict[bool, list[int]] = {}
            for round_ in range(args.rounds):
                for merge in (False, True) if round_ % 2 == 0 else (True, False):
                    tokens[merge], seconds = decode(models[merge], prompt, args.new)
                    steps[merge] += seconds
                    rates[merge].append(len(seconds) / sum(seconds))
            quantiles = {m: np.percentile(s, [10, 25, 50]) * 1e3 for m, s in steps.items()}
            print(
                f"{name} (int8_activations={int8}), load average {os.getloadavg()[0]:.2f}: "
                f"ms/step p10/p25/p50 unmerged {np.round(quantiles[False], 2).tolist()}, "
                f"merged {np.round(quantiles[True], 2).tolist()} "
                f"(p50 ratio {quantiles[False][2] / quantiles[True][2]:.3f}); tokens/s median "
                f"unmerged {statistics.median(rates[False]):.2f}, "
                f"merged {statistics.median(rates[True]):.2f}; "
                f"same tokens: {tokens[False] == tokens[True]}",
                flush=True,
            )
            del models


if __name__ == "__main__":
    main()
