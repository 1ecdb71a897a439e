"""Benchmark: the PyTorch backend against a hand-written eager module of the same math.

One Llama-shaped model (tests/torch/data/llama.linnet: RMS norm, rotary
embeddings, grouped-query attention, SwiGLU, a KV cache in `state`) with random
weights runs three ways in the same process:

- eager: the hand-written PyTorch module (tests/torch/data/llama_eager.py),
  written the way Hugging Face writes Llama with a static cache;
- interpreted: `linnet.torch.load(..., compile=False)`, the IR walked per call;
- generated: `linnet.torch.load(..., compile=True)`, straight-line source.

Two workloads: the prefill (`forward` over a prompt, filling the cache) and
one cached decode step. Each is timed in interleaved rounds (every path once
per round, so drift hits all alike), after warm-up, under `torch.no_grad()`.
The table prints the best round in milliseconds (the estimate least disturbed
by other processes on a shared machine, as `timeit` advises), the ratio to
eager (lower is better), and the ratio of the medians. `--clock cpu` times
this process's CPU time instead of wall time, which other processes on a busy
machine disturb less (use it with `--threads 1`). Outputs are checked against
eager before timing.

    .venv/bin/python bench/torch_backend.py [--device cuda] [--dtype bf16] [--small] [--threads N]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "torch" / "data"
sys.path.insert(0, str(ROOT / "src"))

import linnet.torch as lt  # noqa: E402
from linnet.ir.bind import bind  # noqa: E402
from linnet.pipeline import check_program  # noqa: E402

MODEL = {"B": 1, "Vocab": 4096, "H": 512, "Layers": 4, "Heads": 8, "KvHeads": 2,
         "Inner": 1408, "MaxSeq": 256}  # fmt: skip
SMALL = {"B": 1, "Vocab": 256, "H": 64, "Layers": 2, "Heads": 4, "KvHeads": 2,
         "Inner": 96, "MaxSeq": 32}  # fmt: skip
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def eager_class() -> Any:
    spec = importlib.util.spec_from_file_location("llama_eager", DATA / "llama_eager.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.EagerLlama


def random_weights(generics: dict[str, int], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Every mandatory param of the model, N(0, 0.02) (norm weights around 1), by path."""
    model = bind(check_program(DATA / "llama.linnet"), generics={**generics, "T": "f32"})
    g = torch.Generator().manual_seed(0)
    out = {}
    for path, t in model.tensors.items():
        if t.kind != "param" or t.optional:
            continue
        values = torch.randn(t.type.shape, generator=g) * 0.02
        if path.endswith("norm.weight"):
            values += 1.0
        out[path] = values.to(dtype)
    return out


def timings_ms(fns: dict[str, Callable[[], object]], rounds: int, sync: Callable[[], None],
               clock: Callable[[], float] = time.perf_counter) -> dict[str, list[float]]:  # fmt: skip
    """Milliseconds per call of each function, interleaved round by round."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            sync()
            start = clock()
            fn()
            sync()
            times[name].append((clock() - start) * 1e3)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="f32", choices=sorted(DTYPES))
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--small", action="store_true", help="a tiny model (smoke test)")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: default)")
    parser.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="wall time, or this process's CPU time (steadier on a shared machine)",
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    generics = SMALL if args.small else MODEL
    prompt = min(args.prompt, generics["MaxSeq"] - 1)
    device = torch.device(args.device)
    dtype = DTYPES[args.dtype]
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    weights = random_weights(generics, dtype)
    eager = eager_class()(**generics, dtype=dtype).to(device)
    eager.load_state_dict(weights)
    common = {"generics": {**generics, "T": args.dtype}, "weights": weights, "device": device}
    start = time.perf_counter()
    interpreted = lt.load(DATA / "llama.linnet", **common)
    generated = lt.load(DATA / "llama.linnet", compile=True, **common)
    load_s = time.perf_counter() - start

    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, generics["Vocab"], (generics["B"], prompt), generator=g)
    ids32 = ids.to(torch.int32).to(device)
    ids64 = ids.to(device)
    step = ids32[:, :1]
    pos_tensor = torch.tensor([prompt], device=device)
    pos32 = torch.tensor(prompt, dtype=torch.int32, device=device)

    prefill = {
        "eager": lambda: eager(ids64),
        "interpreted": lambda: interpreted(ids32),
        "generated": lambda: generated(ids32),
    }
    decode = {
        "eager": lambda: eager.decode(ids64[:, :1], pos_tensor),
        "interpreted": lambda: interpreted.run_entry("decode", [step, pos32]),
        "generated": lambda: generated.run_entry("decode", [step, pos32]),
    }
    tolerance = 1e-3 if dtype == torch.float32 else 5e-2
    with torch.no_grad():
        first = time.perf_counter()
        outputs = {name: fn() for name, fn in prefill.items()}
        compile_s = time.perf_counter() - first
        for name in ("interpreted", "generated"):
            err = (outputs[name].float() - outputs["eager"].float()).abs().max().item()
            assert err < tolerance, f"{name} prefill differs from eager by {err}"
        steps = {name: fn() for name, fn in decode.items()}
        for name in ("interpreted", "generated"):
            err = (steps[name].float() - steps["eager"].float()).abs().max().item()
            assert err < tolerance, f"{name} decode differs from eager by {err}"
        clock = time.process_time if args.clock == "cpu" else time.perf_counter
        for fns in (prefill, decode):
            timings_ms(fns, 3, sync)  # warm-up
        prefill_ms = timings_ms(prefill, args.rounds, sync, clock)
        decode_ms = timings_ms(decode, args.rounds * 4, sync, clock)

    params = sum(w.numel() for w in weights.values())
    print(f"# Llama-shaped model, {params / 1e6:.1f}M params, {args.dtype} on {device}, "
          f"{torch.get_num_threads()} threads; prompt {prompt}, cache {generics['MaxSeq']}; "
          f"{args.clock} clock")  # fmt: skip
    print(f"# load + bind {load_s:.2f} s; first calls (lower, optimise, prepare) {compile_s:.2f} s")
    print("| path | prefill ms | vs eager | (medians) | decode step ms | vs eager | (medians) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    cells = []
    for times in (prefill_ms, decode_ms):
        best = {name: min(values) for name, values in times.items()}
        middle = {name: statistics.median(values) for name, values in times.items()}
        cells.append((best, middle))
    for name in prefill:
        row = [name]
        for best, middle in cells:
            row += [f"{best[name]:.3f}", f"{best[name] / best['eager']:.2f}x",
                    f"{middle[name] / middle['eager']:.2f}x"]  # fmt: skip
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
