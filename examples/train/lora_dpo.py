"""LoRA fine-tuning of the Llama example on the Zen of Python, then DPO on a few pairs.

The same model and data as `sft.py` (the seeded random Llama of
`examples/01-llama`, one byte a token; each aphorism learned after the prompt
"Zen: "), but only low-rank adapters train (`add_lora` on the attention's
query and value projections and the MLP's down projection; the rest stays
frozen). Then preference optimisation (`linnet.train.dpo.dpo`) on pairs made
from the aphorisms: the prompt is "Zen: " and an aphorism's first two words,
the chosen completion is the rest of it, the rejected one the same words in
reverse order. The reference log-probs are the SFT model's, computed once
before the first DPO step. Both loss curves are printed; `--adapter DIR`
saves the adapters as PEFT files (`save_lora`).

    python examples/train/lora_dpo.py [--sft-steps 40] [--dpo-steps 20] [--adapter DIR]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import torch

import linnet.torch as lt
from linnet.train import Step, add_lora, save_lora, train
from linnet.train.dpo import DpoStep, Pair, dpo

HERE = Path(__file__).resolve().parent
TARGETS = ["*.q_proj.weight", "*.v_proj.weight", "*.down_proj.weight"]


def sft_script() -> ModuleType:
    """`sft.py` beside this file: the model, the aphorisms and their batches."""
    spec = importlib.util.spec_from_file_location("train_sft", HERE / "sft.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def preference_pairs(lines: Sequence[str], prompt: bytes) -> list[Pair]:
    """For each aphorism of four words or more: its first two words after the prompt,
    the rest in order (chosen) or reversed (rejected)."""
    pairs = []
    for line in lines:
        words = line.split()
        if len(words) < 4:
            continue
        head = prompt + " ".join(words[:2]).encode()
        chosen = (" " + " ".join(words[2:]) + "\n").encode()
        rejected = (" " + " ".join(reversed(words[2:])) + "\n").encode()
        if chosen != rejected:
            pairs.append(Pair.of(list(head), list(chosen), list(rejected)))
    return pairs


def main(argv: Sequence[str] | None = None) -> tuple[list[float], list[DpoStep]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sft-steps", type=int, default=40)
    parser.add_argument("--dpo-steps", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=256, help="positions per SFT batch")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--adapter", type=Path, default=None, help="save the adapters here")
    args = parser.parse_args(argv)
    sft = sft_script()
    weights = sft.llama_weights()
    config = {**weights.DEFAULT_CONFIG, "Layers": args.layers, "MaxSeq": args.tokens}
    model = lt.load(
        sft.LLAMA / "src" / "lib.linnet",
        generics=config,
        weights=weights.make_weights(config, seed=0),
        trainable=True,
    )
    torch.manual_seed(0)  # lora_A's initial values (PEFT's Kaiming-uniform draw)
    adapters = add_lora(model, TARGETS, rank=args.rank, alpha=2 * args.rank)
    trainable = [p for a in adapters for p in a.parameters()]
    print(f"LoRA rank {args.rank} on {len(adapters)} weights: "
          f"{sum(p.numel() for p in trainable):,} trainable parameters")  # fmt: skip

    lines = sft.aphorisms()
    batches = sft.epochs(sft.examples(lines), args.tokens, count=args.sft_steps)
    optimizer = torch.optim.AdamW(trainable, lr=1e-2, weight_decay=0.0)

    def sft_report(step: Step) -> None:
        if step.step == 1 or step.step % 10 == 0 or step.step == args.sft_steps:
            print(f"sft step {step.step:4d}  loss {step.loss:.4f}")

    history = train(model, batches, optimizer=optimizer, steps=args.sft_steps, on_step=sft_report)

    pairs = preference_pairs(lines, sft.PROMPT)
    optimizer = torch.optim.AdamW(trainable, lr=5e-3, weight_decay=0.0)

    def dpo_report(step: DpoStep) -> None:
        if step.step == 0 or (step.step + 1) % 5 == 0 or step.step + 1 == args.dpo_steps:
            print(f"dpo step {step.step + 1:4d}  loss {step.loss:.4f}  "
                  f"margin {step.margins:+.3f}  accuracy {step.accuracy:.2f}")  # fmt: skip

    preferences = dpo(model, pairs, optimizer=optimizer, beta=0.1, batch_size=4,
                      steps=args.dpo_steps, on_step=dpo_report)  # fmt: skip
    print(f"sft loss {history.losses[0]:.3f} -> {history.losses[-1]:.3f}; "
          f"{len(pairs)} pairs, dpo loss {preferences[0].loss:.3f} -> {preferences[-1].loss:.3f}")  # fmt: skip
    if args.adapter is not None:
        save_lora(model, args.adapter)
        print(f"adapters saved to {args.adapter}")
    return history.losses, preferences


if __name__ == "__main__":
    main()
    sys.exit(0)
