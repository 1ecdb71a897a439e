"""FP8 (E4M3FN) rows and MXFP4 blocks in NumPy: quantisers and exact decoders.

Stage: beside `linnet.quant.rtn`; nothing here knows about files. In: a float
weight `[..., Out, In]` (or the stored bytes). Out: the tensors of
`std.quant`'s `Fp8Linear` / `Mxfp4Linear` and `dequantize_mxfp4` (stdlib.md
section 20), or their f32 values.

- `fp8_rows`: per row `scale = max|w| / 448` (E4M3FN's largest finite value),
  `q = e4m3fn(w / scale)` rounded to nearest even (ml_dtypes' cast, the same
  as torch's `.to(torch.float8_e4m3fn)`), clamped to +-448 first; a zero row
  gets scale 1. Scales f32 `[..., Out, 1]` (compressed-tensors' layout).
- `mxfp4_blocks`: the OCP Microscaling (MX v1.0) quantiser: per block of 32
  inputs, the shared scale is `2^(floor(log2(max|w|)) - 2)` (2 is E2M1's
  largest exponent), stored as the E8M0 byte `exponent + 127`; each value is
  `w / scale` rounded to the nearest E2M1 value (even on ties), saturating at
  +-6. Packed two per byte, even element in the low nibble:
  `[..., Out, In/32, 16]` u8 and scales `[..., Out, In/32]` u8 (gpt-oss'
  `*_blocks` / `*_scales`).
- `decode_fp8`, `decode_e2m1`, `decode_e8m0`, `mxfp4_values`: the std bodies'
  decoders (the NaN byte of E4M3FN reads +-480, E8M0's exponent saturates at
  +-62), used where a backend needs the weights as floats.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

Array = np.ndarray[Any, Any]
FP8_MAX = 448.0
E2M1_MAX = 6.0
E2M1_EMAX = 2
MX_BLOCK = 32


def fp8_rows(weight: Array) -> tuple[Array, Array]:
    """`[..., Out, In]` -> E4M3FN bytes `[..., Out, In]` u8 and scales `[..., Out, 1]` f32."""
    w = np.asarray(weight, dtype=np.float32)
    amax = np.abs(w).max(axis=-1, keepdims=True)
    scale = np.where(amax > 0, amax / np.float32(FP8_MAX), np.float32(1)).astype(np.float32)
    scaled = np.clip(w / scale, -FP8_MAX, FP8_MAX)
    q: Array = scaled.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    return q, scale


def mxfp4_blocks(weight: Array) -> tuple[Array, Array]:
    """`[..., Out, In]` (`In % 32 == 0`) -> blocks `[..., Out, In/32, 16]` u8 and E8M0 scales
    `[..., Out, In/32]` u8."""
    w = np.asarray(weight, dtype=np.float32)
    blocks = w.reshape(*w.shape[:-1], w.shape[-1] // MX_BLOCK, MX_BLOCK)
    amax = np.abs(blocks).max(axis=-1)
    _, exponent = np.frexp(amax)  # amax = f * 2^exponent, f in [0.5, 1): floor(log2) = exponent - 1
    shared = np.where(amax > 0, exponent - 1 - E2M1_EMAX, 0)
    shared = np.clip(shared, -62, 62)  # the decoders saturate there
    scale = np.ldexp(np.float32(1), shared).astype(np.float32)
    scaled = np.clip(blocks / scale[..., None], -E2M1_MAX, E2M1_MAX)
    codes = scaled.astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 15
    packed = (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)
    return packed, (shared + 127).astype(np.uint8)


def decode_fp8(bits: Array) -> Array:
    """E4M3FN bytes -> f32 (`0x7F` / `0xFF` -> +-480, as the std body)."""
    b = np.asarray(bits).astype(np.int32)
    e, m = (b >> 3) & 15, b & 7
    units = np.where(e == 0, 2 * m, (8 + m) << e)
    magnitude = units.astype(np.float32) * np.float32(2.0**-10)
    result: Array = np.where(b >> 7 == 1, -magnitude, magnitude)
    return result


def decode_e2m1(nibbles: Array) -> Array:
    """E2M1 codes (0..15) -> f32."""
    n = np.asarray(nibbles).astype(np.int32) & 15
    e, m = (n >> 1) & 3, n & 1
    halves = np.where(e == 0, m, (2 + m) << np.maximum(e - 1, 0))
    magnitude = halves.astype(np.float32) * np.float32(0.5)
    result: Array = np.where(n >> 3 == 1, -magnitude, magnitude)
    return result


def decode_e8m0(scales: Array) -> Array:
    """E8M0 bytes -> `2^(s - 127)` in f32, the exponent saturated at +-62."""
    k = np.clip(np.asarray(scales).astype(np.int64) - 127, -62, 62)
    result: Array = np.ldexp(np.float32(1), k).astype(np.float32)
    return result


def mxfp4_values(blocks: Array, scales: Array) -> Array:
    """Blocks `[..., G, 16]` and scales `[..., G]` -> f32 `[..., G * 32]`."""
    b = np.asarray(blocks)
    codes = np.stack([b & 15, b >> 4], axis=-1).reshape(*b.shape[:-1], 32)
    values = decode_e2m1(codes) * decode_e8m0(scales)[..., None]
    result: Array = values.reshape(*b.shape[:-2], b.shape[-2] * 32)
    return result
