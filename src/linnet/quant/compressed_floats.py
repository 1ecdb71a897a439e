"""compressed-tensors' FP8 (`float-quantized`) and MXFP4 (`mxfp4-pack-quantized`) linears.

Stage: beside `linnet.quant.compressed`, whose `import_compressed` calls
`plan` and `convert` for the linears it finds in these forms. In / out, per
linear `<name>` (compressed_tensors/compressors/naive_quantized and mxfp4):

| form | checkpoint | std block |
| --- | --- | --- |
| FP8 | `.weight` F8_E4M3 `[Out, In]`, `.weight_scale` `[Out, 1]` (channel) or `[1]` (tensor) | `Fp8Linear`: `.weight` u8 (the same bytes), `.scale` f32 `[Out, 1]` |
| MXFP4 | `.weight_packed` u8 `[Out, In/2]`, `.weight_scale` u8 `[Out, In/32]` (E8M0) | `Mxfp4Linear`: `.weight` u8 `[Out, In/32, 16]`, `.scale` u8 |

Nothing is requantised: the E4M3 bytes are copied (read raw: NumPy has no
E4M3 dtype), a per-tensor scale is repeated per row, a bf16 / f16 scale
widened to f32 (exact); the MXFP4 nibbles are already ours (even element in
the low nibble, compressed-tensors' `pack_fp4_to_uint8`) and its scale bytes
are E8M0. Activation scales (`input_scale`, static W8A8) are dropped: the
blocks are weight-only, the function transformers computes when it
decompresses such a checkpoint. Checked against compressed-tensors'
`decompress` (tests/quant/test_compressed_floats.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from linnet.errors import LinnetError
from linnet.quant.minifloat import MX_BLOCK
from linnet.quant.rewrite import Conversion
from linnet.weights.checkpoint import Checkpoint
from linnet.weights.safetensors import StoredTensor

Array = np.ndarray[Any, Any]
FP8 = "F8_E4M3"
DROPPED = (".input_scale", ".weight_zero_point", ".input_zero_point")


def fp8_prefixes(source: Checkpoint) -> list[str]:
    """`<name>` of every `<name>.weight` stored as E4M3 beside a `<name>.weight_scale`."""
    return sorted(
        n.removesuffix(".weight")
        for n, t in source.tensors.items()
        if n.endswith(".weight") and t.dtype == FP8
    )


def mxfp4_prefixes(source: Checkpoint) -> list[str]:
    """`<name>` of every u8 `<name>.weight_packed` with u8 scales (MXFP4's E8M0 bytes)."""
    found = []
    for name, stored in source.tensors.items():
        if name.endswith(".weight_packed") and stored.dtype == "U8":
            scale = source.tensors.get(name.removesuffix("_packed") + "_scale")
            if scale is not None and scale.dtype == "U8":
                found.append(name.removesuffix(".weight_packed"))
    return sorted(found)


def plan_fp8(source: Checkpoint, prefix: str) -> Conversion:
    weight = source.tensors[f"{prefix}.weight"]
    scale = source.tensors.get(f"{prefix}.weight_scale")
    label = f"{source.label}: `{prefix}`"
    if scale is None:
        raise LinnetError(f"{label}.weight is {FP8} without a `{prefix}.weight_scale`")
    if len(weight.shape) != 2:
        raise LinnetError(f"{label}.weight is {FP8} {list(weight.shape)}, not a 2-D linear")
    out, width = weight.shape
    if scale.linnet_dtype not in ("f16", "bf16", "f32") or scale.shape not in (
        (out, 1),
        (1,),
        (),
    ):
        raise LinnetError(
            f"{label}.weight_scale is {scale.dtype} {list(scale.shape)}: only per-channel "
            f"[{out}, 1] or per-tensor float scales convert (not blocks)"
        )
    dropped = [prefix + s for s in DROPPED if prefix + s in source.tensors]
    return Conversion(
        [f"{prefix}.weight", f"{prefix}.weight_scale", *dropped],
        [(f"{prefix}.weight", "u8", (out, width)), (f"{prefix}.scale", "f32", (out, 1))],
    )


def convert_fp8(source: Checkpoint, prefix: str) -> dict[str, Array]:
    weight = source.tensors[f"{prefix}.weight"]
    scale = np.asarray(source.load(f"{prefix}.weight_scale")).astype(np.float32)
    return {
        f"{prefix}.weight": raw_bytes(weight).reshape(weight.shape),
        f"{prefix}.scale": np.broadcast_to(scale.reshape(-1, 1), (weight.shape[0], 1)).copy(),
    }


def plan_mxfp4(source: Checkpoint, prefix: str) -> Conversion:
    packed = source.tensors[f"{prefix}.weight_packed"]
    scale = source.tensors[f"{prefix}.weight_scale"]
    label = f"{source.label}: `{prefix}`"
    if len(packed.shape) != 2 or len(scale.shape) != 2:
        raise LinnetError(f"{label}.weight_packed / .weight_scale are not 2-D")
    out, half = packed.shape
    if (half * 2) % MX_BLOCK or scale.shape != (out, half * 2 // MX_BLOCK):
        raise LinnetError(
            f"{label}.weight_scale is {list(scale.shape)} for weights [{out}, {half * 2}]: "
            f"MXFP4 shares one scale per {MX_BLOCK} inputs"
        )
    for extra in (".weight_global_scale", ".weight_zero_point"):
        if prefix + extra in source.tensors:
            raise LinnetError(f"{label}{extra}: not an MXFP4 linear (NVFP4 or asymmetric)")
    groups = half * 2 // MX_BLOCK
    dropped = [prefix + s for s in DROPPED if prefix + s in source.tensors]
    return Conversion(
        [f"{prefix}.weight_packed", f"{prefix}.weight_scale", *dropped],
        [(f"{prefix}.weight", "u8", (out, groups, 16)), (f"{prefix}.scale", "u8", (out, groups))],
    )


def convert_mxfp4(source: Checkpoint, prefix: str) -> dict[str, Array]:
    packed = np.asarray(source.load(f"{prefix}.weight_packed"))
    out = packed.shape[0]
    return {
        f"{prefix}.weight": packed.reshape(out, -1, 16).copy(),
        f"{prefix}.scale": np.asarray(source.load(f"{prefix}.weight_scale")).copy(),
    }


def raw_bytes(stored: StoredTensor) -> Array:
    """The stored bytes of a tensor in a file, whatever its dtype (u8, memory-mapped)."""
    if not stored.file.is_file():
        raise LinnetError(f"`{stored.name}` ({stored.dtype}) must come from a SafeTensors file")
    mapped: Array = np.memmap(
        stored.file,
        dtype=np.uint8,
        mode="r",
        offset=stored.begin,
        shape=(stored.end - stored.begin,),
    )
    return np.array(mapped)
