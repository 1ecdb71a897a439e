"""Native `lax` forms of a few standard-library ops, for the generated JAX source.

Stage: backend, the JAX counterpart of `linnet.torch.natives`. A `call` op keeps
an op's canonical body as a region (architecture.md "Core IR"); the JAX code
generator (`linnet.jax.codegen`) inlines that body, unless `find_native` knows
the callee and every operand has the type the helper expects, in which case the
call becomes one call of a helper here (bound as `N` in the generated source).
Each helper computes what the canonical body computes, the same operations on
the same dtypes in the same order (language.md 1.2, "Canonical bodies"); what
changes is the program XLA is given:

| callee | native |
| --- | --- |
| `std.nn.cache::write_at`, `write_span` | one `dynamic_update_slice` of the `N` positions (`at` clamped into the cache; where the span leaves the cache the window keeps the cache's values, as the canonical select does): a donated cache is then updated in place instead of selected over every position and copied |
| `std.nn.cache::write_rows` | one `scatter` of each row's position, dropped outside the cache |
| `std.nn.attention::attention`, `grouped_attention`, `attention_rows`, `grouped_attention_rows` | the query heads grouped by the key/value head they share (`[B, Hk, G * Q, D]`), so keys and values are never repeated to `H` heads; scores, scale, mask (-1e30), softmax and the weighted sum in f32 as the canonical body, cast to `T` once |

The helpers are plain `lax` programs, so they trace under `jax.jit`, `jax.grad`
and `jax.vjp` like the rest of the generated source. Anything the finders do not
recognise (another rank, dtype or operand count) keeps its canonical body.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax.numpy as jnp
from jax import lax

from linnet.ir.core import FLOAT_DTYPES, Op, TensorType

Array = Any
Spelling = Callable[[Sequence[str]], str]
"""Operand names -> the Python expression of the native call."""

MASKED_SCORE = -1e30
"""What a masked attention score becomes (std.nn.attention)."""

_DROP = lax.GatherScatterMode.FILL_OR_DROP


# -- cache writes -------------------------------------------------------------------------


def write_span(cache: Array, value: Array, at: Array) -> Array:
    """stdlib.md 10 `write_span`: positions `at .. at + N` of every row take `value`;
    the positions outside the cache keep the old value, as in the canonical body.
    `write_at` is the case `N = 1`.

    One `dynamic_update_slice` of `N` positions at `at` clamped into the cache, so XLA
    writes a donated cache in place. The window written holds `value` where the span
    covers it and the cache's own values elsewhere (only when `at` leaves the cache:
    `value` shifted by the clamping, selected against the window read back)."""
    size, count = cache.shape[2], value.shape[2]
    i32 = jnp.int32
    at = lax.clamp(i32(-count), at, i32(size))  # beyond either end nothing is written
    start = lax.clamp(i32(0), at, i32(size - count))
    shift = lax.sub(start, at)  # window position j holds value[j + shift]
    zero = i32(0)
    old = lax.dynamic_slice(
        cache, (zero, zero, start, zero), (*cache.shape[:2], count, cache.shape[3])
    )
    padded = lax.pad(
        value, lax.full((), 0, value.dtype), ((0, 0, 0), (0, 0, 0), (count, count, 0), (0, 0, 0))
    )
    shifted = lax.dynamic_slice(padded, (zero, zero, lax.add(shift, i32(count)), zero), value.shape)
    source = lax.add(lax.iota(i32, count), lax.broadcast(shift, (count,)))
    inside = lax.bitwise_and(
        lax.ge(source, lax.full((count,), 0, i32)), lax.lt(source, lax.full((count,), count, i32))
    )
    window = lax.select(lax.broadcast_in_dim(inside, value.shape, (2,)), shifted, old)
    return lax.dynamic_update_slice(cache, window, (zero, zero, start, zero))


def write_rows(cache: Array, value: Array, at: Array) -> Array:
    """stdlib.md 10 `write_rows`: row `b` takes `value[b, :, 0]` at position `at[b]`;
    a position outside the cache is dropped (the row is unchanged)."""
    rows, heads, _, width = cache.shape
    index = lax.concatenate(
        [lax.reshape(lax.iota(jnp.int32, rows), (rows, 1)), lax.reshape(at, (rows, 1))], 1
    )
    numbers = lax.ScatterDimensionNumbers(
        update_window_dims=(1, 2),
        inserted_window_dims=(0, 2),
        scatter_dims_to_operand_dims=(0, 2),
    )
    return lax.scatter(
        cache,
        index,
        lax.reshape(value, (rows, heads, width)),
        numbers,
        unique_indices=True,
        mode=_DROP,
    )


# -- attention ----------------------------------------------------------------------------


def attention(
    query: Array, key: Array, value: Array, scale: Array, mask: Array | None, rows: bool
) -> Array:
    """std.nn.attention's `attention` / `grouped_attention` (`mask` `[Q, K]` or none) and
    `attention_rows` / `grouped_attention_rows` (`rows`: `mask` `[B, Q, K]`), with query
    head `j * G + g` served by key/value head `j` (`G = H / Hk`, HF `repeat_kv` order)."""
    batch, heads, queries, depth = query.shape
    kv_heads, keys = key.shape[1], key.shape[2]
    groups = heads // kv_heads
    f32 = jnp.float32
    grouped = lax.reshape(
        lax.convert_element_type(query, f32), (batch, kv_heads, groups * queries, depth)
    )
    scores = lax.dot_general(
        grouped,
        lax.convert_element_type(key, f32),
        (((3,), (3,)), ((0, 1), (0, 1))),
        precision=lax.Precision.HIGHEST,
        preferred_element_type=f32,
    )  # [B, Hk, G * Q, K]
    shape = scores.shape
    scores = lax.mul(scores, lax.broadcast(lax.convert_element_type(scale, f32), shape))
    if mask is not None:
        wide = (batch, kv_heads, groups, queries, keys)
        where = lax.broadcast_in_dim(mask, wide, (0, 3, 4) if rows else (3, 4))
        masked = lax.full(wide, MASKED_SCORE, f32)
        scores = lax.reshape(lax.select(where, lax.reshape(scores, wide), masked), shape)
    kept = (0, 1, 2)
    peak = lax.broadcast_in_dim(lax.reduce_max(scores, (3,)), shape, kept)
    exponentials = lax.exp(lax.sub(scores, peak))
    total = lax.broadcast_in_dim(lax.reduce_sum(exponentials, (3,)), shape, kept)
    weights = lax.div(exponentials, total)
    out = lax.dot_general(
        weights,
        lax.convert_element_type(value, f32),
        (((3,), (2,)), ((0, 1), (0, 1))),
        precision=lax.Precision.HIGHEST,
        preferred_element_type=f32,
    )  # [B, Hk, G * Q, D]
    out = lax.reshape(out, (batch, heads, queries, depth))
    return lax.convert_element_type(out, query.dtype)


# -- finding them -------------------------------------------------------------------------


def _write(op: Op, rows: bool) -> Spelling | None:
    """`write_at` / `write_span` (one position range for every row) or `write_rows`."""
    if len(op.operands) != 3:
        return None
    cache, value, at = (v.type for v in op.operands)
    if cache.rank != 4 or value.rank != 4 or op.results[0].type != cache:
        return None
    if cache.dtype != value.dtype or not 1 <= value.shape[2] <= cache.shape[2]:
        return None
    if (cache.shape[0], cache.shape[1], cache.shape[3]) != (
        value.shape[0],
        value.shape[1],
        value.shape[3],
    ):
        return None
    if rows:
        if value.shape[2] != 1 or at != TensorType((cache.shape[0],), "i32"):
            return None
        return lambda a: f"N.write_rows({a[0]}, {a[1]}, {a[2]})"
    if at != TensorType((), "i32"):
        return None
    return lambda a: f"N.write_span({a[0]}, {a[1]}, {a[2]})"


def _attention(op: Op, rows: bool) -> Spelling | None:
    """The four attention ops: `[B, H, Q, D]` queries, `[B, Hk, K, D]` keys and values."""
    if len(op.operands) not in ((5,) if rows else (4, 5)):
        return None
    q, k, v = (o.type for o in op.operands[:3])
    if q.dtype not in FLOAT_DTYPES or q.rank != 4 or k != v or k.rank != 4:
        return None
    if k.dtype != q.dtype or op.results[0].type != q:
        return None
    batch, heads, queries, depth = q.shape
    if k.shape[0] != batch or k.shape[3] != depth or min(q.shape) < 1 or min(k.shape) < 1:
        return None
    if heads % k.shape[1] != 0 or op.operands[3].type != TensorType((), "f32"):
        return None
    if len(op.operands) == 5:
        expected = (batch, queries, k.shape[2]) if rows else (queries, k.shape[2])
        if op.operands[4].type != TensorType(expected, "bool"):
            return None
        return lambda a: f"N.attention({a[0]}, {a[1]}, {a[2]}, {a[3]}, {a[4]}, rows={rows})"
    return lambda a: f"N.attention({a[0]}, {a[1]}, {a[2]}, {a[3]}, None, rows=False)"


FINDERS: dict[str, Callable[[Op], Spelling | None]] = {
    "std.nn.cache::write_at": lambda op: _write(op, rows=False),
    "std.nn.cache::write_span": lambda op: _write(op, rows=False),
    "std.nn.cache::write_rows": lambda op: _write(op, rows=True),
    "std.nn.attention::attention": lambda op: _attention(op, rows=False),
    "std.nn.attention::grouped_attention": lambda op: _attention(op, rows=False),
    "std.nn.attention::attention_rows": lambda op: _attention(op, rows=True),
    "std.nn.attention::grouped_attention_rows": lambda op: _attention(op, rows=True),
}


def find_native(op: Op) -> Spelling | None:
    """How to spell the `call` op `op` as a native call, or None to inline its body."""
    finder = FINDERS.get(str(op.attrs.get("callee", "")))
    return None if finder is None else finder(op)
