"""ONNX lowering rules for constants, `iota` and the shape and indexing ops.

Stage: part of the exporter's op table. Shapes are static after binding, so
every shape, axis list and slice bound is a constant i64 tensor, and an op
that changes nothing (a broadcast or reshape to the same shape, the identity
permutation, a full slice) emits no node at all.

- `reshape` sets `allowzero=1`: a 0 in a static shape means an empty axis,
  not ONNX's "copy this dimension from the input".
- `slice` passes only the axes it actually cuts; IR stops are already
  clamped to the axis (language.md 9.3), as ONNX clamps them.
- `gather` is ONNX `Gather` (same result shape rule); `take` broadcasts its
  index tensors, stacks them on a last axis and uses `GatherND`. Indices of
  dtypes other than i32/i64 go through i64. Out-of-range indices are
  backend-defined (language.md 9.2): ONNX Runtime rejects them with an error.
- `iota` is `Range` in i32, i64, f32 or f64, and `Range` in i64 plus the IR
  cast for any other dtype.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from linnet.ir.core import Op
from linnet.onnx.export.elementwise import ir_cast
from linnet.onnx.export.graph import Emitter, Rule

_RANGE_DTYPES = frozenset({"i32", "i64", "f32", "f64"})
_INDEX_DTYPES = frozenset({"i32", "i64"})


def _tuple(op: Op, key: str) -> tuple[int, ...]:
    value = op.attrs[key]
    assert isinstance(value, tuple)
    return value


def lower_const(em: Emitter, op: Op) -> Sequence[str]:
    value = op.attrs["value"]
    assert isinstance(value, np.ndarray)
    return [em.const(value, op.results[0].type.dtype)]


def lower_iota(em: Emitter, op: Op) -> Sequence[str]:
    t = op.results[0].type
    work = t.dtype if t.dtype in _RANGE_DTYPES else "i64"
    scalars = (em.const(v, work) for v in (0, t.shape[0], 1))
    return [ir_cast(em, em.one("Range", list(scalars)), work, t.dtype)]


def lower_broadcast(em: Emitter, op: Op) -> Sequence[str]:
    x = em.name(op.operands[0])
    shape = op.results[0].type.shape
    if op.operands[0].type.shape == shape:
        return [x]
    return [em.one("Expand", [x, em.ints(shape)])]


def lower_reshape(em: Emitter, op: Op) -> Sequence[str]:
    return [
        reshape(em, em.name(op.operands[0]), op.operands[0].type.shape, op.results[0].type.shape)
    ]


def reshape(em: Emitter, x: str, source: Sequence[int], shape: Sequence[int]) -> str:
    """`Reshape` to a static shape (no node when it is already that shape)."""
    if tuple(source) == tuple(shape):
        return x
    return em.one("Reshape", [x, em.ints(shape)], {"allowzero": 1})


def transpose(em: Emitter, x: str, perm: Sequence[int]) -> str:
    """`Transpose` (no node for the identity permutation)."""
    if list(perm) == list(range(len(perm))):
        return x
    return em.one("Transpose", [x], {"perm": list(perm)})


def lower_permute(em: Emitter, op: Op) -> Sequence[str]:
    return [transpose(em, em.name(op.operands[0]), _tuple(op, "perm"))]


def lower_slice(em: Emitter, op: Op) -> Sequence[str]:
    x = em.name(op.operands[0])
    shape = op.operands[0].type.shape
    start, stop, step = (_tuple(op, k) for k in ("start", "stop", "step"))
    axes = [
        axis
        for axis, dim in enumerate(shape)
        if (start[axis], min(stop[axis], dim), step[axis]) != (0, dim, 1)
    ]
    if not axes:
        return [x]
    inputs = [
        x,
        em.ints([start[a] for a in axes]),
        em.ints([min(stop[a], shape[a]) for a in axes]),
        em.ints(axes),
    ]
    if any(step[a] != 1 for a in axes):
        inputs.append(em.ints([step[a] for a in axes]))
    return [em.one("Slice", inputs)]


def lower_concat(em: Emitter, op: Op) -> Sequence[str]:
    names = [em.name(v) for v in op.operands]
    if len(names) == 1:
        return names
    return [em.one("Concat", names, {"axis": op.attrs["axis"]})]


# ONNX Runtime's CumSum kernels: f32, f64, f16, i32, i64. Other dtypes add in a wider one of
# the same kind and convert back: the low bits of a wrapped integer sum are the sum wrapped
# in the narrow dtype, and bf16 adds in f32 rounding once at the end (within bf16's tolerance).
_CUMSUM_VIA = {"i8": "i32", "i16": "i32", "u8": "i32", "u16": "i32", "u32": "i64", "u64": "i64"}
_CUMSUM_VIA["bf16"] = "f32"


def lower_cumsum(em: Emitter, op: Op) -> Sequence[str]:
    """`cumsum` as `CumSum(x, axis)` (inclusive, forward; language-extensions 5.2)."""
    (x,) = op.operands
    dtype = x.type.dtype
    via = _CUMSUM_VIA.get(dtype, dtype)
    axis = em.const(np.asarray(op.attrs["axis"], dtype=np.int64), "i64")
    summed = em.one("CumSum", [em.cast(em.name(x), dtype, via), axis])
    return [em.cast(summed, via, dtype)]


def index_tensor(em: Emitter, name: str, dtype: str) -> str:
    """Indices as i32 or i64, the dtypes ONNX `Gather`/`GatherND` accept."""
    return name if dtype in _INDEX_DTYPES else ir_cast(em, name, dtype, "i64")


def lower_gather(em: Emitter, op: Op) -> Sequence[str]:
    x, indices = op.operands
    index = index_tensor(em, em.name(indices), indices.type.dtype)
    return [em.one("Gather", [em.name(x), index], {"axis": op.attrs["axis"]})]


def lower_take(em: Emitter, op: Op) -> Sequence[str]:
    x, *indices = op.operands
    if not indices:
        return [em.name(x)]
    shape = op.results[0].type.shape
    columns = []
    for value in indices:
        index = ir_cast(em, em.name(value), value.type.dtype, "i64")
        if value.type.shape != shape:
            index = em.one("Expand", [index, em.ints(shape)])
        columns.append(em.one("Unsqueeze", [index, em.ints([len(shape)])]))
    stacked = columns[0] if len(columns) == 1 else em.one("Concat", columns, {"axis": -1})
    return [em.one("GatherND", [em.name(x), stacked])]


RULES: dict[str, Rule] = {
    "const": lower_const,
    "iota": lower_iota,
    "broadcast": lower_broadcast,
    "reshape": lower_reshape,
    "permute": lower_permute,
    "slice": lower_slice,
    "concat": lower_concat,
    "cumsum": lower_cumsum,
    "gather": lower_gather,
    "take": lower_take,
}
