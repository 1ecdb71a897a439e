"""`linnet.gguf.q8.quantize_q8_0` gives gguf-py's Q8_0 bytes (ggml's reference) exactly.

gguf-py's `quants.quantize` is the reference (a bit-exact port of ggml's
`quantize_row_q8_0_ref`); the inputs hold what rounding gets wrong first:
exact halves of every sign after scaling (ties go away from zero), values
just below a half, all-zero blocks (scale 0, which must not be stored as
-0.0), a block whose largest magnitude is negative, tiny and huge scales, and
shapes of one, two and three axes spanning several chunks.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from linnet.gguf.q8 import CHUNK_VALUES, quantize_q8_0  # noqa: E402

Array = np.ndarray[Any, Any]


def reference(array: Array) -> Array:
    return np.asarray(gguf.quants.quantize(array, gguf.GGMLQuantizationType.Q8_0))


def awkward(shape: tuple[int, ...], seed: int) -> Array:
    """Random values of `shape` whose first blocks (as many as fit) are the hard cases."""
    values = (np.random.default_rng(seed).standard_normal(shape) * 0.02).astype(np.float32)
    flat = values.reshape(-1, 32)
    cases = [
        np.arange(32) - 15.5,  # max 16.5 -> d = 16.5 / 127: many near-halves
        np.zeros(32),
        -np.zeros(32),
        np.where(np.arange(32) % 2 == 0, 127.0, -63.5),  # exact halves once scaled
        np.where(np.arange(32) == 7, -1.0, 0.3),  # the largest magnitude negative
        flat[5 % len(flat)] * np.float32(1e-30),
        flat[6 % len(flat)] * np.float32(1e6),
        np.float32(0.5) - np.float32(2**-25) * np.arange(32),
    ]
    for i, case in enumerate(cases[: len(flat)]):
        flat[i] = case
    return values


@pytest.mark.parametrize(
    "shape", [(64,), (7, 96), (CHUNK_VALUES // 64 + 3, 64), (3, 5, 128)], ids=str
)
def test_bytes_equal_gguf_py(shape: tuple[int, ...]) -> None:
    values = awkward(shape, seed=len(shape))
    got = quantize_q8_0(values)
    want = reference(values)
    assert got.dtype == np.uint8 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_random_matrices_equal_gguf_py() -> None:
    for seed in range(3):
        values = np.random.default_rng(seed).standard_normal((33, 2048)).astype(np.float32)
        np.testing.assert_array_equal(quantize_q8_0(values), reference(values))


def test_rows_not_a_multiple_of_32_are_refused() -> None:
    with pytest.raises(ValueError, match="multiple of 32"):
        quantize_q8_0(np.zeros((2, 40), np.float32))
