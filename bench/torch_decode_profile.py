"""Profile: the aten ops a linnet.torch decode step of the Llama example runs per layer.

Batch-1 decoding through `linnet.torch` spends what the linears leave in many small
aten ops per layer (norms, rope, cache writes, attention, reshapes). This bench loads
examples/01-llama at the TinyLlama shape (random f32 weights, `--vocab` kept small so
loading is quick: the layers do not depend on it) with 1 and 2 layers, profiles
`--steps` steps of `decode` (Batch 1) or `decode_slots` (one member of a 4-row cache,
as the serving engine runs a lone request) with `torch.profiler`, and prints per aten
op the calls and self time per layer: the 2-layer step minus the 1-layer step.
The linears run in `linnet.native`'s kernels (not aten ops) and are left out. Then it
times `--variant` (f32 or int4, group 128) decode steps at `--layers` layers, full
vocabulary, in `--rounds` rounds (median), with `--threads` threads.

`--inside` skips the profile and splits each decode step's time between the native linear
kernels (`linnet.native`'s ctypes calls, each timed) and the rest, per layer, for each of
`--variants` (f32, int8, int4), with each change to that rest on and off: the code
generator's joined linear calls (`linnet.torch.codegen.JOIN_CALLS`; one module each) and the
C loops for rms_norm, rope, attention and cache writes (`linnet.torch.natives_cpu`), rounds alternated in one process, the median round
reported.

    .venv/bin/python bench/torch_decode_profile.py [--entry decode|decode_slots]
        [--variant f32|int4] [--layers 4] [--threads 1] [--steps 16] [--rounds 3]
        [--max-seq 64]
    .venv/bin/python bench/torch_decode_profile.py --inside [--variants f32,int8,int4]
        [--layers 8] [--threads 2] [--steps 16] [--rounds 5] [--entry decode|decode_slots]
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

import decode_profile  # noqa: E402  (bench/, the script's own folder, is on the path)
import quant_decode  # noqa: E402


def step_runner(module: Any, entry: str) -> Any:
    import torch

    def step(position: int, token: Any) -> Any:
        if entry == "decode":
            return module.run_entry("decode", [token.reshape(1), position])
        slots = torch.tensor([0], dtype=torch.int32)
        at = torch.tensor([position], dtype=torch.int32)
        return module.run_entry("decode_slots", [token.reshape(1, 1), slots, at])

    return step


def generics(entry: str, layers: int, vocab: int | None, max_seq: int) -> dict[str, Any]:
    sizes = {**quant_decode.TINYLLAMA, "Layers": layers}
    if vocab is not None:
        sizes["Vocab"] = vocab
    batch = 4 if entry == "decode_slots" else 1
    return {**sizes, "Batch": batch, "MaxSeq": max_seq, "T": "f32"}


def profile(
    entry: str, layers: int, vocab: int, steps: int, max_seq: int
) -> dict[str, tuple[float, float]]:
    """Per aten op: calls and self microseconds per step."""
    import torch

    import linnet.torch

    make = quant_decode.file_module("llama_make_weights", quant_decode.EXAMPLE / "make_weights.py")
    sizes = generics(entry, layers, vocab, max_seq)
    weights = make.make_weights(sizes, seed=0)
    module = linnet.torch.load(quant_decode.SOURCE, generics=sizes, weights=weights, compile=True)
    step = step_runner(module, entry)
    token = torch.ones(1, dtype=torch.int32)
    with torch.no_grad():
        module.run_entry("prefill", [torch.ones(sizes["Batch"], 8, dtype=torch.int32), 0])
        for position in range(8, 12):
            step(position, token)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as run:
            for position in range(12, 12 + steps):
                step(position, token)
    return {e.key: (e.count / steps, e.self_cpu_time_total / steps) for e in run.key_averages()}


def timed(args: argparse.Namespace) -> list[float]:
    """Milliseconds per decode step in each round (greedy, after a 16-token prefill)."""
    import torch

    import linnet.torch

    make = quant_decode.file_module("llama_make_weights", quant_decode.EXAMPLE / "make_weights.py")
    sizes = generics(args.entry, args.layers, None, args.max_seq)
    floats = make.make_weights(sizes, seed=0)
    folder = Path(tempfile.mkdtemp(prefix="torch-decode-profile-"))
    source, weights = decode_profile.variant(args.variant, floats, folder, "tinyllama")
    module = linnet.torch.load(source, generics=sizes, weights=weights, compile=True)
    step = step_runner(module, args.entry)
    prompt = torch.arange(1, 17, dtype=torch.int32).reshape(1, 16).repeat(sizes["Batch"], 1)
    rounds = []
    with torch.no_grad():
        for index in range(args.rounds + 1):
            module.reset_state()
            token = module.run_entry("prefill", [prompt, 0])[:1, -1].argmax(-1).to(torch.int32)
            start = time.perf_counter()
            for position in range(16, 16 + args.steps):
                token = step(position, token).argmax(-1).to(torch.int32).reshape(1)
            if index:  # the first round lowers and generates the entry
                rounds.append((time.perf_counter() - start) / args.steps * 1e3)
    return rounds


def _timed_kernels() -> list[float]:
    """Wraps every linear of `linnet.native.Kernels` to add its seconds to the returned cell."""
    from linnet.native.kernels import Kernels

    spent = [0.0]
    for name in [n for n in vars(Kernels) if "linear" in n and not n.startswith("_")]:
        original = getattr(Kernels, name)

        def timed_call(self: Any, *args: Any, _original: Any = original, **kw: Any) -> Any:
            start = time.perf_counter()
            try:
                return _original(self, *args, **kw)
            finally:
                spent[0] += time.perf_counter() - start

        setattr(Kernels, name, timed_call)
    return spent


def inside(args: argparse.Namespace) -> None:
    """Kernel and outside time per decode step for each change, rounds alternated."""
    import torch

    import linnet.torch
    from linnet.torch import codegen, natives

    spent = _timed_kernels()
    make = quant_decode.file_module("llama_make_weights", quant_decode.EXAMPLE / "make_weights.py")
    sizes = generics(args.entry, args.layers, None, args.max_seq)
    floats = make.make_weights(sizes, seed=0)
    scratch = tempfile.TemporaryDirectory(prefix="torch-decode-inside-")
    folder = Path(scratch.name)  # the quantised checkpoints: removed once the modules load
    prompt = torch.arange(1, 17, dtype=torch.int32).reshape(1, 16).repeat(sizes["Batch"], 1)
    names = ("native_rms_norm", "native_rope", "native_attention", "native_write_span")
    loops = {n: getattr(natives, n) for n in names}
    runs: dict[str, Any] = {}
    for name in args.variants.split(","):
        source, weights = decode_profile.variant(name, floats, folder, "tinyllama")
        for joined in (False, True):
            codegen.JOIN_CALLS = joined
            module = linnet.torch.load(source, generics=sizes, weights=weights, compile=True)
            step = step_runner(module, args.entry)
            with torch.no_grad():  # generate the code now, with JOIN_CALLS as set
                module.run_entry("prefill", [prompt, 0])
                step(16, torch.ones(1, dtype=torch.int32))
            # each change on or off (`aten small ops`: the C loops off)
            if joined:
                runs[f"{name} joined, aten small ops"] = (module, step, False)
                runs[f"{name} joined, C small ops"] = (module, step, True)
            else:
                runs[f"{name} apart, aten small ops"] = (module, step, False)
    codegen.JOIN_CALLS = True
    scratch.cleanup()
    times: dict[str, list[tuple[float, float]]] = {key: [] for key in runs}
    with torch.no_grad():
        for _ in range(args.rounds):
            for key, (module, step, norm) in runs.items():
                for loop, found in loops.items():
                    setattr(natives, loop, found if norm else lambda *_: None)
                module.reset_state()
                logits = module.run_entry("prefill", [prompt, 0])
                token = logits[:1, -1].argmax(-1).to(torch.int32)
                spent[0] = 0.0
                start = time.perf_counter()
                for position in range(16, 16 + args.steps):
                    token = step(position, token).argmax(-1).to(torch.int32).reshape(1)
                wall = (time.perf_counter() - start) / args.steps * 1e3
                times[key].append((wall, spent[0] / args.steps * 1e3))
    for loop, found in loops.items():
        setattr(natives, loop, found)
    print(
        f"{args.entry}, {args.layers} layers, {args.threads} thread(s), {args.steps} steps, "
        f"median of {args.rounds} alternated rounds, load {os.getloadavg()[0]:.2f}, "
        f"GOMP_SPINCOUNT={os.environ.get('GOMP_SPINCOUNT', '-')} "
        f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '-')}"
    )
    print("| variant | ms/step | kernels ms | outside ms | outside us/layer |")
    print("| --- | --- | --- | --- | --- |")
    for key, rounds in times.items():
        wall = statistics.median(w for w, _ in rounds)
        kernel = statistics.median(k for _, k in rounds)
        outside = statistics.median(w - k for w, k in rounds)
        print(
            f"| {key} | {wall:.2f} | {kernel:.2f} | {outside:.2f} | "
            f"{outside / args.layers * 1e3:.0f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entry", choices=["decode", "decode_slots"], default="decode")
    parser.add_argument("--variant", choices=["f32", "int4"], default="f32")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--vocab", type=int, default=512, help="vocabulary of the profiled runs")
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-seq", type=int, default=64, help="cache positions (MaxSeq)")
    parser.add_argument("--inside", action="store_true", help="kernel vs outside time per layer")
    parser.add_argument("--variants", default="f32,int8,int4", help="with --inside")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    if args.inside:
        inside(args)
        return
    one = profile(args.entry, 1, args.vocab, args.steps, args.max_seq)
    two = profile(args.entry, 2, args.vocab, args.steps, args.max_seq)
    layer = {
        k: (v[0] - one.get(k, (0, 0))[0], v[1] - one.get(k, (0, 0))[1]) for k, v in two.items()
    }
    print(f"{args.entry}: aten ops per layer, {args.threads} thread(s), profiled self time")
    print("| op | calls | us |\n| --- | --- | --- |")
    for name, (calls, micros) in sorted(layer.items(), key=lambda kv: -kv[1][1]):
        if abs(calls) >= 0.05:
            print(f"| {name} | {calls:.0f} | {micros:.0f} |")
    calls = sum(v[0] for v in layer.values())
    micros = sum(v[1] for v in layer.values())
    print(f"| total | {calls:.0f} | {micros:.0f} |")
    rounds = timed(args)
    print(
        f"{args.variant} {args.entry}, MaxSeq {args.max_seq}, {args.layers} layers, {args.threads} thread(s): "
        f"{statistics.median(rounds):.2f} ms/step (rounds {[round(r, 2) for r in rounds]}), "
        f"load {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
