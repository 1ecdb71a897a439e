"""Benchmark: batch-1 greedy decoding through `linnet.jax.load_model` against a hand-written JAX Llama.

One Llama (examples/01-llama, transformers' `LlamaForCausalLM` written in
Linnet) with random weights, TinyLlama-1.1B-shaped by default (22 layers,
H=2048, 32 heads, 4 KV heads, f32; `--layers` and `--small` shrink it),
decodes greedily four ways on the same weights, each in its own process (so
that no process holds two copies of the weights, and each compiles cold):

- linnet jax: `load_model`, every entry's lean program jitted for XLA, the KV
  caches kept on the device and donated to each step (updated in place); the
  argmax runs on the device and the token goes back in without a host copy;
- the hand-written peer: the same math in `jax.numpy` under `jax.jit`, the
  same cache layout `[B, KvHeads, MaxSeq, D]` written with
  `lax.dynamic_update_slice`, caches donated: what a JAX user would write;
- linnet torch: `linnet.torch.load(..., compile=True)` (generated source);
- transformers eager: `generate(do_sample=False)`.

The parent builds transformers' model, writes its weights once to a
SafeTensors file in a temporary folder (deleted at the end), times
transformers, frees it, then runs each JAX/PyTorch contender as a child
process that loads that file (`--cycles N` runs the JAX contenders N times,
alternating, for A/B figures on a noisy machine; every figure is the median).
Each row shows the contender's peak resident memory (`ru_maxrss`).

Decode tokens per second are also shown as a fraction of the machine's read
bandwidth cap: each step reads every weight but the embedding table once,
plus the KV cache, so the cap is the read bandwidth (measured in this run, the
method of bench/onnx_decode.py) divided by those bytes. Compile times: the
first prefill and first decode call of `load_model` (lowering to Core IR, code
generation, trace, XLA compile, one run) against the first prefill and first
decode call of the peer's `jax.jit` functions (trace, XLA compile, one run), each
in a fresh process whose weights are already on the device and whose XLA has
started (`xla_started`).
All four paths must produce the same tokens (printed).

    .venv/bin/python bench/jax_backend.py [--small] [--layers N] [--prompt 16] [--new 32]
        [--rounds 3] [--cycles 1] [--contenders jax,peer,torch,transformers]

`--contenders jax,peer` times only the two JAX programs (the parent still runs
transformers once for the reference tokens), the shortest rerun of the aims.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from onnx_decode import (  # noqa: E402
    SMALL,
    SOURCE,
    TINYLLAMA,
    hf_generate,
    hf_model,
    load_average,
    read_bandwidth,
    timed,
)

Array = np.ndarray[Any, Any]


# -- the hand-written peer ---------------------------------------------------------------


def peer_functions(sizes: dict[str, int], max_seq: int) -> tuple[Any, Any]:
    """`prefill(W, caches, tokens)` and `decode(W, caches, token, position)`, jitted, caches donated."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    heads, kv_heads, layers = sizes["Heads"], sizes["KvHeads"], sizes["Layers"]
    dim = sizes["H"] // heads
    groups = heads // kv_heads
    inv = 1.0 / (10000.0 ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    angles = np.arange(max_seq, dtype=np.float64)[:, None] * inv[None, :]
    cos_table = jnp.asarray(np.concatenate([np.cos(angles)] * 2, -1), jnp.float32)
    sin_table = jnp.asarray(np.concatenate([np.sin(angles)] * 2, -1), jnp.float32)

    def linear(x: Any, w: Any) -> Any:
        """`x @ w.T` for a weight stored `[Out, In]`, without materialising the transpose."""
        return lax.dot_general(x, w, (((x.ndim - 1,), (1,)), ((), ())))

    def rms(x: Any, w: Any) -> Any:
        return x * lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-5) * w

    def rotate(x: Any, cos: Any, sin: Any) -> Any:
        half = x.shape[-1] // 2
        turned = jnp.concatenate([-x[..., half:], x[..., :half]], -1)
        return x * cos + turned * sin

    def forward(w: dict[str, Any], caches: list[Any], tokens: Any, start: Any) -> Any:
        batch, seq = tokens.shape
        positions = start + jnp.arange(seq)
        cos, sin = cos_table[positions], sin_table[positions]
        h = w["model.embed_tokens.weight"][tokens]
        keys = jnp.arange(max_seq)
        allowed = keys[None, :] <= positions[:, None]  # [S, MaxSeq]
        new_caches = []
        for i in range(layers):
            p = f"model.layers.{i}."
            x = rms(h, w[p + "input_layernorm.weight"])
            q = linear(x, w[p + "self_attn.q_proj.weight"]).reshape(batch, seq, heads, dim)
            k = linear(x, w[p + "self_attn.k_proj.weight"]).reshape(batch, seq, kv_heads, dim)
            v = linear(x, w[p + "self_attn.v_proj.weight"]).reshape(batch, seq, kv_heads, dim)
            q = rotate(q.transpose(0, 2, 1, 3), cos, sin)
            k = rotate(k.transpose(0, 2, 1, 3), cos, sin)
            v = v.transpose(0, 2, 1, 3)
            k_cache = lax.dynamic_update_slice(caches[2 * i], k, (0, 0, start, 0))
            v_cache = lax.dynamic_update_slice(caches[2 * i + 1], v, (0, 0, start, 0))
            new_caches += [k_cache, v_cache]
            qg = q.reshape(batch, kv_heads, groups, seq, dim)
            scores = jnp.einsum("bkgsd,bktd->bkgst", qg, k_cache) / np.sqrt(dim)
            scores = jnp.where(allowed, scores, -1e30)
            probs = jax.nn.softmax(scores, -1)
            out = jnp.einsum("bkgst,bktd->bkgsd", probs, v_cache)
            out = out.reshape(batch, heads, seq, dim).transpose(0, 2, 1, 3)
            h = h + linear(out.reshape(batch, seq, heads * dim), w[p + "self_attn.o_proj.weight"])
            x = rms(h, w[p + "post_attention_layernorm.weight"])
            gate = jax.nn.silu(linear(x, w[p + "mlp.gate_proj.weight"]))
            up = linear(x, w[p + "mlp.up_proj.weight"])
            h = h + linear(gate * up, w[p + "mlp.down_proj.weight"])
        logits = linear(rms(h, w["model.norm.weight"]), w["lm_head.weight"])
        return logits, new_caches

    prefill = jax.jit(lambda w, c, t: forward(w, c, t, 0), donate_argnums=(1,))
    decode = jax.jit(lambda w, c, t, p: forward(w, c, t[:, None], p), donate_argnums=(1,))
    return prefill, decode


