"""`std.quant` linears as GGUF blocks, from their integers: no float detour.

Stage: part of `linnet.gguf.export`. In: the bound tensors of one quantised
linear (`Int8Linear`: `weight` i8 `[Out, In]`, `scale` f32 `[Out]`;
`Int4GroupLinear`: `weight` u8 `[Out, G, group/2]`, `scale` `[Out, G]`,
`zero` u8 `[Out, G]`, optionally `order`). Out: the bytes of a llama.cpp
block type holding the same integers (`ggml-common.h`):

| layout | GGUF type | block of 32 weights | value |
| --- | --- | --- | --- |
| `Int8Linear`, `In % 32 == 0` | `Q8_0` | f16 `d`, 32 i8 `q` | `d * q` |
| `Int4GroupLinear`, group 32, every zero point 8 | `Q4_0` | f16 `d`, 16 bytes | `d * (q - 8)` |
| `Int4GroupLinear`, group 32 | `Q4_1` | f16 `d`, f16 `m`, 16 bytes | `d * q + m` |
| `Mxfp4Linear` | `MXFP4` | E8M0 `e`, 16 bytes of E2M1 | `e2m1(q) * 2^(e - 127)` |

The integers are kept; only the scales are rounded, to f16 (`d = f16(scale)`;
`m = f16(-zero * scale)`), so a checkpoint whose scales are f16 (GPTQ, AWQ,
symmetric compressed-tensors) goes to `Q4_0` / `Q8_0` exactly; MXFP4 blocks
and their scale bytes are copied (exact). GGUF's 4-bit
blocks put element `j` of a block in the low nibble of byte `j` and element
`j + 16` in its high nibble (ours: elements `2k`, `2k + 1` of byte `k`).

Any other quantised linear (another group size, an activation order, rows
that do not split into blocks of 32, `Fp8Linear`: GGUF has no E4M3 type) has
no block form with the same integers: `dequantized` gives its weight exactly as the std body computes it
(f32 arithmetic), and the exporter writes that at the requested outtype.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from linnet.quant import minifloat
from linnet.quant.gptq_awq import unpack_pairs
from linnet.records import record

Array = np.ndarray[Any, Any]
BLOCK = 32
ROLES = ("scale", "zero", "order")
"""The companions of `<name>.weight` that the block form absorbs."""


@record(frozen=True)
class QuantisedLinear:
    """One `std.quant` linear among bound tensors: its kind (`int8`, `int4_groups`), the
    logical `[Out, In]` shape, the GGUF type name it goes to directly (`Q8_0`, `Q4_0`,
    `Q4_1`) or None when it must be dequantised, and the companion paths."""

    kind: str
    shape: tuple[int, int]
    direct: str | None
    companions: tuple[str, ...]


def find_quantised(arrays: Mapping[str, Array]) -> dict[str, QuantisedLinear]:
    """The quantised linears among `arrays`, by their `<name>.weight` path."""
    found: dict[str, QuantisedLinear] = {}
    for path, weight in arrays.items():
        if not path.endswith(".weight"):
            continue
        prefix = path.removesuffix(".weight")
        scale = arrays.get(prefix + ".scale")
        if scale is None:
            continue
        companions = tuple(f"{prefix}.{r}" for r in ROLES if f"{prefix}.{r}" in arrays)
        zero = arrays.get(prefix + ".zero")
        if weight.dtype == np.uint8 and weight.ndim == 2 and scale.shape == (weight.shape[0], 1):
            found[path] = QuantisedLinear("fp8", weight.shape, None, companions)
        elif weight.dtype == np.uint8 and weight.ndim == 3 and scale.dtype == np.uint8:
            out, groups, half = weight.shape
            found[path] = QuantisedLinear("mxfp4", (out, groups * 32), "MXFP4", companions)
        elif weight.dtype == np.int8 and weight.ndim == 2 and zero is None:
            out, width = weight.shape
            direct = "Q8_0" if width % BLOCK == 0 else None
            found[path] = QuantisedLinear("int8", (out, width), direct, companions)
        elif weight.dtype == np.uint8 and weight.ndim == 3 and zero is not None:
            out, groups, half = weight.shape
            direct = None
            if 2 * half == BLOCK and prefix + ".order" not in arrays:
                direct = "Q4_0" if bool((np.asarray(zero) == 8).all()) else "Q4_1"
            found[path] = QuantisedLinear(
                "int4_groups", (out, groups * 2 * half), direct, companions
            )
    return found


def dequantized(
    kind: str, weight: Array, scale: Array, zero: Array | None, order: Array | None
) -> Array:
    """The f32 weight `[Out, In]` (inputs in their own order) the std body computes."""
    if kind == "fp8":
        fp8: Array = minifloat.decode_fp8(weight) * np.asarray(scale, np.float32)
        return fp8
    if kind == "mxfp4":
        return minifloat.mxfp4_values(weight, scale)
    scale32 = np.asarray(scale).astype(np.float32)
    if kind == "int8":
        result: Array = np.asarray(weight).astype(np.float32) * scale32[:, None]
        return result
    assert zero is not None
    q = unpack_pairs(np.asarray(weight)).astype(np.float32)  # [Out, G, group]
    blocks = (q - np.asarray(zero).astype(np.float32)[..., None]) * scale32[..., None]
    flat = blocks.reshape(blocks.shape[0], -1)
    if order is None:
        return flat
    restored = np.empty_like(flat)
    restored[:, np.asarray(order)] = flat
    return restored


def block_bytes(kind: str, weight: Array, scale: Array, zero: Array | None) -> Array:
    """The GGUF bytes `[Out, In / 32 * block bytes]` of a linear whose `direct` type is set
    (MXFP4 blocks may have leading axes, as experts do: `[..., Out, G, 16]` ->
    `[..., Out, G * 17]`)."""
    if kind == "mxfp4":
        codes = unpack_pairs(np.asarray(weight))  # [..., Out, G, 32]
        packed = (codes[..., :16] | (codes[..., 16:] << 4)).astype(np.uint8)
        mx = np.concatenate([np.asarray(scale)[..., None], packed], axis=-1)
        return mx.reshape(*codes.shape[:-2], -1)
    d = np.asarray(scale).astype(np.float32).astype(np.float16)
    if kind == "int8":
        out, width = weight.shape
        rows = np.asarray(weight).reshape(out, width // BLOCK, BLOCK).view(np.uint8)
        scales = np.repeat(d[:, None], width // BLOCK, axis=1)[..., None].view(np.uint8)
        return np.concatenate([scales, rows], axis=-1).reshape(out, -1)
    assert zero is not None
    q = unpack_pairs(np.asarray(weight))  # [Out, G, 32]
    packed = (q[..., : BLOCK // 2] | (q[..., BLOCK // 2 :] << 4)).astype(np.uint8)
    parts = [d[..., None].view(np.uint8)]
    zeros = np.asarray(zero)
    if not bool((zeros == 8).all()):
        low = -(zeros.astype(np.float32) * np.asarray(scale).astype(np.float32))
        parts.append(low.astype(np.float16)[..., None].view(np.uint8))
    return np.concatenate([*parts, packed], axis=-1).reshape(q.shape[0], -1)
