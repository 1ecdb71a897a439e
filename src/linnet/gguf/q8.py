"""Q8_0 quantisation for the GGUF writer: gguf-py's bytes, with less work per value.

Stage: `linnet.gguf.export` with `outtype="q8_0"` (issue 13). gguf-py's
`quants.quantize` (a port of ggml's `quantize_row_q8_0_ref`) takes every step
over the whole matrix, reducing each block of 32 along a short last axis, so
each step is a full-size temporary and a slow reduction. This runs the same
arithmetic on chunks that stay in cache, with the blocks as columns so that
every step runs along long contiguous rows: per block of 32 values,
`d = max|x| / 127` (f32), `q = roundf(x * (1 / d))` with ties away from zero
(0 where `d` is 0), stored as `d` in f16 then the 32 `q` as int8. The rounding
is `trunc(y) + trunc(2 * (y - trunc(y)))`: one step away from zero when the
exact remainder reaches one half, which is ggml's `roundf` for every f32 `y`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

Array = np.ndarray[Any, Any]
BLOCK = 32
BLOCK_BYTES = 2 + BLOCK
CHUNK_VALUES = 1 << 16
"""Values per chunk: the temporaries of one chunk (a few hundred KB) stay in cache."""


def quantize_q8_0(array: Array) -> Array:
    """`array` (f32, last axis a multiple of 32) as Q8_0 bytes, shape `[..., cols / 32 * 34]`."""
    values = np.asarray(array, dtype=np.float32)
    cols = int(values.shape[-1])
    if cols % BLOCK:
        raise ValueError(f"Q8_0 needs rows of a multiple of {BLOCK} values, got {cols}")
    blocks = values.reshape(-1, BLOCK)
    out = np.empty((blocks.shape[0], BLOCK_BYTES), np.uint8)
    step = CHUNK_VALUES // BLOCK
    for start in range(0, blocks.shape[0], step):
        # blocks as columns: every step below runs along long contiguous rows
        chunk = np.ascontiguousarray(blocks[start : start + step].T)
        scale = np.abs(chunk).max(axis=0) / np.float32(127)
        with np.errstate(divide="ignore"):
            chunk *= np.where(scale == 0, np.float32(0), np.float32(1) / scale)
        rounded = np.trunc(chunk)
        chunk -= rounded  # the remainder r, exact, with the value's sign
        chunk += chunk  # 2r, exact; trunc(2r) is the step away from zero (-1, 0 or 1)
        rounded += np.trunc(chunk, out=chunk)
        target = out[start : start + step]
        target[:, :2] = scale.astype(np.float16)[:, None].view(np.uint8)
        target[:, 2:] = rounded.astype(np.int8).T.view(np.uint8)
    return out.reshape(*values.shape[:-1], cols // BLOCK * BLOCK_BYTES)
