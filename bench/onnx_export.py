"""Benchmark: `linnet.onnx.export_model` against `torch.onnx.export(dynamo=True)` on one Llama.

Both tools export the same random weights of a Llama, TinyLlama-1.1B-shaped by
default (22 layers, H=2048, 32 heads, 4 KV heads, f32), each in a process of
its own so that time and peak memory (the child's maximum resident set) are
its alone:

- linnet: `export_model` of examples/01-llama (transformers' `LlamaForCausalLM`
  in Linnet) from a SafeTensors file opened once, the `decode` entry and the
  `prefill` entry for 32 tokens, saved by `SavingTogether`: two model files
  pointing into one `weights.<version>.data` (external data) holding each weight once;
- torch: transformers' `LlamaForCausalLM` loaded from the same file, exported
  by `torch.onnx.export(..., dynamo=True)` for a 32-token `input_ids` without a
  KV cache (`use_cache=False`), written with external data.

Then ONNX Runtime (CPU provider, default session options) runs a 32-token
forward on each graph, also in processes of their own: session creation time
and the median latency over interleaved-free repeated runs. Each table row
carries the ratio to the peer; the aim for linnet's export is under 12 s and a
peak under 1.2x the weight bytes at TinyLlama shapes.

linnet exports twice, with static shapes and with `prefill`'s sequence
length `S` dynamic (`export_model(dynamic=["S"])`: one graph for every
prompt length, shapes computed in the graph), each in its own process; the
tables print both, and the latency rows run both prefill graphs. The aim for
the dynamic export: no slower than the static one was, and the same latency.

linnet's exports go through `SavingTogether`: `decode` is exported first, and
its weights (all of them) are written in a thread while `prefill` is lowered.

`--exports-only` runs the two linnet exports alone (no torch export, no ONNX
Runtime runs) and prints their rows: static against dynamic in a few minutes.
With `--repeat N` each row runs N times, the rows alternated round by round and
`os.sync()` before each (the previous row's gigabytes written back first), and
the table prints each row's median and every round, of the wall time and of
the CPU time (user and system: what the disk's swings leave out); `--compare-save` adds the
rows saved the way before `SavingTogether` (`save_together` once both entries
are exported), to show what writing during the export gains.

    .venv/bin/python bench/onnx_export.py [--small] [--layers N] [--keep DIR] [--exports-only]
                                          [--repeat N] [--compare-save]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "examples" / "01-llama" / "src" / "lib.linnet"
TINYLLAMA = {"Vocab": 32000, "H": 2048, "Heads": 32, "KvHeads": 4, "Inner": 5632, "Layers": 22}
SMALL = {"Vocab": 256, "H": 64, "Heads": 4, "KvHeads": 2, "Inner": 176, "Layers": 2}
TOKENS = 32
MAX_SEQ = 64


def peak_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: kilobytes


def cpu_seconds() -> float:
    """User and system time of this process, its threads included (the disk wait is not)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def hf_config(sizes: dict[str, int]) -> Any:
    import transformers

    return transformers.LlamaConfig(
        vocab_size=sizes["Vocab"], hidden_size=sizes["H"], num_attention_heads=sizes["Heads"],
        num_key_value_heads=sizes["KvHeads"], head_dim=sizes["H"] // sizes["Heads"],
        intermediate_size=sizes["Inner"], num_hidden_layers=sizes["Layers"],
        max_position_embeddings=MAX_SEQ, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=False, use_cache=False, attn_implementation="eager",
    )  # fmt: skip


# -- the children -------------------------------------------------------------------------


def child_weights(sizes: dict[str, int], work: Path) -> dict[str, Any]:
    """Seeded transformers weights as one SafeTensors file (the shared input)."""
    import torch
    import transformers
    from safetensors.torch import save_file

    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(hf_config(sizes)).eval()
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(work / "weights.safetensors"))
    return {"bytes": sum(v.numel() * v.element_size() for v in state.values())}


