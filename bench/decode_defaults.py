"""Study: f32 batch-1 decode speed under our CPU session default and ONNX Runtime's own defaults.

`linnet.onnx.load_model`'s CPU sessions differ from a plain
`onnxruntime.SessionOptions()` in one setting: idle pool threads do not spin
(`session.intra_op.allow_spinning = 0`, `linnet.onnx.runtime.session`). Both
use full graph optimisation and ONNX Runtime's default pool size. This study
decodes the same model (examples/01-llama, seeded random weights, TinyLlama
shape by default) greedily under each setting, alternating them for `--rounds`
rounds (each round in a rotated order, so neither always runs first), and
prints tokens/s per round, the medians, the median of the per-round ratios and
the load average around every round. `--threads 1,2` adds each setting with
that many pool threads (`intra_op_num_threads`).

    .venv/bin/python bench/decode_defaults.py [--shape tinyllama|medium|small] [--rounds 8]
        [--new 32] [--threads N,...]

Run it on a quiet machine and on a busy one: the default in
`linnet.onnx.runtime.session` (`CPU_SPINNING`) is chosen from those tables.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
EXAMPLE = ROOT / "examples" / "01-llama"
SOURCE = EXAMPLE / "src" / "lib.linnet"
SHAPES = {
    "tinyllama": {"Vocab": 32000, "H": 2048, "Heads": 32, "KvHeads": 4, "Inner": 5632,
                  "Layers": 22},
    "medium": {"Vocab": 8192, "H": 1024, "Heads": 16, "KvHeads": 4, "Inner": 2816, "Layers": 4},
    "small": {"Vocab": 256, "H": 64, "Heads": 4, "KvHeads": 2, "Inner": 176, "Layers": 2},
}  # fmt: skip


def _module(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def options(spinning: bool, threads: int | None) -> Any:
    """Session options: spinning on is ONNX Runtime's own default, off is ours."""
    import onnxruntime as ort

    chosen = ort.SessionOptions()
    chosen.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    chosen.log_severity_level = 3
    chosen.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    if threads:
        chosen.intra_op_num_threads = threads
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tinyllama")
    parser.add_argument("--layers", type=int, help="override the number of layers")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument(
        "--threads", default="",
        help="comma-separated pool sizes to add (default: ONNX Runtime's own pool size only)",
    )  # fmt: skip
    args = parser.parse_args()
    sizes = dict(SHAPES[args.shape])
    if args.layers:
        sizes["Layers"] = args.layers
    generics = {**sizes, "Batch": 1, "MaxSeq": args.prompt + args.new, "T": "f32"}

    import onnxruntime as ort

    from linnet.ir.core import TensorType
    from linnet.onnx import load_model
    from linnet.onnx.runtime.session import CPU_SPINNING

    decode_bench = _module("onnx_decode_bench", ROOT / "bench" / "onnx_decode.py")
    make_weights = _module("llama_make_weights", EXAMPLE / "make_weights.py")
    weights = make_weights.make_weights(generics, seed=0)
    prompt = np.random.default_rng(1).integers(0, sizes["Vocab"], (1, args.prompt))
    prompt = prompt.astype(np.int32)
    scalar = TensorType((), "i32")
    settings: dict[str, Any] = {
        f"linnet default (spinning {'on' if CPU_SPINNING else 'off'})": None,
        f"ONNX Runtime defaults (spinning on){' = ours' if CPU_SPINNING else ''}": options(
            True, None
        ),
    }
    if CPU_SPINNING:
        settings["spinning off"] = options(False, None)
    for threads in (int(t) for t in args.threads.split(",") if t):
        settings[f"spinning off, {threads} threads"] = options(False, threads)
        settings[f"spinning on, {threads} threads"] = options(True, threads)
    models = {}
    tokens = {}
    for label, chosen in settings.items():
        model = load_model(SOURCE, generics=generics, weights=weights, session_options=chosen)
        model.prepare("prefill", [TensorType(prompt.shape, "i32"), scalar], argmax=True)
        model.prepare("decode", [TensorType((1,), "i32"), scalar], argmax=True)
        tokens[label] = decode_bench.linnet_generate(model, prompt, args.new)[0]  # warm-up
        models[label] = model
    steps = args.new - 1
    labels = list(models)
    rates: dict[str, list[float]] = {label: [] for label in labels}
    loads: list[str] = []
    for round_ in range(args.rounds):
        shift = round_ % len(labels)
        for label in labels[shift:] + labels[:shift]:
            seconds = decode_bench.linnet_generate(models[label], prompt, args.new)[2]
            rates[label].append(steps / seconds)
        loads.append(f"{os.getloadavg()[0]:.1f}")

    weight_bytes = sum(a.nbytes for a in weights.values())
    print(
        f"# Llama {sizes}, f32, {weight_bytes / 1e9:.2f} GB of weights; prompt {args.prompt}, "
        f"{args.new} new tokens ({steps} timed decode steps per round); onnxruntime "
        f"{ort.__version__}, {os.cpu_count()} cores; load average at the end "
        f"{decode_bench.load_average()}; {time.strftime('%Y-%m-%d %H:%M')}"
    )
    print("# decode tokens/s per round (1-minute load average after each round)")
    print("| round | load | " + " | ".join(labels) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in labels) + " |")
    for round_ in range(args.rounds):
        cells = " | ".join(f"{rates[label][round_]:.2f}" for label in labels)
        print(f"| {round_ + 1} | {loads[round_]} | {cells} |")
    medians = " | ".join(f"**{statistics.median(rates[label]):.2f}**" for label in labels)
    print(f"| median | | {medians} |")
    first = labels[0]
    for label in labels[1:]:
        ratios = [b / a for a, b in zip(rates[first], rates[label], strict=True)]
        wins = sum(r > 1 for r in ratios)
        print(
            f"# {label} / {first}: median ratio {statistics.median(ratios):.2f} "
            f"(range {min(ratios):.2f}-{max(ratios):.2f}; faster in {wins} of {len(ratios)} rounds)"
        )
    same = all(tokens[label] == tokens[first] for label in labels)
    print(f"# greedy tokens equal under every setting: {same}")


if __name__ == "__main__":
    main()
