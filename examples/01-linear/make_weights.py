"""Write small random weights for examples/01-linear as SafeTensors.

    python examples/01-linear/make_weights.py                  # build/examples/01-linear/
    python examples/01-linear/make_weights.py --out DIR --in 16 --out-features 4 --no-bias

The tensors are the ones `linnet inspect --parameters` lists for the bound
block (`weight`, and `bias` unless `--no-bias`), drawn with NumPy from a fixed
seed, under the names `torch.nn.Linear` uses, so a `state_dict` loads them as is.
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


def make_weights(
    out: Path, *, features_in: int = 8, features_out: int = 4, bias: bool = True, seed: int = 0
) -> Path:
    """Write `weights.safetensors` into `out` and return its path."""
    model = load_model(SOURCE, generics={"In": features_in, "Out": features_out})
    rng = np.random.default_rng(seed)
    bound = 1.0 / np.sqrt(features_in)  # torch.nn.Linear's default init range
    tensors = {
        path: rng.uniform(-bound, bound, t.type.shape).astype(np.float32)
        for path, t in model.tensors.items()
        if bias or not t.optional
    }
    out.mkdir(parents=True, exist_ok=True)
    target = out / "weights.safetensors"
    save_safetensors(tensors, target, metadata={"In": str(features_in), "Out": str(features_out)})
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder")
    parser.add_argument("--in", dest="features_in", type=int, default=8)
    parser.add_argument("--out-features", type=int, default=4)
    parser.add_argument("--no-bias", action="store_true", help="leave the optional bias out")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    path = make_weights(
        args.out,
        features_in=args.features_in,
        features_out=args.out_features,
        bias=not args.no_bias,
        seed=args.seed,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
