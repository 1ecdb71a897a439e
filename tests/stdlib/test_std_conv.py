"""`std.nn.conv` (stdlib.md 11) against F.conv2d / F.conv1d and np.pad, with its blocks.

The geometry (kernel, stride, padding) comes from the call's generics; the
cases include a kernel wider than the padded input allows to slide evenly, so
integer division of the output size matters, and `Pad = 0`.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from stdlib_support import StdBlock, StdCases, f64, normal

SOURCE = """module cases

use std.nn.conv::{conv1d, conv2d, conv2d_rect, zero_pad, zero_pad1d, zero_pad_rect}

pub entry square<B: Dim, Ci: Dim, Co: Dim, H: Dim, W: Dim, K: Dim, St: Dim, P: Dim, T: Float>(
    x: Tensor[B, Ci, H, W; T],
    w: Tensor[Co, Ci, K, K; T],
    b: Tensor[Co; T],
) -> (Tensor[B, Co, (H + 2 * P - K) / St + 1, (W + 2 * P - K) / St + 1; T], Tensor[B, Co, (H + 2 * P - K) / St + 1, (W + 2 * P - K) / St + 1; T])
where
    St > 0,
    K > 0
{
    return (
        conv2d<B, Ci, Co, H, W, K, St, P, T>(x, w),
        conv2d<B, Ci, Co, H, W, K, St, P, T>(x, w, some(b)),
    )
}

pub entry line<B: Dim, Ci: Dim, Co: Dim, L: Dim, K: Dim, St: Dim, P: Dim, T: Float>(
    x: Tensor[B, Ci, L; T],
    w: Tensor[Co, Ci, K; T],
    b: Tensor[Co; T],
) -> (Tensor[B, Co, (L + 2 * P - K) / St + 1; T], Tensor[B, Co, (L + 2 * P - K) / St + 1; T])
where
    St > 0,
    K > 0
{
    return (
        conv1d<B, Ci, Co, L, K, St, P, T>(x, w),
        conv1d<B, Ci, Co, L, K, St, P, T>(x, w, some(b)),
    )
}

pub entry rect<
    B: Dim,
    Ci: Dim,
    Co: Dim,
    H: Dim,
    W: Dim,
    KH: Dim,
    KW: Dim,
    SH: Dim,
    SW: Dim,
    PH: Dim,
    PW: Dim,
    T: Float,
>(
    x: Tensor[B, Ci, H, W; T],
    w: Tensor[Co, Ci, KH, KW; T],
    b: Tensor[Co; T],
) -> Tensor[B, Co, (H + 2 * PH - KH) / SH + 1, (W + 2 * PW - KW) / SW + 1; T]
where
    SH > 0,
    SW > 0,
    KH > 0,
    KW > 0
{
    return conv2d_rect<B, Ci, Co, H, W, KH, KW, SH, SW, PH, PW, T>(x, w, some(b))
}

pub entry pads<B: Dim, C: Dim, H: Dim, W: Dim, P: Dim, PH: Dim, PW: Dim, T: Float>(
    x: Tensor[B, C, H, W; T],
) -> (Tensor[B, C, H + 2 * P, W + 2 * P; T], Tensor[B, C, H + 2 * PH, W + 2 * PW; T], Tensor[B, C, H, W + 2 * P; T]) {
    let flat = reshape(x, [B * C, H, W])
    let wide = zero_pad1d<B * C, H, W, P, T>(flat)
    return (
        zero_pad<B, C, H, W, P, T>(x),
        zero_pad_rect<B, C, H, W, PH, PW, T>(x),
        reshape(wide, [B, C, H, W + 2 * P]),
    )
}
"""

BLOCKS = """module cases

use std.nn.conv::{Conv1d, Conv2d, Conv2dRect}

