"""Benchmark: batch-1 greedy decoding through `linnet.jax.load_model` against a hand-written JAX Llama.

One Llama (examples/01-llama, transformers' `LlamaForCausalLM` written in
Linnet) with random weights, TinyLlama-1.1B-shaped by default (22 layers,
H=2048, 32 heads, 4 KV heads, f32; `--layers` and `--small` shrink it),
decodes greedily in one process, four ways on the same weights:

- linnet jax: `load_model`, every entry's StableHLO compiled by XLA, the KV
  caches kept on the device and donated to each step (updated in place); the
  argmax runs on the device and the token goes back in without a host copy;
- the hand-written peer: the same math in `jax.numpy` under `jax.jit`, the
  same cache layout `[B, KvHeads, MaxSeq, D]` written with
  `lax.dynamic_update_slice`, caches donated: what a JAX user would write;
- linnet torch: `linnet.torch.load(..., compile=True)` (generated source);
- transformers eager: `generate(do_sample=False)`.

Decode tokens per second are also shown as a fraction of the machine's read
bandwidth cap: each step reads every weight but the embedding table once,
plus the KV cache, so the cap is the read bandwidth (measured in this run, the
method of bench/onnx_decode.py) divided by those bytes. Compile times: the
first prefill and first decode call of `load_model` (lowering, StableHLO
export, XLA compile) against `jax.jit(...).lower(...).compile()` of the peer.
All four paths must produce the same tokens (printed).

    .venv/bin/python bench/jax_backend.py [--small] [--layers N] [--prompt 16] [--new 32]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a tiny model (smoke test)")
    parser.add_argument("--layers", type=int, help="override the number of layers")
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sizes = dict(SMALL if args.small else TINYLLAMA)
    if args.layers:
        sizes["Layers"] = args.layers
    max_seq = args.prompt + args.new

    import jax
    import jax.numpy as jnp
    import torch

    import linnet.jax as lj
    import linnet.torch as lt

    bandwidth = read_bandwidth()
    reference = hf_model(sizes, max_seq)
    weights = {name: t.detach().numpy() for name, t in reference.state_dict().items()}
    generics = {**sizes, "Batch": 1, "MaxSeq": max_seq, "T": "f32"}
    prompt = np.random.default_rng(1).integers(0, sizes["Vocab"], (1, args.prompt))
    prompt = prompt.astype(np.int32)

    model, load_s = timed(lj.load_model, SOURCE, generics=generics, weights=weights)
    # Compile: the first prefill and the first decode (lowering, export, XLA compile).
    _, prefill_compile = timed(model.run_entry, "prefill", [prompt, 0])
    token = np.zeros((1,), np.int32)
    _, decode_compile = timed(model.run_entry, "decode", [token, args.prompt])

    peer = peer_functions(sizes, max_seq)
    device_weights = {k: jnp.asarray(v) for k, v in weights.items()}
    dim = sizes["H"] // sizes["Heads"]
    cache_shape = (1, sizes["KvHeads"], max_seq, dim)

    def fresh_caches() -> list[Any]:
        return [jnp.zeros(cache_shape, jnp.float32) for _ in range(2 * sizes["Layers"])]

    caches = fresh_caches()
    start = time.perf_counter()
    peer[0].lower(device_weights, caches, jnp.asarray(prompt)).compile()
    peer_prefill_compile = time.perf_counter() - start
    start = time.perf_counter()
    peer[1].lower(device_weights, caches, jnp.asarray(token), np.int32(0)).compile()
    peer_decode_compile = time.perf_counter() - start

    module = lt.load(SOURCE, generics=generics, weights=weights, compile=True)

    ours = linnet_jax_generate(model, prompt, args.new)[0]  # warm-up
    theirs = peer_generate(peer, device_weights, fresh_caches(), prompt, args.new)[0]
    torch_tokens = linnet_torch_generate(module, prompt, args.new)[0]
    hf_tokens = hf_generate(reference, prompt, args.new)
    runs: dict[str, list[tuple[float, float]]] = {"jax": [], "peer": [], "torch": []}
    for _ in range(args.rounds):  # interleaved, so that load changes hit every path alike
        _, p, d = linnet_jax_generate(model, prompt, args.new)
        runs["jax"].append((p, d))
        _, p, d, _ = peer_generate(peer, device_weights, fresh_caches(), prompt, args.new)
        runs["peer"].append((p, d))
        _, p, d = linnet_torch_generate(module, prompt, args.new)
        runs["torch"].append((p, d))
    full = statistics.median(
        timed(hf_generate, reference, prompt, args.new)[1] for _ in range(args.rounds)
    )
    one = statistics.median(timed(hf_generate, reference, prompt, 1)[1] for _ in range(args.rounds))

    steps = args.new - 1
    embed = weights["model.embed_tokens.weight"].nbytes
    weight_bytes = sum(a.nbytes for a in weights.values())
    cache_bytes = 2 * sizes["Layers"] * int(np.prod(cache_shape)) * 4
    per_token = weight_bytes - embed + cache_bytes
    cap = bandwidth / per_token

    print(f"# Llama {sizes}, f32, {weight_bytes / 1e9:.2f} GB of weights; prompt {args.prompt}, "
          f"{args.new} new tokens, batch 1; jax {jax.__version__} ({jax.default_backend()}), "
          f"torch {torch.__version__}, {os.cpu_count()} cores, load average {load_average()}")  # fmt: skip
    print(f"# read bandwidth: {bandwidth / 1e9:.1f} GB/s; bytes read per decode step "
          f"{per_token / 1e9:.3f} GB; cap {cap:.2f} tokens/s; load_model {load_s:.2f} s")  # fmt: skip
    print(f"# compile: linnet jax prefill {prefill_compile:.2f} s, decode {decode_compile:.2f} s "
          f"(lowering + StableHLO + XLA); peer prefill {peer_prefill_compile:.2f} s, decode "
          f"{peer_decode_compile:.2f} s (jit lower + compile); ratio "
          f"{(prefill_compile + decode_compile) / (peer_prefill_compile + peer_decode_compile):.2f}x")  # fmt: skip
    print("| path | prefill ms | decode tokens/s | vs peer | ms/token | of the cap |")
    print("| --- | --- | --- | --- | --- | --- |")
    peer_decode = statistics.median(d for _, d in runs["peer"])
    rows = [
        ("linnet jax (load_model, StableHLO on XLA)", runs["jax"]),
        ("hand-written jax.numpy under jax.jit", runs["peer"]),
        ("linnet torch (compile=True)", runs["torch"]),
    ]
    for name, timings in rows:
        prefill = statistics.median(p for p, _ in timings)
        decode = statistics.median(d for _, d in timings)
        rate = steps / decode
        print(f"| {name} | {prefill * 1e3:.0f} | {rate:.2f} | {peer_decode / decode:.2f}x "
              f"| {decode / steps * 1e3:.1f} | {rate / cap:.0%} |")  # fmt: skip
    hf_decode = max(full - one, 1e-9)
    rate = steps / hf_decode
    print(f"| transformers eager generate | {one * 1e3:.0f} (with 1 token) | {rate:.2f} "
          f"| {peer_decode / hf_decode:.2f}x | {hf_decode / steps * 1e3:.1f} | {rate / cap:.0%} |")  # fmt: skip
    same = ours == theirs == torch_tokens == hf_tokens
    print(f"# greedy tokens equal on all four paths: {same}")


if __name__ == "__main__":
    main()
