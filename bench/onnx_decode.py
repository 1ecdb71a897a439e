"""Benchmark: batch-1 greedy decoding through `linnet.onnx.load_model` against transformers.

One Llama (examples/01-llama, transformers' `LlamaForCausalLM` written in
Linnet) with random weights, TinyLlama-1.1B-shaped by default (22 layers,
H=2048, 32 heads, 4 KV heads, f32), decodes greedily in the same process:

- linnet onnx: `prefill` over the prompt, then one `decode` per token with
  `argmax=True, keep_on_device=True`: the argmax is taken inside the graph and
  the token goes back in as the next input without leaving ONNX Runtime;
- transformers eager: `LlamaForCausalLM.generate(do_sample=False)` on the very
  same tensors (the Linnet weights are views of transformers' parameters).

Decode speed is what batch-1 generation costs per token. Each step reads every
weight but the embedding table once (the lookup reads one row), so tokens per
second are capped by the machine's read bandwidth divided by those bytes; the
bandwidth is measured in the same run (NumPy reductions over a buffer larger
than the caches, one thread per core, the best of five rounds of max and
sum). transformers' decode rate is its `generate` time for N new tokens minus
the time for one (the prefill and the first token), divided by N - 1.

Decoding runs twice through `load_model`: as loaded by default (dynamic
sessions allowed: an entry whose own sizes may vary gets one session for
every size where its graph allows, `linnet.onnx.runtime.model`) and with
`dynamic=False` (one session per input shape); the table prints both and
says which entries a dynamic session served.

It also shows that no KV-cache byte is copied per step: every cache is bound
as input and output of the decode graph and written in place (a scatter of
the new row), so its buffer address never changes and no second buffer is
ever written; the table lists the update mode of each state and the swaps.

    .venv/bin/python bench/onnx_decode.py [--small] [--layers N] [--prompt 16] [--new 48]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

SOURCE = ROOT / "examples" / "01-llama" / "src" / "lib.linnet"
TINYLLAMA = {"Vocab": 32000, "H": 2048, "Heads": 32, "KvHeads": 4, "Inner": 5632, "Layers": 22}
SMALL = {"Vocab": 256, "H": 64, "Heads": 4, "KvHeads": 2, "Inner": 176, "Layers": 2}
Array = np.ndarray[Any, Any]


def load_average() -> str:
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def read_bandwidth(gigabytes: float = 1.1, rounds: int = 5) -> float:
    """Bytes per second that reductions over a large f32 buffer read, all cores at once.

    The best over rounds and over two reductions: `np.max` is slower than a sum
    (it checks for NaN), and a probe that reads slower than the model's own
    kernels would overstate how close they come to the cap.
    """
    buffer = np.ones(int(gigabytes * 2**30) // 4, np.float32)
    threads = os.cpu_count() or 1
    parts = np.array_split(buffer, threads)
    best = float("inf")
    for _ in range(rounds):
        for kernel in (np.max, np.add.reduce):
            workers = [threading.Thread(target=kernel, args=(part,)) for part in parts]
            start = time.perf_counter()
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            best = min(best, time.perf_counter() - start)
    return buffer.nbytes / best


def ort_defaults() -> Any:
    """ONNX Runtime's default session options (full graph optimisation, spinning threads)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    return options


def hf_model(sizes: dict[str, int], max_seq: int) -> Any:
    """transformers' Llama with seeded random weights (norm weights perturbed from 1)."""
    import torch
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=sizes["Vocab"], hidden_size=sizes["H"], num_attention_heads=sizes["Heads"],
        num_key_value_heads=sizes["KvHeads"], head_dim=sizes["H"] // sizes["Heads"],
        intermediate_size=sizes["Inner"], num_hidden_layers=sizes["Layers"],
        max_position_embeddings=max_seq, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None,
        attn_implementation="eager",
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for name, value in model.named_parameters():
            if name.endswith("norm.weight"):
                value.add_(0.2 * torch.randn_like(value))
    return model


def linnet_generate(model: Any, prompt: Array, new: int) -> tuple[list[int], float, float]:
    """Greedy tokens, prefill seconds (incl. the first token), decode seconds for new - 1."""
    model.reset_state()
    start = time.perf_counter()
    first = model.run_entry("prefill", [prompt, 0], argmax=True)
    token = model.place(first[:, -1], "i32")
    prefill_s = time.perf_counter() - start
    kept = [token]
    start = time.perf_counter()
    for position in range(prompt.shape[1], prompt.shape[1] + new - 1):
        token = model.run_entry("decode", [token, position], argmax=True, keep_on_device=True)
        kept.append(token)
    decode_s = time.perf_counter() - start
    return [int(t.numpy()[0]) for t in kept], prefill_s, decode_s


def hf_generate(model: Any, prompt: Array, new: int) -> list[int]:
    import torch

    ids = torch.from_numpy(prompt.astype(np.int64))
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False)
    return [int(t) for t in out[0, prompt.shape[1] :]]


