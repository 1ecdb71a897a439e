"""`trainable=True`: params are `nn.Parameter`s and gradients flow through both paths.

References: central finite differences in f64 (an independent check of the
whole chain, native kernels included), and a hand-written `nn.Module` holding
the same weights (gradients must agree parameter by parameter). The small Llama
of test_torch_model.py checks gradients through the attention, RMS norm and
linear natives against its eager twin.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from test_torch_model import GENERICS, LLAMA, eager_module, llama_weights
from torch import nn

import linnet.torch as lt

MLP = """module tiny_mlp

use std.nn.activations::{silu}
use std.nn.linear::{Linear}

pub block Mlp<In: Dim, Hidden: Dim, Out: Dim, T: Float = f64> {
    sub up: Linear<In, Hidden, T>
    sub down: Linear<Hidden, Out, T>
    param scale: Tensor[Out; T]

    pub entry forward<B: Dim>(x: Tensor[B, In; T]) -> Tensor[B, Out; T] {
        let y = down.forward(silu(up.forward(x)))
        let s[b, o] = y[b, o] * scale[o] + tanh(y[b, o])
        return s
    }
}
"""
SIZES = {"In": 4, "Hidden": 6, "Out": 3}


class HandMlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(4, 6, dtype=torch.float64)
        self.down = nn.Linear(6, 3, bias=False, dtype=torch.float64)
        self.scale = nn.Parameter(torch.zeros(3, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.down(F.silu(self.up(x)))
        return y * self.scale + torch.tanh(y)


def mlp_weights() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    shapes = {"up.weight": (6, 4), "up.bias": (6,), "down.weight": (3, 6), "scale": (3,)}
    return {k: torch.randn(s, generator=g, dtype=torch.float64) for k, s in shapes.items()}


def loss_of(model: nn.Module, x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    return (model(x) * r).sum()


@pytest.mark.parametrize("compile", [False, True])
def test_gradients_match_finite_differences(compile: bool) -> None:
    m = lt.load(MLP, generics=SIZES, weights=mlp_weights(), trainable=True, compile=compile)
    params = dict(m.named_parameters())
    assert set(params) == set(mlp_weights())
    g = torch.Generator().manual_seed(1)
    x = torch.randn(5, 4, generator=g, dtype=torch.float64, requires_grad=True)
    r = torch.randn(5, 3, generator=g, dtype=torch.float64)
    loss_of(m, x, r).backward()
    eps = 1e-6
    for name, p in [*params.items(), ("input x", x)]:
        assert p.grad is not None, name
        for index in [(0,) * p.dim(), tuple(d - 1 for d in p.shape)]:
            with torch.no_grad():
                saved = p[index].item()
                p[index] = saved + eps
                up = loss_of(m, x, r).item()
                p[index] = saved - eps
                down = loss_of(m, x, r).item()
                p[index] = saved
            numeric = (up - down) / (2 * eps)
            assert p.grad[index].item() == pytest.approx(numeric, rel=1e-6, abs=1e-8), name


@pytest.mark.parametrize("compile", [False, True])
def test_gradients_match_hand_written_module(compile: bool) -> None:
    weights = mlp_weights()
    m = lt.load(MLP, generics=SIZES, weights=weights, trainable=True, compile=compile)
    hand = HandMlp()
    hand.load_state_dict(weights)
    x = torch.randn(5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    r = torch.randn(5, 3, dtype=torch.float64)
    loss_of(m, x, r).backward()
    loss_of(hand, x, r).backward()
    ours, theirs = dict(m.named_parameters()), dict(hand.named_parameters())
    for name, p in ours.items():
        assert p.grad is not None and theirs[name].grad is not None
        torch.testing.assert_close(p.grad, theirs[name].grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("compile", [False, True])
def test_optimizer_steps_are_seen(compile: bool) -> None:
    """After a step the next call uses the new weights (nothing stale is cached)."""
    weights = mlp_weights()
    m = lt.load(MLP, generics=SIZES, weights=weights, trainable=True, compile=compile)
    hand = HandMlp()
    hand.load_state_dict(weights)
    x = torch.randn(5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    r = torch.randn(5, 3, dtype=torch.float64)
    for model in (m, hand):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            opt.zero_grad()
            loss_of(model, x, r).backward()
            opt.step()
    torch.testing.assert_close(m(x), hand(x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("compile", [False, True])
def test_llama_gradients_match_eager(compile: bool) -> None:
    weights = llama_weights(seed=4)
    m = lt.load(LLAMA, generics=GENERICS, weights=weights, trainable=True, compile=compile)
    eager = eager_module().EagerLlama(**GENERICS)
    eager.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})
    ids = torch.tensor([[3, 8, 1, 22]], dtype=torch.int32)
    r = torch.from_numpy(np.random.default_rng(5).standard_normal((1, 4, 40)).astype(np.float32))
    (m(ids) * r).sum().backward()
    (eager(ids.long()) * r).sum().backward()
    theirs = dict(eager.named_parameters())
    for name, p in m.named_parameters():
        assert p.grad is not None, name
        grad = theirs[name].grad
        assert grad is not None
        torch.testing.assert_close(p.grad, grad, rtol=1e-4, atol=1e-5)
    # the cache written during a trainable call is stored without its graph
    assert not m.tensor("layers.0.self_attn.k_cache").requires_grad


TIED = """module tied

use std.nn.embedding::{Embedding}
use std.nn.linear::{Linear}

pub block Tied<V: Dim, H: Dim> {
    sub embed: Embedding<V, H, f64>
    sub head: Linear<H, V, f64>

    pub entry forward<S: Dim>(ids: Tensor[S; i32]) -> Tensor[S, V; f64] {
        return head.forward(embed.forward(ids))
    }
}
"""


@pytest.mark.parametrize("compile", [False, True])
def test_tied_weights_share_one_parameter(compile: bool) -> None:
    """Two paths bound to one stored tensor (language.md 12.9) are one torch Parameter."""
    table = torch.randn(5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    m = lt.load(TIED, generics={"V": 5, "H": 3}, weights={"embed.weight": table},
                bindings={"head.weight": "embed.weight"}, trainable=True, compile=compile)  # fmt: skip
    assert m.tensor("embed.weight") is m.tensor("head.weight")
    assert len(list(m.parameters())) == 1
    ids = torch.tensor([0, 3, 4], dtype=torch.int32)
    m(ids).sum().backward()
    reference = table.clone().requires_grad_(True)
    (reference[ids.long()] @ reference.T).sum().backward()
    grad = m.tensor("embed.weight").grad
    assert grad is not None and reference.grad is not None
    torch.testing.assert_close(grad, reference.grad)
