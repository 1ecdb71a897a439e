"""Shape ops, constants and indexing in the reference interpreter.

References are element-by-element index arithmetic in Python (where each
result element comes from), not the NumPy call the interpreter makes.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from ir_core_support import random_floats, random_ints, run_one

from linnet.errors import LinnetError
from linnet.ir.core import Builder, TensorType
from linnet.ir.interp import run_function


def test_broadcast_copies_size_one_and_leading_axes() -> None:
    rng = np.random.default_rng(0)
    x = random_floats(rng, "f32", (3, 1))
    got = run_one("broadcast", [x], {"shape": (2, 3, 4)})
    for i, j, k in itertools.product(range(2), range(3), range(4)):
        assert got[i, j, k] == x[j, 0]


def test_reshape_is_row_major() -> None:
    x = np.arange(24, dtype=np.int32).reshape(2, 3, 4) * 7 - 5
    got = run_one("reshape", [x], {"shape": (4, 6)})
    flat = x.reshape(-1).tolist()
    assert [[int(got[r, c]) for c in range(6)] for r in range(4)] == [
        flat[r * 6 : r * 6 + 6] for r in range(4)
    ]


def test_permute_moves_axes() -> None:
    rng = np.random.default_rng(1)
    x = random_floats(rng, "f64", (2, 3, 4))
    got = run_one("permute", [x], {"perm": (2, 0, 1)})
    assert got.shape == (4, 2, 3)
    for i, j, k in itertools.product(range(4), range(2), range(3)):
        assert got[i, j, k] == x[j, k, i]


@pytest.mark.parametrize(
    ("start", "stop", "step"),
    [
        ((0, 1), (5, 4), (1, 1)),
        ((1, 0), (9, 4), (2, 3)),
        ((4, 2), (5, 2), (1, 1)),
        ((6, 0), (9, 4), (1, 2)),
    ],
)
def test_slice_with_clamped_stop_and_steps(
    start: tuple[int, ...], stop: tuple[int, ...], step: tuple[int, ...]
) -> None:
    rng = np.random.default_rng(2)
    x = random_ints(rng, "i16", (5, 4))
    got = run_one("slice", [x], {"start": start, "stop": stop, "step": step})
    rows = [r for r in range(start[0], min(stop[0], 5), step[0])]
    cols = [c for c in range(start[1], min(stop[1], 4), step[1])]
    assert got.shape == (len(rows), len(cols))
    assert got.tolist() == [[int(x[r, c]) for c in cols] for r in rows]


def test_concat_along_an_axis() -> None:
    rng = np.random.default_rng(3)
    a, b, c = (random_floats(rng, "bf16", (2, n, 3)) for n in (1, 4, 2))
    got = run_one("concat", [a, b, c], {"axis": 1}, dtypes=["bf16"] * 3)
    assert got.shape == (2, 7, 3)
    pieces = [(a, 0), (b, 1), (c, 5)]
    for array, offset in pieces:
        for i, j, k in np.ndindex(array.shape):
            assert got[i, j + offset, k] == array[i, j, k]


def test_const_and_iota() -> None:
    b = Builder.for_function([])
    c = b.const([[1.5, -2.0]], "bf16")
    i = b.iota(5, "i8")
    f = b.iota(3, "f32")
    fn = b.finish_function("f", [c, i, f])
    (got_c, got_i, got_f), _ = run_function(fn, {}, {}, [])
    assert got_c.astype(np.float64).tolist() == [[1.5, -2.0]]
    assert got_i.dtype == np.int8 and got_i.tolist() == [0, 1, 2, 3, 4]
    assert got_f.dtype == np.float32 and got_f.tolist() == [0.0, 1.0, 2.0]


@pytest.mark.parametrize("index_dtype", ["i32", "u8", "i64"])
def test_gather_takes_along_an_axis(index_dtype: str) -> None:
    rng = np.random.default_rng(4)
    x = random_floats(rng, "f32", (3, 5, 2))
    idx = rng.integers(0, 5, size=(2, 4)).astype(
        np.dtype(index_dtype.replace("i", "int").replace("u", "uint"))
    )
    got = run_one("gather", [x, idx], {"axis": 1})
    assert got.shape == (3, 2, 4, 2)
    for a, p, q, c in np.ndindex(got.shape):
        assert got[a, p, q, c] == x[a, int(idx[p, q]), c]


def test_gather_with_a_scalar_index_removes_the_axis() -> None:
    x = np.arange(12, dtype=np.int64).reshape(3, 4) * 3 + 1
    got = run_one("gather", [x, np.array(2, np.int64)], {"axis": 0})
    assert got.shape == (4,) and got.tolist() == [int(v) for v in x[2]]


def test_take_broadcasts_index_tensors() -> None:
    rng = np.random.default_rng(5)
    x = random_floats(rng, "f16", (4, 6))
    rows = rng.integers(0, 4, size=(3, 1)).astype(np.int32)
    cols = rng.integers(0, 6, size=(5,)).astype(np.int32)
    got = run_one("take", [x, rows, cols])
    assert got.shape == (3, 5)
    for p, q in np.ndindex(got.shape):
        assert got[p, q] == x[int(rows[p, 0]), int(cols[q])]


@pytest.mark.parametrize("bad", [5, -1])
def test_out_of_range_runtime_index_is_reported(bad: int) -> None:
    x = np.ones((2, 5), np.float32)
    with pytest.raises(LinnetError, match=r"op gather: index .* out of range"):
        run_one("gather", [x, np.array([0, bad], np.int32)], {"axis": 1})
    with pytest.raises(LinnetError, match="op take"):
        run_one("take", [x, np.array([0], np.int32), np.array([bad], np.int32)])


def test_select_broadcasts_condition() -> None:
    rng = np.random.default_rng(6)
    cond = rng.random((2, 1, 3)) > 0.5
    a = random_ints(rng, "u16", (4, 1))
    b = random_ints(rng, "u16", (3,))
    got = run_one("select", [cond, a, b])
    assert got.shape == (2, 4, 3)
    for i, j, k in np.ndindex(got.shape):
        assert got[i, j, k] == (a[j, 0] if cond[i, 0, k] else b[k])


def test_inputs_of_the_wrong_type_name_the_input() -> None:
    b = Builder.for_function([("tokens", TensorType((2,), "i64"))])
    fn = b.finish_function("f", [b.args[0]])
    with pytest.raises(LinnetError, match=r"input tokens of entry f: expected i64\[2\]"):
        run_function(fn, {}, {}, [np.zeros(2, np.int32)])
    with pytest.raises(LinnetError, match="takes 1 inputs"):
        run_function(fn, {}, {}, [])
