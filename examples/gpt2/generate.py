"""Greedy decoding with the GPT-2 example, on PyTorch.

    python examples/gpt2/make_weights.py            # writes out/gpt2 (random weights)
    python examples/gpt2/generate.py [--weights out/gpt2] [--steps 16] [ID ...]

Decodes twice: a Python loop over the `prefill` and `decode` entries (one cached
step per token), and the `generate` entry, whose `while` loop runs every step inside
one call. Both print the new token ids. Any folder holding a GPT-2
`model.safetensors` and our `generics.json` works, including one written by
transformers' `save_pretrained`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

import linnet.torch as lt

HERE = Path(__file__).resolve().parent


def load(folder: Path, *, batch: int = 1, compile: bool = True) -> lt.LinnetModule:
    """The `Gpt2` block bound to the weights and generics in `folder`."""
    generics = json.loads((folder / "generics.json").read_text()) | {"Batch": batch}
    return lt.load(HERE / "src" / "lib.linnet", generics=generics,
                   weights=folder / "model.safetensors", compile=compile)  # fmt: skip


def greedy(model: lt.LinnetModule, ids: torch.Tensor, steps: int) -> torch.Tensor:
    """`steps` new tokens `[Batch, steps]` (i32): prefill the prompt from position 0,
    then one `decode` per token."""
    with torch.no_grad():
        logits = model.run_entry("prefill", [ids, 0])
        assert isinstance(logits, torch.Tensor)
        token = logits[:, -1].argmax(-1).to(torch.int32)
        tokens = [token]
        for position in range(ids.shape[1], ids.shape[1] + steps - 1):
            logits = model.run_entry("decode", [token, position])
            assert isinstance(logits, torch.Tensor)
            token = logits.argmax(-1).to(torch.int32)
            tokens.append(token)
    return torch.stack(tokens, dim=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", type=Path, default=Path("out/gpt2"))
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("ids", type=int, nargs="*", default=[5, 17, 42, 8, 3, 30])
    args = parser.parse_args()
    model = load(args.weights)
    ids = torch.tensor([args.ids], dtype=torch.int32)
    print("prompt:   ", args.ids)
    print("decode:   ", greedy(model, ids, args.steps)[0].tolist())
    model.reset_state()
    with torch.no_grad():
        generated = model.run_entry("generate", [ids], generics={"Steps": args.steps})
    assert isinstance(generated, torch.Tensor)
    print("generate: ", generated[0].tolist())


if __name__ == "__main__":
    main()
