"""`quantize_checkpoint`: a float SafeTensors checkpoint in, the `std.quant` layouts out.

Stage: the user-facing side of `linnet.quant` (and `linnet quantize`). In: a
checkpoint source (`linnet.weights.checkpoint`: a file, a sharded folder or
index, or arrays in memory) and parameter-path globs. Out: one SafeTensors
file in which every matched linear weight `<name>.weight` `[Out, In]` is
replaced by the tensors of the `std.quant` block that reads it (stdlib.md
section 20), under the paths that block declares:

| bits | block | tensors |
| --- | --- | --- |
| 4 | `Int4GroupLinear<In, Out, group, T>` | `<name>.weight` u8 `[Out, In/group, group/2]`, `<name>.scale` `[Out, In/group]` (dtype `T`), `<name>.zero` u8 `[Out, In/group]` |
| 8 | `Int8Linear<In, Out, T>` | `<name>.weight` i8 `[Out, In]`, `<name>.scale` f32 `[Out]` |
| `fp8` | `Fp8Linear<In, Out, T>` | `<name>.weight` u8 `[Out, In]` (E4M3FN), `<name>.scale` f32 `[Out, 1]` |
| `mxfp4` | `Mxfp4Linear<In, Out, T>` | `<name>.weight` u8 `[Out, In/32, 16]`, `<name>.scale` u8 `[Out, In/32]` (E8M0) |

Weights stored `[In, Out]` (transformers' `Conv1D`, as GPT-2 keeps its
projections) are named by `transposed`, globs among the matched weights: they
are transposed before quantising, so the output holds the same `[Out, ...]`
layouts and a source reads them with the same std blocks
(`linnet.quant.source` rewrites `Conv1D` members to them).

Every other tensor (biases, norms, embeddings, unmatched weights) is copied
unchanged, so a source that swaps `Linear` for the quantised block binds the
file as it bound the float one. The quantisers are `linnet.quant.rtn`
(round-to-nearest; the 4-bit one is ONNX Runtime's, bit for bit) and
`linnet.quant.minifloat` (FP8 rows, the OCP MX quantiser for MXFP4), chosen
by `scheme` (`int`: `bits` 4 or 8; `fp8`; `mxfp4`).

Streamed: the output is written tensor by tensor from the memory-mapped
input (`save_safetensors_streamed`), atomically; only the (small) quantised
tensors of weights already read but not yet written are held in memory.
Refused with a `LinnetError`, before anything is written: a pattern that
matches no tensor, a matched tensor that is not a 2-D float `.weight`, a
group that does not divide a row, an unknown method or bit width.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from linnet.errors import LinnetError
from linnet.quant import minifloat, rtn
from linnet.quant.minifloat import MX_BLOCK
from linnet.quant.rewrite import Conversion, rewrite_checkpoint
from linnet.weights.checkpoint import CheckpointSource, open_checkpoint
from linnet.weights.safetensors import NUMPY_DTYPES, release_mapped

METHODS = ("rtn",)
SCHEMES = ("int", "fp8", "mxfp4")
BITS = (4, 8)
FLOATS = ("f16", "bf16", "f32", "f64")
SCALE_DTYPES = ("f16", "bf16", "f32")

Array = np.ndarray[Any, Any]


def quantize_checkpoint(
    weights: CheckpointSource,
    output: str | os.PathLike[str],
    *,
    patterns: Sequence[str],
    method: str = "rtn",
    bits: int = 4,
    group: int = 128,
    dtype: str | None = None,
    scheme: str = "int",
    transposed: Sequence[str] = (),
) -> list[str]:
    """Quantise the `.weight` tensors whose names match any glob in `patterns`; returns
    the names of the weights quantised (see the module docstring).

    `scheme` is `int` (`bits` and `group` apply), `fp8` or `mxfp4`. `dtype` is the
    4-bit scales' dtype (the block's `T`); by default the weight's own float dtype
    (f64 weights give f32 scales). 8-bit and FP8 scales are always f32. `transposed`:
    globs naming the matched weights stored `[In, Out]` (`Conv1D`).
    """
    if method not in METHODS:
        raise LinnetError(f"quantize: unknown method `{method}` (known: {', '.join(METHODS)})")
    if scheme not in SCHEMES:
        raise LinnetError(f"quantize: unknown scheme `{scheme}` (known: {', '.join(SCHEMES)})")
    if bits not in BITS:
        raise LinnetError(f"quantize: bits must be 4 or 8, not {bits}")
    if scheme == "int" and bits == 4 and (group <= 0 or group % 2):
        raise LinnetError(f"quantize: the group must be a positive even size, not {group}")
    if dtype is not None and dtype not in SCALE_DTYPES:
        raise LinnetError(
            f"quantize: the scale dtype must be one of {', '.join(SCALE_DTYPES)}, not `{dtype}`"
        )
    if not patterns:
        raise LinnetError("quantize: no patterns given (globs over parameter paths)")
    source = open_checkpoint(weights)
    chosen = _matched(source.label, list(source.tensors), patterns)
    flipped = _matched(source.label, sorted(chosen), transposed, "quantised weight")
    conversions: dict[str, Conversion] = {}
    for name in sorted(chosen):
        stored = source.tensors[name]
        kind = stored.linnet_dtype
        if kind not in FLOATS or len(stored.shape) != 2:
            raise LinnetError(
                f"{source.label}: `{name}` matched {_which(name, patterns)} but is "
                f"{stored.dtype} {list(stored.shape)}; only 2-D float linear weights [Out, In] "
                "can be quantised"
            )
        out, width = stored.shape[::-1] if name in flipped else stored.shape
        prefix = name.removesuffix(".weight")
        block = MX_BLOCK if scheme == "mxfp4" else group
        if (scheme == "mxfp4" or (scheme == "int" and bits == 4)) and width % block:
            raise LinnetError(
                f"{source.label}: `{name}` has {width} inputs per row, which the group "
                f"size {block} does not divide; pick a group that divides {width}"
            )
        tensors: list[tuple[str, str, tuple[int, ...]]]
        if scheme == "fp8":
            tensors = [("weight", "u8", (out, width)), ("scale", "f32", (out, 1))]
        elif scheme == "mxfp4":
            blocks = width // MX_BLOCK
            tensors = [("weight", "u8", (out, blocks, 16)), ("scale", "u8", (out, blocks))]
        elif bits == 8:
            tensors = [("weight", "i8", (out, width)), ("scale", "f32", (out,))]
        else:
            scale = dtype or ("f32" if kind == "f64" else kind)
            groups = width // group
            tensors = [
                ("weight", "u8", (out, groups, group // 2)),
                ("scale", scale, (out, groups)),
                ("zero", "u8", (out, groups)),
            ]
        produced = [(f"{prefix}.{role}", k, shape) for role, k, shape in tensors]
        conversions[name] = Conversion([name], produced)

    def convert(name: str) -> dict[str, Array]:
        prefix = name.removesuffix(".weight")
        stored = source.load(name)
        weight = np.ascontiguousarray(stored.T) if name in flipped else stored
        kinds = {n: k for n, k, _ in conversions[name].produced}
        arrays = _quantize(weight, scheme, bits, group)
        release_mapped(stored)
        return {
            f"{prefix}.{role}": value.astype(NUMPY_DTYPES[kinds[f"{prefix}.{role}"]])
            for role, value in arrays.items()
        }

    label = {"int": f"int{bits}" + (f" group {group}" if bits == 4 else ""), "fp8": "fp8 e4m3",
             "mxfp4": "mxfp4"}[scheme]  # fmt: skip
    rewrite_checkpoint(source, output, conversions, convert, {"linnet.quant": f"{method} {label}"})
    return sorted(chosen)


def _quantize(weight: Array, scheme: str, bits: int, group: int) -> dict[str, Array]:
    if scheme == "fp8":
        q, scale = minifloat.fp8_rows(weight)
        return {"weight": q, "scale": scale}
    if scheme == "mxfp4":
        blocks, scales = minifloat.mxfp4_blocks(weight)
        return {"weight": blocks, "scale": scales}
    if bits == 8:
        q, scale = rtn.int8_rows(weight)
        return {"weight": q, "scale": scale}
    packed, scale, zero = rtn.int4_groups(weight, group)
    return {"weight": packed, "scale": scale, "zero": zero}


def _matched(
    label: str, names: list[str], patterns: Sequence[str], what: str = "tensor"
) -> set[str]:
    chosen: set[str] = set()
    for pattern in patterns:
        hits = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
        if not hits:
            raise LinnetError(
                f"{label}: the pattern `{pattern}` matches no {what} (globs match whole "
                "tensor names, e.g. `model.layers.*.self_attn.q_proj.weight`)"
            )
        for name in hits:
            if not name.endswith(".weight"):
                raise LinnetError(
                    f"{label}: the pattern `{pattern}` matches `{name}`; only `<name>.weight` "
                    "tensors of linear layers can be quantised"
                )
        chosen.update(hits)
    return chosen


def _which(name: str, patterns: Sequence[str]) -> str:
    return next(f"`{p}`" for p in patterns if fnmatch.fnmatchcase(name, p))
