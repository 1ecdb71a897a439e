"""`std.nn.rope::rope` as ONNX Runtime's `com.microsoft::RotaryEmbedding` (rotate-half).

Stage: a finder registered in `fused` (`fused=True`, CPU provider).

The std op takes full-width tables `[S, D]` and computes
`x * cos + rotate_half(x) * sin` on heads-first `x` `[B, H, S, D]`. The
contrib kernel (non-interleaved, 4-D input read as `[B, H, S, D]`) computes
`out[i] = x[i] cos[p, i] - x[i + D/2] sin[p, i]` and
`out[i + D/2] = x[i + D/2] cos[p, i] + x[i] sin[p, i]` from half-width caches
`[max_pos, D/2]`: the same function only when each table's two halves are
equal. That is proven, not assumed: a table qualifies when it is a
compile-time constant with equal halves, or when it is built by elementwise
`cos`/`sin`/`cast` ops from `concat(a, a)` on the last axis (how every model
builds its tables, stdlib.md section 7). The caches are then the first halves
of the model's own tables (same numerics), and `position_ids` is the constant
`[B, S]` row `0..S-1`, so row `s` of the cache rotates position `s` (computed
by `Range` and `Expand` when `B` or `S` is dynamic).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from linnet.ir.core import Op, Value
from linnet.onnx.export.graph import Emitter

_ROPE_DTYPES = frozenset({"f32", "f16"})
_ELEMENTWISE = frozenset({"cos", "sin", "cast"})


def has_equal_halves(em: Emitter, table: Value) -> bool:
    """Whether `table[..., :D/2] == table[..., D/2:]` is known at export time."""
    value = table
    while True:
        known = em.known.get(value)
        if known is not None:
            half = known.shape[-1] // 2
            return bool(np.array_equal(known[..., :half], known[..., half:]))
        op = em.producers.get(value)
        if op is None:
            return False
        if op.kind in _ELEMENTWISE and len(op.operands) == 1:
            value = op.operands[0]
            continue
        if op.kind == "concat" and len(op.operands) == 2:
            axis = int(str(op.attrs["axis"]))
            last = axis in (-1, value.type.rank - 1)
            return last and op.operands[0] is op.operands[1]
        return False


def fuse_rope(em: Emitter, op: Op) -> Sequence[str] | None:
    """Rotate-half rotary embedding as `RotaryEmbedding(interleaved=0)` on `[B, H, S, D]`."""
    if em.provider != "cpu" or len(op.operands) != 3:
        return None
    x, cos_table, sin_table = op.operands
    dtype = x.type.dtype
    if dtype not in _ROPE_DTYPES or x.type.rank != 4:
        return None
    batch, _, length, width = em.shape_of(x)
    if not isinstance(width, int) or width % 2 or width == 0 or length == 0 or batch == 0:
        return None
    if not (has_equal_halves(em, cos_table) and has_equal_halves(em, sin_table)):
        return None
    half = width // 2
    starts, ends, axes = em.ints([0]), em.ints([half]), em.ints([-1])
    cos_cache = em.one("Slice", [em.name(cos_table), starts, ends, axes])
    sin_cache = em.one("Slice", [em.name(sin_table), starts, ends, axes])
    if isinstance(batch, int) and isinstance(length, int):
        rows = np.broadcast_to(np.arange(length, dtype=np.int64), (batch, length))
        positions = em.const(rows, "i64")
    else:  # dynamic sizes: the same rows, computed
        line = em.one("Range", [em.const(0, "i64"), em.dim_scalar(length), em.const(1, "i64")])
        positions = em.one("Expand", [line, em.dims([batch, length])])
    inputs = [em.name(x), positions, cos_cache, sin_cache]
    attrs = {"interleaved": 0}
    return [em.one("RotaryEmbedding", inputs, attrs, domain="com.microsoft")]
