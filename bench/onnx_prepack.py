"""Benchmark: ONNX Runtime's multi-row decode with and without pre-packed weights, in one process.

A card's decoder (`bench/serve.py --shape tinyllama --keep DIR` writes one at
TinyLlama's shape: DIR/card) on ONNX Runtime with `Batch=8`: `decode_slots` at
one row (the plain session, as the serve engine runs it), at 8 rows plain, and at
8 rows with `--share` of the weight bytes pre-packed (`run_entry(prepack=...)`,
what `linnet serve --prepack SHARE` gives the full-batch decode). The three take
turns round by round (rotated order), so a busy machine slows each alike; both
wall and process CPU time per step are reported, the CPU time being the steadier
on a shared machine (the pool's threads sleep when idle, `session.CPU_SPINNING`),
with the 8-row aggregate over the one-row rate (the issue's aim: 4x), the largest
logit difference between the plain and pre-packed 8-row sessions, and the peak RSS.

    .venv/bin/python bench/onnx_prepack.py CARD [--share 0.3] [--rounds 4]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("card", type=Path)
    parser.add_argument("--share", type=float, default=0.3)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3, help="steps per variant per round")
    args = parser.parse_args()

    from linnet.onnx.runtime.model import load_model

    model = load_model(args.card, generics={"Batch": 8})
    budget = int(args.share * model.weight_bytes)

    def step(rows: int, position: int, prepack: int) -> Any:
        tokens = np.arange(rows, dtype=np.int32)[:, None] + 5
        slots = np.arange(rows, dtype=np.int32)
        positions = np.full(rows, position, np.int32)
        return model.run_entry("decode_slots", [tokens, slots, positions], prepack=prepack)

    variants = {"1 row": (1, 0), "8 rows": (8, 0), f"8 rows, {args.share} packed": (8, budget)}
    first = {name: step(rows, 0, packed) for name, (rows, packed) in variants.items()}
    plain, packed = (first[name] for name in list(variants)[1:])
    print(f"largest |plain - pre-packed| logit at 8 rows: {np.abs(plain - packed).max():.2e} "
          f"(largest logit {np.abs(plain).max():.2f})", flush=True)  # fmt: skip
    wall: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for r in range(args.rounds):
        for name in names[r % 3 :] + names[: r % 3]:
            rows, prepack = variants[name]
            started, used = time.perf_counter(), time.process_time()
            for i in range(args.steps):
                step(rows, 1 + i, prepack)
            wall[name].append((time.perf_counter() - started) / args.steps)
            cpu[name].append((time.process_time() - used) / args.steps)
        print(f"round {r}: load {os.getloadavg()[0]:.1f}", flush=True)
    base_wall, base_cpu = statistics.median(wall["1 row"]), statistics.median(cpu["1 row"])
    for name, (rows, _) in variants.items():
        w, c = statistics.median(wall[name]), statistics.median(cpu[name])
        print(f"{name:22} wall {w * 1e3:6.0f} ms/step ({rows / w:5.1f} tokens/s, "
              f"{rows * base_wall / w:.2f}x one row's)  CPU {c * 1e3:6.0f} ms/step "
              f"({rows * base_cpu / c:.2f}x one row's)")  # fmt: skip
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"peak RSS {peak:.2f} GiB; load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
