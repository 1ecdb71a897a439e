"""`std.nn.decoding` (stdlib.md 14): `argmax` against np.argmax (i32, first index on
ties) and `last_tokens` against NumPy indexing (the index clamped into the sequence)."""

from __future__ import annotations

import numpy as np
import pytest
from stdlib_support import BF16, StdCases, normal

SOURCE = """module cases

use std.nn.decoding::{argmax, last_tokens}

pub entry run<*S: Shape, N: Dim, T: Numeric>(x: Tensor[*S, N; T]) -> Tensor[*S; i32] {
    return argmax(x)
}

pub entry last<M: Dim, S: Dim, H: Dim, T: Float>(
    x: Tensor[M, S, H; T],
    lengths: Tensor[M; i32],
) -> Tensor[M, H; T]
where S > 0 {
    return last_tokens(x, lengths)
}
"""


@pytest.fixture(scope="module")
def std() -> StdCases:
    return StdCases(SOURCE)


@pytest.mark.parametrize("shape", [(9,), (4, 9), (2, 3, 9)])
def test_argmax_f32(std: StdCases, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(120 + len(shape))
    x = normal(rng, shape)
    runs = std.expect("run", [x], [np.argmax(x, axis=-1)])
    assert all(r[0].dtype == np.int32 for r in runs.values())


def test_ties_go_to_the_first_index(std: StdCases) -> None:
    rng = np.random.default_rng(124)
    x = normal(rng, [5, 8])
    x[0, [2, 5]] = 9.0
    x[1, [0, 7]] = 9.0
    x[2, [6, 7]] = 9.0
    x[3, :] = -1.5  # every entry ties
    x[4, [1, 3, 4]] = x[4].max() + 1
    expected = np.array([2, 0, 6, 0, 1])
    assert (np.argmax(x, axis=-1) == expected).all()
    std.expect("run", [x], [expected])


@pytest.mark.parametrize(
    "dtype", [np.int32, np.int64, np.uint8, BF16], ids=["i32", "i64", "u8", "bf16"]
)
def test_other_dtypes_with_ties(std: StdCases, dtype: type) -> None:
    rng = np.random.default_rng(125)
    x = rng.integers(0, 6, (6, 10)).astype(dtype)  # small range: many ties
    std.expect("run", [x], [np.argmax(x.astype(np.float64), axis=-1)])


def test_last_tokens_take_each_rows_last_real_position(std: StdCases) -> None:
    rng = np.random.default_rng(126)
    x = normal(rng, [4, 6, 3])
    lengths = np.array([1, 6, 3, 0], np.int32)  # 0 clamps to the first position
    expected = x[np.arange(4), np.clip(lengths - 1, 0, 5)]
    std.expect("last", [x, lengths], [expected])
