"""ONNX Runtime GenAI's side of the decode benchmarks: its int4 model builder on our weights.

Used by `bench/quant_decode.py` (run there, not alone), as `bench/llama_cpp_runs.py`
is for llama.cpp. Each GenAI call runs in a child process of its own (`python
bench/genai_runs.py build ...` / `decode ...`, one JSON line on stdout), so
that its model leaves the parent's memory alone and is gone when the child exits.

- `write_model` writes a Hugging Face Llama folder of the same float weights
  with `linnet.hf.export` (and `llama_cpp_runs.write_vocabulary`'s throwaway
  vocabulary: the builder loads the folder's tokenizer with `AutoTokenizer` and
  fails without one), then runs the model builder on it in a child: `python -m
  onnxruntime_genai.models.builder -i HF -o OUT -p int4 -e cpu --extra_options
  block_size=B accuracy_level=A is_symmetric=false`. `block_size` is our int4
  group (128 by default; the builder's own default is 32); `is_symmetric=false`
  gives uint4 with a zero point per block, our `Int4GroupLinear` layout (its
  round-to-nearest is ONNX Runtime's quantiser, as ours is), where the
  builder's default is symmetric int4; `accuracy_level=4` is the builder's CPU
  default, said out loud: `MatMulNBits` rounds the activations to int8 per
  block (llama.cpp's trade, and our `int8_activations` rows'). The build reads
  back the block sizes and accuracy levels of the model's `MatMulNBits` nodes,
  and the run prints them. Like ours, it quantises every projection and
  `lm_head` (the builder fuses q/k/v into one matrix); the token embedding
  stays f32.
- `decode` (the child): `og.Model` from an `og.Config` whose decoder session
  has `intra_op_num_threads` = `--threads` (`Config.overlay`), greedy search
  (`do_sample=False`, `max_length` = prompt + new), the prompt in one
  `append_tokens` (the prefill), then `generate_next_token` once per new token:
  the first picks the argmax of the prefill's logits, each later one runs a
  decode step first; timed from the first new token on, as
  `llama_cpp_runs.py` times llama.cpp: one warm-up, then the median of
  `rounds`. `bytes` is what a step reads of the model's weights: its
  initializers (external data included) less the token embedding table.

onnxruntime-genai loads the `onnxruntime` package of the same interpreter
(here the venv's, so both sides run the same ONNX Runtime). It is a bench-only
peer, installed outside the project's environment, e.g.

    python -m pip install --no-deps --target SITE onnxruntime-genai==0.18.0
    PYTHONPATH=SITE .venv/bin/python bench/quant_decode.py ...

(the builder also imports torch, transformers and onnx_ir, which the venv has).

    python bench/genai_runs.py check
    python bench/genai_runs.py build HF_FOLDER OUT --block-size 128 --accuracy-level 4
    python bench/genai_runs.py decode MODEL_DIR --tokens 1,2,3 --new 32 --threads 2
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BLOCK_SIZES = (16, 32, 64, 128, 256)
"""The builder's `block_size` choices."""
BUILDER = "onnxruntime_genai.models.builder"


@dataclass(frozen=True)
class Built:
    """A model the builder wrote: its folder, how it was made, and what a decode step reads."""

    path: Path
    how: str
    export_s: float
    build_s: float
    kv_itemsize: int
    """Bytes per element of its KV cache (the builder's CPU int4 model: f32)."""


def available() -> tuple[bool, str]:
    """(whether `onnxruntime_genai` and its builder's imports work here, the version or why not).

    Checked in a child, as every GenAI call is."""
    if importlib.util.find_spec("onnxruntime_genai") is None:
        return (
            False,
            "`onnxruntime_genai` is not importable here (onnxruntime-genai is not installed)",
        )
    try:
        found = _child(["check"])
    except RuntimeError as error:
        return False, str(error)
    return True, f"onnxruntime-genai {found['version']} on onnxruntime {found['onnxruntime']}"


def _llama_cpp_runs() -> ModuleType:
    """`bench/llama_cpp_runs.py` (for its `write_vocabulary`), imported by path."""
    name = "llama_cpp_runs"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / "llama_cpp_runs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def write_model(
    folder: Path,
    generics: Mapping[str, object],
    f32: tuple[Path, Mapping[str, Any]],
    block_size: int = 128,
    accuracy_level: int = 4,
) -> Built:
    """The builder's int4 model of the float checkpoint `f32` (source, weights) in
    `folder / "genai-int4"`, by way of a Hugging Face folder `folder / "hf"`."""
    import linnet.hf

    if block_size not in BLOCK_SIZES:
        raise ValueError(f"the builder's block_size is one of {BLOCK_SIZES}, not {block_size}")
    vocabulary = _llama_cpp_runs().write_vocabulary(folder / "genai-vocabulary")
    source, weights = f32
    start = time.perf_counter()
    hf = folder / "hf"
    linnet.hf.export(source, hf, generics=generics, weights=weights, tokenizer=vocabulary)
    export_s = time.perf_counter() - start
    out = folder / "genai-int4"
    done = _child(["build", str(hf), str(out), "--block-size", str(block_size),
                   "--accuracy-level", str(accuracy_level), "--cache", str(folder / "genai-cache")])  # fmt: skip
    how = (
        f"onnxruntime-genai {done['version']} builder (-p int4 -e cpu --extra_options "
        f"{' '.join(done['options'])}) on linnet.hf.export of the float checkpoint: "
        f"{done['matmulnbits']} MatMulNBits, block sizes {done['block_sizes']}, accuracy levels "
        f"{done['accuracy_levels']}, {'with' if done['zero_points'] else 'without'} zero points; "
        f"the builder's peak resident memory {done['peak_rss'] / 1e9:.1f} GB"
    )
    return Built(out, how, export_s, done["seconds"], done["kv_itemsize"])


