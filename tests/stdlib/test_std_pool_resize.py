"""`std.nn.pool` and `std.nn.resize` (stdlib.md 12-13) against F.max_pool2d, means, F.interpolate."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from stdlib_support import BF16, StdCases, f64, normal

SOURCE = """module cases

use std.nn.pool::{global_average_pool2d, max_pool2d}
use std.nn.resize::{upsample_nearest2d}

pub entry pool<B: Dim, C: Dim, H: Dim, W: Dim, K: Dim, St: Dim, P: Dim, T: Float>(
    x: Tensor[B, C, H, W; T],
) -> Tensor[B, C, (H + 2 * P - K) / St + 1, (W + 2 * P - K) / St + 1; T]
where
    St > 0,
    K > 0
{
    return max_pool2d<B, C, H, W, K, St, P, T>(x)
}

pub entry mean<B: Dim, C: Dim, H: Dim, W: Dim, T: Float>(
    x: Tensor[B, C, H, W; T],
) -> Tensor[B, C; T] {
    return global_average_pool2d(x)
}

pub entry grow<B: Dim, C: Dim, H: Dim, W: Dim, Scale: Dim, T: Float>(
    x: Tensor[B, C, H, W; T],
) -> Tensor[B, C, H * Scale, W * Scale; T]
where Scale > 0 {
    return upsample_nearest2d<B, C, H, W, Scale, T>(x)
}
"""


@pytest.fixture(scope="module")
def std() -> StdCases:
    return StdCases(SOURCE)


# (K, Stride, Pad) with Pad <= K / 2, where F.max_pool2d is defined
@pytest.mark.parametrize(
    ("k", "stride", "pad"), [(2, 2, 0), (3, 2, 1), (3, 1, 1), (1, 1, 0), (4, 3, 2)]
)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16], ids=["f32", "f16", "bf16"])
@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")  # -1e30 in f16
def test_max_pool2d(std: StdCases, k: int, stride: int, pad: int, dtype: np.dtype) -> None:
    """Exact: a max picks one input; padding (-1e30, -inf in f16) never wins, even over -9."""
    rng = np.random.default_rng(160 + k * 10 + stride)
    x = (normal(rng, [2, 3, 7, 6]) * 3 - 9).astype(dtype)
    expected = F.max_pool2d(torch.from_numpy(f64(x)), k, stride, pad).numpy()
    std.expect("pool", [x], [expected], generics={"K": k, "St": stride, "P": pad}, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["f32", "bf16"])
def test_global_average_pool2d(std: StdCases, dtype: np.dtype) -> None:
    """Accumulated in f32 and cast to `T` once."""
    rng = np.random.default_rng(170)
    x = (normal(rng, [2, 5, 6, 7]) + 0.5).astype(dtype)
    expected = f64(x).mean(axis=(2, 3))
    rtol = 1e-5 if dtype == np.float32 else 2.0**-8 + 1e-5
    std.expect("mean", [x], [expected], rtol=rtol, atol=1e-6)


@pytest.mark.parametrize("scale", [1, 2, 3])
def test_upsample_nearest2d(std: StdCases, scale: int) -> None:
    rng = np.random.default_rng(180 + scale)
    x = normal(rng, [2, 3, 4, 5])
    t = torch.from_numpy(f64(x))
    expected = F.interpolate(t, scale_factor=scale, mode="nearest").numpy()
    std.expect("grow", [x], [expected], generics={"Scale": scale}, rtol=0, atol=0)