def peer_generate(peer: Any, weights: Any, caches: Any, prompt: Array, new: int) -> Any:
    import jax.numpy as jnp

    prefill, decode = peer
    start = time.perf_counter()
    logits, caches = prefill(weights, caches, jnp.asarray(prompt))
    token = jnp.argmax(logits[:, -1], -1).astype(jnp.int32)
    token.block_until_ready()
    prefill_s = time.perf_counter() - start
    kept = [token]
    start = time.perf_counter()
    for position in range(prompt.shape[1], prompt.shape[1] + new - 1):
        logits, caches = decode(weights, caches, token, np.int32(position))
        token = jnp.argmax(logits[:, -1], -1).astype(jnp.int32)
        kept.append(token)
    token.block_until_ready()
    decode_s = time.perf_counter() - start
    return [int(t[0]) for t in kept], prefill_s, decode_s, caches


# -- linnet jax and linnet torch ------------------------------------------------------------


def linnet_jax_generate(model: Any, prompt: Array, new: int) -> tuple[list[int], float, float]:
    import jax.numpy as jnp

    model.reset_state()
    start = time.perf_counter()
    logits = model.run_entry("prefill", [prompt, 0])
    token = jnp.argmax(logits[:, -1], -1).astype(jnp.int32)
    token.block_until_ready()
    prefill_s = time.perf_counter() - start
    kept = [token]
    start = time.perf_counter()
    for position in range(prompt.shape[1], prompt.shape[1] + new - 1):
        logits = model.run_entry("decode", [token, position])
        token = jnp.argmax(logits, -1).astype(jnp.int32)
        kept.append(token)
    token.block_until_ready()
    decode_s = time.perf_counter() - start
    return [int(t[0]) for t in kept], prefill_s, decode_s


