"""Write small random weights for examples/vit as SafeTensors.

    python examples/vit/make_weights.py                       # ViTModel, build/examples/vit/
    python examples/vit/make_weights.py --no-pooler           # add_pooling_layer=False
    python examples/vit/make_weights.py --labels 5            # ViTForImageClassification
    python examples/vit/make_weights.py --out DIR --h 64 --layers 4

The tensors are every param of the bound root block (`linnet inspect
--parameters` lists them), drawn from a fixed seed, under transformers'
`state_dict` names, so `ViTModel(config).load_state_dict(...)` accepts the file
as is. Projection weights are scaled by `1/sqrt(fan_in)`, LayerNorm gains sit
near 1, and the class token and position embeddings are unit-variance.
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
# Images of Grid * Patch = 16 pixels square, 16 patches of 4 x 4.
GENERICS = {"Channels": 3, "H": 32, "Heads": 4, "Inner": 64, "Layers": 2, "Patch": 4, "Grid": 4}


def random_tensor(path: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """One weight, scaled by its role (read from the path's last segments)."""
    name = path.rsplit(".", 2)
    if name[-1] in ("cls_token", "position_embeddings"):
        array = rng.standard_normal(shape)
    elif name[-1] == "bias":
        array = 0.1 * rng.standard_normal(shape)
    elif len(shape) == 1:  # a LayerNorm gain
        array = 1.0 + 0.1 * rng.standard_normal(shape)
    else:  # a projection `[Out, In]` or the patch convolution `[H, C, P, P]`
        array = rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))
    return array.astype(np.float32)


def make_weights(
    out: Path, *, labels: int | None = None, pooler: bool = True, seed: int = 0, **generics: int
) -> Path:
    """Write `weights.safetensors` (a `ViTModel`, or with `labels` a
    `ViTForImageClassification`, which has no pooler) and return its path."""
    bound = {**GENERICS, **generics}
    if labels is None:
        model = load_model(SOURCE, root="ViTModel", generics=bound)
    else:
        model = load_model(
            SOURCE, root="ViTForImageClassification", generics={**bound, "Labels": labels}
        )
        pooler = False
    rng = np.random.default_rng(seed)
    tensors = {
        path: random_tensor(path, t.type.shape, rng)
        for path, t in model.tensors.items()
        if pooler or ".pooler." not in f".{path}"
    }
    out.mkdir(parents=True, exist_ok=True)
    target = out / "weights.safetensors"
    save_safetensors(tensors, target, metadata={k: str(v) for k, v in bound.items()})
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-pooler", action="store_true", help="leave `pooler.*` out")
    parser.add_argument("--labels", type=int, help="write a ViTForImageClassification instead")
    for name, value in GENERICS.items():
        parser.add_argument(f"--{name.lower()}", type=int, default=value, help=f"`{name}`")
    args = parser.parse_args()
    generics = {name: getattr(args, name.lower()) for name in GENERICS}
    path = make_weights(
        args.out, labels=args.labels, pooler=not args.no_pooler, seed=args.seed, **generics
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
