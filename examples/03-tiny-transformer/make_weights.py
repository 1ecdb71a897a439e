"""Write small random weights for examples/03-tiny-transformer as SafeTensors.

    python examples/03-tiny-transformer/make_weights.py        # build/examples/03-tiny-transformer/
    python examples/03-tiny-transformer/make_weights.py --out DIR --layers 4

Every param of the bound `TinyTransformer` (`linnet inspect --parameters`
lists them: `embed.weight`, `layers.0.attn.q.weight`, `layers.0.mlp.gate.weight`,
`norm.weight`, `head.weight`, ...) drawn from a fixed seed. The optional
`Linear` biases are left out, so the projections are bias-free.
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
GENERICS = {"Vocab": 48, "H": 32, "Heads": 4, "Inner": 64, "Layers": 2}


def make_weights(out: Path, *, seed: int = 0, **generics: int) -> Path:
    """Write `weights.safetensors` for `GENERICS` updated by `generics`; return its path."""
    bound = {**GENERICS, **generics}
    model = load_model(SOURCE, generics=bound)
    rng = np.random.default_rng(seed)
    tensors = {}
    for path, t in model.tensors.items():
        if t.optional:
            continue
        shape = t.type.shape
        if len(shape) == 1:  # an RMS norm gain
            array = 1.0 + 0.1 * rng.standard_normal(shape)
        elif path == "embed.weight":
            array = rng.standard_normal(shape)
        else:  # a projection `[Out, In]`
            array = rng.standard_normal(shape) / np.sqrt(shape[1])
        tensors[path] = array.astype(np.float32)
    out.mkdir(parents=True, exist_ok=True)
    target = out / "weights.safetensors"
    save_safetensors(tensors, target, metadata={k: str(v) for k, v in bound.items()})
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder")
    parser.add_argument("--seed", type=int, default=0)
    for name, value in GENERICS.items():
        parser.add_argument(f"--{name.lower()}", type=int, default=value, help=f"`{name}`")
    args = parser.parse_args()
    generics = {name: getattr(args, name.lower()) for name in GENERICS}
    print(f"wrote {make_weights(args.out, seed=args.seed, **generics)}")


if __name__ == "__main__":
    main()
