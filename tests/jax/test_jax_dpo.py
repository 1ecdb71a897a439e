"""`linnet.jax.dpo.dpo` against `linnet.train.dpo.dpo` (PyTorch) on the Llama example.

The same random preference pairs (two batches of two) and weights: two AdamW
steps of full fine-tuning with the precomputed reference give PyTorch's loss,
rewards, margins and accuracy to 1e-5 relative and its parameters; one step of
a LoRA policy (the adapters drawn alike for a seed, `test_jax_train_lora.py`; slow)
against a separate reference model gives PyTorch's figures as well.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import optax
import pytest
import torch
from decoder_cases import llama
from jax_train_support import torch_model

import linnet.jax as lj
from linnet.errors import LinnetError
from linnet.jax.dpo import dpo
from linnet.jax.train import add_lora
from linnet.train import add_lora as torch_add_lora
from linnet.train.dpo import DpoStep, Pair
from linnet.train.dpo import dpo as torch_dpo


def pairs(vocab: int, count: int = 4, seed: int = 2) -> list[Pair]:
    rng = np.random.default_rng(seed)

    def tokens(low: int, high: int) -> list[int]:
        return [int(t) for t in rng.integers(1, vocab, int(rng.integers(low, high)))]

    return [Pair.of(tokens(1, 5), tokens(1, 6), tokens(1, 6)) for _ in range(count)]


def jax_model() -> Any:
    decoder = llama()
    return lj.load_source(
        decoder.source, generics=decoder.generics(1, 16), weights=decoder.weights, entry="forward"
    )


def assert_same(ours: list[DpoStep], theirs: list[DpoStep]) -> None:
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs, strict=True):
        assert a.loss == pytest.approx(b.loss, rel=1e-5)
        # the rewards are beta times differences of log-probs of size ~10: f32 rounding of
        # those (1e-6) is their absolute error on either backend
        for name in ("chosen_rewards", "rejected_rewards", "margins"):
            assert getattr(a, name) == pytest.approx(getattr(b, name), rel=1e-5, abs=2e-6), name
        assert a.accuracy == b.accuracy


def test_dpo_steps_equal_pytorch() -> None:
    data = pairs(llama().vocab)
    params, ours = dpo(
        jax_model(), data, optimizer=optax.adamw(1e-2, weight_decay=0.01), batch_size=2
    )
    model = torch_model(llama())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    theirs = torch_dpo(model, data, optimizer=optimizer, batch_size=2)
    assert_same(ours, theirs)
    assert ours[1].margins != 0.0
    # AdamW divides each gradient element by its own running RMS, so an element's update
    # carries that element's relative rounding error, large where the gradient is near 0:
    # measured up to 1.5e-5 (one element of 1024; lr is 1e-2) on an Intel Xeon, 1e-5 on a
    # Zen 4; a wrong gradient moves elements by about lr
    for name, value in model.named_parameters():
        np.testing.assert_allclose(
            np.asarray(params[name]), value.detach().numpy(), rtol=1e-5, atol=5e-5, err_msg=name
        )


@pytest.mark.slow
def test_lora_dpo_with_a_reference_model_equals_pytorch() -> None:
    data = pairs(llama().vocab, seed=3)
    reference = jax_model()
    policy = add_lora(jax_model(), "*.q_proj.weight", rank=2, alpha=4, seed=9)
    _, ours = dpo(
        policy, data, optimizer=optax.sgd(0.5), reference=reference, batch_size=2, steps=2
    )
    model = torch_model(llama())
    torch.manual_seed(9)
    torch_add_lora(model, "*.q_proj.weight", rank=2, alpha=4)
    trained = [p for p in model.parameters() if p.requires_grad]
    theirs = torch_dpo(
        model,
        data,
        optimizer=torch.optim.SGD(trained, lr=0.5),
        reference=torch_model(llama()),
        batch_size=2,
        steps=2,
    )
    assert_same(ours, theirs)


def test_refusals() -> None:
    with pytest.raises(LinnetError, match="no preference pairs"):
        dpo(jax_model(), [], optimizer=optax.sgd(0.1))
    with pytest.raises(LinnetError, match="label_smoothing"):
        dpo(jax_model(), pairs(61), optimizer=optax.sgd(0.1), label_smoothing=0.5)