def child_linnet(sizes: dict[str, int], work: Path, dynamic: bool, after: bool) -> dict[str, Any]:
    """`decode`, then `prefill` (S dynamic with `dynamic`), exported and saved together.

    By default (`SavingTogether`) each entry's weights are written in a thread as soon
    as it is exported, so `prefill` is lowered while `decode`'s weights (all of them)
    go to disk; with `after`, the way `save_together` saves, everything is written
    once both are exported. Both write the same files.
    """
    sys.path.insert(0, str(ROOT / "src"))
    from linnet.onnx import SavingTogether, export_model
    from linnet.weights.safetensors import read_safetensors

    out = work / output_name(dynamic, after)
    out.mkdir(exist_ok=True)
    times = {}
    start, cpu = time.perf_counter(), cpu_seconds()
    weights = read_safetensors(work / "weights.safetensors")  # memory-mapped, opened once
    with SavingTogether(out, background=not after) as saving:  # one weights.<version>.data
        for entry, own in (("decode", {}), ("prefill", {"S": TOKENS})):
            began = time.perf_counter()
            exported = export_model(
                SOURCE,
                generics={**generics_of(sizes), **own},
                weights=weights,
                entry=entry,
                dynamic=["S"] if dynamic and own else [],
            )
            saving.add(entry, exported)
            times[entry] = time.perf_counter() - began
        began = time.perf_counter()
    times["save"] = time.perf_counter() - began  # what is left to write once both are exported
    seconds, cpu = time.perf_counter() - start, cpu_seconds() - cpu
    files = {p.name: p.stat().st_size for p in out.iterdir()}
    return {"seconds": seconds, "cpu": cpu, "entries": times, "peak": peak_bytes(), "files": files}


def generics_of(sizes: dict[str, int]) -> dict[str, object]:
    return {**sizes, "Batch": 1, "MaxSeq": MAX_SEQ, "T": "f32"}


def output_name(dynamic: bool, after: bool) -> str:
    return ("linnet-dynamic" if dynamic else "linnet") + ("-after" if after else "")


def child_torch(sizes: dict[str, int], work: Path) -> dict[str, Any]:
    import torch
    import transformers
    from safetensors.torch import load_file

    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(hf_config(sizes))
    model.load_state_dict(load_file(str(work / "weights.safetensors")), assign=True)
    model.model.rotary_emb = type(model.model.rotary_emb)(model.config)  # off the meta device
    model.eval()
    ids = torch.zeros((1, TOKENS), dtype=torch.int64)
    out = work / "torch"
    out.mkdir(exist_ok=True)
    start = time.perf_counter()
    with torch.no_grad():
        torch.onnx.export(model, (ids,), str(out / "model.onnx"), dynamo=True,
                          input_names=["input_ids"], output_names=["logits"],
                          external_data=True)  # fmt: skip
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "peak": peak_bytes()}


def child_latency(sizes: dict[str, int], work: Path, which: str, rounds: int) -> dict[str, Any]:
    """Session creation and median 32-token forward latency of one exported graph."""
    import onnxruntime as ort

    path = work / ("torch/model.onnx" if which == "torch" else f"{which}/prefill.onnx")
    options = ort.SessionOptions()
    options.log_severity_level = 3
    start = time.perf_counter()
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    create = time.perf_counter() - start
    ids = np.random.default_rng(1).integers(0, sizes["Vocab"], (1, TOKENS))
    feeds: dict[str, Any] = {}
    for value in session.get_inputs():
        if value.name in ("tokens", "input_ids"):
            feeds[value.name] = ids.astype(np.int32 if value.type == "tensor(int32)" else np.int64)
        elif value.name == "start":
            feeds[value.name] = np.array(0, np.int32)
        else:  # KV-cache state: zeros
            feeds[value.name] = np.zeros(value.shape, np.float32)
    first_output = session.get_outputs()[0].name
    logits = session.run([first_output], feeds)[0]
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        session.run([first_output], feeds)
        times.append(time.perf_counter() - start)
    np.save(work / f"{which}_logits.npy", np.asarray(logits, np.float32).reshape(TOKENS, -1))
    return {"create": create, "latency": statistics.median(times), "peak": peak_bytes()}


