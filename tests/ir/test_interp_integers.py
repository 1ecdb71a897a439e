"""Integer semantics of the reference interpreter against exact Python integer math.

Every integer dtype, random operands over the whole range plus the extremes:
wrapping arithmetic, C-style truncating div/rem, bitwise ops, shifts in and out
of range, comparisons (language.md 7.5, 10.3).
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from ir_core_support import INT_DTYPES, INT_RANGES, elementwise, random_ints, run_one, wrap

SHAPE = (6, 7)


def trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def trunc_rem(a: int, b: int) -> int:
    return a - b * trunc_div(a, b)


ARITH = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": trunc_div,
    "rem": trunc_rem,
    "max": max,
    "min": min,
    "and": lambda a, b: a & b,
    "or": lambda a, b: a | b,
    "xor": lambda a, b: a ^ b,
}
COMPARE = {
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
}


@pytest.mark.parametrize("dtype", INT_DTYPES)
@pytest.mark.parametrize("kind", sorted(ARITH))
def test_integer_binary_matches_exact_math(kind: str, dtype: str) -> None:
    rng = np.random.default_rng(zlib.crc32(f"{kind}{dtype}".encode()))
    a = random_ints(rng, dtype, SHAPE)
    b = random_ints(rng, dtype, SHAPE)
    if kind in ("div", "rem"):
        b[0, :] = random_ints(rng, dtype, (SHAPE[1],)) % 7 + 1  # small divisors too
    got = run_one(kind, [a, b])
    expected = elementwise(lambda x, y: wrap(ARITH[kind](x, y), dtype), a, b)
    assert got.dtype == a.dtype
    assert got.reshape(-1).tolist() == expected


@pytest.mark.parametrize("dtype", INT_DTYPES)
@pytest.mark.parametrize("kind", sorted(COMPARE))
def test_integer_comparisons(kind: str, dtype: str) -> None:
    rng = np.random.default_rng(7)
    a = random_ints(rng, dtype, SHAPE)
    b = a.copy()
    b[1:] = random_ints(rng, dtype, (SHAPE[0] - 1, SHAPE[1]))  # first row equal
    got = run_one(kind, [a, b])
    assert got.dtype == np.bool_
    assert got.reshape(-1).tolist() == elementwise(COMPARE[kind], a, b)


def test_division_truncates_toward_zero_not_floor() -> None:
    a = np.array([-7, 7, -7, 7, -1, -128, 5], np.int8)
    b = np.array([2, -2, -2, 2, 3, -1, -5], np.int8)
    assert run_one("div", [a, b]).tolist() == [-3, -3, 3, 3, 0, -128, -1]
    assert run_one("rem", [a, b]).tolist() == [-1, 1, -1, 1, -1, 0, 0]


def test_wraparound_at_the_width() -> None:
    a = np.array([127, -128, 100], np.int8)
    b = np.array([1, -1, 100], np.int8)
    assert run_one("add", [a, b]).tolist() == [-128, 127, -56]
    assert run_one("mul", [a, b]).tolist() == [127, -128, 16]
    u = np.array([0, 255, 3], np.uint8)
    assert run_one("sub", [u, np.array([1, 255, 5], np.uint8)]).tolist() == [255, 0, 254]
    assert run_one("neg", [u]).tolist() == [0, 1, 253]
    assert run_one("abs", [np.array([-128, -5, 7], np.int8)]).tolist() == [-128, 5, 7]


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_unary_integer_ops(dtype: str) -> None:
    rng = np.random.default_rng(3)
    x = random_ints(rng, dtype, SHAPE)
    lo, hi = INT_RANGES[dtype]
    assert run_one("neg", [x]).reshape(-1).tolist() == elementwise(lambda v: wrap(-v, dtype), x)
    expected_abs = elementwise(lambda v: wrap(abs(v), dtype), x)
    assert run_one("abs", [x]).reshape(-1).tolist() == expected_abs
    expected_not = elementwise(lambda v: wrap(~v, dtype), x)
    assert run_one("not", [x]).reshape(-1).tolist() == expected_not
    assert lo <= min(expected_not) and max(expected_not) <= hi


def shift_left(a: int, s: int, dtype: str) -> int:
    width = int(dtype[1:])
    return wrap(a << s, dtype) if 0 <= s < width else 0


def shift_right(a: int, s: int, dtype: str) -> int:
    width = int(dtype[1:])
    if 0 <= s < width:
        return a >> s  # Python's >> is arithmetic; unsigned values are non-negative
    return -1 if a < 0 else 0


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_shifts_in_and_out_of_range(dtype: str) -> None:
    rng = np.random.default_rng(11)
    width = int(dtype[1:])
    x = random_ints(rng, dtype, SHAPE)
    lo, _hi = INT_RANGES[dtype]
    amounts = rng.integers(0, width + 3, size=SHAPE)  # includes width, width+1, width+2
    if lo < 0:
        amounts[0, :3] = [-1, -5, lo]
    s = amounts.astype(x.dtype)
    got_shl = run_one("shl", [x, s]).reshape(-1).tolist()
    got_shr = run_one("shr", [x, s]).reshape(-1).tolist()
    assert got_shl == elementwise(lambda a, k: shift_left(a, k, dtype), x, s)
    assert got_shr == elementwise(lambda a, k: shift_right(a, k, dtype), x, s)


def test_shr_is_arithmetic_for_signed_and_logical_for_unsigned() -> None:
    signed = np.array([-16, -1, 16], np.int8)
    assert run_one("shr", [signed, np.full(3, 2, np.int8)]).tolist() == [-4, -1, 4]
    unsigned = signed.view(np.uint8)  # same bits: 240, 255, 16
    assert run_one("shr", [unsigned, np.full(3, 2, np.uint8)]).tolist() == [60, 63, 4]


def test_bool_logic_and_equality() -> None:
    a = np.array([True, True, False, False])
    b = np.array([True, False, True, False])
    assert run_one("and", [a, b]).tolist() == [True, False, False, False]
    assert run_one("or", [a, b]).tolist() == [True, True, True, False]
    assert run_one("xor", [a, b]).tolist() == [False, True, True, False]
    assert run_one("not", [a]).tolist() == [False, False, True, True]
    assert run_one("eq", [a, b]).tolist() == [True, False, False, True]
    assert run_one("ne", [a, b]).tolist() == [False, True, True, False]


def test_integer_broadcasting() -> None:
    rng = np.random.default_rng(5)
    a = random_ints(rng, "i32", (3, 1, 4))
    b = random_ints(rng, "i32", (5, 1))
    got = run_one("sub", [a, b])
    assert got.shape == (3, 5, 4)
    for i, j, k in np.ndindex(got.shape):
        assert got[i, j, k] == wrap(int(a[i, 0, k]) - int(b[j, 0]), "i32")
