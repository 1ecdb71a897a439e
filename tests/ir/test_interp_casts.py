"""`cast` semantics (language.md 10.3) against exact Python conversions.

float -> int truncates toward zero then wraps; int -> int wraps; bool -> 0/1;
number -> bool is `!= 0`; float -> float rounds to nearest even (bf16 checked
against bit-level rounding, f32 against `struct`'s C conversion).
"""

from __future__ import annotations

import math
import struct

import ml_dtypes
import numpy as np
import pytest
from ir_core_support import (
    FLOATS,
    INT_DTYPES,
    INT_RANGES,
    bf16_round,
    elementwise,
    random_floats,
    random_ints,
    run_one,
    wrap,
)

from linnet.ir.core import TensorType, numpy_dtype


def cast(array: np.ndarray, source: str, target: str) -> np.ndarray:
    return run_one("cast", [array], result=TensorType(array.shape, target), dtypes=[source])


@pytest.mark.parametrize("source", ["f16", "bf16", "f32", "f64"])
@pytest.mark.parametrize("target", INT_DTYPES)
def test_float_to_int_truncates_toward_zero(source: str, target: str) -> None:
    lo, hi = INT_RANGES[target]
    limit = min(hi, 100.0 if source in ("f16", "bf16") else 1e6)
    low = max(lo, -limit)
    rng = np.random.default_rng(INT_DTYPES.index(target))
    x = random_floats(rng, source, (40,), low, limit)
    x[:4] = np.array([-2.75, -0.5, 0.5, 2.75] if lo < 0 else [0.25, 0.5, 2.75, 3.5]).astype(x.dtype)
    got = cast(x, source, target)
    expected = [math.trunc(v) for v in x.astype(np.float64).tolist()]
    assert got.dtype == numpy_dtype(target)
    assert got.tolist() == expected


@pytest.mark.parametrize("source", INT_DTYPES)
@pytest.mark.parametrize("target", INT_DTYPES)
def test_int_to_int_wraps(source: str, target: str) -> None:
    rng = np.random.default_rng(INT_DTYPES.index(source) * 8 + INT_DTYPES.index(target))
    x = random_ints(rng, source, (32,))
    got = cast(x, source, target)
    assert got.tolist() == elementwise(lambda v: wrap(v, target), x)


@pytest.mark.parametrize("target", (*INT_DTYPES, *FLOATS))
def test_bool_to_number_and_back(target: str) -> None:
    flags = np.array([True, False, True, True, False])
    as_number = cast(flags, "bool", target)
    assert as_number.astype(np.float64).tolist() == [1, 0, 1, 1, 0]
    rng = np.random.default_rng(1)
    if target in FLOATS:
        x = random_floats(rng, target, (20,))
        x[:3] = np.array([0.0, -0.0, np.nan]).astype(x.dtype)
    else:
        x = random_ints(rng, target, (20,))
        x[:2] = 0
    back = cast(x, target, "bool")
    assert back.tolist() == [v != 0 for v in x.astype(np.float64).tolist()]
    if target in FLOATS:
        assert back[2]  # NaN != 0


def test_f64_to_f32_rounds_to_nearest_even() -> None:
    rng = np.random.default_rng(12)
    x = rng.normal(size=200) * 10.0 ** rng.integers(-8, 8, size=200)
    ties = [1.0 + 2.0**-24, 1.0 + 3 * 2.0**-24, -(1.0 + 2.0**-24)]
    x[: len(ties)] = ties
    got = cast(x, "f64", "f32")
    expected = [struct.unpack("f", struct.pack("f", v))[0] for v in x.tolist()]
    assert got.astype(np.float64).tolist() == expected
    assert got[:3].astype(np.float64).tolist() == [1.0, 1.0 + 2.0**-22, -1.0]


def test_f32_to_bf16_matches_bit_rounding() -> None:
    rng = np.random.default_rng(13)
    x = (rng.normal(size=300) * 100).astype(np.float32)
    x[:2] = [1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8]  # ties: to 1.0 and to 1 + 2^-6
    got = cast(x, "f32", "bf16")
    assert got.dtype == np.dtype(ml_dtypes.bfloat16)
    assert got.view(np.uint16).tolist() == bf16_round(x).view(np.uint16).tolist()
    assert got[:2].astype(np.float64).tolist() == [1.0, 1.0 + 2.0**-6]


def test_int_to_float_and_f16_saturation() -> None:
    big = np.array([2**24 + 1, -(2**24) - 3, 7], np.int64)
    # 2^24 + 1 ties between 2^24 and 2^24 + 2: even mantissa is 2^24.
    assert cast(big, "i64", "f32").astype(np.float64).tolist() == [2.0**24, -(2.0**24) - 4, 7.0]
    assert cast(np.array([70000.0], np.float32), "f32", "f16")[0] == np.inf


def test_conversions_to_bf16_go_through_f32() -> None:
    # Pinned choice (kernels.py): like ml_dtypes and PyTorch, f64 and integers
    # reach bf16 through f32. 1 + 2^-8 + 2^-30 is above the bf16 tie, but its f32
    # rounding 1 + 2^-8 is exactly on it, so the result is 1.0.
    x = np.array([1.0 + 2.0**-8 + 2.0**-30, 3.0, -0.375])
    assert cast(x, "f64", "bf16").astype(np.float64).tolist() == [1.0, 3.0, -0.375]
    ints = np.array([257, 259, -(2**20) - 1, 12], np.int32)
    expected = bf16_round(ints.astype(np.float32)).astype(np.float64).tolist()
    assert (
        cast(ints, "i32", "bf16").astype(np.float64).tolist()
        == expected
        == [256, 260, -(2**20), 12]
    )