# -- the parent ---------------------------------------------------------------------------


def run_child(name: str, args: argparse.Namespace, work: Path, *extra: str) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", name, "--work", str(work),
               "--layers", str(args.layers or 0), "--rounds", str(args.rounds), *extra]  # fmt: skip
    if args.small:
        command.append("--small")
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"the {name} child failed (exit {done.returncode})")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def sizes_of(args: argparse.Namespace) -> dict[str, int]:
    sizes = dict(SMALL if args.small else TINYLLAMA)
    if args.layers:
        sizes["Layers"] = args.layers
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a tiny model (smoke test)")
    parser.add_argument("--layers", type=int, default=0, help="override the number of layers")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--keep", type=Path, help="keep the exported files in this folder")
    parser.add_argument(
        "--exports-only", action="store_true", help="only linnet's static and dynamic exports"
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="--exports-only: rounds of every row, alternated"
    )
    parser.add_argument(
        "--compare-save",
        action="store_true",
        help="--exports-only: also save after both exports (save_together), not while exporting",
    )
    parser.add_argument("--dynamic", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--after", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--which", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = sizes_of(args)
    if args.child:
        children = {
            "weights": lambda: child_weights(sizes, args.work),
            "linnet": lambda: child_linnet(sizes, args.work, args.dynamic, args.after),
            "torch": lambda: child_torch(sizes, args.work),
            "latency": lambda: child_latency(sizes, args.work, args.which, args.rounds),
        }
        print(json.dumps(children[args.child]()))
        return

    work = Path(tempfile.mkdtemp(prefix="onnx_export_bench_", dir=args.keep))
    if args.exports_only:
        variants = [(False, False), (True, False)]
        if args.compare_save:
            variants += [(False, True), (True, True)]
        runs: dict[tuple[bool, bool], list[dict[str, Any]]] = {v: [] for v in variants}
        loads = []
        try:
            weight_bytes = run_child("weights", args, work)["bytes"]
            for _ in range(args.repeat):  # rounds alternate the rows: drift hits each alike
                for dynamic, after in variants:
                    os.sync()  # the previous row's dirty pages written back before this one
                    loads.append(os.getloadavg()[0])
                    flags = [*(["--dynamic"] if dynamic else []), *(["--after"] if after else [])]
                    runs[dynamic, after].append(run_child("linnet", args, work, *flags))
                    if args.keep is None:  # outside the timing; the next row writes afresh
                        shutil.rmtree(work / output_name(dynamic, after), ignore_errors=True)
        finally:
            if args.keep is None:
                shutil.rmtree(work, ignore_errors=True)
        print_exports(sizes, weight_bytes, runs, loads)
        return
    try:
        weight_bytes = run_child("weights", args, work)["bytes"]
        os.sync()
        linnet = run_child("linnet", args, work)
        os.sync()
        linnet_dynamic = run_child("linnet", args, work, "--dynamic")
        os.sync()
        torch_run = run_child("torch", args, work)
        ours = run_child("latency", args, work, "--which", "linnet")
        ours_dynamic = run_child("latency", args, work, "--which", "linnet-dynamic")
        theirs = run_child("latency", args, work, "--which", "torch")
        reference = np.load(work / "torch_logits.npy")
        gap = max(float(np.abs(np.load(work / f"{w}_logits.npy") - reference).max())
                  for w in ("linnet", "linnet-dynamic"))  # fmt: skip
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)

    gb = 1e9
    print(f"# Llama {sizes}, f32, {weight_bytes / gb:.2f} GB of weights; "
          f"{os.cpu_count()} cores; "
          f"each tool in its own process; max |logit difference| between the graphs {gap:.1e}")  # fmt: skip
    print("| export | seconds | vs torch | peak GB | peak / weight bytes | vs torch |")
    print("| --- | --- | --- | --- | --- | --- |")
    rows = (("linnet export_model (prefill + decode), static shapes", linnet),
            ("linnet export_model (prefill + decode), prefill S dynamic", linnet_dynamic),
            ("torch.onnx.export(dynamo=True)", torch_run))  # fmt: skip
    for name, r in rows:
        print(f"| {name} | {r['seconds']:.1f} | {r['seconds'] / torch_run['seconds']:.2f}x | "
              f"{r['peak'] / gb:.2f} | {r['peak'] / weight_bytes:.2f}x | "
              f"{r['peak'] / torch_run['peak']:.2f}x |")  # fmt: skip
    for label, run in (("static", linnet), ("S dynamic", linnet_dynamic)):
        entries = ", ".join(f"{k} {v:.2f} s" for k, v in run["entries"].items())
        files = ", ".join(f"{k} {v / gb:.2f} GB" for k, v in sorted(run["files"].items()))
        print(f"# linnet {label}: {entries}; files written: {files}")
    print("# aim: < 12 s and < 1.2x the weight bytes; dynamic no slower than static")
    print("| graph on ONNX Runtime (CPU) | session s | 32-token forward ms | vs torch |")
    print("| --- | --- | --- | --- |")
    graphs = (("linnet prefill, static shapes", ours),
              ("linnet prefill, S dynamic", ours_dynamic), ("torch dynamo", theirs))  # fmt: skip
    for name, r in graphs:
        print(f"| {name} | {r['create']:.1f} | {r['latency'] * 1e3:.1f} | "
              f"{r['latency'] / theirs['latency']:.2f}x |")  # fmt: skip


