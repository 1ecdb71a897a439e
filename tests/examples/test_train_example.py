"""examples/train/sft.py: a few steps on the Zen of Python lower the loss, and resume works."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "train" / "sft.py"


def sft() -> ModuleType:
    spec = importlib.util.spec_from_file_location("train_sft", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_zen_is_decoded() -> None:
    lines = sft().aphorisms()
    assert lines[0] == "Beautiful is better than ugly." and len(lines) == 19


def test_a_short_run_learns_and_resumes(tmp_path: Path) -> None:
    script = sft()
    options = ["--layers", "1", "--tokens", "128", "--checkpoint", str(tmp_path)]
    losses = script.main(["--steps", "12", *options])
    assert losses[-1] < 0.75 * losses[0]
    again = script.main(["--steps", "12", *options])  # everything restored: no new step
    assert again == losses
