"""Write small random weights for the Llama example as SafeTensors (seeded).

The tensor list comes from the example itself: the file is checked, its root
block `LlamaForCausalLM` is bound with the given generics, and every mandatory
`param` path gets an array of its declared shape and dtype. Those paths are
transformers' `LlamaForCausalLM.state_dict()` names, so the file also loads
into transformers with `load_state_dict` (the tests do exactly that).

Values: projections and `lm_head` ~ N(0, 1/In) (unit-scale activations, so a
random model still produces varied greedy tokens), the embedding ~ N(0, 1),
RMS norm weights ~ 1 + N(0, 0.1^2). The optional biases are left out, as in
transformers' default `LlamaConfig` (`attention_bias=False`, `mlp_bias=False`).

    python examples/01-llama/make_weights.py OUT.safetensors [--seed N] [--bind G=V]...
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from linnet.ir.core import numpy_dtype
from linnet.pipeline import load_model
from linnet.weights import save_safetensors

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "src" / "lib.linnet"

# The bundled default: a 2-layer grouped-query Llama (4 query heads share 2
# key/value heads, head size 16), 256 tokens, a 64-position KV cache, batch 1.
DEFAULT_CONFIG: dict[str, object] = {
    "Vocab": 256,
    "H": 64,
    "Heads": 4,
    "KvHeads": 2,
    "Inner": 176,
    "Layers": 2,
    "Batch": 1,
    "MaxSeq": 64,
    "T": "f32",
}


def weight_specs(
    config: Mapping[str, object], source: Path = SOURCE
) -> dict[str, tuple[tuple[int, ...], str]]:
    """Every mandatory param of the bound root block: path -> (shape, Linnet dtype)."""
    model = load_model(source, generics=dict(config))
    return {
        path: (tensor.type.shape, tensor.type.dtype)
        for path, tensor in model.tensors.items()
        if tensor.kind == "param" and not tensor.optional and tensor.group is None
    }


def make_weights(
    config: Mapping[str, object], seed: int = 0, source: Path = SOURCE
) -> dict[str, np.ndarray[Any, Any]]:
    """Seeded random arrays for every mandatory param path (see the module docstring)."""
    rng = np.random.default_rng(seed)
    arrays: dict[str, np.ndarray[Any, Any]] = {}
    for path, (shape, dtype) in sorted(weight_specs(config, source).items()):
        if path.endswith("layernorm.weight") or path.endswith("norm.weight"):
            values = 1.0 + 0.1 * rng.standard_normal(shape)
        elif path.endswith("embed_tokens.weight"):
            values = rng.standard_normal(shape)
        else:
            values = rng.standard_normal(shape) / np.sqrt(shape[-1])
        arrays[path] = values.astype(numpy_dtype(dtype))
    return arrays


def parameter_count(arrays: Mapping[str, np.ndarray[Any, Any]]) -> int:
    return sum(int(a.size) for a in arrays.values())


def parse_binds(items: Sequence[str], base: Mapping[str, object]) -> dict[str, object]:
    """`G=V` pairs over `base`; integers stay integers, anything else (a dtype) a string."""
    config = dict(base)
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise SystemExit(f"--bind expects G=V, got `{item}`")
        config[name] = int(value) if value.isdigit() else value
    return config


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the SafeTensors file to write")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bind", action="append", default=[], metavar="G=V")
    args = parser.parse_args(argv)
    config = parse_binds(args.bind, DEFAULT_CONFIG)
    arrays = make_weights(config, args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    save_safetensors(arrays, args.out, metadata={"format": "pt", "seed": str(args.seed)})
    binds = " ".join(f"{k}={v}" for k, v in config.items())
    print(f"wrote {len(arrays)} tensors, {parameter_count(arrays):,} parameters to {args.out}")
    print(f"generics: {binds}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
