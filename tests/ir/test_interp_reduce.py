"""`reduce` and `contract` in the reference interpreter against Python loops.

Float sums/products are compared with an f64 Python accumulation (the oracle
accumulates in f64 and rounds once); integer sums wrap like exact sums taken
modulo 2^w; empty reductions give the identities of language.md 8.6.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np
import pytest
from ir_core_support import (
    FLOATS,
    INT_DTYPES,
    INT_RANGES,
    random_floats,
    random_ints,
    run_one,
    wrap,
)

from linnet.ir.core import numpy_dtype

REL = {"f16": 2.0**-10, "bf16": 2.0**-7, "f32": 2.0**-23, "f64": 1e-14}


def reduce_reference(
    x: np.ndarray, axes: tuple[int, ...], combine: Callable[[list[float]], float]
) -> np.ndarray:
    """Apply `combine` to the elements of `x` along `axes`, with Python arithmetic."""
    kept = [i for i in range(x.ndim) if i not in axes]
    out_shape = tuple(x.shape[i] for i in kept)
    out = np.empty(out_shape, dtype=object)
    for out_index in np.ndindex(out_shape):
        items = []
        for red_index in itertools.product(*(range(x.shape[a]) for a in axes)):
            full = [0] * x.ndim
            for axis, i in zip(kept, out_index, strict=True):
                full[axis] = i
            for axis, i in zip(axes, red_index, strict=True):
                full[axis] = i
            items.append(x[tuple(full)].item())
        out[out_index] = combine(items)
    return out


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("kind", ["sum", "prod", "max", "min"])
@pytest.mark.parametrize("axes", [(1,), (0, 2), (0, 1, 2)])
def test_float_reductions(kind: str, dtype: str, axes: tuple[int, ...]) -> None:
    rng = np.random.default_rng(len(kind) + 7 * FLOATS.index(dtype))
    x = random_floats(rng, dtype, (3, 4, 5), 0.5, 1.5 if kind == "prod" else 4.0)
    x[0, 0, 0] = -x[0, 0, 0]
    combine = {"sum": math.fsum, "prod": math.prod, "max": max, "min": min}[kind]
    got = run_one("reduce", [x], {"kind": kind, "axes": axes}, dtypes=[dtype])
    expected = reduce_reference(x.astype(np.float64), axes, combine).astype(np.float64)
    assert got.dtype == numpy_dtype(dtype)
    np.testing.assert_allclose(got.astype(np.float64), expected, rtol=REL[dtype])


@pytest.mark.parametrize("dtype", INT_DTYPES)
@pytest.mark.parametrize("kind", ["sum", "prod", "max", "min"])
def test_integer_reductions_wrap(kind: str, dtype: str) -> None:
    rng = np.random.default_rng(INT_DTYPES.index(dtype) * 4 + len(kind))
    x = random_ints(rng, dtype, (4, 6))
    combine = {"sum": sum, "prod": math.prod, "max": max, "min": min}[kind]
    got = run_one("reduce", [x], {"kind": kind, "axes": (1,)})
    expected = [wrap(v, dtype) for v in reduce_reference(x, (1,), combine).tolist()]
    assert got.dtype == x.dtype and got.tolist() == expected


def test_boolean_reductions() -> None:
    rng = np.random.default_rng(8)
    x = rng.random((5, 3)) > 0.6
    x[0] = True
    x[1] = False
    assert run_one("reduce", [x], {"kind": "any", "axes": (1,)}).tolist() == [
        any(r) for r in x.tolist()
    ]
    assert run_one("reduce", [x], {"kind": "all", "axes": (1,)}).tolist() == [
        all(r) for r in x.tolist()
    ]


@pytest.mark.parametrize(
    ("kind", "dtype", "identity"),
    [
        ("sum", "f32", 0.0),
        ("prod", "i16", 1),
        ("max", "f32", -math.inf),
        ("min", "bf16", math.inf),
        ("max", "i8", -128),
        ("min", "i8", 127),
        ("max", "u8", 0),
        ("min", "u32", 2**32 - 1),
        ("min", "i64", INT_RANGES["i64"][1]),
        ("any", "bool", False),
        ("all", "bool", True),
    ],
)
def test_empty_reductions_give_identities(kind: str, dtype: str, identity: float) -> None:
    x = np.zeros((3, 0), numpy_dtype(dtype))
    got = run_one("reduce", [x], {"kind": kind, "axes": (1,)}, dtypes=[dtype])
    assert got.shape == (3,)
    assert (
        got.astype(np.float64).tolist() == [float(identity)] * 3 or got.tolist() == [identity] * 3
    )


def contract_reference(
    lhs: np.ndarray,
    rhs: np.ndarray,
    lb: tuple[int, ...],
    rb: tuple[int, ...],
    lc: tuple[int, ...],
    rc: tuple[int, ...],
) -> np.ndarray:
    """dot_general by explicit loops: result axes are batch, lhs free, rhs free."""
    lfree = [i for i in range(lhs.ndim) if i not in lb + lc]
    rfree = [i for i in range(rhs.ndim) if i not in rb + rc]
    shape = (
        tuple(lhs.shape[a] for a in lb)
        + tuple(lhs.shape[a] for a in lfree)
        + tuple(rhs.shape[a] for a in rfree)
    )
    out = np.empty(shape, dtype=object)
    for index in np.ndindex(shape):
        batch, rest = index[: len(lb)], index[len(lb) :]
        li, ri = rest[: len(lfree)], rest[len(lfree) :]
        total: list[object] = []
        for k in itertools.product(*(range(lhs.shape[a]) for a in lc)):
            left = [0] * lhs.ndim
            right = [0] * rhs.ndim
            for axes, values, target in (
                (lb, batch, left),
                (rb, batch, right),
                (lc, k, left),
                (rc, k, right),
                (lfree, li, left),
                (rfree, ri, right),
            ):
                for axis, v in zip(axes, values, strict=True):
                    target[axis] = v
            total.append(lhs[tuple(left)].item() * rhs[tuple(right)].item())
        out[index] = math.fsum(total) if lhs.dtype.kind == "f" else sum(total)  # type: ignore[arg-type]
    return out


CONTRACTIONS = [
    # matmul, batched matmul with transposed rhs, outer product, full dot, two contracted axes
    ((3, 4), (4, 5), (), (), (1,), (0,)),
    ((2, 3, 4), (2, 5, 4), (0,), (0,), (2,), (2,)),
    ((3,), (4,), (), (), (), ()),
    ((6,), (6,), (), (), (0,), (0,)),
    ((2, 3, 4), (4, 2, 5), (), (), (0, 2), (1, 0)),
    ((3, 2, 4), (4, 3), (0,), (1,), (2,), (0,)),
]


@pytest.mark.parametrize(("ls", "rs", "lb", "rb", "lc", "rc"), CONTRACTIONS)
@pytest.mark.parametrize("dtype", ["f32", "bf16", "i32"])
def test_contract_matches_loops(ls, rs, lb, rb, lc, rc, dtype: str) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(sum(ls) + sum(rs))
    if dtype == "i32":
        lhs = rng.integers(-50, 50, size=ls).astype(np.int32)
        rhs = rng.integers(-50, 50, size=rs).astype(np.int32)
    else:
        lhs = random_floats(rng, dtype, ls)
        rhs = random_floats(rng, dtype, rs)
    attrs = {"lhs_batch": lb, "rhs_batch": rb, "lhs_contract": lc, "rhs_contract": rc}
    got = run_one("contract", [lhs, rhs], attrs, dtypes=[dtype, dtype])
    expected = contract_reference(
        lhs.astype(np.float64) if dtype != "i32" else lhs,
        rhs.astype(np.float64) if dtype != "i32" else rhs,
        lb,
        rb,
        lc,
        rc,
    )
    assert got.shape == expected.shape
    if dtype == "i32":
        assert got.tolist() == expected.tolist()
    else:
        np.testing.assert_allclose(
            got.astype(np.float64), expected.astype(np.float64), rtol=REL[dtype], atol=1e-6
        )


def test_integer_contraction_wraps() -> None:
    lhs = np.array([[100, 100]], np.int8)
    rhs = np.array([[2], [1]], np.int8)
    attrs = {"lhs_batch": (), "rhs_batch": (), "lhs_contract": (1,), "rhs_contract": (0,)}
    assert run_one("contract", [lhs, rhs], attrs).tolist() == [[wrap(300, "i8")]]
