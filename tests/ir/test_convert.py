"""`linnet.ir.convert`: our rounding into bf16 equals PyTorch's, whatever ml_dtypes does."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from linnet.ir.convert import BF16, bf16_to_f32, convert, to_bf16


def _torch_bf16_bits(x: np.ndarray) -> np.ndarray:
    t = torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16)
    return t.view(torch.int16).numpy().view(np.uint16)


def test_f32_to_bf16_equals_torch_on_random_bit_patterns() -> None:
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, size=200_000, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    finite = np.isfinite(x)
    ours = to_bf16(x).view(np.uint16)
    assert np.array_equal(ours[finite], _torch_bf16_bits(x)[finite])
    # NaN stays NaN (quiet, same sign); torch's NaN payload is not specified
    assert np.isnan(bf16_to_f32(to_bf16(x[~finite & np.isnan(x)]))).all()


def test_ties_and_specials() -> None:
    x = np.array(
        [
            1.0 + 2.0**-8,
            1.0 + 3 * 2.0**-8,
            -(1.0 + 2.0**-8),
            np.inf,
            -np.inf,
            0.0,
            -0.0,
            3.3895314e38,
            np.finfo(np.float32).max,
            1e-40,
        ],
        dtype=np.float32,
    )
    assert np.array_equal(to_bf16(x).view(np.uint16), _torch_bf16_bits(x))
    assert np.signbit(bf16_to_f32(to_bf16(np.array([-0.0], np.float32))))[0]


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.int32, np.uint8, np.bool_])
def test_other_sources_go_through_f32(dtype: type) -> None:
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(5000) * 1000).astype(dtype)
    expected = _torch_bf16_bits(x.astype(np.float32))
    assert np.array_equal(convert(x, BF16).view(np.uint16), expected)


def test_out_of_bf16_is_exact() -> None:
    x = to_bf16(np.linspace(-5, 5, 1001, dtype=np.float32))
    back = convert(x, np.dtype(np.float64))
    assert np.array_equal(
        back, torch.from_numpy(x.view(np.int16)).view(torch.bfloat16).double().numpy()
    )
    assert convert(x, np.dtype(np.int32)).dtype == np.int32