pub block Model {
    sub square: Conv2d<3, 4, 3, 2, 1>
    sub line: Conv1d<3, 4, 5, 2, 2>
    sub rect: Conv2dRect<3, 4, 3, 5, 1, 2, 1, 2>

    pub entry forward<B: Dim, H: Dim, W: Dim, L: Dim>(
        x: Tensor[B, 3, H, W; f32],
        rows: Tensor[B, 3, L; f32],
    ) -> (Tensor[B, 4, (H + 2 - 3) / 2 + 1, (W + 2 - 3) / 2 + 1; f32], Tensor[B, 4, (L + 4 - 5) / 2 + 1; f32], Tensor[B, 4, (H + 2 - 3) / 1 + 1, (W + 4 - 5) / 2 + 1; f32]) {
        return (square.forward(x), line.forward(rows), rect.forward(x))
    }
}
"""


@pytest.fixture(scope="module")
def std() -> StdCases:
    return StdCases(SOURCE)


def tensors(*arrays: np.ndarray | None) -> list[torch.Tensor | None]:
    return [None if a is None else torch.from_numpy(f64(a)) for a in arrays]


# (H, W, K, Stride, Pad): Pad 0; even stride with a remainder; a 1x1 kernel; pad > K/2
SQUARE = [(6, 7, 3, 1, 1), (7, 6, 3, 2, 0), (5, 5, 1, 1, 0), (6, 5, 2, 3, 2), (4, 4, 4, 1, 1)]


@pytest.mark.parametrize(("h", "w", "k", "stride", "pad"), SQUARE)
def test_conv2d(std: StdCases, h: int, w: int, k: int, stride: int, pad: int) -> None:
    rng = np.random.default_rng(130 + h * w + k)
    x, weight, b = normal(rng, [2, 3, h, w]), normal(rng, [4, 3, k, k]), normal(rng, [4])
    x_t, w_t, b_t = tensors(x, weight, b)
    expected = [
        F.conv2d(x_t, w_t, None, stride, pad).numpy(),
        F.conv2d(x_t, w_t, b_t, stride, pad).numpy(),
    ]
    generics = {"K": k, "St": stride, "P": pad}
    std.expect("square", [x, weight, b], expected, generics=generics, atol=1e-5)


@pytest.mark.parametrize(
    ("length", "k", "stride", "pad"), [(11, 5, 2, 2), (8, 3, 1, 0), (9, 1, 3, 1)]
)
def test_conv1d(std: StdCases, length: int, k: int, stride: int, pad: int) -> None:
    rng = np.random.default_rng(140 + length + k)
    x, weight, b = normal(rng, [2, 3, length]), normal(rng, [4, 3, k]), normal(rng, [4])
    x_t, w_t, b_t = tensors(x, weight, b)
    expected = [
        F.conv1d(x_t, w_t, None, stride, pad).numpy(),
        F.conv1d(x_t, w_t, b_t, stride, pad).numpy(),
    ]
    generics = {"K": k, "St": stride, "P": pad}
    std.expect("line", [x, weight, b], expected, generics=generics, atol=1e-5)


def test_conv2d_rect(std: StdCases) -> None:
    """The upstream call's geometry: kernel 3x5, strides (1, 2), pads (1, 2)."""
    rng = np.random.default_rng(150)
    x, weight, b = normal(rng, [2, 3, 6, 9]), normal(rng, [4, 3, 3, 5]), normal(rng, [4])
    x_t, w_t, b_t = tensors(x, weight, b)
    expected = F.conv2d(x_t, w_t, b_t, (1, 2), (1, 2)).numpy()
    generics = {"KH": 3, "KW": 5, "SH": 1, "SW": 2, "PH": 1, "PW": 2}
    std.expect("rect", [x, weight, b], [expected], generics=generics, atol=1e-5)


@pytest.mark.parametrize("pad", [0, 2])
def test_zero_pad_helpers(std: StdCases, pad: int) -> None:
    rng = np.random.default_rng(151)
    x = normal(rng, [2, 3, 4, 5])
    expected = [
        np.pad(x, [(0, 0), (0, 0), (pad, pad), (pad, pad)]),
        np.pad(x, [(0, 0), (0, 0), (1, 1), (3, 3)]),
        np.pad(x, [(0, 0), (0, 0), (0, 0), (pad, pad)]),
    ]
    generics = {"P": pad, "PH": 1, "PW": 3}
    std.expect("pads", [x], expected, generics=generics, rtol=0, atol=0)


def test_conv_blocks_bind_weight_and_optional_bias() -> None:
    model = StdBlock(BLOCKS, "Model")
    rng = np.random.default_rng(152)
    x, rows = normal(rng, [2, 3, 6, 9]), normal(rng, [2, 3, 11])
    weights = {
        "square.weight": normal(rng, [4, 3, 3, 3]),
        "square.bias": normal(rng, [4]),
        "line.weight": normal(rng, [4, 3, 5]),
        "line.bias": normal(rng, [4]),
        "rect.weight": normal(rng, [4, 3, 3, 5]),  # no bias, as upstream's checkpoint
    }
    t = {name: torch.from_numpy(f64(a)) for name, a in weights.items()}
    x_t = torch.from_numpy(f64(x))
    expected = [
        F.conv2d(x_t, t["square.weight"], t["square.bias"], 2, 1).numpy(),
        F.conv1d(torch.from_numpy(f64(rows)), t["line.weight"], t["line.bias"], 2, 2).numpy(),
        F.conv2d(x_t, t["rect.weight"], None, (1, 2), (1, 2)).numpy(),
    ]
    model.expect({}, weights, [x, rows], expected, atol=1e-5)
