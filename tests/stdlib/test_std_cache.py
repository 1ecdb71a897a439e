"""`std.nn.cache` (stdlib.md 10): KV-cache writes against NumPy slice assignment, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from stdlib_support import StdCases, normal

SOURCE = """module cases

use std.nn.cache::{write_at, write_members, write_rows, write_slot, write_slots, write_span}

pub entry at<B: Dim, H: Dim, S: Dim, D: Dim, T: Float>(
    cache: Tensor[B, H, S, D; T],
    value: Tensor[B, H, 1, D; T],
    position: i32,
) -> Tensor[B, H, S, D; T]
where S > 0 {
    return write_at(cache, value, position)
}

pub entry span<B: Dim, H: Dim, S: Dim, N: Dim, D: Dim, T: Float>(
    cache: Tensor[B, H, S, D; T],
    value: Tensor[B, H, N, D; T],
    position: i32,
) -> Tensor[B, H, S, D; T]
where
    S > 0,
    N > 0
{
    return write_span(cache, value, position)
}

pub entry span_fixed<B: Dim, H: Dim, S: Dim, N: Dim, D: Dim, T: Float>(
    cache: Tensor[B, H, S, D; T],
    value: Tensor[B, H, N, D; T],
) -> (Tensor[B, H, S, D; T], Tensor[B, H, S, D; T])
where
    S > 0,
    N > 0
{
    return (write_span(cache, value, 0), write_span(cache, value, 2))
}

pub entry rows<B: Dim, H: Dim, S: Dim, D: Dim, T: Float>(
    cache: Tensor[B, H, S, D; T],
    value: Tensor[B, H, 1, D; T],
    positions: Tensor[B; i32],
) -> Tensor[B, H, S, D; T]
where S > 0 {
    return write_rows(cache, value, positions)
}

pub entry slot<B: Dim, H: Dim, S: Dim, N: Dim, D: Dim, T: Float>(
    cache: Tensor[B, H, S, D; T],
    value: Tensor[1, H, N, D; T],
    row: i32,
    position: i32,
) -> Tensor[B, H, S, D; T]
where
    S > 0,
    N > 0
{
    return write_slot(cache, value, row, position)
}

pub entry slots<B: Dim, H: Dim, S: Dim, M: Dim, N: Dim, D: Dim, T: Float>(
    cache: Tensor[B, H, S, D; T],
    value: Tensor[M, H, N, D; T],
    rows: Tensor[M; i32],
    position: i32,
) -> Tensor[B, H, S, D; T]
where
    S > 0,
    N > 0,
    M > 0
{
    return write_slots(cache, value, rows, position)
}

