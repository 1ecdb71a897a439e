"""Helpers for the Core IR tests: one-op functions, random data, exact integer references."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ml_dtypes
import numpy as np
from backend_cases import INT_RANGES, one_op

from linnet.ir.core import TensorType, numpy_dtype
from linnet.ir.interp import run_function

INT_DTYPES = tuple(INT_RANGES)
FLOATS = ("f16", "bf16", "f32", "f64")


def wrap(value: int, dtype: str) -> int:
    """Two's-complement wrap of a Python int to `dtype` (the exact reference)."""
    lo, hi = INT_RANGES[dtype]
    span = hi - lo + 1
    return (value - lo) % span + lo


def run_one(
    kind: str,
    arrays: Sequence[np.ndarray],
    attrs: Mapping[str, object] | None = None,
    result: TensorType | None = None,
    dtypes: Sequence[str] | None = None,
) -> np.ndarray:
    """Run one op on arrays whose Linnet dtypes are `dtypes` (inferred from NumPy otherwise)."""
    from linnet.ir.core import dtype_of_numpy

    names = dtypes or [dtype_of_numpy(a.dtype) for a in arrays]
    types = [TensorType(a.shape, d) for a, d in zip(arrays, names, strict=True)]
    fn = one_op(kind, types, attrs, result)
    results, _ = run_function(fn, {}, {}, list(arrays))
    return results[0]


def random_ints(
    rng: np.random.Generator, dtype: str, shape: tuple[int, ...], *, nonzero: bool = True
) -> np.ndarray:
    """Integers over the dtype's whole range (and its extremes), never zero unless asked."""
    lo, hi = INT_RANGES[dtype]
    values = rng.integers(lo, hi, size=shape, endpoint=True, dtype=numpy_dtype(dtype))
    flat = values.reshape(-1)
    extremes = np.array(
        [lo, hi, lo + 1, hi - 1] if lo < 0 else [hi, 1, hi - 1, 2], dtype=values.dtype
    )
    flat[: min(4, flat.size)] = extremes[: min(4, flat.size)]
    if nonzero:
        flat[flat == 0] = 1
    return values


def random_floats(
    rng: np.random.Generator,
    dtype: str,
    shape: tuple[int, ...],
    low: float = -4.0,
    high: float = 4.0,
) -> np.ndarray:
    """Uniform floats in [low, high), away from zero, rounded to `dtype`."""
    values = rng.uniform(low, high, size=shape)
    values[np.abs(values) < 1e-3] = 0.5
    return values.astype(numpy_dtype(dtype))


def bf16_round(values: np.ndarray) -> np.ndarray:
    """Round f32 values to bf16 with integer bit arithmetic (independent of ml_dtypes)."""
    bits = np.asarray(values, np.float32).view(np.uint32).astype(np.uint64)
    bias = 0x7FFF + ((bits >> 16) & 1)
    rounded = ((bits + bias) >> 16).astype(np.uint16)
    return rounded.view(ml_dtypes.bfloat16)


def elementwise(fn: Callable[..., Any], *arrays: np.ndarray) -> list[Any]:
    """Apply a Python function to matching elements (inputs already the same shape)."""
    return [fn(*items) for items in zip(*(a.reshape(-1).tolist() for a in arrays), strict=True)]
