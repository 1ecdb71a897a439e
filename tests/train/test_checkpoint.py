"""Checkpoints of `linnet.train.train`: exact resume, the files, the two latest kept, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from decoder_cases import Decoder, llama
from train_support import examples, linnet_model

from linnet.errors import LinnetError
from linnet.train import History, cosine_schedule, pack, train
from linnet.train.checkpoint import latest
from linnet.weights.safetensors import read_safetensors

STEPS = 6


@pytest.fixture(scope="module")
def decoder() -> Decoder:
    return llama()


def run(
    decoder: Decoder,
    steps: int,
    folder: Path | None = None,
    every: int | None = None,
) -> tuple[History, dict[str, torch.Tensor]]:
    """A fresh model, optimizer and schedule trained on the same batches up to `steps`."""
    torch.manual_seed(0)
    model = linnet_model(decoder)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
    schedule = cosine_schedule(optimizer, warmup=2, total=STEPS)
    batches = pack(examples(decoder.vocab, 60, seed=21), 32)  # a fresh stream each run
    history = train(
        model,
        batches,
        optimizer=optimizer,
        steps=steps,
        schedule=schedule,
        checkpoint=folder,
        checkpoint_every=every,
    )
    return history, {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_resume_reproduces_the_uninterrupted_run_exactly(decoder: Decoder, tmp_path: Path) -> None:
    whole, expected = run(decoder, STEPS)
    first, _ = run(decoder, 4, tmp_path, every=3)  # saves after steps 3 and 4 (the end)
    assert first.losses == whole.losses[:4]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000003", "step-00000004"]
    resumed, params = run(decoder, STEPS, tmp_path, every=3)
    assert resumed.losses == whole.losses  # bit for bit, the restored steps included
    assert [s.lr for s in resumed.steps] == [s.lr for s in whole.steps]
    for name, value in expected.items():
        assert torch.equal(params[name], value), name
    # two latest kept: 4 (end of the first run), 6 (the end); 3 removed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000004", "step-00000006"]


def test_the_files_hold_no_pickle(decoder: Decoder, tmp_path: Path) -> None:
    run(decoder, 2, tmp_path, every=2)
    folder = latest(tmp_path)
    assert folder is not None and folder.name == "step-00000002"
    names = sorted(p.name for p in folder.iterdir())
    assert names == [
        "model.safetensors", "optimizer.json", "optimizer.safetensors", "progress.json",
        "random.safetensors",
    ]  # fmt: skip
    model = read_safetensors(folder / "model.safetensors")
    assert "model.layers.0.self_attn.q_proj.weight" in model
    optimizer = read_safetensors(folder / "optimizer.safetensors")
    assert {"state.0.exp_avg", "state.0.exp_avg_sq", "state.0.step"} <= set(optimizer)
    document = json.loads((folder / "optimizer.json").read_text())
    assert document["optimizer"] == "AdamW"
    assert set(document["parameters"]) == set(model)  # the parameter path of each index
    progress = json.loads((folder / "progress.json").read_text())
    assert progress["step"] == 2 and progress["world"] == 1 and len(progress["history"]) == 2
    assert progress["schedule"]["last_epoch"] == 2


def test_an_interrupted_save_is_ignored(decoder: Decoder, tmp_path: Path) -> None:
    run(decoder, 2, tmp_path, every=2)
    broken = tmp_path / "step-00000009"
    broken.mkdir()
    (broken / "model.safetensors").write_bytes(b"half")
    assert latest(tmp_path) == tmp_path / "step-00000002"


def test_resume_needs_the_same_batches_and_optimizer(decoder: Decoder, tmp_path: Path) -> None:
    run(decoder, 2, tmp_path, every=2)
    model = linnet_model(decoder)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = list(pack(examples(decoder.vocab, 60, seed=21), 32))
    with pytest.raises(LinnetError, match="saved for a AdamW optimizer, restored into a SGD"):
        train(model, batches, optimizer=sgd, steps=4, checkpoint=tmp_path)
    adam = torch.optim.AdamW(model.parameters(), lr=5e-3)
    schedule = cosine_schedule(adam, warmup=2, total=STEPS)
    with pytest.raises(LinnetError, match="consumed 2 batches, but the batches end after 1"):
        train(model, batches[:1], optimizer=adam, schedule=schedule, steps=4, checkpoint=tmp_path)


def test_bad_options_are_errors(decoder: Decoder) -> None:
    model = linnet_model(decoder)
    adam = torch.optim.AdamW(model.parameters())
    with pytest.raises(LinnetError, match="checkpoint_every needs a checkpoint folder"):
        train(model, [], optimizer=adam, checkpoint_every=2)
    with pytest.raises(LinnetError, match="accumulate must be >= 1"):
        train(model, [], optimizer=adam, accumulate=0)
