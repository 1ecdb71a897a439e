"""Dtype conversion of host arrays, with the rounding into bf16 done by us.

Stage: shared by the reference interpreter (`ir.kernels`: casts and every
result coerced to its declared dtype) and weight binding (`cast_dtype=True`).

Why our own: NumPy has no bf16; ml_dtypes supplies the storage type, but its
conversion rules have changed between releases (0.7 rounds f64 straight to
bf16, earlier releases went through f32). The oracle's numerics must not move
with a dependency, so conversion *into* bf16 is implemented here, as
language.md and `ir.kernels` document it and as PyTorch does: any source is
first converted to f32 (NumPy's round-to-nearest-even for f64, exact or
rounded for integers), then the f32 bits are rounded to nearest even on the
upper 16 bits; NaN stays a quiet NaN with its sign, infinities stay infinite.
Conversion *out of* bf16 is exact (a bf16 value is an f32 with the low 16
bits zero), so it goes through f32 too, by bits.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.generic]

BF16 = np.dtype(ml_dtypes.bfloat16)


def bf16_to_f32(x: Array) -> Array:
    """The exact f32 value of each bf16 element, by shifting its 16 bits into place."""
    bits = np.array(x, order="C").view(np.uint16).astype(np.uint32) << np.uint32(16)
    return bits.view(np.float32)


def to_bf16(x: Array) -> Array:
    """Round any numeric or bool array to bf16 through f32, to nearest even."""
    if x.dtype == BF16:
        return x
    f32 = np.array(x, dtype=np.float32, order="C")  # keeps 0-d arrays 0-d
    bits = f32.view(np.uint32)
    lsb = (bits >> np.uint32(16)) & np.uint32(1)
    rounded = ((bits + np.uint32(0x7FFF) + lsb) >> np.uint32(16)).astype(np.uint16)
    nan = np.isnan(f32)
    if nan.any():
        quiet = ((bits >> np.uint32(16)) | np.uint32(0x0040)).astype(np.uint16)
        rounded = np.where(nan, quiet, rounded)
    return rounded.view(BF16)


def convert(x: Array, dtype: np.dtype[np.generic]) -> Array:
    """`x.astype(dtype)`, except that conversions into and out of bf16 are ours (see above)."""
    if x.dtype == dtype:
        return x
    if dtype == BF16:
        return to_bf16(x)
    if x.dtype == BF16:
        return bf16_to_f32(x).astype(dtype)
    return x.astype(dtype)
