"""gpt-oss' MXFP4 mixture-of-experts tensors as llama.cpp's `gpt-oss` architecture holds them.

Stage: part of `linnet.gguf`. Linnet has no gpt-oss model source yet, so no
family of `linnet.gguf.export` reaches these tensors through a bound model;
this module converts them from a checkpoint's arrays, for a writer that
holds the rest of the model (`add_experts`). In: per layer `N` the tensors
gpt-oss checkpoints store and `linnet.quant.import_quantized` keeps (the
layout `std.quant`'s `dequantize_mxfp4` and expert ops read):

| checkpoint | shape | GGUF (`blk.N.`) |
| --- | --- | --- |
| `model.layers.N.mlp.experts.gate_up_proj_blocks` / `_scales` | u8 `[E, 2I, H/32, 16]` / `[E, 2I, H/32]` | `ffn_gate_exps.weight`, `ffn_up_exps.weight` (MXFP4 `[E, I, H]`) |
| `model.layers.N.mlp.experts.down_proj_blocks` / `_scales` | u8 `[E, H, I/32, 16]` / `[E, H, I/32]` | `ffn_down_exps.weight` (MXFP4 `[E, H, I]`) |
| `..._proj_bias` | f32 `[E, 2I]`, `[E, H]` | `ffn_gate_exps.bias`, `ffn_up_exps.bias`, `ffn_down_exps.bias` |

As `convert_hf_to_gguf.py`'s `GptOssModel` writes them: the gate and up rows
are interleaved in `gate_up_proj` (gate = even rows, up = odd rows) and split;
each MXFP4 block is its E8M0 scale byte followed by 16 bytes holding element
`j` in the low nibble of byte `j` and element `j + 16` in its high nibble
(`linnet.gguf.quantised.block_bytes`; gpt-oss holds elements `2k`, `2k + 1` in
byte `k`). The integers and scale bytes are moved, never requantised, so the
GGUF file dequantises to exactly what the checkpoint does. The names come
from the `gguf` package's tensor map for `gpt-oss`, and the metadata llama.cpp
reads for the experts (`expert_count`, `expert_used_count`,
`expert_feed_forward_length`) from the shapes and the caller.

Refused with a `LinnetError`: blocks without their scales, shapes that are
not MXFP4 blocks of the same experts, an odd number of gate/up rows.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from linnet.errors import LinnetError
from linnet.gguf.quantised import block_bytes
from linnet.records import record

Array = np.ndarray[Any, Any]
EXPERTS = re.compile(r"model\.layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj)_blocks$")


@record(frozen=True)
class GgufTensor:
    """One tensor to write: its GGUF name, the stored data (MXFP4 bytes `[..., G * 17]` u8 or
    f32 values), and `mxfp4` (the GGML type is MXFP4, not the data's dtype)."""

    name: str
    data: Array
    mxfp4: bool


def expert_tensors(arrays: Mapping[str, Array], layers: int) -> list[GgufTensor]:
    """The llama.cpp tensors of every gpt-oss MXFP4 expert projection in `arrays` (see the
    module docstring), in layer order."""
    import gguf

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GPT_OSS, layers)
    found = sorted(
        (int(m.group(1)), m.group(2)) for n in arrays if (m := EXPERTS.fullmatch(n)) is not None
    )
    out: list[GgufTensor] = []
    for layer, projection in found:
        prefix = f"model.layers.{layer}.mlp.experts.{projection}"
        blocks, scales = _pair(arrays, prefix)
        bias = arrays.get(f"{prefix}_bias")
        if bias is not None and tuple(bias.shape) != blocks.shape[:2]:
            raise LinnetError(
                f"`{prefix}_bias` is {list(bias.shape)}, not [experts, rows] "
                f"{list(blocks.shape[:2])}"
            )
        if projection == "gate_up_proj":
            if blocks.shape[1] % 2:
                raise LinnetError(
                    f"`{prefix}_blocks` has {blocks.shape[1]} rows; gate and up rows "
                    "alternate, so there must be an even number"
                )
            parts = [("gate_proj", slice(0, None, 2)), ("up_proj", slice(1, None, 2))]
        else:
            parts = [("down_proj", slice(None))]
        for part, rows in parts:
            base = names.get_name(f"model.layers.{layer}.mlp.experts.{part}")
            assert base is not None  # the gguf package maps every gpt-oss expert projection
            data = block_bytes("mxfp4", blocks[:, rows], scales[:, rows], None)
            out.append(GgufTensor(f"{base}.weight", np.ascontiguousarray(data), True))
            if bias is not None:
                values = np.asarray(bias, dtype=np.float32)[:, rows]
                out.append(GgufTensor(f"{base}.bias", np.ascontiguousarray(values), False))
    return out


def add_experts(writer: Any, arrays: Mapping[str, Array], layers: int, used: int) -> int:
    """Add the expert tensors of `arrays` to a `gguf.GGUFWriter` of architecture `gpt-oss`,
    with the expert metadata (`used` experts per token); returns how many tensors."""
    import gguf

    tensors = expert_tensors(arrays, layers)
    if not tensors:
        raise LinnetError("no `model.layers.N.mlp.experts.*_blocks` tensors (gpt-oss MXFP4)")
    down = np.asarray(arrays[f"model.layers.{_first(arrays)}.mlp.experts.down_proj_blocks"])
    experts, _, groups, _ = down.shape
    if not 0 < used <= experts:
        raise LinnetError(f"{used} experts used per token, of {experts}")
    writer.add_expert_count(int(experts))
    writer.add_expert_used_count(int(used))
    writer.add_expert_feed_forward_length(int(groups * 32))
    for tensor in tensors:
        raw = gguf.GGMLQuantizationType.MXFP4 if tensor.mxfp4 else None
        writer.add_tensor(tensor.name, tensor.data, raw_dtype=raw)
    return len(tensors)


def _first(arrays: Mapping[str, Array]) -> int:
    layers = [
        int(m.group(1))
        for n in arrays
        if (m := EXPERTS.fullmatch(n)) is not None and m.group(2) == "down_proj"
    ]
    if not layers:
        raise LinnetError("no `model.layers.N.mlp.experts.down_proj_blocks` tensor (gpt-oss MXFP4)")
    return min(layers)


def _pair(arrays: Mapping[str, Array], prefix: str) -> tuple[Array, Array]:
    blocks, scales = arrays[f"{prefix}_blocks"], arrays.get(f"{prefix}_scales")
    if scales is None:
        raise LinnetError(f"`{prefix}_blocks` has no `{prefix}_scales`")
    if (
        blocks.dtype != np.uint8
        or scales.dtype != np.uint8
        or blocks.ndim != 4
        or blocks.shape[-1] != 16
        or tuple(blocks.shape[:-1]) != tuple(scales.shape)
    ):
        raise LinnetError(
            f"`{prefix}_blocks` {blocks.dtype} {list(blocks.shape)} and `{prefix}_scales` "
            f"{scales.dtype} {list(scales.shape)} are not MXFP4 expert blocks [E, Out, G, 16] "
            "u8 with E8M0 scales [E, Out, G] u8"
        )
    return np.asarray(blocks), np.asarray(scales)
