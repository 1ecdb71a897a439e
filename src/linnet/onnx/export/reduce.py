"""ONNX lowering rules for `reduce` and `contract`.

Stage: part of the exporter's op table.

`reduce` becomes `ReduceSum`/`ReduceProd`/`ReduceMax`/`ReduceMin` with the
axes as an i64 input (opset 18+) and `keepdims=0`; `any`/`all` are
`ReduceMax`/`ReduceMin` over bool. Two cases never reach ONNX Runtime:
no axes (ONNX would reduce every axis; the IR's result is the operand) and
an empty reduced domain, whose result is the identity of language.md 8.6
(sum 0, prod 1, any false, all true, max the lowest value, min the highest)
known at export time because shapes are static. Sums and products
accumulate in `dtypes.accumulate_dtype`, extrema in `extremum_dtype`.
ONNX Runtime's integer `ReduceSum` and `ReduceProd` saturate instead of
wrapping (measured, 1.32) and it has no unsigned reductions, so integer sums
are a `MatMul` with a column of ones (integer matmul wraps), integer products
a halving tree of `Mul`, and u64 extrema run on i64 with the top bit flipped.

`contract` (dot_general) becomes one matrix product. The operands are
transposed to `[batch, free, contracting]` and `[batch, contracting, free]`,
reshaped to `[batch, M, K]` and `[batch, K, N]`, multiplied, and reshaped to
`[batch, lhs free, rhs free]`; transposes and reshapes that change nothing
are skipped. Without batch axes and with a float dtype the product is
`Gemm` on `[M, K]` and the right operand as stored when its contracting axes
come last (`transB=1`): a `[Out, In]` weight bound at run time is then never
copied into a transposed layout on each call. Contractions over an empty
axis are all zeros, emitted as a constant.

With dynamic generics the sizes are read through `Emitter.shape_of` (a
polynomial axis is taken to be non-empty) and the reshapes compute their
shapes; an integer product over a dynamic axis is refused (its halving tree
is unrolled at export time).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from linnet.errors import LinnetError
from linnet.ir.core import FLOAT_DTYPES, Op, numpy_dtype
from linnet.ir.symbolic import Dim, Poly
from linnet.onnx.export.dtypes import accumulate_dtype, extremum_dtype
from linnet.onnx.export.graph import Emitter, Rule
from linnet.onnx.export.shapes import reshape, transpose

_REDUCE_OPS = {
    "sum": "ReduceSum",
    "prod": "ReduceProd",
    "max": "ReduceMax",
    "min": "ReduceMin",
    "any": "ReduceMax",
    "all": "ReduceMin",
}


def identity_value(kind: str, dtype: str) -> object:
    """The value of a reduction over nothing (language.md 8.6, `kernels._identity`)."""
    if kind in ("sum", "prod"):
        return 0 if kind == "sum" else 1
    if kind in ("any", "all"):
        return kind == "all"
    if dtype in FLOAT_DTYPES:
        return -np.inf if kind == "max" else np.inf
    info = np.iinfo(numpy_dtype(dtype))
    return info.min if kind == "max" else info.max


def filled(em: Emitter, value: object, dtype: str, shape: Sequence[Dim]) -> str:
    """A constant of `shape` filled with `value` (a scalar broadcast by `Expand`)."""
    scalar = em.const(value, dtype)
    return scalar if not shape else em.one("Expand", [scalar, em.dims(shape)])


def _prod(dims: Iterable[Dim]) -> Dim:
    total: Dim = 1
    for d in dims:
        total = total * d
    return total


def lower_reduce(em: Emitter, op: Op) -> Sequence[str]:
    kind = str(op.attrs["kind"])
    axes = op.attrs["axes"]
    assert isinstance(axes, tuple)
    source = op.operands[0].type
    source_shape = em.shape_of(op.operands[0])
    result_shape = em.shape_of(op.results[0])
    x = em.name(op.operands[0])
    if not axes:
        return [x]
    if _prod(source_shape[a] for a in axes) == 0:
        return [filled(em, identity_value(kind, source.dtype), source.dtype, result_shape)]
    dtype = source.dtype
    if kind in ("sum", "prod"):
        work = accumulate_dtype(dtype, em.provider)
        wide = em.cast(x, dtype, work)
        if work in FLOAT_DTYPES:
            reduced = _reduce_node(em, _REDUCE_OPS[kind], wide, axes)
        else:
            matrix = _rows(em, wide, source_shape, axes)
            fold = _integer_sum if kind == "sum" else _integer_product
            reduced = reshape(em, fold(em, matrix, work), [matrix.rows, 1], result_shape)
        return [em.cast(reduced, work, dtype)]
    if kind in ("max", "min") and dtype == "u64":
        return [_unsigned_extremum(em, kind, x, axes)]
    work = extremum_dtype(dtype) if kind in ("max", "min") else "bool"
    reduced = _reduce_node(em, _REDUCE_OPS[kind], em.cast(x, dtype, work), axes)
    return [em.cast(reduced, work, dtype)]


def _reduce_node(em: Emitter, op_type: str, x: str, axes: Sequence[int]) -> str:
    return em.one(op_type, [x, em.ints(sorted(axes))], {"keepdims": 0})


class _Rows:
    """A tensor laid out as `[rows, count]`: the kept axes flattened, then the reduced ones."""

    def __init__(self, name: str, rows: Dim, count: Dim) -> None:
        self.name, self.rows, self.count = name, rows, count


def _rows(em: Emitter, x: str, shape: Sequence[Dim], axes: Sequence[int]) -> _Rows:
    kept = [a for a in range(len(shape)) if a not in axes]
    order = [*kept, *sorted(axes)]
    rows = _prod(shape[a] for a in kept)
    count = _prod(shape[a] for a in axes)
    moved = transpose(em, x, order)
    return _Rows(reshape(em, moved, [shape[a] for a in order], [rows, count]), rows, count)


def _integer_sum(em: Emitter, x: _Rows, work: str) -> str:
    """Wrapping integer sum as a product with ones: ONNX Runtime's integer `ReduceSum`
    saturates (and has no unsigned kernels), its integer `MatMul` wraps like the IR."""
    if isinstance(x.count, Poly):
        ones = filled(em, 1, work, [x.count, 1])
    else:
        ones = em.const(np.ones((x.count, 1), numpy_dtype(work)), work)
    return em.one("MatMul", [x.name, ones])


def _integer_product(em: Emitter, x: _Rows, work: str) -> str:
    """Wrapping integer product by halving the row (`ReduceProd` saturates on integers)."""
    if isinstance(x.count, Poly):
        raise LinnetError(
            f"an integer product over an axis of dynamic size `{x.count}` cannot be exported; "
            "bind that generic"
        )
    name, count = x.name, x.count
    while count > 1:
        if count % 2:
            ones = filled(em, 1, work, [x.rows, 1])
            name, count = em.one("Concat", [name, ones], {"axis": 1}), count + 1
        half = count // 2
        left = em.one("Slice", [name, em.ints([0]), em.ints([half]), em.ints([1])])
        right = em.one("Slice", [name, em.ints([half]), em.ints([count]), em.ints([1])])
        name, count = em.one("Mul", [left, right]), half
    return name


def _unsigned_extremum(em: Emitter, kind: str, x: str, axes: Sequence[int]) -> str:
    """u64 max/min (no kernel): flipping the top bit maps unsigned order onto i64 order."""
    top = em.const(np.iinfo(np.int64).min, "i64")
    signed = em.one("BitwiseXor", [em.cast(x, "u64", "i64"), top])
    reduced = _reduce_node(em, _REDUCE_OPS[kind], signed, axes)
    return em.cast(em.one("BitwiseXor", [reduced, top]), "i64", "u64")


def _tuple(op: Op, key: str) -> tuple[int, ...]:
    value = op.attrs[key]
    assert isinstance(value, tuple)
    return value


def lower_contract(em: Emitter, op: Op) -> Sequence[str]:
    lhs, rhs = op.operands
    lb, rb, lc, rc = (
        _tuple(op, k) for k in ("lhs_batch", "rhs_batch", "lhs_contract", "rhs_contract")
    )
    dtype = lhs.type.dtype
    lshape, rshape = em.shape_of(lhs), em.shape_of(rhs)
    result = em.shape_of(op.results[0])
    lf = [a for a in range(lhs.type.rank) if a not in lb + lc]
    rf = [a for a in range(rhs.type.rank) if a not in rb + rc]
    k = _prod(lshape[a] for a in lc)
    if k == 0 or _prod(result) == 0:
        return [filled(em, 0, dtype, result)]
    work = accumulate_dtype(dtype, em.provider)
    a = em.cast(em.name(lhs), dtype, work)
    b = em.cast(em.name(rhs), dtype, work)
    batch = [lshape[i] for i in lb]
    m = _prod(lshape[i] for i in lf)
    n = _prod(rshape[i] for i in rf)
    if not lb and work in FLOAT_DTYPES:
        product = _gemm(em, op, a, b, (lf, lc, rf, rc), (m, k, n))
    else:
        a = transpose(em, a, [*lb, *lf, *lc])
        a = reshape(em, a, [*batch, *(lshape[i] for i in (*lf, *lc))], [*batch, m, k])
        b = transpose(em, b, [*rb, *rc, *rf])
        b = reshape(em, b, [*batch, *(rshape[i] for i in (*rc, *rf))], [*batch, k, n])
        product = em.one("MatMul", [a, b])
    shaped = reshape(em, product, [*batch, m, n], result)
    return [em.cast(shaped, work, dtype)]


def _gemm(
    em: Emitter,
    op: Op,
    a: str,
    b: str,
    axes: tuple[list[int], tuple[int, ...], list[int], tuple[int, ...]],
    sizes: tuple[Dim, Dim, Dim],
) -> str:
    """`[M, K] x [K, N]` as `Gemm`, reading either operand transposed where it is stored so."""
    lhs, rhs = (em.shape_of(v) for v in op.operands)
    lf, lc, rf, rc = axes
    m, k, n = sizes
    trans_a = bool(lf) and list(lc) + lf == list(range(len(lhs)))
    trans_b = bool(rf) and rf + list(rc) == list(range(len(rhs)))
    left_order = [*lc, *lf] if trans_a else [*lf, *lc]
    right_order = [*rf, *rc] if trans_b else [*rc, *rf]
    a = transpose(em, a, left_order)
    b = transpose(em, b, right_order)
    a = reshape(em, a, [lhs[i] for i in left_order], [k, m] if trans_a else [m, k])
    b = reshape(em, b, [rhs[i] for i in right_order], [n, k] if trans_b else [k, n])
    attrs = {name: 1 for name, on in (("transA", trans_a), ("transB", trans_b)) if on}
    return em.one("Gemm", [a, b], attrs)


RULES: dict[str, Rule] = {"reduce": lower_reduce, "contract": lower_contract}
