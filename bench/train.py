"""Benchmark: a training step of `linnet.train` and `linnet.jax.train` against transformers' Llama.

One Llama (4 layers, H = 512, 8 heads sharing 4 key/value heads, a 32000-token
vocabulary, untied head), one set of seeded weights, one batch of `--rows`
sequences of `--length` tokens, the same AdamW. Each side runs in its own
process, so its peak memory is its own:

- linnet: the Llama example loaded with `linnet.torch.load(..., trainable=True,
  compile=True)`, the rows packed end to end into one batch (`linnet.train.pack`,
  no padding), steps of `linnet.train.train`: `loss_packed` with the chunked
  `linear_cross_entropy` (the logits are never held whole), clipping to norm 1;
- linnet-jax: the same example on JAX (`linnet.jax.load_source`), the same
  packed batch, steps of `linnet.jax.train.train` (one jitted step, optax's
  adamw, the same clipping); its peak memory is XLA's device peak on a GPU,
  the process's peak resident set on the CPU;
- hand-jax: the baseline of the JAX side, a hand-written `jax.numpy` Llama
  (`hand_loss`) under a hand-written optax loop (one jitted step: gradient,
  the same clipping, adamw) on the same packed batch;
- transformers: `LlamaForCausalLM` (SDPA attention) on the `[rows, length]`
  batch with `labels`, `loss.backward()`, the same clipping, `optimizer.step()`.

Each side first checks its first step's loss against the other's (printed), then
times `--steps` steps after `--warmup` (the device synchronised around each);
`--clock cpu` counts this process's CPU time instead of wall time, which other
processes on a busy machine disturb less (use it with `--threads 1`).
The table shows the best and median step time, the peak memory (CUDA: the
allocator's peak; CPU: the process's peak resident set) and the ratios linnet /
transformers and linnet-jax / transformers, and linnet-jax / hand-jax (`jax/hand`;
lower is better; the aim of issue 17 is at most 1.1x). Aims (issue 16): step time at most 1.05x,
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
SIDES = ("linnet", "jax", "hand-jax", "transformers")
NAMES = {
    "linnet": "linnet",
    "jax": "linnet-jax",
    "hand-jax": "hand-jax",
    "transformers": "transformers",
}


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

    elif side == "jax":
        return run_jax(reference, ids, config, args)
    elif side == "hand-jax":
        return run_hand_jax(reference, ids, config, args)
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


def run_jax(
    reference: Any, ids: torch.Tensor, config: dict[str, int], args: argparse.Namespace
) -> dict[str, Any]:
    """The JAX side: `linnet.jax.train.train` over the example as generated `jax.numpy`
    (`load_source`), optax's adamw, one call running every step on the same batch; a
    step's time is the clock between two `on_step` calls (the loss read back each step)."""
    import itertools

    import jax
    import optax

    import linnet.jax as lj
    from linnet.jax.train import Example, pack, train
    from linnet.jax.train.checkpoint import host

    weights = {k: v.detach().float().numpy() for k, v in reference.state_dict().items()}
    del reference
    generics = {**config, "Batch": 1, "MaxSeq": args.length, "T": args.dtype}
    model = lj.load_source(
        LLAMA, generics=generics, weights=weights, entry="forward", cast_dtype=True
    )
    del weights
    (batch,) = pack([Example(row) for row in ids.numpy()], args.rows * args.length)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    marks = [clock()]
    losses: list[float] = []

    def on_step(step: Any) -> None:
        losses.append(step.loss)
        marks.append(clock())

    params, _ = train(
        model,
        itertools.repeat(batch),
        optimizer=optax.adamw(1e-4, weight_decay=0.01),
        steps=args.warmup + args.steps,
        clip=1.0,
        on_step=on_step,
    )
    host(params["model.norm.weight"])
    times = [b - a for a, b in itertools.pairwise(marks)][args.warmup :]
    device = jax.devices()[0]
    stats = device.memory_stats() if device.platform != "cpu" else None
    peak = int(stats["peak_bytes_in_use"]) if stats else peak_bytes("cpu")
    return {"losses": losses, "times": times, "peak": peak}


