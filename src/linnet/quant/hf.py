"""`import_quantized`: a quantised Hugging Face checkpoint folder to the `std.quant` layouts.

Stage: the user-facing importer of `linnet.quant` (and `linnet quantize
--import`). In: a folder with `config.json` and the SafeTensors weights
(one file, shards, or an index). The `quantization_config` in `config.json`
decides the format, never the tensor names:

| `quant_method` | read by | linears found by |
| --- | --- | --- |
| `gptq` (bits 4, `checkpoint_format` `gptq` / `gptq_v2`) | `gptq_awq.gptq_linear` | `<name>.qweight` |
| `awq` (bits 4, `version` `gemm`) | `gptq_awq.awq_linear` | `<name>.qweight` |
| `compressed-tensors` (`pack-quantized`, `float-quantized`, `mxfp4-pack-quantized`) | `compressed.import_compressed` | `<name>.weight_packed`, E4M3 `<name>.weight` |
| `mxfp4` (gpt-oss) | `_mxfp4_experts` | `<name>_blocks` |

Out: one SafeTensors file where each quantised linear is an
`Int4GroupLinear` (`<name>.weight`, `.scale`, `.zero`, `.order` for a GPTQ
activation order) and every other tensor (biases, norms, embeddings, an
unquantised `lm_head`) is copied. gpt-oss' MXFP4 experts (`<name>_blocks`
u8 `[E, Out, G, 16]`, `<name>_scales` u8 `[E, Out, G]`) are already the
layout `std.quant`'s `dequantize_mxfp4` and expert ops read: they are checked
(pairs, dtypes, shapes) and copied under their names. The scales keep their dtype (the block's
`T`) unless `dtype` names another.

Refused with a `LinnetError`, before anything is written: no `config.json` or
no `quantization_config`, another method, bit width, AWQ version or GPTQ
checkpoint format, companions missing or of the wrong shape.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from linnet.errors import LinnetError
from linnet.quant.compressed import import_compressed
from linnet.quant.gptq_awq import awq_linear, gptq_linear
from linnet.quant.rewrite import Conversion, rewrite_checkpoint
from linnet.weights.checkpoint import Checkpoint, open_checkpoint
from linnet.weights.safetensors import NUMPY_DTYPES

Array = np.ndarray[Any, Any]
SCALE_DTYPES = ("f16", "bf16", "f32")
GPTQ_FORMATS = ("gptq", "gptq_v2")


def quantization_config(folder: Path) -> dict[str, Any]:
    """The `quantization_config` object of `folder/config.json`, or a LinnetError."""
    path = folder / "config.json"
    if not path.is_file():
        raise LinnetError(f"{folder}: no config.json (its quantization_config names the format)")
    try:
        config = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise LinnetError(f"{path}: not readable JSON ({error})") from None
    quant = config.get("quantization_config") if isinstance(config, dict) else None
    if not isinstance(quant, dict):
        raise LinnetError(f"{path}: no `quantization_config` object (not a quantised checkpoint)")
    return quant


def import_quantized(
    folder: str | os.PathLike[str], output: str | os.PathLike[str], *, dtype: str | None = None
) -> list[str]:
    """Convert every quantised linear of the checkpoint in `folder` (see the module
    docstring); returns their names (`<name>` of `<name>.qweight`)."""
    if dtype is not None and dtype not in SCALE_DTYPES:
        raise LinnetError(
            f"import: the scale dtype must be one of {', '.join(SCALE_DTYPES)}, not `{dtype}`"
        )
    root = Path(folder)
    quant = quantization_config(root)
    method = str(quant.get("quant_method", "")).lower()
    where = f"{root / 'config.json'}: quantization_config"
    if method == "compressed-tensors":
        return import_compressed(root, output, dtype=dtype)
    if method == "mxfp4":
        return _mxfp4_experts(open_checkpoint(root), output)
    if method not in ("gptq", "awq"):
        raise LinnetError(
            f"{where}: quant_method `{method}` is not one Linnet imports "
            "(gptq, awq, compressed-tensors, mxfp4)"
        )
    if quant.get("bits") != 4:
        raise LinnetError(f"{where}: bits {quant.get('bits')}; only 4-bit {method} imports")
    if method == "gptq":
        form = str(quant.get("checkpoint_format", "gptq")).lower()
        if form not in GPTQ_FORMATS:
            raise LinnetError(
                f"{where}: checkpoint_format `{form}`; only {' and '.join(GPTQ_FORMATS)} import"
            )
    else:
        form = str(quant.get("version", "gemm")).lower()
        if form != "gemm":
            raise LinnetError(f"{where}: AWQ version `{form}`; only `gemm` imports")
        if quant.get("zero_point") is False:
            raise LinnetError(f"{where}: AWQ without zero points does not import")
    source = open_checkpoint(root)
    prefixes = sorted(n.removesuffix(".qweight") for n in source.tensors if n.endswith(".qweight"))
    if not prefixes:
        raise LinnetError(f"{source.label}: no `*.qweight` tensors for quant_method `{method}`")
    group = quant.get("group_size")
    declared = group if isinstance(group, int) and group > 0 else None
    conversions = {p: _plan(source, p, method, dtype, declared) for p in prefixes}

    def convert(prefix: str) -> dict[str, Array]:
        names = conversions[prefix].consumed
        arrays = {n.rsplit(".", 1)[1]: np.asarray(source.load(n)) for n in names}
        if method == "awq":
            roles = awq_linear(arrays["qweight"], arrays["qzeros"], arrays["scales"])
        else:
            roles = gptq_linear(
                f"{source.label}: `{prefix}`",
                arrays["qweight"],
                arrays["qzeros"],
                arrays["scales"],
                arrays.get("g_idx"),
                v1=form == "gptq",
            )
        kinds = {name: kind for name, kind, _ in conversions[prefix].produced}
        return {
            f"{prefix}.{role}": value.astype(NUMPY_DTYPES[kinds[f"{prefix}.{role}"]])
            for role, value in roles.items()
        }

    metadata = {"linnet.quant": f"{method} {form} int4"}
    rewrite_checkpoint(source, output, conversions, convert, metadata)
    return prefixes


def _plan(
    source: Checkpoint, prefix: str, method: str, dtype: str | None, group: int | None
) -> Conversion:
    """What one linear reads and writes, after checking its tensors' dtypes and shapes (and
    the group size against config.json's `group_size`, unless that is -1: whole rows)."""
    tensors = source.tensors
    label = f"{source.label}: `{prefix}`"
    for role in ("qzeros", "scales"):
        if f"{prefix}.{role}" not in tensors:
            raise LinnetError(f"{label}.qweight has no `{prefix}.{role}`")
    qweight, qzeros = tensors[f"{prefix}.qweight"], tensors[f"{prefix}.qzeros"]
    scales = tensors[f"{prefix}.scales"]
    kind = scales.linnet_dtype
    if kind not in SCALE_DTYPES or len(scales.shape) != 2:
        raise LinnetError(
            f"{label}.scales is {scales.dtype} {list(scales.shape)}, not [groups, Out] in a float dtype"
        )
    groups, out = scales.shape
    if method == "gptq":
        width = qweight.shape[0] * 8 if len(qweight.shape) == 2 else 0
        expected = (width // 8, out)
    else:
        width = qweight.shape[0] if len(qweight.shape) == 2 else 0
        expected = (width, (out + 7) // 8)
    if qweight.dtype != "I32" or qweight.shape != expected or width == 0:
        raise LinnetError(
            f"{label}.qweight is {qweight.dtype} {list(qweight.shape)}, not I32 "
            f"{list(expected)} for {out} outputs (4-bit, eight per int32)"
        )
    if groups == 0 or width % groups or (width // groups) % 2:
        raise LinnetError(
            f"{label}: {groups} scale groups for {width} inputs; the group size must divide "
            "the inputs and be even"
        )
    if group is not None and width // groups != group:
        raise LinnetError(
            f"{label}: {groups} scale groups for {width} inputs, but config.json's "
            f"group_size is {group}"
        )
    if qzeros.dtype != "I32" or qzeros.shape != (groups, (out + 7) // 8):
        raise LinnetError(
            f"{label}.qzeros is {qzeros.dtype} {list(qzeros.shape)}, not I32 "
            f"[{groups}, {(out + 7) // 8}]"
        )
    consumed = [f"{prefix}.qweight", f"{prefix}.qzeros", f"{prefix}.scales"]
    produced: list[tuple[str, str, tuple[int, ...]]] = [
        (f"{prefix}.weight", "u8", (out, groups, width // groups // 2)),
        (f"{prefix}.scale", dtype or kind, (out, groups)),
        (f"{prefix}.zero", "u8", (out, groups)),
    ]
    g_idx = tensors.get(f"{prefix}.g_idx")
    if g_idx is not None:
        if method != "gptq" or g_idx.linnet_dtype not in ("i32", "i64") or g_idx.shape != (width,):
            raise LinnetError(
                f"{label}.g_idx is {g_idx.dtype} {list(g_idx.shape)}, not an integer [{width}] "
                "of a GPTQ linear"
            )
        consumed.append(f"{prefix}.g_idx")
        values = np.asarray(source.load(f"{prefix}.g_idx"))
        if not np.array_equal(values, np.arange(width) // (width // groups)):
            produced.append((f"{prefix}.order", "i32", (width,)))
    return Conversion(consumed, produced)


def _mxfp4_experts(source: Checkpoint, output: str | os.PathLike[str]) -> list[str]:
    """Check gpt-oss' `*_blocks` / `*_scales` pairs and copy the checkpoint (see the module
    docstring); returns the names (`<name>` of `<name>_blocks`)."""
    names = sorted(n.removesuffix("_blocks") for n in source.tensors if n.endswith("_blocks"))
    if not names:
        raise LinnetError(f"{source.label}: no `*_blocks` tensors for quant_method `mxfp4`")
    for name in names:
        blocks, scales = source.tensors[f"{name}_blocks"], source.tensors.get(f"{name}_scales")
        if scales is None:
            raise LinnetError(f"{source.label}: `{name}_blocks` has no `{name}_scales`")
        if (
            blocks.dtype != "U8"
            or scales.dtype != "U8"
            or len(blocks.shape) < 3
            or blocks.shape[-1] != 16
            or blocks.shape[:-1] != scales.shape
        ):
            raise LinnetError(
                f"{source.label}: `{name}_blocks` {blocks.dtype} {list(blocks.shape)} and "
                f"`{name}_scales` {scales.dtype} {list(scales.shape)} are not MXFP4 blocks "
                "[..., G, 16] u8 with E8M0 scales [..., G] u8"
            )
    rewrite_checkpoint(source, output, {}, _nothing, {"linnet.quant": "mxfp4 experts"})
    return names


def _nothing(prefix: str) -> dict[str, Array]:
    """The converter of a rewrite that converts nothing (never called)."""
    raise AssertionError(prefix)
