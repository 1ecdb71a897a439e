"""Benchmark: a training step of `linnet.train` against transformers' `LlamaForCausalLM`.

One Llama (4 layers, H = 512, 8 heads sharing 4 key/value heads, a 32000-token
vocabulary, untied head), one set of seeded weights, one batch of `--rows`
sequences of `--length` tokens, the same AdamW. Each side runs in its own
process, so its peak memory is its own:

- linnet: the Llama example loaded with `linnet.torch.load(..., trainable=True,
  compile=True)`, the rows packed end to end into one batch (`linnet.train.pack`,
  no padding), steps of `linnet.train.train`: `loss_packed` with the chunked
  `linear_cross_entropy` (the logits are never held whole), clipping to norm 1;
- transformers: `LlamaForCausalLM` (SDPA attention) on the `[rows, length]`
  batch with `labels`, `loss.backward()`, the same clipping, `optimizer.step()`.

Each side first checks its first step's loss against the other's (printed), then
times `--steps` steps after `--warmup` (the device synchronised around each);
`--clock cpu` counts this process's CPU time instead of wall time, which other
processes on a busy machine disturb less (use it with `--threads 1`).
The table shows the best and median step time, the peak memory (CUDA: the
allocator's peak; CPU: the process's peak resident set) and the ratio linnet /
transformers (lower is better). Aims (issue 16): step time at most 1.05x,
peak memory below transformers'.

    .venv/bin/python bench/train.py [--device cuda] [--dtype bf16] [--rows 8] [--length 256]
        [--threads 1 --clock cpu]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

LLAMA = ROOT / "examples" / "01-llama" / "src" / "lib.linnet"
CONFIG = {"Vocab": 32000, "H": 512, "Heads": 8, "KvHeads": 4, "Inner": 1408, "Layers": 4}
SMALL = {"Vocab": 512, "H": 64, "Heads": 4, "KvHeads": 2, "Inner": 128, "Layers": 2}
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def reference_model(config: dict[str, int], dtype: torch.dtype, device: str) -> Any:
    import transformers

    hf = transformers.LlamaConfig(
        vocab_size=config["Vocab"],
        hidden_size=config["H"],
        num_attention_heads=config["Heads"],
        num_key_value_heads=config["KvHeads"],
        head_dim=config["H"] // config["Heads"],
        intermediate_size=config["Inner"],
        num_hidden_layers=config["Layers"],
        max_position_embeddings=4096,
        rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        tie_word_embeddings=False,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(hf).to(device=device, dtype=dtype)


def batch_rows(config: dict[str, int], rows: int, length: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, config["Vocab"], (rows, length), generator=g)


def synchronise(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def peak_bytes(device: str) -> int:
    if device.startswith("cuda"):
        return int(torch.cuda.max_memory_allocated())
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def run_side(side: str, args: argparse.Namespace) -> dict[str, Any]:
    """One side's losses and step times, in this process."""
    config = SMALL if args.small else CONFIG
    dtype = DTYPES[args.dtype]
    reference = reference_model(config, dtype, args.device)
    ids = batch_rows(config, args.rows, args.length)
    times: list[float] = []
    losses: list[float] = []
    if side == "transformers":
        model = reference
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        inputs = ids.to(args.device)

        def step() -> float:
            optimizer.zero_grad(set_to_none=True)
            loss = model(inputs, labels=inputs).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            return float(loss.detach())

    else:
        import linnet.torch as lt
        from linnet.train import Example, pack, train

        weights = {k: v.detach() for k, v in reference.state_dict().items()}
        generics = {**config, "Batch": 1, "MaxSeq": args.length, "T": args.dtype}
        model = lt.load(
            LLAMA,
            generics=generics,
            weights=weights,
            trainable=True,
            compile=True,
            device=args.device,
        )
        del reference, weights
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        (batch,) = pack([Example(row) for row in ids], args.rows * args.length)

        def step() -> float:
            (done,) = train(model, [batch], optimizer=optimizer, clip=1.0).steps
            return done.loss

    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    for index in range(args.warmup + args.steps):
        synchronise(args.device)
        started = clock()
        losses.append(step())
        synchronise(args.device)
        if index >= args.warmup:
            times.append(clock() - started)
    return {"losses": losses, "times": times, "peak": peak_bytes(args.device)}


def row(name: str, found: dict[str, Any]) -> tuple[str, float, float, float]:
    times = found["times"]
    return name, min(times) * 1e3, statistics.median(times) * 1e3, found["peak"] / 2**20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="f32", choices=sorted(DTYPES))
    parser.add_argument("--rows", type=int, default=2)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--small", action="store_true", help="a tiny model (for the smoke test)")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument(
        "--clock", choices=["wall", "cpu"], default="wall", help="cpu: this process's CPU time"
    )
    parser.add_argument("--side", choices=["linnet", "transformers"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.side:
        print(json.dumps(run_side(args.side, args)))
        return 0
    found = {}
    for side in ("linnet", "transformers"):
        command = [sys.executable, __file__, *sys.argv[1:], "--side", side]
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        found[side] = json.loads(out.strip().splitlines()[-1])
    first = [found[s]["losses"][0] for s in ("linnet", "transformers")]
    config = SMALL if args.small else CONFIG
    print(
        f"Llama {config}, {args.dtype} on {args.device}: {args.rows} x {args.length} tokens a step"
    )
    print(f"first-step loss: linnet {first[0]:.6f}, transformers {first[1]:.6f}")
    rows = [row(s, found[s]) for s in ("linnet", "transformers")]
    rows.append(
        ("ratio", rows[0][1] / rows[1][1], rows[0][2] / rows[1][2], rows[0][3] / rows[1][3])
    )
    print(f"{'':14}{'best ms':>10}{'median ms':>11}{'peak MiB':>10}")
    for name, best, median, peak in rows:
        digits = 3 if name == "ratio" else 1
        print(f"{name:14}{best:10.{digits}f}{median:11.{digits}f}{peak:10.{digits}f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
