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

With dynamic generics (`graph.Emitter.dims`) a size may be a polynomial:
shapes become computed tensors, a `const` whose shape varies (one value
repeated) becomes `Expand` of that value, one whose integral elements vary
is computed in i64 and cast, and a node is skipped only when the
sizes are equal as polynomials. A slice stop that may exceed a symbolic axis
is passed as is: ONNX `Slice` clamps it, as the IR does.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from linnet.ir.core import Op
from linnet.ir.symbolic import Dim, Poly
from linnet.onnx.export.elementwise import ir_cast
from linnet.onnx.export.graph import Emitter, Rule

_RANGE_DTYPES = frozenset({"i32", "i64", "f32", "f64"})
_INDEX_DTYPES = frozenset({"i32", "i64"})


def _tuple(em: Emitter, op: Op, key: str) -> tuple[Dim, ...]:
    value = em.attr(op, key)
    assert isinstance(value, tuple)
    return value


def lower_const(em: Emitter, op: Op) -> Sequence[str]:
    t = op.results[0].type
    if em.dynamic is not None and op in em.dynamic.fills:
        scalar = em.const(em.dynamic.fills[op], t.dtype)
        return [em.one("Expand", [scalar, em.dims(em.shape_of(op.results[0]))])]
    if em.dynamic is not None and op in em.dynamic.values:
        flat = em.dims(em.dynamic.values[op])
        shaped = em.one("Reshape", [flat, em.ints(t.shape)])
        return [ir_cast(em, shaped, "i64", t.dtype)]
    value = op.attrs["value"]
    assert isinstance(value, np.ndarray)
    return [em.const(value, t.dtype)]


def lower_iota(em: Emitter, op: Op) -> Sequence[str]:
    t = op.results[0].type
    work = t.dtype if t.dtype in _RANGE_DTYPES else "i64"
    (length,) = em.shape_of(op.results[0])
    stop = em.const(length, work) if isinstance(length, int) else _size(em, length, work)
    scalars = [em.const(0, work), stop, em.const(1, work)]
    return [ir_cast(em, em.one("Range", scalars), work, t.dtype)]


def _size(em: Emitter, d: Poly, dtype: str) -> str:
    return em.cast(em.dim_scalar(d), "i64", dtype)


def lower_broadcast(em: Emitter, op: Op) -> Sequence[str]:
    x = em.name(op.operands[0])
    shape = em.shape_of(op.results[0])
    if em.shape_of(op.operands[0]) == shape:
        return [x]
    return [em.one("Expand", [x, em.dims(shape)])]


def lower_reshape(em: Emitter, op: Op) -> Sequence[str]:
    source, result = op.operands[0], op.results[0]
    return [reshape(em, em.name(source), em.shape_of(source), em.shape_of(result))]


def reshape(em: Emitter, x: str, source: Sequence[Dim], shape: Sequence[Dim]) -> str:
    """`Reshape` to a shape (no node when it is already that shape)."""
    if tuple(source) == tuple(shape):
        return x
    return em.one("Reshape", [x, em.dims(shape)], {"allowzero": 1})


def transpose(em: Emitter, x: str, perm: Sequence[int], shape: Sequence[Dim] | None = None) -> str:
    """`Transpose` (no node for the identity permutation); a `Reshape` where `shape`
    (`x`'s) shows that only axes of size 1 move (`moves_only_units`)."""
    if list(perm) == list(range(len(perm))):
        return x
    if shape is not None and moves_only_units(perm, shape):
        return reshape(em, x, shape, [shape[axis] for axis in perm])
    return em.one("Transpose", [x], {"perm": list(perm)})


def moves_only_units(perm: Sequence[int], shape: Sequence[Dim]) -> bool:
    """Whether permuting axes `perm` of a row-major tensor of `shape` keeps every element
    where it is: the axes not known to have size 1 stay in their order (a decode step's
    `[B, 1, N, D]` -> `[B, N, 1, D]` of one token). Such a permutation is a reshape."""
    kept = [axis for axis in perm if shape[axis] != 1]
    return kept == sorted(kept)


def lower_permute(em: Emitter, op: Op) -> Sequence[str]:
    perm = op.attrs["perm"]
    assert isinstance(perm, tuple)
    source = op.operands[0]
    return [transpose(em, em.name(source), perm, em.shape_of(source))]


def _clamped(stop: Dim, dim: Dim) -> Dim:
    """`min(stop, dim)` where it is known; else `stop` (ONNX `Slice` clamps)."""
    if isinstance(stop, int) and isinstance(dim, int):
        return min(stop, dim)
    return dim if stop == dim else stop


def lower_slice(em: Emitter, op: Op) -> Sequence[str]:
    x = em.name(op.operands[0])
    shape = em.shape_of(op.operands[0])
    start, stop, step = (_tuple(em, op, k) for k in ("start", "stop", "step"))
    axes = [
        axis
        for axis, dim in enumerate(shape)
        if (start[axis], _clamped(stop[axis], dim), step[axis]) != (0, dim, 1)
    ]
    if not axes:
        return [x]
    inputs = [
        x,
        em.dims([start[a] for a in axes]),
        em.dims([_clamped(stop[a], shape[a]) for a in axes]),
        em.ints(axes),
    ]
    if any(step[a] != 1 for a in axes):
        inputs.append(em.dims([step[a] for a in axes]))
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
    shape = em.shape_of(op.results[0])
    columns = []
    for value in indices:
        index = ir_cast(em, em.name(value), value.type.dtype, "i64")
        if em.shape_of(value) != shape:
            index = em.one("Expand", [index, em.dims(shape)])
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
