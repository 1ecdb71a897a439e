"""Write small random weights for examples/02-attention as SafeTensors.

    python examples/02-attention/make_weights.py               # build/examples/02-attention/
    python examples/02-attention/make_weights.py --out DIR --hidden 32 --heads 8

The tensors are the ones `linnet inspect --parameters` lists for the bound
block, under the names `torch.nn.MultiheadAttention` uses (`in_proj_weight`,
`in_proj_bias`, `out_proj.weight`, `out_proj.bias`), drawn from a fixed seed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from linnet.pipeline import load_model
from linnet.weights import save_safetensors

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "src" / "lib.linnet"
DEFAULT_OUT = HERE.parents[1] / "build" / "examples" / HERE.name


def make_weights(out: Path, *, hidden: int = 16, heads: int = 4, seed: int = 0) -> Path:
    """Write `weights.safetensors` into `out` and return its path."""
    model = load_model(SOURCE, generics={"H": hidden, "Heads": heads})
    rng = np.random.default_rng(seed)
    tensors = {}
    for path, t in model.tensors.items():
        shape = t.type.shape
        scale = 1.0 / np.sqrt(shape[1]) if len(shape) == 2 else 0.1
        tensors[path] = (scale * rng.standard_normal(shape)).astype(np.float32)
    out.mkdir(parents=True, exist_ok=True)
    target = out / "weights.safetensors"
    save_safetensors(tensors, target, metadata={"H": str(hidden), "Heads": str(heads)})
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder")
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"wrote {make_weights(args.out, hidden=args.hidden, heads=args.heads, seed=args.seed)}")


if __name__ == "__main__":
    main()