def print_exports(
    sizes: dict[str, int],
    weight_bytes: int,
    runs: dict[tuple[bool, bool], list[dict[str, Any]]],
    loads: list[float],
) -> None:
    """`--exports-only`: each row's median over its rounds, every round, against static."""
    gb = 1e9
    rounds = len(next(iter(runs.values())))
    print(f"# Llama {sizes}, f32, {weight_bytes / gb:.2f} GB of weights; "
          f"{os.cpu_count()} cores; each export in its own process, os.sync() before each; "
          f"{rounds} rounds, rows alternated; load average (1 min) before each row "
          f"{min(loads):.2f}-{max(loads):.2f}")  # fmt: skip
    print("| export (decode, then prefill) | median s | vs static | every round s "
          "| median CPU s | every round CPU s | peak GB | peak / weight bytes |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    base = statistics.median(r["seconds"] for r in runs[False, False])
    for (dynamic, after), done in runs.items():
        shape = "prefill S dynamic" if dynamic else "static shapes"
        save = "save_together after both" if after else "SavingTogether while exporting"
        median = statistics.median(r["seconds"] for r in done)
        every = ", ".join(f"{r['seconds']:.2f}" for r in done)
        cpu = statistics.median(r["cpu"] for r in done)
        every_cpu = ", ".join(f"{r['cpu']:.2f}" for r in done)
        peak = max(r["peak"] for r in done)
        print(f"| linnet, {shape}, {save} | {median:.2f} | {median / base:.2f}x | {every} | "
              f"{cpu:.2f} | {every_cpu} | {peak / gb:.2f} | {peak / weight_bytes:.2f}x |")  # fmt: skip
    for (dynamic, after), done in runs.items():
        entries = ", ".join(
            f"{k} {statistics.median(r['entries'][k] for r in done):.2f} s"
            for k in done[0]["entries"]
        )
        label = ("S dynamic" if dynamic else "static") + (", saved after" if after else "")
        print(f"# linnet {label}, medians: {entries}")


if __name__ == "__main__":
    main()
