"""The loop of `linnet.train.train` on a tiny bigram model: steps, records, schedule, bar.

The model's `loss_packed` is `linear_cross_entropy(embed(tokens), head, ...)`,
so one step is easy to write by hand with torch: the reference for the loss,
the gradient clipping and the learning rates of `cosine_schedule`, which is
also checked against transformers' cosine schedule with a floor.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import linnet.torch as lt
from linnet import progress
from linnet.errors import LinnetError
from linnet.train import Example, Step, cosine_schedule, pack, train

BIGRAM = """module bigram

use std.nn.embedding::{Embedding}
use std.nn.loss::{linear_cross_entropy}

pub block Bigram<V: Dim, H: Dim> {
    sub embed: Embedding<V, H, f32>
    param head: Tensor[V, H; f32]

    pub entry loss_packed<P: Dim>(
        tokens: Tensor[P; i32],
        positions: Tensor[P; i32],
        segments: Tensor[P; i32],
        targets: Tensor[P; i64],
        weights: Tensor[P; f32],
    ) -> f32 {
        return linear_cross_entropy(embed.forward(tokens), head, targets, weights)
    }
}
"""
V, H = 11, 4


def bigram() -> torch.nn.Module:
    g = torch.Generator().manual_seed(0)
    weights = {
        "embed.weight": torch.randn(V, H, generator=g),
        "head": torch.randn(V, H, generator=g),
    }
    return lt.load(BIGRAM, generics={"V": V, "H": H}, weights=weights, trainable=True)


def data(count: int = 12) -> list[Example]:
    rng = np.random.default_rng(3)
    return [Example(rng.integers(0, V, int(rng.integers(2, 7)))) for _ in range(count)]


def test_one_step_by_hand() -> None:
    model = bigram()
    batches = list(pack(data(), 16))
    embed = model.tensor("embed.weight").detach().clone().requires_grad_()
    head = model.tensor("head").detach().clone().requires_grad_()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    history = train(model, batches, optimizer=optimizer, steps=1, clip=0.3)
    (step,) = history.steps
    b = batches[0]
    each = F.cross_entropy(embed[b.tokens.long()] @ head.T, b.targets, reduction="none")
    loss = (each * b.weights).sum() / b.weights.sum()
    loss.backward()
    assert step.loss == pytest.approx(float(loss.detach()), rel=1e-6)
    assert embed.grad is not None and head.grad is not None
    norm = math.sqrt(float(embed.grad.square().sum() + head.grad.square().sum()))
    assert step.grad_norm == pytest.approx(norm, rel=1e-5)
    assert step.learned == b.learned and step.tokens == 16 and step.lr == 0.5
    scale = 0.3 / (norm + 1e-6)  # clip_grad_norm_'s coefficient
    torch.testing.assert_close(model.tensor("head"), head - 0.5 * scale * head.grad)


def test_runs_until_the_batches_end_and_reports_each_step() -> None:
    model = bigram()
    batches = list(pack(data(), 16))
    seen: list[Step] = []
    history = train(
        model,
        batches,
        optimizer=torch.optim.AdamW(model.parameters()),
        accumulate=2,
        clip=None,
        on_step=seen.append,
    )
    assert len(history) == math.ceil(len(batches) / 2) and seen == history.steps
    assert all(s.grad_norm is None for s in history.steps)
    assert sum(s.learned for s in history.steps) == sum(b.learned for b in batches)


def test_cosine_schedule_rates() -> None:
    from transformers import get_cosine_with_min_lr_schedule_with_warmup

    model = bigram()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    schedule = cosine_schedule(optimizer, warmup=3, total=10, floor=0.1)
    history = train(model, pack(data(40), 8), optimizer=optimizer, steps=12, schedule=schedule)
    rates = [s.lr for s in history.steps]
    assert rates[:3] == pytest.approx([0.2 / 3, 0.4 / 3, 0.2])  # the first step learns
    other = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.2)
    theirs = get_cosine_with_min_lr_schedule_with_warmup(other, 3, 10, min_lr_rate=0.1)
    expected = []
    for _ in range(12):
        expected.append(other.param_groups[0]["lr"])
        other.step()
        theirs.step()
    assert rates[3:10] == pytest.approx(expected[3:10], rel=1e-12)  # after warmup they agree
    assert rates[10:] == pytest.approx([0.02, 0.02])  # the floor after `total`
    with pytest.raises(LinnetError, match="0 <= warmup <= total"):
        cosine_schedule(optimizer, warmup=5, total=4)


def test_progress_bar_shows_loss_rate_and_lr(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(progress.ENV, "1")
    monkeypatch.setattr(progress, "DELAY", 0.0)
    model = bigram()
    train(model, pack(data(), 16), optimizer=torch.optim.AdamW(model.parameters()), steps=2)
    shown = capsys.readouterr().err
    assert "training" in shown and "loss " in shown and "tok/s" in shown and "lr 0.001" in shown


def test_a_model_without_the_entry_is_an_error() -> None:
    model = lt.load(
        BIGRAM.replace("loss_packed", "other"),
        generics={"V": V, "H": H},
        weights=None,
        trainable=True,
    )
    with pytest.raises(LinnetError, match="no `loss_packed` entry, which training needs"):
        train(model, pack(data(), 16), optimizer=torch.optim.AdamW(model.parameters()))
