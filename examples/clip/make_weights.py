"""Write small random weights for examples/clip as SafeTensors.

    python examples/clip/make_weights.py                      # build/examples/clip/
    python examples/clip/make_weights.py --out DIR --text-layers 3 --proj 32

The tensors are every param of the bound `CLIPModel` (`linnet inspect
--parameters` lists them) except the projection biases, which CLIP does not
have, drawn from a fixed seed under transformers' `state_dict` names.
`logit_scale` holds CLIP's initial `log(1 / 0.07)`, stored with one element
because Linnet has no rank-0 tensors (transformers stores a 0-d tensor).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

from linnet.pipeline import load_model
from linnet.weights import save_safetensors

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "src" / "lib.linnet"
DEFAULT_OUT = HERE.parents[1] / "build" / "examples" / HERE.name
# Text: 64 tokens (the last one, 63, is end-of-text), up to 12 positions.
# Images: 12 pixels square, 9 patches of 4 x 4.
GENERICS = {
    "Vocab": 64,
    "TextH": 32,
    "TextHeads": 4,
    "TextInner": 48,
    "TextLayers": 2,
    "MaxPos": 12,
    "Channels": 3,
    "VisionH": 24,
    "VisionHeads": 3,
    "VisionInner": 40,
    "VisionLayers": 2,
    "Patch": 4,
    "Grid": 3,
    "Proj": 16,
}
LOGIT_SCALE = math.log(1 / 0.07)
NO_BIAS = ("text_projection.bias", "visual_projection.bias")


def random_tensor(path: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """One weight, scaled by its role (read from the path's last segments)."""
    owner, name = path.rsplit(".", 1) if "." in path else ("", path)
    if name == "logit_scale":
        array = np.full(shape, LOGIT_SCALE)
    elif name == "class_embedding" or owner.endswith(("token_embedding", "position_embedding")):
        array = rng.standard_normal(shape)
    elif name == "bias":
        array = 0.1 * rng.standard_normal(shape)
    elif len(shape) == 1:  # a LayerNorm gain
        array = 1.0 + 0.1 * rng.standard_normal(shape)
    else:  # a projection `[Out, In]` or the patch convolution `[H, C, P, P]`
        array = rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))
    return array.astype(np.float32)


def make_weights(out: Path, *, seed: int = 0, **generics: int) -> Path:
    """Write `weights.safetensors` for `GENERICS` updated by `generics`; return its path."""
    bound = {**GENERICS, **generics}
    model = load_model(SOURCE, generics=bound)
    rng = np.random.default_rng(seed)
    tensors = {
        path: random_tensor(path, t.type.shape, rng)
        for path, t in model.tensors.items()
        if path not in NO_BIAS
    }
    out.mkdir(parents=True, exist_ok=True)
    target = out / "weights.safetensors"
    save_safetensors(tensors, target, metadata={k: str(v) for k, v in bound.items()})
    return target


def option(name: str) -> str:
    """`TextInner` -> `--text-inner`."""
    return "--" + "".join(f"-{c.lower()}" if c.isupper() else c for c in name).lstrip("-")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder")
    parser.add_argument("--seed", type=int, default=0)
    for name, value in GENERICS.items():
        parser.add_argument(option(name), dest=name, type=int, default=value, help=f"`{name}`")
    args = parser.parse_args()
    generics = {name: getattr(args, name) for name in GENERICS}
    print(f"wrote {make_weights(args.out, seed=args.seed, **generics)}")


if __name__ == "__main__":
    main()
