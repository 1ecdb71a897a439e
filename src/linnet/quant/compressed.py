"""`import_compressed`: compressed-tensors `pack-quantized` int4 checkpoints to `Int4GroupLinear`.

Stage: `linnet.quant`, beside `checkpoint`. In: a SafeTensors checkpoint
written by compressed-tensors (llm-compressor's GPTQ / AWQ / RTN W4A16
output, `"format": "pack-quantized"`): per linear `<name>.weight_packed`
i32 `[Out, In/8]`, `<name>.weight_scale` `[Out, In/group]`,
`<name>.weight_shape` `[Out, In]`, and `<name>.weight_zero_point` i32
`[ceil(Out/8), In/group]` when asymmetric. Out: the same file with each
such linear in the `Int4GroupLinear` layout (stdlib.md section 20) under
`<name>.weight`, `.scale`, `.zero`; every other tensor copied.

The layouts line up without arithmetic on the weights
(compressed_tensors/compressors/pack_quantized/helpers.py): 4-bit values are
packed densely, element `i` at bits `4i..4i+3` of the little-endian words, so
the words' bytes are our bytes (element `2k` in the low nibble of byte `k`);
each value is stored as `q + 8`, its signed value plus 8, which is our
unsigned nibble. Its dequantisation is `(q - zp) * scale`, so our zero point
is `zp + 8`: 8 for every group of a symmetric checkpoint, else the zero
points' nibbles as stored (packed the same way, along `Out`, also plus 8). The scales are
kept in their dtype (the block's `T`) unless `dtype` says otherwise. Checked
against compressed-tensors' own `decompress` (tests/quant/test_compressed.py).

FP8 (`float-quantized`) and MXFP4 (`mxfp4-pack-quantized`) linears in the same
checkpoint become `Fp8Linear` / `Mxfp4Linear` (`linnet.quant.compressed_floats`).

Refused with a `LinnetError`, before anything is written: another bit width,
an activation order (`weight_g_idx`), a group that does not divide a row or
is odd, missing or misshapen companions.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from linnet.errors import LinnetError
from linnet.quant import compressed_floats as floats
from linnet.quant.rewrite import Conversion, rewrite_checkpoint
from linnet.weights.checkpoint import Checkpoint, CheckpointSource, open_checkpoint
from linnet.weights.safetensors import NUMPY_DTYPES, release_mapped

Array = np.ndarray[Any, Any]
PACKED = ".weight_packed"
COMPANIONS = (".weight_scale", ".weight_shape", ".weight_zero_point")
SCALE_DTYPES = ("f16", "bf16", "f32")


def import_compressed(
    weights: CheckpointSource, output: str | os.PathLike[str], *, dtype: str | None = None
) -> list[str]:
    """Convert every `pack-quantized` 4-bit linear (see the module docstring); returns their
    names (`<name>` of `<name>.weight_packed`)."""
    if dtype is not None and dtype not in SCALE_DTYPES:
        raise LinnetError(
            f"import: the scale dtype must be one of {', '.join(SCALE_DTYPES)}, not `{dtype}`"
        )
    source = open_checkpoint(weights)
    fp8, mxfp4 = floats.fp8_prefixes(source), floats.mxfp4_prefixes(source)
    prefixes = sorted(
        n.removesuffix(PACKED)
        for n in source.tensors
        if n.endswith(PACKED) and n.removesuffix(PACKED) not in mxfp4
    )
    if not prefixes and not fp8 and not mxfp4:
        raise LinnetError(
            f"{source.label}: no `*{PACKED}` and no E4M3 `*.weight` tensors (not a "
            "pack-quantized, float-quantized or mxfp4-pack-quantized checkpoint)"
        )
    conversions: dict[str, Conversion] = {}
    conversions.update({p: floats.plan_fp8(source, p) for p in fp8})
    conversions.update({p: floats.plan_mxfp4(source, p) for p in mxfp4})
    for prefix in prefixes:
        out, width, groups, scale_dtype = _check(source, prefix)
        kind = dtype or scale_dtype
        conversions[prefix] = Conversion(
            [
                prefix + suffix
                for suffix in (PACKED, *COMPANIONS)
                if prefix + suffix in source.tensors
            ],
            [
                (f"{prefix}.weight", "u8", (out, groups, width // groups // 2)),
                (f"{prefix}.scale", kind, (out, groups)),
                (f"{prefix}.zero", "u8", (out, groups)),
            ],
        )

    def convert(prefix: str) -> dict[str, Array]:
        if prefix in fp8:
            return floats.convert_fp8(source, prefix)
        if prefix in mxfp4:
            return floats.convert_mxfp4(source, prefix)
        scale_dtype = conversions[prefix].produced[1][1]
        return {f"{prefix}.{role}": v for role, v in _convert(source, prefix, scale_dtype).items()}

    forms = [name for name, found in (("pack-quantized int4", prefixes), ("float-quantized fp8",
             fp8), ("mxfp4-pack-quantized", mxfp4)) if found]  # fmt: skip
    rewrite_checkpoint(source, output, conversions, convert, {"linnet.quant": ", ".join(forms)})
    return sorted([*prefixes, *fp8, *mxfp4])


def _check(source: Checkpoint, prefix: str) -> tuple[int, int, int, str]:
    """(Out, In, groups, scale dtype) of one packed linear, or a LinnetError."""
    tensors = source.tensors
    for suffix in (".weight_scale", ".weight_shape"):
        if prefix + suffix not in tensors:
            raise LinnetError(f"{source.label}: `{prefix}{PACKED}` has no `{prefix}{suffix}`")
    if prefix + ".weight_g_idx" in tensors:
        raise LinnetError(
            f"{source.label}: `{prefix}` has an activation order (`weight_g_idx`), which "
            "import_compressed does not convert yet"
        )
    packed, scale = tensors[prefix + PACKED], tensors[prefix + ".weight_scale"]
    shape = [int(v) for v in np.asarray(source.load(prefix + ".weight_shape")).reshape(-1)]
    if len(shape) != 2 or packed.dtype != "I32" or len(packed.shape) != 2:
        raise LinnetError(
            f"{source.label}: `{prefix}{PACKED}` is {packed.dtype} {list(packed.shape)} for a "
            f"weight of shape {shape}; only 2-D linears packed in int32 convert"
        )
    out, width = shape
    if packed.shape != (out, width // 8) or width % 8:
        raise LinnetError(
            f"{source.label}: `{prefix}{PACKED}` has shape {list(packed.shape)}, not "
            f"[{out}, {width} / 8]: only 4-bit weights with In a multiple of 8 convert"
        )
    kind = scale.linnet_dtype
    if kind not in SCALE_DTYPES or len(scale.shape) != 2 or scale.shape[0] != out:
        raise LinnetError(
            f"{source.label}: `{prefix}.weight_scale` is {scale.dtype} {list(scale.shape)}, "
            f"not [{out}, groups] in a float dtype"
        )
    groups = scale.shape[1]
    if groups == 0 or width % groups or (width // groups) % 2:
        raise LinnetError(
            f"{source.label}: `{prefix}` has {groups} scale groups per row of {width}: the "
            "group size must divide the row and be even"
        )
    zero = tensors.get(prefix + ".weight_zero_point")
    if zero is not None and (zero.dtype != "I32" or zero.shape != ((out + 7) // 8, groups)):
        raise LinnetError(
            f"{source.label}: `{prefix}.weight_zero_point` is {zero.dtype} {list(zero.shape)}, "
            f"not I32 [{(out + 7) // 8}, {groups}] (4-bit zero points packed along Out)"
        )
    return out, width, groups, kind


def _convert(source: Checkpoint, prefix: str, scale_dtype: str) -> dict[str, Array]:
    packed = source.load(prefix + PACKED)
    out, words = packed.shape
    scale = source.load(prefix + ".weight_scale")
    groups = scale.shape[1]
    nibbles = np.ascontiguousarray(packed).astype("<i4").view(np.uint8).reshape(out, words * 4)
    weight = nibbles.reshape(out, groups, -1).copy()
    release_mapped(packed)
    if prefix + ".weight_zero_point" in source.tensors:
        stored = source.load(prefix + ".weight_zero_point")
        bytes_ = np.ascontiguousarray(stored.T).astype("<i4").view(np.uint8)  # [G, Out/2]
        unpacked = np.stack([bytes_ & 15, bytes_ >> 4], axis=-1).reshape(groups, -1)
        # stored as zp + 8 already (pack_to_int32 adds the offset): that is our zero point
        zero = np.ascontiguousarray(unpacked[:, :out].T).astype(np.uint8)
    else:
        zero = np.full((out, groups), 8, np.uint8)
    return {
        "weight": weight,
        "scale": np.asarray(scale).astype(NUMPY_DTYPES[scale_dtype]),
        "zero": zero,
    }