def hand_loss(params: Any, batch: Any, config: dict[str, int]) -> Any:
    """A hand-written `jax.numpy` Llama's packed loss: the sum of the weighted token cross
    entropies over the batch (what the example's `loss_packed` computes), f32."""
    import jax
    import jax.numpy as jnp

    tokens, positions, segments, targets, weights = batch
    heads, kv_heads = config["Heads"], config["KvHeads"]
    dim = config["H"] // heads
    frequencies = 1.0 / (10000.0 ** (jnp.arange(0, dim, 2, dtype=jnp.float32) / dim))
    angles = positions.astype(jnp.float32)[:, None] * frequencies
    angles = jnp.concatenate([angles, angles], axis=-1)
    cos, sin = jnp.cos(angles)[:, None], jnp.sin(angles)[:, None]
    count = tokens.shape[0]
    order = jnp.arange(count)
    mask = (order[None, :] <= order[:, None]) & (segments[None, :] == segments[:, None])

    def norm(x: Any, weight: Any) -> Any:
        return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-5) * weight

    def rotate(x: Any) -> Any:
        half = x.shape[-1] // 2
        return x * cos + jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1) * sin

    x = params["model.embed_tokens.weight"][tokens]
    for layer in range(config["Layers"]):
        w = {k.split(f"model.layers.{layer}.", 1)[1]: v for k, v in params.items()
             if k.startswith(f"model.layers.{layer}.")}  # fmt: skip
        h = norm(x, w["input_layernorm.weight"])
        q = rotate((h @ w["self_attn.q_proj.weight"].T).reshape(count, heads, dim))
        k = rotate((h @ w["self_attn.k_proj.weight"].T).reshape(count, kv_heads, dim))
        v = (h @ w["self_attn.v_proj.weight"].T).reshape(count, kv_heads, dim)
        k = jnp.repeat(k, heads // kv_heads, axis=1)
        v = jnp.repeat(v, heads // kv_heads, axis=1)
        scores = jnp.einsum("qhd,khd->hqk", q, k) / jnp.sqrt(jnp.float32(dim))
        scores = jnp.where(mask[None], scores, -jnp.inf)
        attended = jnp.einsum("hqk,khd->qhd", jax.nn.softmax(scores, axis=-1), v)
        x = x + attended.reshape(count, heads * dim) @ w["self_attn.o_proj.weight"].T
        h = norm(x, w["post_attention_layernorm.weight"])
        gate = jax.nn.silu(h @ w["mlp.gate_proj.weight"].T) * (h @ w["mlp.up_proj.weight"].T)
        x = x + gate @ w["mlp.down_proj.weight"].T
    logits = norm(x, params["model.norm.weight"]) @ params["lm_head.weight"].T
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    picked = jnp.take_along_axis(log_probs, targets[:, None].astype(jnp.int32), axis=-1)[:, 0]
    return -jnp.sum(weights * picked)


def run_hand_jax(
    reference: Any, ids: torch.Tensor, config: dict[str, int], args: argparse.Namespace
) -> dict[str, Any]:
    """The baseline for the JAX side: a hand-written optax loop over `hand_loss`, one
    jitted step (gradient, clipping as torch's, adamw), on the same packed batch."""
    import jax
    import jax.numpy as jnp
    import optax

    from linnet.train import Example, pack

    dtype = jnp.bfloat16 if args.dtype == "bf16" else jnp.float32
    params = {
        k: jnp.asarray(v.detach().float().numpy(), dtype) for k, v in reference.state_dict().items()
    }
    del reference
    (packed,) = pack([Example(row) for row in ids.numpy()], args.rows * args.length)
    batch = tuple(
        jnp.asarray(getattr(packed, f).numpy())
        for f in ("tokens", "positions", "segments", "targets", "weights")
    )
    learned = float(packed.learned)
    optimizer = optax.adamw(1e-4, weight_decay=0.01)
    state = optimizer.init(params)

    def step(params: Any, state: Any, batch: Any, learned: Any) -> Any:
        loss, grads = jax.value_and_grad(lambda p: hand_loss(p, batch, config) / learned)(params)
        norm = optax.tree.norm(grads)
        scale = jnp.minimum(1.0 / (norm + 1e-6), 1.0)
        grads = jax.tree.map(lambda g: g * scale.astype(g.dtype), grads)
        updates, state = optimizer.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

    jitted = jax.jit(step, donate_argnums=(0, 1))
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    losses: list[float] = []
    times: list[float] = []
    for index in range(args.warmup + args.steps):
        started = clock()
        params, state, loss = jitted(params, state, batch, jnp.float32(learned))
        losses.append(float(loss))
        if index >= args.warmup:
            times.append(clock() - started)
    device = jax.devices()[0]
    stats = device.memory_stats() if device.platform != "cpu" else None
    peak = int(stats["peak_bytes_in_use"]) if stats else peak_bytes("cpu")
    return {"losses": losses, "times": times, "peak": peak}


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
    parser.add_argument("--side", choices=list(SIDES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.side:
        print(json.dumps(run_side(args.side, args)))
        return 0
    found = {}
    for side in SIDES:
        command = [sys.executable, __file__, *sys.argv[1:], "--side", side]
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        found[side] = json.loads(out.strip().splitlines()[-1])
    first = {s: found[s]["losses"][0] for s in SIDES}
    config = SMALL if args.small else CONFIG
    print(
        f"Llama {config}, {args.dtype} on {args.device}: {args.rows} x {args.length} tokens a step"
    )
    print(
        f"first-step loss: linnet {first['linnet']:.6f}, "
        f"transformers {first['transformers']:.6f}, linnet-jax {first['jax']:.6f}, "
        f"hand-jax {first['hand-jax']:.6f}"
    )
    rows = {s: row(NAMES[s], found[s]) for s in SIDES}
    base = rows["transformers"]
    table = [rows["linnet"], rows["jax"], rows["hand-jax"], base]
    for name, side, against in (
        ("ratio", "linnet", base),
        ("jax-ratio", "jax", base),
        ("jax/hand", "jax", rows["hand-jax"]),
    ):
        ours = rows[side]
        table.append((name, ours[1] / against[1], ours[2] / against[2], ours[3] / against[3]))
    print(f"{'':14}{'best ms':>10}{'median ms':>11}{'peak MiB':>10}")
    for name, best, median, peak in table:
        digits = 3 if name in ("ratio", "jax-ratio", "jax/hand") else 1
        print(f"{name:14}{best:10.{digits}f}{median:11.{digits}f}{peak:10.{digits}f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
