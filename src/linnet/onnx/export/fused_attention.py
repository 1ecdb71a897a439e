"""`std.nn.attention` ops as ONNX Runtime's `GroupQueryAttention` / `MultiHeadAttention`.

Stage: finders registered in `fused` (`fused=True`, CPU provider, f32).

The std ops take heads-first `q [B, H, Q, D]`, `k`/`v [B, Hk, K, D]`, a
compile-time `scale` and an optional boolean `[Q, K]` mask; a masked score
becomes -1e30 after scaling. Both kernels add an `attention_bias` to the
scaled scores instead: `Where(mask, 0, -1e30)`, which gives the same f32
score (`s - 1e30` rounds to -1e30 for any `|s| < 3e22`), so even a fully
masked row averages the values as the std op does. f16 is left to the body:
-1e30 is not an f16 value and an f16 bias turns a fully masked row into NaN.

- `GroupQueryAttention` (`causal=0`) serves the KV heads without repeating
  them. It appends the new keys to `past_key`, so the keys are split as
  `past = k[:, :, :K-Q]` and `new = k[:, :, K-Q:]` (`seqlens_k = K - 1`,
  `total_sequence_length = K`): the concatenation is `k` again. The CPU
  kernel rejects a past with `Q > 1` when `B > 1` and a head size that is
  not a multiple of 8, so it is used when `D % 8 == 0` and `K == Q`,
  `Q == 1` or `B == 1`.
- `MultiHeadAttention` otherwise, with the KV heads repeated as the body does
  (HF `repeat_kv` order).

Sizes come from `Emitter.shape_of`, so dynamic batch and sequence sizes are
computed in the graph (`seqlens_k` and `total_sequence_length` included);
`GroupQueryAttention` then needs `K == Q` or `Q == 1` as polynomials.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from linnet.ir.core import Op, Value
from linnet.ir.symbolic import Dim, Poly
from linnet.onnx.export.fused_native import known_f32_scalar
from linnet.onnx.export.graph import Emitter
from linnet.onnx.export.shapes import transpose

_MASKED = -1e30
_DOMAIN = "com.microsoft"


def _to_sequence_major(em: Emitter, x: Value, length: Dim | None = None, start: Dim = 0) -> str:
    """`x[:, :, start:start+length]` of `[B, N, L, D]` as `[B, length, N * D]`."""
    batch, heads, full, width = em.shape_of(x)
    length = full - start if length is None else length
    name = em.name(x)
    if (start, length) != (0, full):
        bounds = [em.dims([start]), em.dims([start + length]), em.ints([2])]
        name = em.one("Slice", [name, *bounds])
    moved = transpose(em, name, [0, 2, 1, 3], (batch, heads, length, width))
    return em.one("Reshape", [moved, em.dims([batch, length, heads * width])])


def _heads_first(em: Emitter, name: str, shape: tuple[Dim, ...]) -> str:
    """`[B, Q, H * D]` back to `[B, H, Q, D]`."""
    batch, heads, length, width = shape
    split = em.one("Reshape", [name, em.dims([batch, length, heads, width])])
    return transpose(em, split, [0, 2, 1, 3], (batch, length, heads, width))


def _bias(em: Emitter, mask: Value | None) -> str:
    """The `[1, 1, Q, K]` f32 bias of a boolean mask (empty name when there is none)."""
    if mask is None:
        return ""
    queries, keys = em.shape_of(mask)
    zero, masked = em.const(np.float32(0.0), "f32"), em.const(np.float32(_MASKED), "f32")
    bias = em.one("Where", [em.name(mask), zero, masked])
    return em.one("Reshape", [bias, em.dims([1, 1, queries, keys])])


def _operands(em: Emitter, op: Op) -> tuple[Value, Value, Value, float, Value | None] | None:
    if em.provider != "cpu" or len(op.operands) not in (4, 5):
        return None
    query, key, value = op.operands[:3]
    scale = known_f32_scalar(em, op, 3)
    mask = op.operands[4] if len(op.operands) == 5 else None
    if scale is None or {query.type.dtype, key.type.dtype, value.type.dtype} != {"f32"}:
        return None
    q_shape, k_shape = em.shape_of(query), em.shape_of(key)
    if query.type.rank != 4 or key.type != value.type or k_shape != em.shape_of(value):
        return None
    if 0 in q_shape + k_shape:
        return None
    if mask is not None and em.shape_of(mask) != (q_shape[2], k_shape[2]):
        return None
    return query, key, value, scale, mask


def _group_query(
    em: Emitter, query: Value, key: Value, value: Value, scale: float, mask: Value | None
) -> str | None:
    batch, heads, queries, width = em.shape_of(query)
    kv_heads, keys = em.shape_of(key)[1], em.shape_of(key)[2]
    past = keys - queries
    if isinstance(past, Poly) or isinstance(width, Poly) or width % 8 or past < 0:
        return None
    if not (past == 0 or queries == 1 or batch == 1):
        return None
    inputs = [_to_sequence_major(em, query)]
    inputs += [_to_sequence_major(em, v, queries, past) for v in (key, value)]
    if past:
        ends = [em.ints([0]), em.ints([past]), em.ints([2])]
        inputs += [em.one("Slice", [em.name(v), *ends]) for v in (key, value)]
    else:
        inputs += ["", ""]
    if isinstance(batch, int) and isinstance(keys, int):
        inputs.append(em.const(np.full(batch, keys - 1, np.int32), "i32"))
        inputs.append(em.const(np.int32(keys), "i32"))
    else:  # computed from the dynamic sizes
        last = em.cast(em.dim(keys - 1), "i64", "i32")
        inputs.append(em.one("Expand", [last, em.dims([batch])]))
        inputs.append(em.cast(em.dim_scalar(keys), "i64", "i32"))
    inputs += ["", "", "", _bias(em, mask)]
    attrs = {"num_heads": heads, "kv_num_heads": kv_heads, "scale": scale, "causal": 0}
    names = em.node("GroupQueryAttention", inputs, attrs, outputs=3, domain=_DOMAIN)
    return names[0]


def _repeat_heads(em: Emitter, x: Value, heads: int) -> str:
    batch, kv_heads, keys, width = em.shape_of(x)
    if kv_heads == heads:
        return em.name(x)
    assert isinstance(kv_heads, int)
    grouped = em.one("Reshape", [em.name(x), em.dims([batch, kv_heads, 1, keys, width])])
    wide = em.one("Expand", [grouped, em.dims([batch, kv_heads, heads // kv_heads, keys, width])])
    return em.one("Reshape", [wide, em.dims([batch, heads, keys, width])])


def _multi_head(
    em: Emitter, query: Value, key: Value, value: Value, scale: float, mask: Value | None
) -> str:
    heads = query.type.shape[1]  # a head count: never dynamic (fuse_attention checks)
    inputs = [_to_sequence_major(em, query)]
    inputs += [_repeat_heads(em, v, heads) for v in (key, value)]
    inputs += ["", "", _bias(em, mask)]
    attrs = {"num_heads": heads, "scale": scale}
    return em.one("MultiHeadAttention", inputs, attrs, domain=_DOMAIN)


def fuse_attention(em: Emitter, op: Op) -> Sequence[str] | None:
    """`attention` / `grouped_attention` as one contrib attention kernel (f32, CPU)."""
    found = _operands(em, op)
    if found is None:
        return None
    query, key, value, scale, mask = found
    q_shape, k_shape = em.shape_of(query), em.shape_of(key)
    heads, kv_heads = q_shape[1], k_shape[1]
    if k_shape[0] != q_shape[0] or k_shape[3] != q_shape[3]:
        return None
    if not isinstance(heads, int) or not isinstance(kv_heads, int) or isinstance(q_shape[3], Poly):
        return None
    if kv_heads == 0 or heads % kv_heads:
        return None
    out = _group_query(em, query, key, value, scale, mask)
    if out is None:
        out = _multi_head(em, query, key, value, scale, mask)
    return [_heads_first(em, out, q_shape)]
