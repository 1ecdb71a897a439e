"""Benchmark: bytes on disk and logit error of every `std.quant` scheme, SafeTensors and GGUF.

One Llama (examples/01-llama) with seeded random weights (`make_weights`:
projections N(0, 1/In)), medium-shaped by default (H=1024, 2 layers, vocab
8192). Its float checkpoint is quantised by `linnet.quant.quantize_checkpoint`
into each scheme (every projection and `lm_head`): int8 rows, int4 groups of
128 and of 32, FP8 E4M3 rows, MXFP4 blocks. For each: the SafeTensors size,
the GGUF size `linnet.gguf.export` writes from it (its linears' GGUF type:
Q8_0, Q4_1 and MXFP4 keep the integers; int4-g128 and FP8 have no block form
and are written dequantised at the outtype f16; other floats f16), and the
logits of 32 prompt tokens through `linnet.torch` against the f32 model's:
max |error|, RMS error over RMS logit, and how many argmaxes agree. Random
Gaussian weights have no outliers to protect, so the errors are the formats'
own rounding, not what a trained model shows.

    .venv/bin/python bench/quant_sizes.py [--layers 2] [--vocab 8192] [--tokens 32]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
EXAMPLE = ROOT / "examples" / "01-llama"
SOURCE = EXAMPLE / "src" / "lib.linnet"
VARIANTS = (  # name, bits, group, scheme
    ("int8", 8, 128, "int"),
    ("int4-g128", 4, 128, "int"),
    ("int4-g32", 4, 32, "int"),
    ("fp8", 8, 128, "fp8"),
    ("mxfp4", 4, 32, "mxfp4"),
)


def _module(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--tokens", type=int, default=32)
    args = parser.parse_args()

    import gguf
    import torch

    import linnet.gguf
    import linnet.torch
    from linnet.quant import quantize_checkpoint
    from linnet.weights import save_safetensors

    make_weights = _module("llama_make_weights", EXAMPLE / "make_weights.py")
    quantised = _module("llama_quantised", EXAMPLE / "quantised.py")
    generics: dict[str, object] = {
        "Vocab": args.vocab, "H": 1024, "Heads": 16, "KvHeads": 4, "HeadDim": 64, "Inner": 2816,
        "Layers": args.layers, "RopeTheta": 500000, "EpsInverse": 1000000, "MaxSeq": 64,
        "Batch": 1, "T": "f32",
    }  # fmt: skip
    folder = Path(tempfile.mkdtemp(prefix="quant-sizes-"))
    floats = make_weights.make_weights(generics, seed=0)
    save_safetensors(floats, folder / "f32.safetensors")
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, args.vocab, (1, args.tokens)).astype(np.int32)

    def logits(source: Path, weights: Path) -> Any:
        module = linnet.torch.load(source, generics=generics, weights=weights)
        with torch.no_grad():
            return module(torch.from_numpy(tokens)).numpy()

    def megabytes(path: Path) -> float:
        return path.stat().st_size / 1e6

    def gguf_of(source: Path, weights: Path, name: str, outtype: str) -> tuple[Path, str]:
        path = folder / f"{name}.gguf"
        linnet.gguf.export(
            source, path, generics=generics, weights=weights, outtype=outtype, modelfile=False
        )
        kind = next(
            t.tensor_type.name
            for t in gguf.GGUFReader(path).tensors
            if t.name == "blk.0.ffn_up.weight"
        )
        return path, kind

    reference = logits(SOURCE, folder / "f32.safetensors")
    rms = float(np.sqrt((reference**2).mean()))
    gguf_f32, _ = gguf_of(SOURCE, folder / "f32.safetensors", "f32", "f32")
    print(
        f"# Llama H=1024, Inner=2816, {args.layers} layers, vocab {args.vocab}, random weights; "
        f"logits of {args.tokens} tokens through linnet.torch (f32 logits: RMS {rms:.3f}, "
        f"max {np.abs(reference).max():.3f})"
    )
    print("| weights | SafeTensors MB | GGUF linears | GGUF MB | max abs error | RMS error / RMS "
          "| argmax agree | quantise s |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    print(
        f"| f32 | {megabytes(folder / 'f32.safetensors'):.1f} | F32 | {megabytes(gguf_f32):.1f} "
        f"| 0 | 0 | {args.tokens}/{args.tokens} | - |"
    )
    for name, bits, group, scheme in VARIANTS:
        weights = folder / f"{name}.safetensors"
        start = time.perf_counter()
        quantize_checkpoint(
            folder / "f32.safetensors", weights, patterns=quantised.PATTERNS, bits=bits,
            group=group, scheme=scheme,
        )  # fmt: skip
        seconds = time.perf_counter() - start
        source = folder / f"{name}.linnet"
        source.write_text(quantised.quantised_source(bits, group, scheme=scheme))
        got = logits(source, weights)
        error = np.abs(got - reference)
        agree = int((got.argmax(-1) == reference.argmax(-1)).sum())
        path, kind = gguf_of(source, weights, name, "f16")
        print(
            f"| {name} | {megabytes(weights):.1f} | {kind} | {megabytes(path):.1f} | "
            f"{error.max():.4f} | {np.sqrt((error**2).mean()) / rms:.4f} | "
            f"{agree}/{args.tokens} | {seconds:.1f} |"
        )
    print(
        "# SafeTensors keep the embedding (and every norm) f32; the GGUF files hold the "
        "embedding f16. int4-g128 and fp8 have no GGUF block type with their integers: "
        "written dequantised at f16."
    )


if __name__ == "__main__":
    main()
