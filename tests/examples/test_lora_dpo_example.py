"""examples/train/lora_dpo.py: LoRA SFT lowers the loss, then DPO raises the margin."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "train" / "lora_dpo.py"


def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("train_lora_dpo", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_pairs_reverse_the_rest_of_an_aphorism() -> None:
    pairs = script().preference_pairs(["Beautiful is better than ugly."], b"Zen: ")
    (pair,) = pairs
    assert bytes(pair.prompt) == b"Zen: Beautiful is"
    assert bytes(pair.chosen) == b" better than ugly.\n"
    assert bytes(pair.rejected) == b" ugly. than better\n"


@pytest.mark.slow
def test_a_short_run_learns_and_prefers(tmp_path: Path) -> None:
    options = ["--sft-steps", "12", "--dpo-steps", "10", "--layers", "1", "--tokens", "128",
               "--rank", "4", "--adapter", str(tmp_path / "adapter")]  # fmt: skip
    losses, preferences = script().main(options)
    assert losses[-1] < 0.8 * losses[0]
    assert preferences[0].loss == pytest.approx(math.log(2), rel=1e-5)  # policy == reference
    assert preferences[-1].loss < preferences[0].loss and preferences[-1].margins > 0
    assert (tmp_path / "adapter" / "adapter_model.safetensors").is_file()
