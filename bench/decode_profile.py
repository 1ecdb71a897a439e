"""Profile: where a batch-1 decode step of the Llama example spends its time in ONNX Runtime.

The example (examples/01-llama) with seeded random weights at a
`bench/quant_decode.py` shape, f32 or quantised by
`linnet.quant.quantize_checkpoint` (every projection and `lm_head`, as that
bench does), is loaded by `linnet.onnx.load_model` with ONNX Runtime's
profiler on (`SessionOptions.enable_profiling`, otherwise our default
options: full graph optimisation, pool threads not spinning), prefills a
prompt and decodes `--steps` tokens with the argmax in the graph. For the
decode session it prints, per operator type of the optimised graph ONNX
Runtime ran, the nodes per step and the milliseconds per step: the mean of
the profiler's kernel times, and a typical figure (the median node's time
times the nodes per step) that a preempted kernel on a busy machine does not
inflate, with its share of all kernels; then the exported graph's node
counts. The first decode step (one-time
costs) is left out. The profiler adds a little time per node.

    .venv/bin/python bench/decode_profile.py [--shape medium|tinyllama|small]
        [--variants int4,int8,f32] [--steps 8] [--exact] [--no-merge]

`int4` and `int8` run with `int8_activations=True` unless `--exact`;
`--no-merge` turns off the merging of sibling weight-only products
(`linnet.onnx.runtime.session.MERGE_SIBLINGS`).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

import quant_decode  # noqa: E402  (bench/, the script's own folder, is on the path)


def variant(name: str, floats: dict[str, Any], folder: Path, shape: str) -> tuple[Path, Any]:
    """The source and weights of `f32`, `int8` or `int4` (group 128, 16 at `small`)."""
    if name == "f32":
        return quant_decode.SOURCE, floats
    from linnet.quant import quantize_checkpoint
    from linnet.weights import read_safetensors

    quantised = quant_decode.file_module("llama_quantised", quant_decode.EXAMPLE / "quantised.py")
    bits, group = (8 if name == "int8" else 4), (16 if shape == "small" else 128)
    source = folder / f"{name}.linnet"
    source.write_text(quantised.quantised_source(bits, group))
    target = folder / f"{name}.safetensors"
    patterns = quantised.PATTERNS
    quantize_checkpoint(floats, target, patterns=patterns, bits=bits, group=group)
    return source, read_safetensors(target)


def profile(args: argparse.Namespace, name: str, source: Path, weights: Any, folder: Path) -> None:
    import onnxruntime as ort

    import linnet.onnx
    from linnet.ir.core import TensorType

    sizes = quant_decode.SHAPES[args.shape]
    generics = {**sizes, "Batch": 1, "MaxSeq": args.prompt + args.steps + 2, "T": "f32"}
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.enable_profiling = True
    options.profile_file_prefix = str(folder / f"profile-{name}")
    int8 = name != "f32" and not args.exact
    model = linnet.onnx.load_model(
        source, generics=generics, weights=weights, session_options=options, int8_activations=int8
    )
    scalar = TensorType((), "i32")
    prompt = np.random.default_rng(1).integers(0, sizes["Vocab"], (1, args.prompt), np.int32)
    model.prepare("prefill", [TensorType(prompt.shape, "i32"), scalar], argmax=True)
    decode = model.prepare("decode", [TensorType((1,), "i32"), scalar], argmax=True)
    model.reset_state()
    token = model.place(model.run_entry("prefill", [prompt, 0], argmax=True)[:, -1], "i32")
    positions = range(args.prompt, args.prompt + args.steps + 1)
    start = 0.0
    for step, position in enumerate(positions):
        if step == 1:
            start = time.perf_counter()
        token = model.run_entry("decode", [token, position], argmax=True, keep_on_device=True)
    wall = (time.perf_counter() - start) / args.steps
    events = json.loads(Path(decode.session.end_profiling()).read_text())
    runs = [e for e in events if e.get("cat") == "Session" and e["name"] == "model_run"][1:]
    first_done = runs[0]["ts"]  # the nodes of the timed runs
    nodes = [
        e
        for e in events
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time") and e["ts"] >= first_done
    ]
    steps = len(runs)
    run_us = sum(e["dur"] for e in runs) / steps
    durations: dict[str, list[float]] = collections.defaultdict(list)
    for event in nodes:
        durations[event["args"]["op_name"]].append(event["dur"])
    # per op: (nodes per step, mean us per step, median-node us times nodes per step)
    table = {
        op: (len(d) // steps, sum(d) / steps, float(np.median(d)) * len(d) / steps)
        for op, d in durations.items()
    }
    typical = sum(t[2] for t in table.values())
    print(
        f"\n## {name}, {args.shape}, int8_activations={int8}, merge={not args.no_merge}: "
        f"{wall * 1e3:.2f} ms/step wall, session run {run_us / 1e3:.2f} ms, kernels "
        f"{sum(t[1] for t in table.values()) / 1e3:.2f} ms (typical {typical / 1e3:.2f}), "
        f"{len(nodes) // steps} nodes/step ({steps} steps; load average {os.getloadavg()[0]:.2f})"
    )
    print("| op | nodes/step | ms/step (mean) | ms/step (typical) | share of typical kernels |")
    print("| --- | --- | --- | --- | --- |")
    for op, (count, mean, median) in sorted(table.items(), key=lambda kv: -kv[1][2]):
        print(
            f"| {op} | {count} | {mean / 1e3:.3f} | {median / 1e3:.3f} | {median / typical:.1%} |"
        )
    exported = collections.Counter(n.op_type for n in decode.proto.graph.node)
    print("exported graph (before merging and ONNX Runtime's optimisation):", dict(exported))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=["medium", "small", "tinyllama"], default="medium")
    parser.add_argument("--variants", default="int4,int8,f32")
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--exact", action="store_true", help="no int8_activations")
    parser.add_argument("--no-merge", action="store_true", help="keep sibling products apart")
    args = parser.parse_args()
    import linnet.onnx.runtime.session as session

    session.MERGE_SIBLINGS = not args.no_merge
    make_weights = quant_decode.file_module(
        "llama_make_weights", quant_decode.EXAMPLE / "make_weights.py"
    )
    sizes = quant_decode.SHAPES[args.shape]
    generics = {**sizes, "Batch": 1, "MaxSeq": args.prompt + args.steps + 2, "T": "f32"}
    floats = make_weights.make_weights(generics, seed=0)
    with tempfile.TemporaryDirectory(prefix="decode-profile-") as scratch:
        for name in args.variants.split(","):
            source, weights = variant(name, floats, Path(scratch), args.shape)
            profile(args, name, source, weights, Path(scratch))


if __name__ == "__main__":
    main()