def linnet_torch_generate(module: Any, prompt: Array, new: int) -> tuple[list[int], float, float]:
    import torch

    module.reset_state()
    with torch.no_grad():
        start = time.perf_counter()
        logits = module.run_entry("prefill", [torch.from_numpy(prompt), 0])
        token = torch.argmax(logits[:, -1], -1).to(torch.int32)
        prefill_s = time.perf_counter() - start
        kept = [token]
        start = time.perf_counter()
        for position in range(prompt.shape[1], prompt.shape[1] + new - 1):
            logits = module.run_entry("decode", [token, position])
            token = torch.argmax(logits, -1).to(torch.int32)
            kept.append(token)
        decode_s = time.perf_counter() - start
    return [int(t[0]) for t in kept], prefill_s, decode_s


def peak_rss_gb() -> float:
    """This process's peak resident memory (Linux reports kilobytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def numpy_weights(path: str) -> dict[str, Array]:
    from safetensors.numpy import load_file

    loaded: dict[str, Array] = load_file(path)
    return loaded


def compiled(out: dict[str, Any], key: str, first_call: Any) -> None:
    """Time `first_call` (trace, lower, compile, one run): wall seconds in `out[key]`, and
    the process's CPU seconds (all threads) in `out[key + "_cpu"]`, which a busy shared
    machine inflates much less than the wall time."""
    wall, cpu = time.perf_counter(), time.process_time()
    first_call()
    out[key] = time.perf_counter() - wall
    out[key + "_cpu"] = time.process_time() - cpu


def xla_started() -> None:
    """Compile and run one trivial jitted function: XLA's start-up in a process (its
    client, thread pools, the first compile's set-up) then falls outside every
    contender's compile figure, as it would otherwise fall on whichever compiles first
    (the peer used to pay it when it made its caches with `jnp.zeros`, linnet jax never
    before its first call)."""
    import jax

    jax.jit(lambda x: x + 1)(np.zeros((2,), np.float32)).block_until_ready()


def child(args: argparse.Namespace, sizes: dict[str, int]) -> dict[str, Any]:
    """One contender in this process: compile (first calls), then `rounds` generations.

    The weights are on the device (`block_until_ready`) before anything is timed as
    compile: JAX copies them there asynchronously, and a copy still running would be
    charged (its CPU seconds and its cores) to the compile of whichever contender left it."""
    max_seq = args.prompt + args.new
    generics = {**sizes, "Batch": 1, "MaxSeq": max_seq, "T": "f32"}
    prompt = np.random.default_rng(1).integers(0, sizes["Vocab"], (1, args.prompt))
    prompt = prompt.astype(np.int32)
    token = np.zeros((1,), np.int32)
    out: dict[str, Any] = {"runs": []}
    if args.child == "jax":
        import jax

        import linnet.jax as lj

        def load() -> Any:
            model = lj.load_model(SOURCE, generics=generics, weights=args.weights)
            jax.block_until_ready(list(model.parameters.values()))
            return model

        model, out["load_s"] = timed(load)
        xla_started()
        compiled(
            out,
            "prefill_compile",
            lambda: model.run_entry("prefill", [prompt, 0]).block_until_ready(),
        )
        compiled(
            out,
            "decode_compile",
            lambda: model.run_entry("decode", [token, args.prompt]).block_until_ready(),
        )
        out["tokens"] = linnet_jax_generate(model, prompt, args.new)[0]  # warm-up
        for _ in range(args.rounds):
            out["runs"].append(linnet_jax_generate(model, prompt, args.new)[1:])
    elif args.child == "peer":
        import jax
        import jax.numpy as jnp

        start = time.perf_counter()
        weights = {}
        for name, array in numpy_weights(args.weights).items():
            weights[name] = jnp.asarray(array)
            del array
        gc.collect()
        jax.block_until_ready(list(weights.values()))
        out["load_s"] = time.perf_counter() - start
        xla_started()
        peer = peer_functions(sizes, max_seq)
        shape = (1, sizes["KvHeads"], max_seq, sizes["H"] // sizes["Heads"])

        def fresh() -> list[Any]:
            return [jnp.zeros(shape, jnp.float32) for _ in range(2 * sizes["Layers"])]

        caches = fresh()

        def first_prefill() -> None:
            nonlocal caches
            logits, caches = peer[0](weights, caches, jnp.asarray(prompt))
            logits.block_until_ready()

        def first_decode() -> None:
            nonlocal caches
            logits, caches = peer[1](weights, caches, jnp.asarray(token), np.int32(args.prompt))
            logits.block_until_ready()

        compiled(out, "prefill_compile", first_prefill)
        compiled(out, "decode_compile", first_decode)
        out["tokens"] = peer_generate(peer, weights, fresh(), prompt, args.new)[0]
        for _ in range(args.rounds):
            out["runs"].append(peer_generate(peer, weights, fresh(), prompt, args.new)[1:3])
    else:
        import linnet.torch as lt

        module, out["load_s"] = timed(
            lt.load, SOURCE, generics=generics, weights=args.weights, compile=True
        )
        out["tokens"] = linnet_torch_generate(module, prompt, args.new)[0]
        for _ in range(args.rounds):
            out["runs"].append(linnet_torch_generate(module, prompt, args.new)[1:])
    out["rss_gb"] = peak_rss_gb()
    return out


def run_child(args: argparse.Namespace, name: str, weights: str) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", name, "--weights", weights]
    command += [
        "--prompt",
        str(args.prompt),
        "--new",
        str(args.new),
        "--rounds",
        str(args.rounds),
    ]
    command += ["--small"] if args.small else []
    command += ["--layers", str(args.layers)] if args.layers else []
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"contender {name} failed:\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a tiny model (smoke test)")
    parser.add_argument("--layers", type=int, help="override the number of layers")
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3, help="generations per contender process")
    parser.add_argument("--cycles", type=int, default=1, help="processes per JAX contender")
    parser.add_argument(
        "--contenders",
        default="jax,peer,torch,transformers",
        help="which to time (transformers' greedy tokens are the reference either way)",
    )
    parser.add_argument("--child", choices=["jax", "peer", "torch"], help=argparse.SUPPRESS)
    parser.add_argument("--weights", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = dict(SMALL if args.small else TINYLLAMA)
    if args.layers:
        sizes["Layers"] = args.layers
    if args.child:
        print(json.dumps(child(args, sizes)))
        return
    max_seq = args.prompt + args.new
    unknown = set(args.contenders.split(",")) - {"jax", "peer", "torch", "transformers"}
    if unknown:
        raise SystemExit(f"--contenders: unknown {sorted(unknown)}")

    import jax
    import torch
    from safetensors.torch import save_file

    bandwidth = read_bandwidth()
    reference = hf_model(sizes, max_seq)
    state = {k: v.detach().contiguous() for k, v in reference.state_dict().items()}
    embed = state["model.embed_tokens.weight"].numel() * 4
    weight_bytes = sum(v.numel() * 4 for v in state.values())
    prompt = np.random.default_rng(1).integers(0, sizes["Vocab"], (1, args.prompt))
    prompt = prompt.astype(np.int32)
    with tempfile.TemporaryDirectory(prefix="linnet-jax-bench-") as folder:
        weights = os.path.join(folder, "model.safetensors")
        save_file(state, weights)
        del state
        chosen = args.contenders.split(",")
        # transformers' tokens are always the reference; its timings only when chosen
        time_hf = "transformers" in chosen
        chosen = [name for name in chosen if name != "transformers"]
        hf_tokens = hf_generate(reference, prompt, args.new)
        if time_hf:
            full = statistics.median(
                timed(hf_generate, reference, prompt, args.new)[1] for _ in range(args.rounds)
            )
            one = statistics.median(
                timed(hf_generate, reference, prompt, 1)[1] for _ in range(args.rounds)
            )
        hf_rss = peak_rss_gb()
        del reference
        gc.collect()
        results: dict[str, list[dict[str, Any]]] = {name: [] for name in chosen}
        for cycle in range(args.cycles):
            for name in chosen:
                if name == "torch" and cycle > 0:
                    continue
                results[name].append(run_child(args, name, weights))

    steps = args.new - 1
    cache_bytes = (
        2 * sizes["Layers"] * max_seq * sizes["KvHeads"] * (sizes["H"] // sizes["Heads"]) * 4
    )
    per_token = weight_bytes - embed + cache_bytes
    cap = bandwidth / per_token

    def median(name: str, key: str) -> float:
        return statistics.median(r[key] for r in results[name])

    def decode(name: str) -> float:
        return statistics.median(d for r in results[name] for _, d in r["runs"])

    def prefill(name: str) -> float:
        return statistics.median(p for r in results[name] for p, _ in r["runs"])

    print(f"# Llama {sizes}, f32, {weight_bytes / 1e9:.2f} GB of weights; prompt {args.prompt}, "
          f"{args.new} new tokens, batch 1; jax {jax.__version__} ({jax.default_backend()}), "
          f"torch {torch.__version__}, {os.cpu_count()} cores, load average {load_average()}")  # fmt: skip
    print(f"# read bandwidth: {bandwidth / 1e9:.1f} GB/s; bytes read per decode step "
          f"{per_token / 1e9:.3f} GB; cap {cap:.2f} tokens/s; {args.cycles} process(es) per JAX "
          f"contender x {args.rounds} rounds, medians")  # fmt: skip
    if "jax" in results and "peer" in results:
        ours = median("jax", "prefill_compile") + median("jax", "decode_compile")
        theirs = median("peer", "prefill_compile") + median("peer", "decode_compile")
        ours_cpu = median("jax", "prefill_compile_cpu") + median("jax", "decode_compile_cpu")
        theirs_cpu = median("peer", "prefill_compile_cpu") + median("peer", "decode_compile_cpu")
        print(f"# compile (first prefill + first decode call, fresh process): linnet jax "
              f"prefill {median('jax', 'prefill_compile'):.2f} s, decode "
              f"{median('jax', 'decode_compile'):.2f} s; peer prefill "
              f"{median('peer', 'prefill_compile'):.2f} s, decode "
              f"{median('peer', 'decode_compile'):.2f} s; ratio {ours / theirs:.2f}x "
              f"(per process: {[round(r['prefill_compile'] + r['decode_compile'], 2) for r in results['jax']]}"
              f" vs {[round(r['prefill_compile'] + r['decode_compile'], 2) for r in results['peer']]})")  # fmt: skip
        print(f"# compile CPU seconds (all threads; less hit by a busy machine): linnet jax "
              f"{ours_cpu:.2f} s, peer {theirs_cpu:.2f} s, ratio {ours_cpu / theirs_cpu:.2f}x")  # fmt: skip
    print("| path | prefill ms | decode tokens/s | vs peer | ms/token | of the cap | peak RSS GB |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    labels = {
        "jax": "linnet jax (load_model on XLA)",
        "peer": "hand-written jax.numpy under jax.jit",
        "torch": "linnet torch (compile=True)",
    }
    peer_decode = decode("peer") if "peer" in results else float("nan")
    for name in chosen:
        rate = steps / decode(name)
        rss = max(r["rss_gb"] for r in results[name])
        print(f"| {labels[name]} | {prefill(name) * 1e3:.0f} | {rate:.2f} | "
              f"{peer_decode / decode(name):.2f}x | {decode(name) / steps * 1e3:.1f} | "
              f"{rate / cap:.0%} | {rss:.1f} |")  # fmt: skip
    if time_hf:
        hf_decode = max(full - one, 1e-9)
        rate = steps / hf_decode
        print(f"| transformers eager generate | {one * 1e3:.0f} (with 1 token) | {rate:.2f} "
              f"| {peer_decode / hf_decode:.2f}x | {hf_decode / steps * 1e3:.1f} | "
              f"{rate / cap:.0%} | {hf_rss:.1f} |")  # fmt: skip
    same = all(r["tokens"] == hf_tokens for rs in results.values() for r in rs)
    print(f"# greedy tokens equal on all {len(chosen) + 1} paths: {same}")


if __name__ == "__main__":
    main()