def decode_in_child(
    model_dir: Path, tokens: list[int], new: int, threads: int, rounds: int
) -> dict[str, Any]:
    """`decode` in a child process: {"seconds", "tokens", "bytes", "load_s"}."""
    return _child(_llama_cpp_runs().decode_arguments(model_dir, tokens, new, threads, rounds))


def _child(arguments: list[str]) -> dict[str, Any]:
    result: dict[str, Any] = _llama_cpp_runs().run_child(
        Path(__file__), "ONNX Runtime GenAI", arguments
    )
    return result


def _graph(model_dir: Path) -> Any:
    import onnx

    config = json.loads((model_dir / "genai_config.json").read_text())
    filename = config["model"]["decoder"]["filename"]
    return onnx.load(model_dir / filename, load_external_data=False).graph


def weight_bytes(model_dir: Path) -> int:
    """Bytes of the initializers a decode step reads (inline or external data): all but the
    token embedding table (the initializer gathered by `input_ids`)."""
    import numpy as np
    import onnx.helper

    graph = _graph(model_dir)
    embedding = {
        node.input[0]
        for node in graph.node
        if node.op_type == "Gather" and "input_ids" in node.input
    }
    total = 0
    for tensor in graph.initializer:
        if tensor.name in embedding:
            continue
        count = int(np.prod(tensor.dims))
        if tensor.data_type in (onnx.TensorProto.UINT4, onnx.TensorProto.INT4):
            total += (count + 1) // 2
        else:
            total += (
                count * np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)).itemsize
            )
    return total


def _check() -> dict[str, Any]:
    import onnxruntime
    import onnxruntime_genai

    for needed in ("onnx_ir", "torch", "transformers"):  # the builder's imports
        if importlib.util.find_spec(needed) is None:
            raise ImportError(f"the model builder needs `{needed}`, which is not importable")
    return {"version": onnxruntime_genai.__version__, "onnxruntime": onnxruntime.__version__}


def _build(
    hf: Path, out: Path, block_size: int, accuracy_level: int, cache: Path
) -> dict[str, Any]:
    import resource

    import numpy as np
    import onnx.helper
    import onnxruntime_genai

    options = [f"block_size={block_size}", f"accuracy_level={accuracy_level}", "is_symmetric=false"]
    command = [sys.executable, "-m", BUILDER, "-i", str(hf), "-o", str(out), "-p", "int4",
               "-e", "cpu", "-c", str(cache), "--extra_options", *options]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command[1:])} failed (exit code {done.returncode}): "
            f"{(done.stdout + done.stderr)[-1500:]}"
        )
    graph = _graph(out)
    nodes = [node for node in graph.node if node.op_type == "MatMulNBits"]

    def values(name: str) -> list[int]:
        found = {
            int(onnx.helper.get_attribute_value(a))
            for node in nodes
            for a in node.attribute
            if a.name == name
        }
        return sorted(found)

    past = next(i for i in graph.input if i.name.startswith("past_key_values"))
    kv = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(past.type.tensor_type.elem_type))
    return {
        "seconds": seconds,
        # the builder's peak resident memory (it holds the float model in torch, then the ONNX one)
        "peak_rss": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024,
        "version": onnxruntime_genai.__version__,
        "options": options,
        "matmulnbits": len(nodes),
        "block_sizes": values("block_size"),
        "accuracy_levels": values("accuracy_level"),
        "zero_points": all(len(node.input) > 3 and node.input[3] for node in nodes),
        "kv_itemsize": kv.itemsize,
    }


def _decode(
    model_dir: Path, prompt: list[int], new: int, threads: int, rounds: int
) -> dict[str, Any]:
    import onnxruntime_genai as og

    start = time.perf_counter()
    config = og.Config(str(model_dir))
    threading = {"intra_op_num_threads": threads}
    config.overlay(json.dumps({"model": {"decoder": {"session_options": threading}}}))
    model = og.Model(config)
    load_s = time.perf_counter() - start

    def run() -> tuple[list[int], float]:
        params = og.GeneratorParams(model)
        params.set_search_options(do_sample=False, max_length=len(prompt) + new)
        generator = og.Generator(model, params)
        generator.append_tokens(prompt)  # the prefill: the prompt's logits
        generator.generate_next_token()  # the first new token: the prefill's argmax
        start = time.perf_counter()
        for _ in range(new - 1):
            generator.generate_next_token()  # one decode step, then its argmax
        seconds = time.perf_counter() - start
        kept = [int(t) for t in generator.get_sequence(0)[len(prompt) :]]
        return kept, seconds

    kept, _ = run()  # warm-up
    seconds = statistics.median(run()[1] for _ in range(rounds))
    return {"seconds": seconds, "tokens": kept, "bytes": weight_bytes(model_dir), "load_s": load_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("check")
    build = commands.add_parser("build")
    build.add_argument("hf", type=Path, help="a Hugging Face folder (with tokenizer files)")
    build.add_argument("out", type=Path)
    build.add_argument("--block-size", type=int, choices=BLOCK_SIZES, default=128)
    build.add_argument("--accuracy-level", type=int, choices=(1, 2, 3, 4), default=4)
    build.add_argument("--cache", type=Path, required=True, help="the builder's cache folder")
    _llama_cpp_runs().add_decode_command(commands, "model_dir")
    args = parser.parse_args()
    if args.command == "check":
        result = _check()
    elif args.command == "build":
        result = _build(args.hf, args.out, args.block_size, args.accuracy_level, args.cache)
    else:
        prompt = [int(t) for t in args.tokens.split(",")]
        result = _decode(args.model_dir, prompt, args.new, args.threads, args.rounds)
    print(json.dumps(result))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    main()
