"""Round-to-nearest quantisers for the `std.quant` layouts, in NumPy.

Stage: below `linnet.quant.checkpoint`; nothing here knows about files. In:
one float weight `[Out, In]` (a linear's `weight`, output rows first). Out:
the integer tensors and scales of a `std.quant` block (stdlib.md section 20).

- `int4_groups` is ONNX Runtime's own block quantiser (MLAS
  `MlasQuantizeBlockwise`, what `MatMulNBitsQuantizer` calls, asymmetric):
  per group of `group` consecutive inputs, `min`/`max` widened to include 0,
  `scale = (max - min) / 15`, `zero = round(-min / scale)` clamped to 0..15,
  `q = clamp(round(w * (1 / scale) + zero), 0, 15)` in f32 with C `roundf`
  (half away from zero), packed two per byte, even element in the low nibble.
  Same bytes, scales and zero points as that quantiser (tests/quant), except
  that the zero points stay one u8 per group, as `Int4GroupLinear` reads them
  (`pack_zero_points` gives MatMulNBits' packed form).
- `int8_rows` is symmetric per row, `scale = max|w| / 127`,
  `q = round(w / scale)` (half away from zero), the `Int8Linear` layout.

Rounding happens in f32 whatever the input dtype, as the reference does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

Array = np.ndarray[Any, Any]


def round_half_away(x: Array) -> Array:
    """C `roundf`: halves away from zero (NumPy's `round` goes to even)."""
    return np.sign(x) * np.floor(np.abs(x) + np.float32(0.5))


def int4_groups(weight: Array, group: int) -> tuple[Array, Array, Array]:
    """`[Out, In]` -> packed `[Out, In/group, group/2]` u8, scales `[Out, In/group]` f32,
    zero points `[Out, In/group]` u8 (`group` divides `In` and is even)."""
    out, width = weight.shape
    blocks = np.asarray(weight, dtype=np.float32).reshape(out, width // group, group)
    low = np.minimum(blocks.min(axis=2), np.float32(0))
    high = np.maximum(blocks.max(axis=2), np.float32(0))
    scale = ((high - low) / np.float32(15)).astype(np.float32)
    nonzero = scale != 0
    safe = np.where(nonzero, scale, np.float32(1))
    zero_fp = np.where(nonzero, np.float32(0) - low / safe, low).astype(np.float32)
    zero = np.clip(round_half_away(zero_fp), 0, 15).astype(np.float32)
    reciprocal = np.where(nonzero, np.float32(1) / safe, np.float32(0)).astype(np.float32)
    scaled = (blocks * reciprocal[..., None]).astype(np.float32) + zero[..., None]
    q = np.clip(round_half_away(scaled), 0, 15).astype(np.uint8)
    packed = (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)
    return packed, scale, zero.astype(np.uint8)


def pack_zero_points(zero: Array) -> Array:
    """`[Out, G]` u8 zero points -> MatMulNBits' `[Out, ceil(G/2)]`, low nibble first; an odd
    `G` pads the last high nibble with 8 (the kernel's default zero point, as ORT does)."""
    out, groups = zero.shape
    padded = np.full((out, groups + groups % 2), 8, np.uint8)
    padded[:, :groups] = zero
    packed: Array = (padded[:, 0::2] | (padded[:, 1::2] << 4)).astype(np.uint8)
    return packed


def int8_rows(weight: Array) -> tuple[Array, Array]:
    """`[Out, In]` -> `[Out, In]` i8 and per-row scales `[Out]` f32 (symmetric)."""
    w = np.asarray(weight, dtype=np.float32)
    scale = (np.abs(w).max(axis=1) / np.float32(127)).astype(np.float32)
    safe = np.where(scale != 0, scale, np.float32(1))
    q = np.clip(round_half_away(w / safe[:, None]), -127, 127).astype(np.int8)
    return q, scale
