"""`std.nn.rope` (stdlib.md 7) against an independent complex-number form of rotate-half RoPE.

The reference pairs element `i` with `i + D/2` as the complex number
`x_i + j x_{i+D/2}` and multiplies it by `exp(j * angle_i)`; the tables passed
to Linnet are the full-width `cos`/`sin` of the same angles, each frequency
twice, as HF Llama builds them. Interleaved pairing would fail these checks.
"""

from __future__ import annotations

import numpy as np
import pytest
from stdlib_support import BF16, StdCases, f64, normal

SOURCE = """module cases

use std.nn.rope::{rope, rope_rows, rotate_half}

pub entry half<*S: Shape, D: Dim, T: Float>(x: Tensor[*S, D; T]) -> Tensor[*S, D; T]
where D % 2 == 0 {
    return rotate_half(x)
}

pub entry shared<B: Dim, H: Dim, S: Dim, D: Dim, T: Float>(
    x: Tensor[B, H, S, D; T],
    cos_table: Tensor[S, D; T],
    sin_table: Tensor[S, D; T],
) -> Tensor[B, H, S, D; T]
where D % 2 == 0 {
    return rope(x, cos_table, sin_table)
}

pub entry rows<B: Dim, H: Dim, S: Dim, D: Dim, T: Float>(
    x: Tensor[B, H, S, D; T],
    cos_rows: Tensor[B, S, D; T],
    sin_rows: Tensor[B, S, D; T],
) -> Tensor[B, H, S, D; T]
where D % 2 == 0 {
    return rope_rows(x, cos_rows, sin_rows)
}
"""


@pytest.fixture(scope="module")
def std() -> StdCases:
    return StdCases(SOURCE)


def angles(positions: np.ndarray, dim: int, theta: float = 10000.0) -> np.ndarray:
    """`positions[..., None] * theta^(-2i/D)` for `i < D/2`."""
    inv_freq = theta ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
    return positions[..., None].astype(np.float64) * inv_freq


def tables(a: np.ndarray, dtype: np.dtype = np.float32) -> tuple[np.ndarray, np.ndarray]:
    full = np.concatenate([a, a], axis=-1)
    return np.cos(full).astype(dtype), np.sin(full).astype(dtype)


def complex_rope(x: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Rotate pairs (i, i + D/2) by `a[..., i]`; `a` broadcasts against `x[..., :D/2]`."""
    xf = f64(x)
    half = xf.shape[-1] // 2
    z = (xf[..., :half] + 1j * xf[..., half:]) * np.exp(1j * a)
    return np.concatenate([z.real, z.imag], axis=-1)


def test_rotate_half(std: StdCases) -> None:
    rng = np.random.default_rng(70)
    x = normal(rng, [2, 3, 8])
    expected = np.concatenate([-f64(x)[..., 4:], f64(x)[..., :4]], axis=-1)
    std.expect("half", [x], [expected], rtol=0, atol=0)
    std.expect("half", [x[0, 0]], [expected[0, 0]], rtol=0, atol=0)


def test_rope_shared_tables(std: StdCases) -> None:
    rng = np.random.default_rng(71)
    x = normal(rng, [2, 3, 5, 16])
    positions = np.array([0, 1, 7, 30, 511])
    a = angles(positions, 16)
    cos, sin = tables(a)
    expected = complex_rope(x, a[None, None])
    std.expect("shared", [x, cos, sin], [expected], rtol=1e-5, atol=2e-6)


def test_rope_one_decode_step(std: StdCases) -> None:
    """S = 1 with one row of the tables, as callers do for a decode step."""
    rng = np.random.default_rng(72)
    x = normal(rng, [1, 4, 1, 8])
    a = angles(np.array([123]), 8)
    cos, sin = tables(a)
    std.expect("shared", [x, cos, sin], [complex_rope(x, a[None, None])], atol=2e-6)


def test_rope_rows_per_batch_positions(std: StdCases) -> None:
    """Row `b` rotates with its own table rows (continuous batching)."""
    rng = np.random.default_rng(73)
    x = normal(rng, [3, 2, 4, 8])
    starts = np.array([0, 5, 17])
    positions = starts[:, None] + np.arange(4)[None, :]  # [B, S]
    a = angles(positions, 8)  # [B, S, D/2]
    cos, sin = tables(a)
    std.expect("rows", [x, cos, sin], [complex_rope(x, a[:, None])], atol=2e-6)


def test_rope_bf16_in_t(std: StdCases) -> None:
    """Computed in bf16: each of x*cos, rot*sin and their sum rounds once."""
    rng = np.random.default_rng(74)
    x = normal(rng, [1, 2, 3, 8], BF16)
    a = angles(np.array([2, 9, 40]), 8)
    cos, sin = tables(a, BF16)
    xf = f64(x)
    rotated = np.concatenate([-xf[..., 4:], xf[..., :4]], axis=-1)
    exact = xf * f64(cos) + rotated * f64(sin)
    bound = 2.0**-7 * (np.abs(xf * f64(cos)) + np.abs(rotated * f64(sin)))
    for backend, (got,) in std.run("shared", [x, cos, sin]).items():
        assert got.dtype == BF16
        assert np.all(np.abs(f64(got) - exact) <= bound), backend
