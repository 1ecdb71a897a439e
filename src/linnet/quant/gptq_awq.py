"""GPTQ and AWQ-GEMM 4-bit linears, read into the `Int4GroupLinear` layout exactly.

Stage: below `linnet.quant.hf` (which reads `config.json` and walks the
checkpoint); nothing here knows about files. In: the int32 tensors of one
linear as transformers' GPTQ / AWQ checkpoints store them. Out: the
`Int4GroupLinear` tensors (stdlib.md section 20): `weight` u8
`[Out, G, group/2]` (even element in the low nibble), `scale` `[Out, G]`,
`zero` u8 `[Out, G]`, and `order` i32 `[In]` for an activation order. No
arithmetic on the weights: the same integers, scales and zero points, moved.

GPTQ (AutoGPTQ / GPTQModel, `checkpoint_format` `gptq` or `gptq_v2`):
`qweight` i32 `[In/8, Out]`, element `q[i, o]` at bits `4 (i % 8)` of word
`[i / 8, o]`; `qzeros` i32 `[G, Out/8]`, `z[g, o]` at bits `4 (o % 8)`;
`scales` `[G, Out]`; `g_idx` i32 `[In]`, the group of input `i`. Its weight is
`w[o, i] = (q[i, o] - z'[g_idx[i], o]) * scales[g_idx[i], o]`, where `z' = z + 1`
in the v1 format (AutoGPTQ stores the zero point minus one) and `z' = z` in
v2. A v1 nibble of 15 (a zero point of 16, which AutoGPTQ's packing cannot
write without spilling into the next nibble) is refused. With `desc_act` the
groups are not consecutive inputs: `order` is the stable sort of the inputs by
group, every group must hold exactly `group` inputs, and the columns are moved
into that order (our block applies `order` to `x` first).

AWQ GEMM (AutoAWQ `WQLinear_GEMM`): `qweight` i32 `[In, Out/8]` and `qzeros`
i32 `[G, Out/8]` packed along the outputs in the order `[0, 2, 4, 6, 1, 3, 5,
7]` (nibble `j` of word `c` holds output `8c + ORDER[j]`), `scales` `[G, Out]`,
groups of consecutive inputs, `w[o, i] = (q[i, o] - z[i / group, o]) * s[i / group, o]`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from linnet.errors import LinnetError

Array = np.ndarray[Any, Any]
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
"""Nibble `j` of an AWQ word holds output `8c + AWQ_ORDER[j]`."""


def nibbles(words: Array) -> Array:
    """i32 `[..., W]` -> u8 `[..., 8 W]`: nibble `j` of each word (bits `4j..4j+3`) in turn."""
    data = np.ascontiguousarray(words).astype("<i4").view(np.uint8)  # [..., 4W]
    pairs = np.stack([data & 15, data >> 4], axis=-1)
    unpacked: Array = pairs.reshape(*words.shape[:-1], words.shape[-1] * 8)
    return unpacked


def pack_pairs(q: Array, group: int) -> Array:
    """u8 `[Out, In]` (values 0..15) -> `[Out, In/group, group/2]`, even element low."""
    out, width = q.shape
    packed: Array = (q[:, 0::2] | (q[:, 1::2] << 4)).astype(np.uint8)
    return packed.reshape(out, width // group, group // 2)


def gptq_linear(
    label: str,
    qweight: Array,
    qzeros: Array,
    scales: Array,
    g_idx: Array | None,
    *,
    v1: bool,
) -> dict[str, Array]:
    """One GPTQ linear in the `Int4GroupLinear` layout (roles `weight`, `scale`, `zero` and,
    for an activation order, `order`). `label` names the linear in errors."""
    groups, out = scales.shape
    width = qweight.shape[0] * 8
    group = width // groups
    q = nibbles(qweight.T)  # [Out, In]
    zero = nibbles(qzeros)[:, :out].T.copy()  # [Out, G]
    if v1:
        if (zero == 15).any():
            raise LinnetError(
                f"{label}: a zero-point nibble of 15 in a `gptq` (v1) checkpoint stands for 16, "
                "which its packing cannot store; convert the checkpoint to `gptq_v2`"
            )
        zero += 1
    result = {"scale": np.ascontiguousarray(scales.T), "zero": zero.astype(np.uint8)}
    trivial = np.arange(width) // group
    if g_idx is not None and not np.array_equal(g_idx, trivial):
        counts = np.bincount(np.clip(g_idx, 0, groups), minlength=groups + 1)
        if g_idx.min() < 0 or g_idx.max() >= groups or (counts[:groups] != group).any():
            raise LinnetError(
                f"{label}: `g_idx` does not put exactly {group} inputs in each of the "
                f"{groups} groups, so it has no Int4GroupLinear order"
            )
        order = np.argsort(g_idx, kind="stable")
        q = q[:, order]
        result["order"] = order.astype(np.int32)
    result["weight"] = pack_pairs(q, group)
    return result


def awq_linear(qweight: Array, qzeros: Array, scales: Array) -> dict[str, Array]:
    """One AWQ-GEMM linear in the `Int4GroupLinear` layout (`weight`, `scale`, `zero`)."""
    groups, out = scales.shape
    width = qweight.shape[0]
    reverse = np.argsort(AWQ_ORDER)  # output 8c + k sits in nibble reverse[k]

    def columns(words: Array) -> Array:
        raw = nibbles(words).reshape(words.shape[0], -1, 8)
        ordered: Array = raw[:, :, reverse].reshape(words.shape[0], -1)[:, :out]
        return ordered

    q = columns(qweight).T  # [Out, In]
    zero = columns(qzeros).T  # [Out, G]
    return {
        "weight": pack_pairs(np.ascontiguousarray(q), width // groups),
        "scale": np.ascontiguousarray(scales.T),
        "zero": np.ascontiguousarray(zero).astype(np.uint8),
    }


def pack_words(values: Array) -> Array:
    """u8 `[..., 8W]` (values 0..15) -> i32 `[..., W]`: value `8c + j` at bits `4j` of word
    `c` (the inverse of `nibbles`)."""
    v = np.ascontiguousarray(values).astype(np.uint8)
    pairs = (v[..., 0::2] | (v[..., 1::2] << 4)).astype(np.uint8)  # [..., 4W], little-endian
    words: Array = pairs.view("<i4").astype(np.int32)
    return words


def gptq_words(
    weight: Array, scale: Array, zero: Array, order: Array | None, *, v1: bool
) -> dict[str, Array]:
    """One `Int4GroupLinear` (`weight` u8 `[Out, G, group/2]`, `scale` `[Out, G]`, `zero` u8
    `[Out, G]`, optional `order` i32 `[In]`) as GPTQ stores it: `qweight` i32 `[In/8, Out]`,
    `qzeros` i32 `[G, ceil(Out/8)]` (the zero point minus one in `v1`), `scales` `[G, Out]`
    (the scale dtype kept) and `g_idx` i32 `[In]`, the inverse of `gptq_linear`. The
    integers move; nothing is rounded. A `v1` zero point of 0 has no stored form (a
    LinnetError: write `gptq_v2`)."""
    out, groups, half = weight.shape
    group, width = 2 * half, groups * 2 * half
    q = unpack_pairs(weight).reshape(out, width)  # packed element k of each row
    g_idx = np.arange(width, dtype=np.int32) // group
    if order is not None:
        permutation = np.asarray(order).astype(np.int64)
        columns = np.empty_like(q)
        columns[:, permutation] = q  # packed element k is input order[k]
        q = columns
        g_idx = np.empty(width, np.int32)
        g_idx[permutation] = np.arange(width, dtype=np.int32) // group
    stored = np.asarray(zero).astype(np.int32).T  # [G, Out]
    if v1:
        if (stored == 0).any():
            raise LinnetError(
                "a zero point of 0 has no `gptq` (v1) form (it stores the zero point minus one)"
            )
        stored = stored - 1
    padded = np.zeros((groups, -(-out // 8) * 8), np.uint8)
    padded[:, :out] = stored
    return {
        "qweight": np.ascontiguousarray(pack_words(q).T),
        "qzeros": pack_words(padded),
        "scales": np.ascontiguousarray(np.asarray(scale).T),
        "g_idx": g_idx,
    }


def unpack_pairs(packed: Array) -> Array:
    """u8 `[..., H]` -> `[..., 2H]`: byte `k` gives elements `2k` (low) and `2k + 1` (high)."""
    b = np.asarray(packed)
    pairs: Array = np.stack([b & 15, b >> 4], axis=-1)
    return pairs.reshape(*b.shape[:-1], b.shape[-1] * 2)