def timed(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a tiny model (smoke test)")
    parser.add_argument("--layers", type=int, help="override the number of layers")
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--new", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sizes = dict(SMALL if args.small else TINYLLAMA)
    if args.layers:
        sizes["Layers"] = args.layers
    max_seq = args.prompt + args.new

    import torch

    from linnet.ir.core import TensorType
    from linnet.onnx import load_model

    SCALAR = TensorType((), "i32")

    bandwidth = read_bandwidth()
    start = time.perf_counter()
    reference = hf_model(sizes, max_seq)
    weights = {name: t.detach().numpy() for name, t in reference.state_dict().items()}
    hf_s = time.perf_counter() - start
    generics = {**sizes, "Batch": 1, "MaxSeq": max_seq, "T": "f32"}
    model, load_s = timed(load_model, SOURCE, generics=generics, weights=weights)
    shared = all(model.weights[n].data_ptr() == a.ctypes.data for n, a in weights.items())

    prompt = np.random.default_rng(1).integers(0, sizes["Vocab"], (1, args.prompt))
    prompt = prompt.astype(np.int32)
    start = time.perf_counter()  # lower, export and make the two sessions
    model.prepare("prefill", [TensorType(prompt.shape, "i32"), SCALAR], argmax=True)
    model.prepare("decode", [TensorType((1,), "i32"), SCALAR], argmax=True)
    prepare_s = time.perf_counter() - start
    ours, _, _ = linnet_generate(model, prompt, args.new)  # warm-up
    addresses = {p: model.state_address(p) for p in model.state}
    swaps = model.swaps
    # The same model with ONNX Runtime's own default options (pool threads
    # spin), to show what load_model's CPU default (no spinning) is worth.
    spinning = load_model(SOURCE, generics=generics, weights=weights,
                          session_options=ort_defaults())  # fmt: skip
    linnet_generate(spinning, prompt, args.new)
    per_shape = load_model(SOURCE, generics=generics, weights=weights, dynamic=False)
    static_tokens, _, _ = linnet_generate(per_shape, prompt, args.new)
    runs, spun, static_runs = [], [], []
    for _ in range(args.rounds):  # interleaved, so that load changes hit all alike
        runs.append(linnet_generate(model, prompt, args.new))
        spun.append(linnet_generate(spinning, prompt, args.new))
        static_runs.append(linnet_generate(per_shape, prompt, args.new))
    moved = [p for p, a in addresses.items() if model.state_address(p) != a]
    ours_decode = statistics.median(r[2] for r in runs)
    ours_prefill = statistics.median(r[1] for r in runs)
    spun_decode = statistics.median(r[2] for r in spun)
    static_decode = statistics.median(r[2] for r in static_runs)
    static_prefill = statistics.median(r[1] for r in static_runs)

    theirs = hf_generate(reference, prompt, args.new)  # warm-up
    full = statistics.median(timed(hf_generate, reference, prompt, args.new)[1]
                             for _ in range(args.rounds))  # fmt: skip
    one = statistics.median(timed(hf_generate, reference, prompt, 1)[1] for _ in range(args.rounds))
    hf_decode = max(full - one, 1e-9)

    steps = args.new - 1
    embed = weights["model.embed_tokens.weight"].nbytes
    weight_bytes = sum(a.nbytes for a in weights.values())
    per_token = weight_bytes - embed + sum(v.nbytes for v in model.state.values())
    cap = bandwidth / per_token
    decode_session = next(s for s in model.sessions if s.entry == "decode")
    modes = sorted(set(decode_session.contract.update_modes.values()))
    cache_bytes = sum(v.nbytes for v in model.state.values())

    print(f"# Llama {sizes}, f32, {weight_bytes / 1e9:.2f} GB of weights; "
          f"prompt {args.prompt}, {args.new} new tokens, batch 1; "
          f"onnxruntime CPU, torch {torch.__version__}, {os.cpu_count()} cores, "
          f"load average {load_average()}")  # fmt: skip
    print(
        f"# read bandwidth (NumPy, {os.cpu_count()} threads): {bandwidth / 1e9:.1f} GB/s; "
        f"bytes read per decode step: {per_token / 1e9:.3f} GB (weights without the "
        f"embedding table, plus the KV cache); cap {cap:.2f} tokens/s"
    )
    print(
        f"# transformers init {hf_s:.1f} s; load_model {load_s:.2f} s (weights shared with "
        f"transformers, not copied: {shared}); prefill and decode lowered, exported and "
        f"made sessions in {prepare_s:.2f} s; linnet prefill {ours_prefill * 1e3:.0f} ms "
        f"(dynamic=False: {static_prefill * 1e3:.0f} ms)"
    )
    served = ", ".join(model.dynamic_entries) or "none"
    print(
        f"# entries served by one session for every size (dynamic sessions): {served}; "
        "prefill and decode here write the KV cache in place and take the argmax in the graph, "
        "so each keeps one session per shape"
    )
    print("| path | decode tokens/s | vs transformers | ms/token | GB/s read | of the cap |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, seconds in (("linnet onnx (load_model, dynamic sessions allowed)", ours_decode),
                          ("linnet onnx (load_model, dynamic=False)", static_decode),
                          ("linnet onnx, ONNX Runtime's default options", spun_decode),
                          ("transformers eager generate", hf_decode)):  # fmt: skip
        rate = steps / seconds
        print(
            f"| {name} | {rate:.2f} | {hf_decode / seconds:.2f}x | {seconds / steps * 1e3:.1f}"
            f" | {rate * per_token / 1e9:.1f} | {rate / cap:.0%} |"
        )
    print(
        f"# greedy tokens equal: {ours == theirs} (dynamic=False: {static_tokens == theirs}) "
        f"({sum(a == b for a, b in zip(ours, theirs, strict=True))}/{args.new})"
    )
    print(
        f"# KV cache ({len(addresses)} state buffers, {cache_bytes / 1e6:.1f} MB): decode "
        f"update modes {modes}; buffers moved over {args.rounds * steps} decode steps: "
        f"{len(moved)}; second buffers written (swaps): {model.swaps - swaps}; "
        f"KV-cache bytes copied per step: "
        f"{0 if modes == ['in_place'] and not moved else cache_bytes}"
    )


if __name__ == "__main__":
    main()
