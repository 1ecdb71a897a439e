"""Benchmark: batch-1 greedy decoding of f32, int8 and int4-group weights, side by side.

One Llama (examples/01-llama; its quantised variants from
examples/01-llama/quantised.py) with seeded random weights, TinyLlama-1.1B
shaped by default (22 layers, H=2048, 32 heads, 4 KV heads), decodes
greedily in one process, each precision through both backends:

- `linnet.onnx.load_model`: int4 linears run as ONNX Runtime's `MatMulNBits`
  on pre-packed weights, int8 ones on weights dequantised once at load (its
  8-bit kernel has no fast f32 path); prefill, then `decode` with the argmax
  in the graph and the token kept in ONNX Runtime. Both also run with
  `int8_activations=True` (llama.cpp's Q4_0 / Q8_0 trade: `MatMulNBits` with
  activations rounded to int8 per block, a different function);
- `linnet.torch.load` (generated code): int8 and int4 linears run on
  `linnet.native`'s kernels, which read the packed bytes (the std function in
  f32; `linnet/torch/natives_quant.py`), so its quantised rows read the stored
  bytes (and the f32 linears of a decode step run on its f32 kernel); without a C compiler (or with `LINNET_NATIVE=0`) they are dequantised
  once at load and read f32 bytes, and the run says which. FP8 and MXFP4
  always take the dequantised path. The process's resident memory after each
  path's warm-up is printed (no f32 copy of a quantised weight on the kernels'
  path), and the peak at the end. `--int8-activations` adds `linnet.torch,
  int8_activations` rows for int8 and int4 (`linnet.torch.load(...,
  int8_activations=True)`: the activations rounded to int8 per block and VNNI
  integer dot products, the function of the `load_model` rows with
  `int8_activations`, llama.cpp's trade).

The float checkpoint is quantised by `linnet.quant.quantize_checkpoint`
(round to nearest; every projection and `lm_head`) before timing. Batch-1
decoding reads every weight once per token (all but the embedding table), so
tokens/s are capped by read bandwidth over bytes per token; the bandwidth is a
NumPy probe in the same run (`bench/onnx_decode.py`'s).

llama.cpp (when `llama_cpp` is importable; otherwise its rows are left out
with a note) decodes GGUF files of the same weights, each in a child process
(`bench/llama_cpp_runs.py`): f32 from the float checkpoint, Q8_0 from the
int8 checkpoint's integers (`Int8Linear` rows are Q8_0 blocks with the row's
scale), Q4_0 from the f32 file by llama.cpp's `llama_model_quantize` (the
int4 group-128 asymmetric layout has no GGUF block type; the run says which
way each file was made), with `--threads` threads (also linnet.torch's, by
`torch.set_num_threads`; ONNX Runtime keeps its default pool; default: the CPUs this
process may use, ONNX Runtime's default pool size here), the same prompt and
number of new tokens, greedy, decode timed alone, its rounds alternating with
ours (each of its rounds a child process of its own: one warm-up, one timed
decode), so that a busy machine slows both alike. The `vs llama.cpp` column is
ours over llama.cpp's rate at the matching precision (f32 / Q8_0 / Q4_0).

ONNX Runtime GenAI (when `onnxruntime_genai` and its model builder's imports
work in a child; otherwise a note says why; `--no-genai` leaves it out) is one
more peer of the int4-g128 variant, `bench/genai_runs.py`: a Hugging Face
folder of the same float weights (`linnet.hf.export`) through its model
builder, `-p int4 -e cpu --extra_options block_size=128 accuracy_level=4
is_symmetric=false` (its int4 blocks as wide as our groups, `--group`; uint4
with zero points, our layout and ONNX Runtime's round-to-nearest, as ours;
accuracy level 4, the builder's CPU default, rounds the activations to int8
per block: the function of our `int8_activations` rows and llama.cpp's trade),
decoded greedily by `og.Generator` with `--threads` intra-op threads, timed
like llama.cpp (a child per round, alternating with ours). Its row's `vs
llama.cpp` is against Q4_0; it has no f32 row of its own, so no `vs f32`; its
MB/token counts its f32 KV cache. It loads the venv's `onnxruntime`, so both
sides run the same ONNX Runtime. A bench-only peer, installed outside the venv:
`python -m pip install --no-deps --target SITE onnxruntime-genai==0.18.0`, then
`PYTHONPATH=SITE`. Its build time, the block sizes / accuracy levels read
back from the built model and the builder's peak memory are printed in the
header. The builder (a child) holds the float model in torch and then in ONNX:
about 2.3x the float weights plus 0.8 GB at its peak (2.8 GB for a 2-layer,
3.6 GB for a 4-layer TinyLlama-shaped model), so about 11 GB at TinyLlama
shape (an estimate, not measured), while this process holds its checkpoints:
`--no-genai` where memory is short.

`--extra fp8,mxfp4` adds the FP8 (E4M3 rows) and MXFP4 variants
(`quantize_checkpoint(scheme=...)`); ONNX Runtime has no kernel for them, so
`load_model` decodes them from the bytes on every call (the std body), and
`linnet.torch` dequantises them once.

    .venv/bin/python bench/quant_decode.py [--shape tinyllama|medium|small] [--layers N]
        [--group 128] [--new 32] [--rounds 2] [--no-torch] [--no-onnx] [--extra fp8,mxfp4]
        [--threads N] [--no-llama-cpp] [--no-genai] [--no-dequantised] [--int8-activations]
        [--no-f32]

`--no-onnx` leaves out every `load_model` row (linnet.torch against llama.cpp
only: shorter, and less memory).

(with llama.cpp built elsewhere: `PYTHONPATH=/path/to/site` holding `llama_cpp`; the
same for `onnxruntime_genai`)

llama.cpp from the registry (`pip install --target SITE --no-deps llama-cpp-python==0.3.36
diskcache`, about 5 minutes on 2 cores) builds for the building CPU. On an Intel Xeon that
advertises AMX but whose VM does not let it run, that build dies in
`ggml_backend_amx_mul_mat` on the first Q8_0 / Q4_0 product (a segfault: the child's exit
code -11); there, build it with every other feature of the CPU and AMX off:

    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
    -DGGML_BMI2=ON -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON
    -DGGML_AVX512_BF16=ON -DGGML_AVX_VNNI=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF
    -DGGML_AMX_BF16=OFF" pip install --no-cache-dir ...

(`llama_cpp.llama_print_system_info()` then lists AVX512_VNNI, AVX512_BF16 and REPACK, as
the native build does, without AMX.)
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
EXAMPLE = ROOT / "examples" / "01-llama"
SOURCE = EXAMPLE / "src" / "lib.linnet"
TINYLLAMA = {"Vocab": 32000, "H": 2048, "Heads": 32, "KvHeads": 4, "Inner": 5632, "Layers": 22}
MEDIUM = {"Vocab": 8192, "H": 1024, "Heads": 16, "KvHeads": 4, "Inner": 2816, "Layers": 4}
SMALL = {"Vocab": 256, "H": 64, "Heads": 4, "KvHeads": 2, "Inner": 176, "Layers": 2}
SHAPES = {"tinyllama": TINYLLAMA, "medium": MEDIUM, "small": SMALL}
Array = np.ndarray[Any, Any]


def file_module(name: str, path: Path) -> ModuleType:
    """The Python file at `path` imported as module `name` (the example's helpers, other benches)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def torch_decode(module: Any, prompt: Array, new: int) -> tuple[list[int], float]:
    import torch

    module.reset_state()
    with torch.no_grad():
        logits = module.run_entry("prefill", [torch.from_numpy(prompt), 0])
        token = logits[:, -1].argmax(-1).to(torch.int32)
        kept = [int(token[0])]
        start = time.perf_counter()
        for position in range(prompt.shape[1], prompt.shape[1] + new - 1):
            token = module.run_entry("decode", [token, position]).argmax(-1).to(torch.int32)
            kept.append(int(token[0]))
        seconds = time.perf_counter() - start
    return kept, seconds


def progress(text: str) -> None:
    print(f"# {time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)


def rss() -> float:
    """This process's resident bytes now."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0


PEERS = {"f32": "f32", "int8": "q8_0", "int4": "q4_0"}
"""Our precision (its name up to `-g`) -> the llama.cpp GGUF type it is compared with."""


def peer_of(name: str) -> str | None:
    return PEERS.get(name.split("-g")[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--shape", choices=sorted(SHAPES), default="tinyllama",
        help="tinyllama (1.1B), medium (61M: H=1024, 4 layers) or small (a smoke test)",
    )  # fmt: skip
    parser.add_argument("--layers", type=int, help="override the number of layers")
    parser.add_argument("--group", type=int, help="int4 group size (default 128; 16 if --small)")
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-torch", action="store_true", help="ONNX Runtime only")
    parser.add_argument("--no-onnx", action="store_true", help="linnet.torch (and llama.cpp) only")
    parser.add_argument("--extra", default="", help="comma-separated: fp8, mxfp4")
    parser.add_argument(
        "--threads", type=int, default=len(os.sched_getaffinity(0)),
        help="llama.cpp's and linnet.torch's threads (default: the CPUs this process may use)",
    )  # fmt: skip
    parser.add_argument("--no-llama-cpp", action="store_true", help="leave llama.cpp out")
    parser.add_argument(
        "--no-genai", action="store_true", help="leave ONNX Runtime GenAI's int4 builder model out"
    )  # fmt: skip
    parser.add_argument(
        "--no-f32", action="store_true",
        help="leave out the f32 rows (ours and llama.cpp's): about 9 GB less at TinyLlama shape",
    )  # fmt: skip
    parser.add_argument(
        "--int8-activations", action="store_true",
        help="add linnet.torch rows for int8 and int4 with int8_activations=True",
    )  # fmt: skip
    parser.add_argument(
        "--no-dequantised", action="store_true",
        help="leave out the load_model rows that dequantise int8 / fp8 / mxfp4 weights at load "
        "(f32 speed; each of their sessions folds an f32 copy: about 9 GB at TinyLlama shape)",
    )  # fmt: skip
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="quant-decode-") as scratch:
        run(args, Path(scratch))


def run(args: argparse.Namespace, folder: Path) -> None:
    sizes = dict(SHAPES[args.shape])
    if args.layers:
        sizes["Layers"] = args.layers
    group = args.group or (16 if args.shape == "small" else 128)
    max_seq = args.prompt + args.new
    generics = {**sizes, "Batch": 1, "MaxSeq": max_seq, "T": "f32"}

    import torch

    torch.set_num_threads(args.threads)
    import linnet.onnx
    import linnet.torch
    from linnet.ir.core import TensorType
    from linnet.native import kernels, status
    from linnet.quant import quantize_checkpoint
    from linnet.weights import read_safetensors

    native_kernels = None if args.no_torch else kernels()
    resident: dict[tuple[str, str], float] = {}
    decode_bench = file_module("onnx_decode_bench", ROOT / "bench" / "onnx_decode.py")
    peer = file_module("llama_cpp_runs", ROOT / "bench" / "llama_cpp_runs.py")
    with_peer = not args.no_llama_cpp and peer.available()
    genai = file_module("genai_runs", ROOT / "bench" / "genai_runs.py")
    with_genai, genai_why = (False, "--no-genai") if args.no_genai else genai.available()
    if with_genai and group not in genai.BLOCK_SIZES:
        with_genai, genai_why = False, f"the builder has no block size {group}"

    def onnx_decode(model: Any, prompt: Array, new: int) -> tuple[list[int], float]:
        """Greedy tokens and the seconds of the new - 1 decode steps (`onnx_decode.py`'s)."""
        kept, _, seconds = decode_bench.linnet_generate(model, prompt, new)
        return kept, seconds

    make_weights = file_module("llama_make_weights", EXAMPLE / "make_weights.py")
    quantised = file_module("llama_quantised", EXAMPLE / "quantised.py")

    bandwidth = decode_bench.read_bandwidth()
    start = time.perf_counter()
    floats = make_weights.make_weights(generics, seed=0)
    made_s = time.perf_counter() - start
    variants: dict[str, tuple[Path, Any]] = {"f32": (SOURCE, floats)}
    quantise_s = {}
    progress(f"weights made in {made_s:.1f} s; quantising")
    extra = [e for e in args.extra.split(",") if e]
    for bits, name, scheme in (
        (8, "int8", "int"),
        (4, f"int4-g{group}", "int"),
        *((4, e, e) for e in extra),
    ):
        source = folder / f"{name}.linnet"
        source.write_text(quantised.quantised_source(bits, group, scheme=scheme))
        start = time.perf_counter()
        target = folder / f"{name}.safetensors"
        quantize_checkpoint(
            floats, target, patterns=quantised.PATTERNS, bits=bits, group=group, scheme=scheme
        )
        quantise_s[name] = time.perf_counter() - start
        variants[name] = (source, read_safetensors(target))

    ggufs: dict[str, tuple[Path, str]] = {}
    if with_peer:
        progress("GGUF files for llama.cpp")
        start = time.perf_counter()
        peer_sources = {
            peer_of(n): v for n, v in variants.items() if n != "f32" and peer_of(n) is not None
        }
        ggufs = peer.write_ggufs(folder, generics, variants["f32"], peer_sources)
        gguf_s = time.perf_counter() - start
    built: Any = None
    if with_genai:
        progress("ONNX Runtime GenAI's int4 model (linnet.hf.export, then its model builder)")
        built = genai.write_model(folder, generics, variants["f32"], block_size=group)

    prompt = np.random.default_rng(1).integers(0, sizes["Vocab"], (1, args.prompt))
    prompt = prompt.astype(np.int32)
    scalar = TensorType((), "i32")
    steps = args.new - 1
    # (path family, path, weights shown, our precision, seconds, bytes read per token)
    rows: list[tuple[str, str, str, str, float, float]] = []
    tokens: dict[tuple[str, str], list[int]] = {}
    embed = floats["model.embed_tokens.weight"].nbytes
    dense_bytes = sum(a.nbytes for a in floats.values())
    if args.no_f32:
        del variants["f32"], floats  # the f32 rows are left out: free the float weights
    cache = 2 * sizes["Layers"] * sizes["KvHeads"] * max_seq * (sizes["H"] // sizes["Heads"])
    for name, (source, weights) in variants.items():
        stored = sum(a.nbytes for a in weights.values()) - embed + 4 * cache
        dense = dense_bytes - embed + 4 * cache
        # ONNX Runtime reads int8 weights it dequantised at load, unless int8_activations
        read = dense if name in ("int8", "fp8", "mxfp4") else stored
        model: Any = None
        fast: Any = None
        module: Any = None
        rounding: Any = None
        runs: list[Callable[[], tuple[list[int], float]]] = []
        labels = []
        if not args.no_onnx and not (args.no_dequantised and read == dense and name != "f32"):
            progress(f"{name}: load_model and sessions")
            model = linnet.onnx.load_model(source, generics=generics, weights=weights)
            model.prepare("prefill", [TensorType(prompt.shape, "i32"), scalar], argmax=True)
            model.prepare("decode", [TensorType((1,), "i32"), scalar], argmax=True)
            runs.append(lambda m=model: onnx_decode(m, prompt, args.new))
            labels.append(("linnet.onnx (load_model)", read))
        if name in ("int8", f"int4-g{group}") and not args.no_onnx:
            progress(f"{name}: load_model(int8_activations=True) and sessions")
            fast = linnet.onnx.load_model(
                source, generics=generics, weights=weights, int8_activations=True
            )
            fast.prepare("prefill", [TensorType(prompt.shape, "i32"), scalar], argmax=True)
            fast.prepare("decode", [TensorType((1,), "i32"), scalar], argmax=True)
            runs.append(lambda m=fast: onnx_decode(m, prompt, args.new))
            labels.append(("linnet.onnx, int8_activations", stored))
        if not args.no_torch:
            progress(f"{name}: linnet.torch.load")
            module = linnet.torch.load(source, generics=generics, weights=weights, compile=True)
            runs.append(lambda m=module: torch_decode(m, prompt, args.new))
            packed = name in ("int8", f"int4-g{group}") and native_kernels is not None
            labels.append(("linnet.torch", stored if packed else dense))
        if not args.no_torch and args.int8_activations and name in ("int8", f"int4-g{group}"):
            progress(f"{name}: linnet.torch.load(int8_activations=True)")
            rounding = linnet.torch.load(
                source, generics=generics, weights=weights, compile=True, int8_activations=True
            )
            runs.append(lambda m=rounding: torch_decode(m, prompt, args.new))
            labels.append(("linnet.torch, int8_activations", stored if packed else dense))
        outtype = peer_of(name)
        threads = f"{args.threads} thread{'s' if args.threads > 1 else ''}"
        # this variant's peers: (label, weights shown, its runs module with a `decode_in_child`,
        # the file or folder it decodes, bytes per KV cache value)
        children: list[tuple[str, str, ModuleType, Path, int]] = []
        if outtype in ggufs:  # llama.cpp's KV cache is f16 by default
            children.append((f"llama.cpp, {threads}", outtype.upper(), peer, ggufs[outtype][0], 2))
        if built is not None and name == f"int4-g{group}":
            label = f"ONNX Runtime GenAI, {threads}"
            children.append((label, "INT4 (builder)", genai, built.path, built.kv_itemsize))
        for go, (label, _) in zip(runs, labels, strict=True):
            progress(f"{name}: {label} warm-up")
            tokens[(label, name)] = go()[0]  # lowering, session creation, dequantise once
            resident[(label, name)] = rss()
        # alternated rounds: ours, then each peer's (a child process each), `rounds` times, so
        # that a busy machine slows all alike
        ours: list[list[float]] = [[] for _ in runs]
        theirs: list[list[float]] = [[] for _ in children]
        peer_done: list[dict[str, Any]] = [{} for _ in children]
        for round_ in range(args.rounds):
            for i, go in enumerate(runs):
                ours[i].append(go()[1])
            for i, (_, _, runner, path, _) in enumerate(children):
                peer_done[i] = runner.decode_in_child(
                    path, prompt[0].tolist(), args.new, args.threads, 1
                )
                theirs[i].append(peer_done[i]["seconds"])
            progress(
                f"{name} round {round_ + 1}: "
                + ", ".join(
                    [f"{who} {steps / t[-1]:.2f}" for (who, _), t in zip(labels, ours, strict=True)]
                    + [
                        f"{who} {shown} {steps / t[-1]:.2f}"
                        for (who, shown, *_), t in zip(children, theirs, strict=True)
                    ]
                )
                + " tokens/s"
            )
        for (label, per_token), times in zip(labels, ours, strict=True):
            rows.append((label, label, name, name, statistics.median(times), per_token))
        del model, fast, module, rounding, runs  # before the next variant
        for (label, shown, _, _, kv), times, done in zip(children, theirs, peer_done, strict=True):
            per_token = done["bytes"] + kv * cache
            rows.append((label, label, shown, name, statistics.median(times), per_token))
            tokens[(label, shown)] = done["tokens"]

    print(
        f"# Llama {sizes}, batch 1, prompt {args.prompt}, {args.new} new tokens "
        f"({steps} timed decode steps, median of {args.rounds}); {os.cpu_count()} cores, "
        f"load average {decode_bench.load_average()}; torch {torch.__version__}"
    )
    print(
        f"# read bandwidth (NumPy probe): {bandwidth / 1e9:.1f} GB/s; random weights made in "
        f"{made_s:.1f} s; quantised (rtn, every projection and lm_head) in "
        + ", ".join(f"{k} {v:.1f} s" for k, v in quantise_s.items())
    )
    if ggufs:
        print(f"# GGUF files written in {gguf_s:.1f} s:")
        for outtype, (_, how) in ggufs.items():
            print(f"#   {outtype.upper()}: {how}")
    if built is not None:
        print(
            f"# ONNX Runtime GenAI model (int4-g{group}'s peer; {genai_why}) written in "
            f"{built.export_s + built.build_s:.1f} s (linnet.hf.export {built.export_s:.1f} s, "
            f"builder {built.build_s:.1f} s): {built.how}"
        )
    print(
        "| path | weights | tokens/s | vs f32 | vs llama.cpp | ms/token | MB/token | GB/s "
        "| of bandwidth |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    base = {family: seconds for family, _, _, name, seconds, _ in rows if name == "f32"}
    peers = {name: seconds for family, _, _, name, seconds, _ in rows if family.startswith("llama")}
    onnx_f32 = base.get("linnet.onnx (load_model)", base.get("linnet.torch", 0.0))
    for family, label, shown, name, seconds, per_token in rows:
        rate = steps / seconds
        versus = (
            f"{peers[name] / seconds:.2f}x"
            if name in peers and not family.startswith("llama")
            else ""
        )
        # GenAI has no f32 row of its own: no vs f32 (our f32 is no baseline for its model)
        f32 = base.get(family, 0.0 if family.startswith("ONNX Runtime GenAI") else onnx_f32)
        versus_f32 = f"{f32 / seconds:.2f}x" if f32 else ""
        print(
            f"| {label} | {shown} | {rate:.2f} | {versus_f32} | "
            f"{versus} | {seconds / steps * 1e3:.1f} | {per_token / 1e6:.1f} | "
            f"{rate * per_token / 1e9:.1f} | {rate * per_token / bandwidth:.0%} |"
        )
    first = "linnet.torch" if args.no_onnx else "linnet.onnx (load_model)"
    if (first, "f32") in tokens:
        reference = tokens[(first, "f32")]
        agree = ", ".join(
            f"{label} {name} {sum(a == b for a, b in zip(kept, reference, strict=True))}/{args.new}"
            for (label, name), kept in tokens.items()
        )
        print(f"# greedy tokens equal to {first} f32: {agree}")
    genai_tokens = [(k, v) for k, v in tokens.items() if k[0].startswith("ONNX Runtime GenAI")]
    for (label, shown), kept in genai_tokens:  # the same quantiser as ours: how close is it?
        int4 = f"int4-g{group}"
        agree = ", ".join(
            f"{ours} {sum(a == b for a, b in zip(mine, kept, strict=True))}/{args.new}"
            for (ours, name), mine in tokens.items()
            if name == int4
        )
        print(f"# greedy tokens of {label} {shown} equal to ours at {int4}: {agree}")
    native_line = (
        f"int8 and int4 on linnet.native's kernels ({status().path}, packed bytes)"
        if native_kernels is not None
        else f"every precision dequantised to f32 (linnet.native: {status().reason})"
    )
    print(
        f"# MB/token is what each path reads per step: linnet.torch: {native_line}; the "
        "ONNX int8, fp8 and mxfp4 rows without int8_activations read f32 weights dequantised "
        "once at load; llama.cpp's KV cache is f16"
        + (f", ONNX Runtime GenAI's f{8 * built.kv_itemsize}" if built is not None else "")
    )
    print(
        "# resident memory after each warm-up: "
        + ", ".join(f"{label} {name} {v / 1e9:.1f} GB" for (label, name), v in resident.items())
        + f"; peak {peak_rss() / 1e9:.1f} GB"
    )
    if not ggufs:
        why = (
            "--no-llama-cpp"
            if args.no_llama_cpp
            else "`llama_cpp` is not importable here (llama-cpp-python is not built)"
        )
        print(f"# llama.cpp: left out ({why})")
    if built is None:
        print(f"# ONNX Runtime GenAI: left out ({genai_why})")


if __name__ == "__main__":
    main()
