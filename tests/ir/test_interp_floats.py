"""Float semantics of the reference interpreter against Python's f64 math.

Arithmetic (+ - * /, fmod, max, min) is checked exactly: computing in f64 and
rounding once to f32/f16/bf16 is correctly rounded for these operations, so the
expected value is `round(python_result)`. Float functions are checked within
one unit in the last place of each dtype; bf16/f16 rounding is also pinned by
hand-computed ties.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from ir_core_support import FLOATS, bf16_round, elementwise, random_floats, run_one

from linnet.ir.core import numpy_dtype

SHAPE = (5, 8)
ULP = {"f16": 2.0**-10, "bf16": 2.0**-7, "f32": 2.0**-23, "f64": 2.0**-51}

EXACT = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "rem": math.fmod,
    "max": max,
    "min": min,
}
COMPARE = {
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
}
FUNCTIONS = {
    "exp": (math.exp, -4.0, 4.0),
    "log": (math.log, 0.01, 50.0),
    "sqrt": (math.sqrt, 0.01, 50.0),
    "rsqrt": (lambda v: 1.0 / math.sqrt(v), 0.01, 50.0),
    "sin": (math.sin, -3.0, 3.0),
    "cos": (math.cos, -3.0, 3.0),
    "tanh": (math.tanh, -3.0, 3.0),
    "abs": (abs, -4.0, 4.0),
    "neg": (lambda v: -v, -4.0, 4.0),
}


def as_f64(values: np.ndarray) -> np.ndarray:
    return np.asarray(values).astype(np.float64)


def rounded(values: list[float], dtype: str) -> np.ndarray:
    return np.array(values, np.float64).astype(numpy_dtype(dtype))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("kind", sorted(EXACT))
def test_float_arithmetic_is_correctly_rounded(kind: str, dtype: str) -> None:
    rng = np.random.default_rng(len(kind) * 31 + FLOATS.index(dtype))
    a = random_floats(rng, dtype, SHAPE)
    b = random_floats(rng, dtype, SHAPE)
    got = run_one(kind, [a, b], dtypes=[dtype, dtype])
    expected = rounded(elementwise(EXACT[kind], as_f64(a), as_f64(b)), dtype)
    assert got.dtype == numpy_dtype(dtype)
    assert as_f64(got).tolist() == as_f64(expected).reshape(SHAPE).tolist()


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("kind", sorted(COMPARE))
def test_float_comparisons(kind: str, dtype: str) -> None:
    rng = np.random.default_rng(2)
    a = random_floats(rng, dtype, SHAPE)
    b = random_floats(rng, dtype, SHAPE)
    b[0] = a[0]
    got = run_one(kind, [a, b], dtypes=[dtype, dtype])
    assert got.reshape(-1).tolist() == elementwise(COMPARE[kind], as_f64(a), as_f64(b))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("kind", sorted(FUNCTIONS))
def test_float_functions_within_one_ulp(kind: str, dtype: str) -> None:
    fn, low, high = FUNCTIONS[kind]
    rng = np.random.default_rng(len(kind) + 100 * FLOATS.index(dtype))
    x = random_floats(rng, dtype, SHAPE, low, high)
    got = run_one(kind, [x], dtypes=[dtype])
    expected = np.array(elementwise(fn, as_f64(x))).reshape(SHAPE)
    assert got.dtype == numpy_dtype(dtype)
    np.testing.assert_allclose(as_f64(got), expected, rtol=ULP[dtype], atol=0)


def test_bf16_add_rounds_ties_to_even() -> None:
    bf16 = ml_dtypes.bfloat16
    one = np.array([1.0, 1.0, 1.0, 256.0], bf16)
    # bf16 keeps 7 fraction bits: the ulp of 1.0 is 2^-7.
    small = np.array([2.0**-8, 3 * 2.0**-8, 2.0**-8 + 2.0**-12, 1.0], bf16)
    got = run_one("add", [one, small], dtypes=["bf16", "bf16"])
    # 1 + half an ulp ties to 1 (even); 1 + 1.5 ulp ties to 1 + 2 ulp (even);
    # just above half an ulp rounds up; 256 + 1 is a tie between 256 and 258.
    assert as_f64(got).tolist() == [1.0, 1.0 + 2.0**-6, 1.0 + 2.0**-7, 256.0]


def test_f16_mul_rounds_once_per_op() -> None:
    a = np.array([1.0 + 2.0**-10, 1.0 + 2.0**-5, 1.0 + 2.0**-5 + 2.0**-10], np.float16)
    b = np.array([1.0 + 2.0**-10, 1.0 + 2.0**-6, 1.0 + 2.0**-6], np.float16)
    got = as_f64(run_one("mul", [a, b], dtypes=["f16", "f16"])).tolist()
    # f16 keeps 10 fraction bits. (1 + 2^-10)^2 = 1 + 2^-9 + 2^-20 rounds down;
    # (1 + 2^-5)(1 + 2^-6) = 1 + 48 * 2^-10 + 2^-11 is a tie, kept at the even 48;
    # adding 2^-10 to a makes it 1 + 49 * 2^-10 + 2^-11 + 2^-16: above the tie, up.
    assert got == [1.0 + 2.0**-9, 1.0 + 48 * 2.0**-10, 1.0 + 50 * 2.0**-10]


def test_bf16_function_results_match_bit_level_rounding() -> None:
    rng = np.random.default_rng(9)
    x = random_floats(rng, "bf16", (64,), -3.0, 3.0)
    got = run_one("exp", [x], dtypes=["bf16"])
    expected = bf16_round(np.array([math.exp(v) for v in as_f64(x)], np.float32))
    # exp computed in f64, rounded to f32 and then bf16 may differ from a direct
    # rounding only on near-ties; allow one bf16 ulp there and require most exact.
    assert np.mean(as_f64(got) == as_f64(expected)) > 0.95
    np.testing.assert_allclose(as_f64(got), as_f64(expected), rtol=2.0**-7)


def test_float_broadcasting_and_select() -> None:
    rng = np.random.default_rng(4)
    a = random_floats(rng, "f32", (2, 1, 3))
    b = random_floats(rng, "f32", (4, 1))
    got = run_one("mul", [a, b])
    assert got.shape == (2, 4, 3)
    for i, j, k in np.ndindex(got.shape):
        assert float(got[i, j, k]) == float(np.float32(float(a[i, 0, k]) * float(b[j, 0])))
    cond = rng.random((4, 1)) > 0.5
    chosen = run_one("select", [cond, a, b])
    for i, j, k in np.ndindex(chosen.shape):
        assert chosen[i, j, k] == (a[i, 0, k] if cond[j, 0] else b[j, 0])


def test_ieee_special_values() -> None:
    x = np.array([-1.0, 0.0, 4.0], np.float32)
    assert np.isnan(run_one("log", [x])[0])
    assert run_one("log", [x])[1] == -np.inf
    assert np.isnan(run_one("sqrt", [x])[0])
    assert run_one("rsqrt", [x])[1] == np.inf
    div = run_one("div", [np.array([1.0, -1.0], np.float32), np.zeros(2, np.float32)])
    assert div.tolist() == [np.inf, -np.inf]
    nan = np.array([np.nan, 1.0], np.float32)
    assert np.isnan(run_one("max", [nan, np.array([0.0, 2.0], np.float32)])[0])
