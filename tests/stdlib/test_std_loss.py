"""`std.nn.loss` (stdlib.md 15) against torch.nn.functional in f64: every result is f32."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from stdlib_support import BF16, StdCases, f64, normal

SOURCE = """module cases

use std.nn.loss::{
    cross_entropy,
    entropy,
    linear_cross_entropy,
    linear_token_log_probs,
    log_softmax,
    token_log_probs,
}

pub entry log_probs<*S: Shape, V: Dim, T: Float>(logits: Tensor[*S, V; T]) -> Tensor[*S, V; f32] {
    return log_softmax(logits)
}

pub entry tokens<N: Dim, V: Dim, T: Float>(
    logits: Tensor[N, V; T],
    targets: Tensor[N; i64],
    weights: Tensor[N; f32],
) -> (Tensor[N; f32], f32, Tensor[N; f32]) {
    return (
        token_log_probs(logits, targets),
        cross_entropy(logits, targets, weights),
        entropy(logits),
    )
}

pub entry head<N: Dim, H: Dim, V: Dim, T: Float>(
    hidden: Tensor[N, H; T],
    weight: Tensor[V, H; T],
    targets: Tensor[N; i64],
    weights: Tensor[N; f32],
) -> (Tensor[N; f32], f32) {
    return (
        linear_token_log_probs(hidden, weight, targets),
        linear_cross_entropy(hidden, weight, targets, weights),
    )
}
"""


@pytest.fixture(scope="module")
def std() -> StdCases:
    return StdCases(SOURCE)


def token_references(logits: np.ndarray, targets: np.ndarray, weights: np.ndarray) -> list:  # type: ignore[type-arg]
    t = torch.from_numpy(f64(logits))
    target_t = torch.from_numpy(targets)
    picked = -F.cross_entropy(t, target_t, reduction="none")
    total = (F.cross_entropy(t, target_t, reduction="none") * torch.from_numpy(f64(weights))).sum()
    spread = torch.distributions.Categorical(logits=t).entropy()
    return [picked.numpy(), total.numpy(), spread.numpy()]


@pytest.mark.parametrize("shape", [(7,), (3, 7), (2, 2, 7)])
def test_log_softmax(std: StdCases, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(190 + len(shape))
    logits = normal(rng, shape) * 5
    expected = F.log_softmax(torch.from_numpy(f64(logits)), dim=-1).numpy()
    std.expect("log_probs", [logits], [expected])


def test_log_softmax_of_bf16_and_huge_logits_is_f32(std: StdCases) -> None:
    rng = np.random.default_rng(194)
    logits = (normal(rng, [3, 9]) * 4 + np.float32([[3e4], [-3e4], [0]])).astype(BF16)
    expected = F.log_softmax(torch.from_numpy(f64(logits)), dim=-1).numpy()
    runs = std.expect("log_probs", [logits], [expected], atol=1e-5)
    assert std.result_dtypes("log_probs", [logits]) == ["f32"]
    assert all(r[0].dtype == np.float32 for r in runs.values())


@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["f32", "bf16"])
def test_token_losses_weighted_sum_and_entropy(std: StdCases, dtype: np.dtype) -> None:
    """cross_entropy is a weighted sum, not a mean; weight 0 drops a token."""
    rng = np.random.default_rng(195)
    logits = (normal(rng, [6, 11]) * 3).astype(dtype)
    targets = rng.integers(0, 11, 6).astype(np.int64)
    weights = rng.uniform(0.1, 2.0, 6).astype(np.float32)
    weights[2] = 0.0
    expected = token_references(logits, targets, weights)
    std.expect("tokens", [logits, targets, weights], expected, atol=1e-5)
    assert std.result_dtypes("tokens", [logits, targets, weights]) == ["f32"] * 3
    # a mean over a count is the caller's choice of weights (mask / count)
    mask = np.float32([1, 1, 0, 1, 0, 1])
    kept = torch.from_numpy(mask > 0)
    logits_t, targets_t = torch.from_numpy(f64(logits)), torch.from_numpy(targets)
    mean = F.cross_entropy(logits_t[kept], targets_t[kept]).numpy()
    std.expect("tokens", [logits, targets, mask / 4], [expected[0], mean, expected[2]], atol=1e-5)


def test_linear_heads(std: StdCases) -> None:
    """The logits come from `linear(hidden, weight)`; f32 here, so F.linear is the reference."""
    rng = np.random.default_rng(196)
    hidden, weight = normal(rng, [5, 8]), normal(rng, [13, 8])
    targets = rng.integers(0, 13, 5).astype(np.int64)
    weights = rng.uniform(0.1, 1.0, 5).astype(np.float32)
    logits = F.linear(torch.from_numpy(f64(hidden)), torch.from_numpy(f64(weight))).numpy()
    picked, total, _ = token_references(logits, targets, weights)
    std.expect("head", [hidden, weight, targets, weights], [picked, total], atol=1e-5)
