"""Supervised fine-tuning of the Llama example on the Zen of Python, with `linnet.train`.

The text ships with CPython (`this.s`, ROT13). Each aphorism becomes one
example, its bytes the tokens (the Llama example's default vocabulary is 256,
so a byte is a token), learned after a fixed prompt (`Example.prompted`): the
model learns to complete "Zen: " with an aphorism. The model starts from the
seeded random weights of `examples/01-llama/make_weights.py`; `pack` lays the
examples end to end in batches, `train` runs AdamW with a cosine schedule and
saves a checkpoint every few steps (rerun with the same `--checkpoint` to
resume), and the loss curve is printed as it goes.

    python examples/train/sft.py [--steps 60] [--tokens 256] [--checkpoint DIR]
"""

from __future__ import annotations

import argparse
import codecs
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import torch

import linnet.torch as lt
from linnet.train import Example, Step, cosine_schedule, pack, train

HERE = Path(__file__).resolve().parent
LLAMA = HERE.parent / "01-llama"
PROMPT = b"Zen: "


def llama_weights() -> ModuleType:
    spec = importlib.util.spec_from_file_location("llama_weights", LLAMA / "make_weights.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def aphorisms() -> list[str]:
    """The Zen of Python, one aphorism a line (decoded from `this.s` without printing it)."""
    spec = importlib.util.find_spec("this")
    assert spec is not None and spec.origin is not None
    source = Path(spec.origin).read_text()
    encoded = source.split('s = """', 1)[1].split('"""', 1)[0]
    text = codecs.decode(encoded, "rot13")
    return [line for line in text.splitlines()[2:] if line.strip()]


def examples(lines: Sequence[str]) -> list[Example]:
    return [Example.prompted(list(PROMPT), list(line.encode() + b"\n")) for line in lines]


def epochs(data: list[Example], tokens: int, count: int) -> list:  # type: ignore[type-arg]
    """`count` passes over the data, each in a fixed shuffled order, packed."""
    order = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(count):
        shuffled = [data[int(i)] for i in torch.randperm(len(data), generator=order)]
        batches.extend(pack(shuffled, tokens))
    return batches


def main(argv: Sequence[str] | None = None) -> list[float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--tokens", type=int, default=256, help="positions per batch")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--checkpoint", type=Path, default=None)
    args = parser.parse_args(argv)
    module = llama_weights()
    config = {**module.DEFAULT_CONFIG, "Layers": args.layers, "MaxSeq": args.tokens}
    model = lt.load(
        LLAMA / "src" / "lib.linnet",
        generics=config,
        weights=module.make_weights(config, seed=0),
        trainable=True,
    )
    data = examples(aphorisms())
    batches = epochs(data, args.tokens, count=args.steps)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    schedule = cosine_schedule(optimizer, warmup=max(args.steps // 10, 1), total=args.steps)

    def report(step: Step) -> None:
        if step.step == 1 or step.step % 10 == 0 or step.step == args.steps:
            print(f"step {step.step:4d}  loss {step.loss:.4f}  lr {step.lr:.2e}")

    history = train(
        model,
        batches,
        optimizer=optimizer,
        steps=args.steps,
        schedule=schedule,
        checkpoint=args.checkpoint,
        checkpoint_every=20 if args.checkpoint is not None else None,
        on_step=report,
    )
    print(f"{len(data)} aphorisms, {sum(len(e) for e in data)} tokens; "
          f"loss {history.losses[0]:.3f} -> {history.losses[-1]:.3f}")  # fmt: skip
    return history.losses


if __name__ == "__main__":
    main()
    sys.exit(0)
