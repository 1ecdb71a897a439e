"""f32 -> f16 and bf16 for the GGUF writer: the reference bytes, at the speed of the CPU's instructions.

Stage: `linnet.gguf.export` with `outtype="f16"` or `"bf16"` (issue 13: at most
10 s for a TinyLlama-sized model). The bytes a GGUF file holds are NumPy's
`astype(np.float16)` for f16 and gguf-py's `BF16.quantize_blocks` (ggml's
`ggml_compute_fp32_to_bf16`) for bf16; NumPy converts value by value without
SIMD (about 10 ns a value: 11 s for TinyLlama's 1.1 G weights) and gguf-py makes
four full-size passes. torch's casts (`Tensor.copy_` into a half tensor) run the
CPU's conversion instructions on every core, 50 to 200 times faster, and round
the same way for every value but NaN: round to nearest, ties to even,
subnormals, and overflow to infinity included. NaNs differ: NumPy keeps a
signalling NaN's payload bits, the F16C instructions set the quiet bit;
torch's bf16 cast gives every NaN one pattern, ggml keeps the sign and top
payload bits with the quiet bit set. So a chunk that holds a NaN gets the
reference's bits at its NaNs, and the bytes are the reference's always.

Without torch (an install without the `torch` extra), the reference itself converts.
"""

from __future__ import annotations

import importlib.util
from functools import cache
from typing import Any

import numpy as np

from linnet.ir.convert import to_bf16 as to_bf16_rounded

Array = np.ndarray[Any, Any]
SERIAL_VALUES = (1 << 15) - 1
"""Values per torch cast: fewer than its parallel grain, so no thread pool is woken."""


@cache
def _torch() -> Any:
    """The torch module, or None when it is not installed (imported on first use only)."""
    if importlib.util.find_spec("torch") is None:
        return None
    import torch

    return torch


def f16_reference(values: Array) -> Array:
    """NumPy's f16 of `values` (f32): what a GGUF f16 tensor holds."""
    with np.errstate(over="ignore"):  # overflow to infinity is the defined result
        return values.astype(np.float16)


def bf16_reference(values: Array) -> Array:
    """gguf-py's bf16 bits of `values` (f32) as uint16 (`BF16.quantize_blocks`): NaNs
    quiet with their sign and top payload bits, the rest rounded to nearest even, which
    is the rounding of `linnet.ir.convert.to_bf16`."""
    return to_bf16_rounded(values).view(np.uint16)


def to_f16(values: Array, out: Array) -> Array:
    """`values` (1-D f32, writable: torch shares its memory) into `out` (f16, the same
    size) as `f16_reference` converts them."""
    torch = _torch()
    if torch is None:
        out[...] = f16_reference(values)
        return out
    _cast(torch, values, out, torch.float16)
    _patch_nans(values, out, f16_reference)
    return out


def to_bf16(values: Array, out: Array) -> Array:
    """`values` (1-D f32, writable) into `out` (uint16, the same size) as `bf16_reference`
    converts them."""
    torch = _torch()
    if torch is None:
        out[...] = bf16_reference(values)
        return out
    _cast(torch, values, out, torch.bfloat16)
    _patch_nans(values, out, bf16_reference)
    return out


def _cast(torch: Any, values: Array, out: Array, dtype: Any) -> None:
    # In pieces below torch's parallel grain (32768 values), so each cast runs on this
    # thread: on a busy machine, waking its thread pool for every chunk cost a time
    # slice per cast (16 ms instead of 0.1 ms for 1 M values, measured on 2 shared cores).
    source, target = torch.from_numpy(values), torch.from_numpy(out).view(dtype)
    for start in range(0, values.size, SERIAL_VALUES):
        target[start : start + SERIAL_VALUES].copy_(source[start : start + SERIAL_VALUES])


def _patch_nans(values: Array, out: Array, reference: Any) -> None:
    nans = np.isnan(values)
    if nans.any():
        out[nans] = reference(values[nans]).view(out.dtype)
