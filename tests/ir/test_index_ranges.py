"""Which integer inputs index which extents (linnet.ir.index_ranges), on lowered entries.

Each entry of `SOURCE` uses its integer inputs one way; the test pins the
range derived for each (or that none is, where it could only be guessed),
then checks the derived range against the NumPy reference interpreter: every
value inside runs and reads only in-bounds positions, and the two values
just outside really index out of bounds.
"""

from __future__ import annotations

import numpy as np
import pytest
from lower_support import bound, lowered, t

from linnet.errors import LinnetError
from linnet.ir.bind import BoundModel
from linnet.ir.core import TensorType
from linnet.ir.index_ranges import index_ranges
from linnet.ir.inputs import check_inputs, input_checks
from linnet.ir.interp import run_function
from linnet.ir.lower import lower_entry
from linnet.ir.passes import optimize

SOURCE = """
module t

use std.nn.cache::{write_at, write_span}
use std.nn.embedding::{embedding}

pub block Table<Rows: Dim, W: Dim>
where Rows > 2 {
    param table: Tensor[Rows, W; f32]
    state cache: Tensor[1, 1, Rows, W; f32]

    pub entry row(i: i32) -> Tensor[W; f32] {
        return table[i]
    }

    pub entry shifted(i: i32) -> Tensor[W; f32] {
        return table[i + 2]
    }

    pub entry window<S: Dim>(start: i32) -> Tensor[S, W; f32] {
        return embedding(iota<i32>(S) + start - 1, table)
    }

    pub entry ids<S: Dim>(tokens: Tensor[S; i32]) -> Tensor[S, W; f32] {
        return embedding(tokens + 1, table)
    }

    pub entry wide<S: Dim>(tokens: Tensor[S; i64]) -> Tensor[S, W; f32] {
        return embedding(cast<i32>(tokens), table)
    }

    pub entry widened(i: i32) -> Tensor[W; f32] {
        return table[cast<i64>(i)]
    }

    pub entry spread<S: Dim>(tokens: Tensor[S; i32]) -> Tensor[S, W; f32] {
        return embedding(tokens + iota<i32>(S), table)
    }

    pub entry clamped(i: i32) -> Tensor[W; f32] {
        return table[min(max(i, 0), Rows - 1)]
    }

    pub entry two(i: i32, j: i32) -> Tensor[W; f32] {
        return table[i + j]
    }

    pub entry of_input<N: Dim>(x: Tensor[N; f32], i: i32) -> f32 {
        return x[i]
    }

    pub entry write(x: Tensor[1, 1, 1, W; f32], at: i32) -> Tensor[1, 1, Rows, W; f32] {
        cache = write_at(cache, x, at)
        return cache
    }

    pub entry span<S: Dim>(x: Tensor[1, 1, S, W; f32], at: i32) -> Tensor[1, 1, Rows, W; f32]
    where S > 0 {
        cache = write_span(cache, x, at + 1)
        return cache
    }

    pub entry passed<S: Dim>(
        c: Tensor[1, 1, Rows, W; f32],
        x: Tensor[1, 1, S, W; f32],
        at: i32,
    ) -> Tensor[1, 1, Rows, W; f32]
    where S > 0 {
        return write_span(c, x, at)
    }
}
"""
ROWS, W = 6, 2
AXIS = "it indexes axis 0 of `table`, of length `Rows` = 6"
CACHE = "the cache holds `Rows` = 6 positions"
F, I32, I64 = "f32", "i32", "i64"


@pytest.fixture(scope="module")
def model() -> BoundModel:
    return bound(SOURCE, {"Rows": ROWS, "W": W})


CASES = [
    ("row", [t((), I32)], {"i": (0, 5, AXIS)}),
    ("shifted", [t((), I32)], {"i": (-2, 3, AXIS)}),
    ("window", [t((), I32)], None),  # S from `generics`
    ("ids", [t((3,), I32)], {"tokens": (-1, 4, AXIS)}),
    ("wide", [t((3,), I64)], {}),  # a narrowing cast may wrap: a range would be a guess
    ("widened", [t((), I32)], {"i": (0, 5, AXIS)}),
    ("spread", [t((3,), I32)], {}),  # not every token meets every offset
    ("clamped", [t((), I32)], {}),
    ("two", [t((), I32), t((), I32)], {}),
    ("of_input", [t((5,), F), t((), I32)], {"i": (0, 4, "it indexes axis 0 of input `x`, of length 5")}),
    ("write", [t((1, 1, 1, W), F), t((), I32)], {"at": (0, 5, CACHE)}),
    ("span", [t((1, 1, 3, W), F), t((), I32)],
     {"at": (-1, 2, f"3 positions are written from it and {CACHE}")}),
    ("passed", [t((1, 1, ROWS, W), F), t((1, 1, 3, W), F), t((), I32)], {}),
]  # fmt: skip


@pytest.mark.parametrize(("entry", "types", "expected"), CASES, ids=[c[0] for c in CASES])
def test_ranges(
    model: BoundModel,
    entry: str,
    types: list[TensorType],
    expected: dict[str, tuple[int, int, str]] | None,
) -> None:
    if expected is None:
        fn = optimize(lower_entry(model, entry, types, generics={"S": 4}))
        expected = {"start": (1, 3, AXIS)}  # iota(4) + start - 1 stays in 0..5
    else:
        fn = optimize(lowered(model, entry, types))
    found = {r.name: (r.low.value, r.high.value, r.low.reason) for r in index_ranges(fn, model)}
    assert found == expected
    for r in index_ranges(fn, model):
        assert r.low.reason == r.high.reason


def test_extents_without_a_model_are_numbers(model: BoundModel) -> None:
    fn = optimize(lowered(model, "write", [t((1, 1, 1, W), F), t((), I32)]))
    (found,) = index_ranges(fn)
    assert found.high.reason == "the cache holds 6 positions"


def test_ranges_are_exact_against_the_interpreter(model: BoundModel) -> None:
    """Each value the check accepts reads in bounds; the first one outside does not."""
    fn = optimize(lowered(model, "shifted", [t((), I32)]))
    checks = input_checks(fn, model)
    table = np.arange(ROWS * W, dtype=np.float32).reshape(ROWS, W)
    for i in range(-4, 6):
        value = np.array(i, np.int32)
        inside = -2 <= i <= 3
        if inside:
            check_inputs(checks, [value], "entry `shifted`")
            (out,), _ = run_function(fn, {"table": table}, {}, [value])
            np.testing.assert_array_equal(out, table[i + 2])
        else:
            with pytest.raises(LinnetError, match=r"outside -2\.\.3"):
                check_inputs(checks, [value], "entry `shifted`")
            assert not 0 <= i + 2 < ROWS  # a real out-of-bounds read
