"""`std.nn.softmax::softmax` (stdlib.md 4) against torch.softmax in f64."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from stdlib_support import BF16, StdCases, f64, normal

SOURCE = """module cases

use std.nn.softmax::{softmax}

pub entry run<*S: Shape, N: Dim, T: Float>(x: Tensor[*S, N; T]) -> Tensor[*S, N; T] {
    return softmax(x)
}
"""


@pytest.fixture(scope="module")
def std() -> StdCases:
    return StdCases(SOURCE)


def reference(x: np.ndarray) -> np.ndarray:
    return torch.softmax(torch.from_numpy(f64(x)), dim=-1).numpy()


@pytest.mark.parametrize("shape", [(9,), (3, 7), (2, 3, 4, 5)])
def test_f32_any_leading_axes(std: StdCases, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(30 + len(shape))
    x = normal(rng, shape) * 4
    std.expect("run", [x], [reference(x)])


def test_large_logits_are_stable(std: StdCases) -> None:
    """The row maximum is subtracted: logits near +-1e4 neither overflow nor underflow to NaN."""
    rng = np.random.default_rng(34)
    x = (normal(rng, [4, 6]) * 10 + np.float32([[1e4], [-1e4], [0], [50]])).astype(np.float32)
    std.expect("run", [x], [reference(x)])


@pytest.mark.parametrize("dtype", [BF16, np.float16], ids=["bf16", "f16"])
def test_half_precision_rounds_once(std: StdCases, dtype: np.dtype) -> None:
    """Computed in f32 and cast to `T` once: within half a step (plus f32 noise)."""
    rng = np.random.default_rng(35)
    x = (normal(rng, [5, 11]) * 3).astype(dtype)
    step = 2.0**-7 if dtype == BF16 else 2.0**-10
    runs = std.expect("run", [x], [reference(x)], rtol=step / 2 + 1e-5, atol=1e-7)
    assert all(r[0].dtype == dtype for r in runs.values())
