"""The chunked `linear_cross_entropy` / `linear_token_log_probs` natives against plain autograd.

References: `F.linear` + `F.cross_entropy` through ordinary autograd in f64
(values and gradients of the hidden states, the head and the token weights),
and the std ops' canonical bodies (`std.nn.loss`) run by the backend with its
natives off. The blocks are made small (a few rows) so several blocks, and a
last partial one, are exercised; one test records what autograd keeps for the
backward pass and finds nothing of the size of the logits.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F

import linnet.torch as lt
from linnet.ir.core import TensorType
from linnet.torch import chunked_loss
from linnet.torch.runner import Runner

N, H, V = 11, 5, 7
DTYPES = ["f64", "f64", "i64", "f32"]

LOSSES = """module heads

use std.nn.loss::{linear_cross_entropy, linear_token_log_probs}

pub entry loss<N: Dim, H: Dim, V: Dim, T: Float>(
    hidden: Tensor[N, H; T],
    weight: Tensor[V, H; T],
    targets: Tensor[N; i64],
    weights: Tensor[N; f32],
) -> f32 {
    return linear_cross_entropy(hidden, weight, targets, weights)
}

pub entry log_probs<N: Dim, H: Dim, V: Dim, T: Float>(
    hidden: Tensor[N, H; T],
    weight: Tensor[V, H; T],
    targets: Tensor[N; i64],
) -> Tensor[N; f32] {
    return linear_token_log_probs(hidden, weight, targets)
}
"""


@pytest.fixture(autouse=True)
def three_rows(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Blocks of 3 rows: 11 rows make three full blocks and a partial one."""
    monkeypatch.setattr(chunked_loss, "CHUNK_ELEMENTS", 3 * V)
    assert chunked_loss.chunk_rows(V) == 3
    yield


def inputs(
    dtype: torch.dtype, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(N, H, generator=g, dtype=torch.float64).to(dtype).requires_grad_()
    weight = torch.randn(V, H, generator=g, dtype=torch.float64).to(dtype).requires_grad_()
    targets = torch.randint(0, V, (N,), generator=g)
    weights = torch.rand(N, generator=g, dtype=torch.float32)
    weights[4] = 0.0
    return hidden, weight, targets, weights


def plain_loss(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    logits = F.linear(hidden, weight).to(torch.float64)
    each = F.cross_entropy(logits, targets, reduction="none")
    return (each * weights.to(torch.float64)).sum()


def grads(loss: torch.Tensor, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return torch.autograd.grad(loss, tensors)


def test_loss_and_gradients_equal_plain_autograd_in_f64() -> None:
    hidden, weight, targets, weights = inputs(torch.float64)
    weights.requires_grad_()
    ours = chunked_loss.linear_cross_entropy(hidden, weight, targets, weights)
    theirs = plain_loss(hidden, weight, targets, weights)
    assert ours.dtype == torch.float32  # the std contract: every loss is f32
    torch.testing.assert_close(ours.double(), theirs, rtol=1e-6, atol=0)
    # the log-probabilities are f32 (the std contract), so f32 rounding bounds the gradients
    for mine, plain in zip(
        grads(ours, hidden, weight, weights), grads(theirs, hidden, weight, weights), strict=True
    ):
        torch.testing.assert_close(mine.double(), plain.double(), rtol=1e-6, atol=1e-6)


def test_log_prob_gradients_equal_plain_autograd_in_f64() -> None:
    hidden, weight, targets, _ = inputs(torch.float64, seed=1)
    upstream = torch.randn(N, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    ours = chunked_loss.linear_log_probs(hidden, weight, targets)
    theirs = -F.cross_entropy(F.linear(hidden, weight), targets, reduction="none")
    torch.testing.assert_close(ours.double(), theirs, rtol=1e-6, atol=1e-7)
    mine = grads((ours.double() * upstream).sum(), hidden, weight)
    plain = grads((theirs * upstream).sum(), hidden, weight)
    for a, b in zip(mine, plain, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_bf16_head_gradient_is_accumulated_in_f32() -> None:
    """bf16 inputs: the gradients stay within bf16 rounding of the f64 ones."""
    hidden, weight, targets, weights = inputs(torch.bfloat16, seed=3)
    ours = chunked_loss.linear_cross_entropy(hidden, weight, targets, weights)
    exact = [t.detach().double().requires_grad_() for t in (hidden, weight)]
    theirs = plain_loss(exact[0], exact[1], targets, weights)
    torch.testing.assert_close(ours.double(), theirs, rtol=2e-2, atol=0)
    mine = grads(ours, hidden, weight)
    assert [g.dtype for g in mine] == [torch.bfloat16, torch.bfloat16]
    for a, b in zip(mine, grads(theirs, *exact), strict=True):
        torch.testing.assert_close(a.double(), b, rtol=3e-2, atol=3e-2)


def test_backward_keeps_nothing_of_the_logits_size() -> None:
    hidden, weight, targets, weights = inputs(torch.float32)
    saved: list[int] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        chunked_loss.linear_cross_entropy(hidden, weight, targets, weights)
    assert saved and max(saved) < N * V
    saved.clear()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        plain_loss(hidden, weight, targets, weights)
    assert max(saved) >= N * V  # the unfused form does keep the logits


@pytest.mark.parametrize("compile", [False, True])
def test_backend_uses_the_chunked_native_and_matches_the_canonical_body(compile: bool) -> None:
    hidden, weight, targets, weights = inputs(torch.float64, seed=4)
    fused = lt.load_function(LOSSES, "loss", compile=compile)
    operands = [hidden, weight, targets, weights]
    ours = fused(*operands)
    assert isinstance(ours, torch.Tensor)
    if compile:
        assert "chunked_loss.linear_cross_entropy" in fused.generated_source()
    types = [TensorType(tuple(t.shape), d) for t, d in zip(operands, DTYPES, strict=True)]
    body = Runner(fused.prepare(types).function, torch.device("cpu"), hoist_weights=False,
                  natives=False)  # fmt: skip
    (canonical,), _ = body({}, {}, operands)
    assert isinstance(canonical, torch.Tensor)
    torch.testing.assert_close(ours, canonical, rtol=1e-6, atol=0)
    for a, b in zip(grads(ours, hidden, weight), grads(canonical, hidden, weight), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_no_gradients_are_computed_without_grad_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    hidden, weight, targets, weights = inputs(torch.float32, seed=5)
    blocks: list[int] = []
    original = chunked_loss._Gradients.add

    def counted(self: chunked_loss._Gradients, start: int, *rest: torch.Tensor) -> None:
        blocks.append(start)
        original(self, start, *rest)

    monkeypatch.setattr(chunked_loss._Gradients, "add", counted)
    with torch.no_grad():
        quiet = chunked_loss.linear_cross_entropy(hidden, weight, targets, weights)
    assert blocks == []
    loud = chunked_loss.linear_cross_entropy(hidden, weight, targets, weights)
    assert blocks == [0, 3, 6, 9] and torch.equal(quiet, loud.detach())