pub entry members<B: Dim, H: Dim, S: Dim, M: Dim, D: Dim, T: Float>(
    cache: Tensor[B, H, S, D; T],
    value: Tensor[M, H, 1, D; T],
    rows: Tensor[M; i32],
    positions: Tensor[M; i32],
) -> Tensor[B, H, S, D; T]
where
    S > 0,
    M > 0
{
    return write_members(cache, value, rows, positions)
}
"""

EXACT = {"rtol": 0.0, "atol": 0.0}


@pytest.fixture(scope="module")
def std() -> StdCases:
    return StdCases(SOURCE)


def spanned(cache: np.ndarray, value: np.ndarray, at: int) -> np.ndarray:
    """Positions [at, at + N) that fall inside the cache take value[:, :, s - at]."""
    out = cache.copy()
    for s in range(cache.shape[2]):
        if 0 <= s - at < value.shape[2]:
            out[:, :, s] = value[:, :, s - at]
    return out


@pytest.mark.parametrize("position", [0, 3, 6])
def test_write_at(std: StdCases, position: int) -> None:
    rng = np.random.default_rng(110)
    cache, value = normal(rng, [2, 3, 7, 4]), normal(rng, [2, 3, 1, 4])
    expected = cache.copy()
    expected[:, :, position] = value[:, :, 0]
    std.expect("at", [cache, value, np.int32(position)], [expected], **EXACT)


@pytest.mark.parametrize("position", [-2, 0, 3, 5, 7])
def test_write_span_clamps_to_the_cache(std: StdCases, position: int) -> None:
    """Inside, overlapping the start or the end, and wholly past the cache (no change)."""
    rng = np.random.default_rng(111)
    cache, value = normal(rng, [2, 2, 7, 3]), normal(rng, [2, 2, 3, 3])
    expected = spanned(cache, value, position)
    std.expect("span", [cache, value, np.int32(position)], [expected], **EXACT)


def test_write_span_at_constant_positions(std: StdCases) -> None:
    rng = np.random.default_rng(112)
    cache, value = normal(rng, [1, 2, 6, 3]), normal(rng, [1, 2, 4, 3])
    expected = [spanned(cache, value, 0), spanned(cache, value, 2)]
    std.expect("span_fixed", [cache, value], expected, **EXACT)


def test_write_rows_each_at_its_own_position(std: StdCases) -> None:
    rng = np.random.default_rng(113)
    cache, value = normal(rng, [4, 2, 6, 3]), normal(rng, [4, 2, 1, 3])
    positions = np.array([5, 0, 2, 2], np.int32)
    expected = cache.copy()
    for row, position in enumerate(positions):
        expected[row, :, position] = value[row, :, 0]
    std.expect("rows", [cache, value, positions], [expected], **EXACT)


@pytest.mark.parametrize(("row", "position"), [(0, 0), (2, 3), (1, 5)])
def test_write_slot_touches_one_row(std: StdCases, row: int, position: int) -> None:
    rng = np.random.default_rng(114)
    cache, value = normal(rng, [3, 2, 7, 3]), normal(rng, [1, 2, 3, 3])
    expected = cache.copy()
    expected[row : row + 1] = spanned(cache[row : row + 1], value, position)
    inputs = [cache, value, np.int32(row), np.int32(position)]
    std.expect("slot", inputs, [expected], **EXACT)


@pytest.mark.parametrize("listed", [[3, 0], [1], [4, 2, 0, 1, 3]])
def test_write_slots_distinct_rows(std: StdCases, listed: list[int]) -> None:
    """value[m] goes to row slots[m]; rows not listed keep their contents."""
    rng = np.random.default_rng(115 + len(listed))
    cache = normal(rng, [5, 2, 6, 3])
    value = normal(rng, [len(listed), 2, 2, 3])
    expected = cache.copy()
    for m, row in enumerate(listed):
        expected[row : row + 1] = spanned(cache[row : row + 1], value[m : m + 1], 3)
    inputs = [cache, value, np.array(listed, np.int32), np.int32(3)]
    std.expect("slots", inputs, [expected], **EXACT)


@pytest.mark.parametrize(
    ("listed", "positions"),
    [([3, 0], [5, 0]), ([1], [2]), ([4, -1, 0, 5, 2], [1, 3, 5, 0, 4]), ([-3, -2], [1, 1])],
)
def test_write_members_one_position_per_listed_row(
    std: StdCases, listed: list[int], positions: list[int]
) -> None:
    """Member m's value goes to row slots[m] at positions[m]; slots outside the rows (the
    padding members of decode_slots) and rows nobody lists change nothing."""
    rng = np.random.default_rng(120 + len(listed))
    cache = normal(rng, [5, 2, 6, 3])
    value = normal(rng, [len(listed), 2, 1, 3])
    expected = cache.copy()
    for m, (row, position) in enumerate(zip(listed, positions, strict=True)):
        if 0 <= row < 5:
            expected[row, :, position] = value[m, :, 0]
    inputs = [cache, value, np.array(listed, np.int32), np.array(positions, np.int32)]
    std.expect("members", inputs, [expected], **EXACT)
