"""Traced sizes (`linnet.ir.traced`) and the one-lowering dynamic path (`linnet.ir.dynamic_traced`).

The arithmetic is checked against the polynomials it must carry; the path is
checked with hand-built lowerings: one whose sizes all stay traced (two
lowerings, the table read off the traced one), and ones that lose a trace where
no hook sees it (NumPy, `int()` before the trace existed): the check lowering
must catch each, and the sampler must then fit what the trace missed, never bake
the sample's value into the graph.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping

import numpy as np
import pytest

from linnet.errors import LinnetError
from linnet.ir.core import Builder, Function, TensorType
from linnet.ir.dynamic import lower_dynamic
from linnet.ir.size_decisions import note, recording
from linnet.ir.symbolic import Poly, parse_poly
from linnet.ir.traced import Traced, dim_of, tracing

NAMES = ("B", "S")


def _traced(name: str, value: int) -> int:
    return Traced(value, Poly.var(NAMES, name))


def _poly(text: str) -> object:
    return parse_poly(text, NAMES)


def test_ring_operations_carry_their_polynomials() -> None:
    b, s = _traced("B", 3), _traced("S", 5)
    cases = [
        (b * s + 1, 16, "B*S + 1"),
        (2 * s - b, 7, "2*S + -1*B"),
        (s * s - s, 20, "S^2 + -1*S"),
        (s**2, 25, "S^2"),
        (-s + 10, 5, "-1*S + 10"),
        (sum([s, s, b]), 13, "2*S + B"),
        ((4 * s + 8) // 4, 7, "S + 2"),  # exact for every size
    ]
    for value, expected, poly in cases:
        assert type(value) is Traced
        assert value == expected
        assert dim_of(value) == _poly(poly)
    assert (s - s) == 0 and type(s - s) is int  # a constant is a plain int
    assert (2 * s + 1) % 2 == 1 and type((2 * s + 1) % 2) is int  # the same at every size
    assert abs(s) is s  # never negative


@pytest.mark.parametrize(
    "op",
    [
        lambda s: s // 4,
        lambda s: 8 // s,
        lambda s: -8 // s,
        lambda s: s / 2,
        lambda s: float(s),
        lambda s: int(s),
        lambda s: abs(s - 10),
        lambda s: s & 1,
        lambda s: s >> 1,
    ],
)
def test_what_no_polynomial_describes_is_plain_and_noted_lost(op: Callable[[int], object]) -> None:
    with tracing() as state:
        value = op(_traced("S", 5))
    assert type(value) is not Traced
    assert state.first_loss() is not None


def test_a_floor_division_a_noted_decision_guards_keeps_the_path() -> None:
    """`S / 4` noted as a decision becomes the guard `4 <= S < 8`: no trace is lost."""
    with tracing() as state, recording() as log:
        s = _traced("S", 5)
        quotient = s // 4
        again = s // 4  # the same value computed twice (a type and its expression)
        note("floor", "/", s, 4, quotient, "here")
    assert quotient == again == 1
    assert state.first_loss() is None
    assert [d.kind for d in log] == ["floor"]
    with tracing() as state:
        _traced("S", 5) // 4  # noted nowhere: lost
    assert state.first_loss() == "`5 // 4`"
    with tracing() as state, recording():  # `8 / S` noted: guarded the same way
        s = _traced("S", 5)
        note("floor", "/", 8, s, 8 // s, "here")
    assert state.first_loss() is None


def test_a_remainder_is_its_polynomial_between_the_thresholds_a_noted_decision_guards() -> None:
    """`S % 3` at 5 is `S - 3` while `S / 3` is 1 (the guard a noted `%` becomes);
    noted nowhere, no guard says so: lost."""
    with tracing() as state, recording() as log:
        s = _traced("S", 5)
        remainder = s % 3
        note("mod", "%", s, 3, remainder, "here")
    assert remainder == 2 and dim_of(remainder) == _poly("S + -3")
    assert state.first_loss() is None
    assert [d.kind for d in log] == ["mod"]
    with tracing() as state:
        _traced("S", 5) % 3
    assert state.first_loss() == "`5 % 3`"


def test_constants_keep_the_traces_of_the_ints_they_were_made_of() -> None:
    b = Builder.for_function([])
    with tracing() as state:
        made = b.const([_traced("S", 5) - 1, 7], "i32")
    (op,) = b.ops
    array = op.attrs["value"]
    assert made.type == TensorType((2,), "i32")
    assert array.tolist() == [4, 7] and array.dtype == np.int32
    assert state.const_dims(array) == (_poly("S + -1"), 7)
    assert state.lost is None


Lower = Callable[[Mapping[str, int]], Function]


def _entry(make_shape: Callable[[int], int]) -> Lower:
    """`f(x: [S]) -> (x, iota(n))` with `n = make_shape(S)` (the lowering's own
    computation of a size, traced or not)."""

    def lower_at(values: Mapping[str, int]) -> Function:
        s = values["S"]
        b = Builder.for_function([("x", TensorType((s,), "f32"))])
        return b.finish_function("f", [b.args[0], b.iota(make_shape(s))])

    return lower_at


def _fits(values: Mapping[str, int]) -> bool:
    return True


def test_an_entry_whose_sizes_stay_traced_is_lowered_twice() -> None:
    seen: list[int] = []
    inner = _entry(lambda s: s)

    def counted(values: Mapping[str, int]) -> Function:
        seen.append(int.__int__(values["S"]))
        return inner(values)

    fn, dims = lower_dynamic(counted, ["S"], _fits)
    assert dims.method == "traced" and dims.declined == ""
    assert len(seen) == 2 and seen[0] != seen[1]
    assert dims.shape(fn.results[1]) == (_poly_s("S"),)


def _poly_s(text: str) -> object:
    return parse_poly(text, ("S",))


@pytest.mark.parametrize(
    "bake",
    [
        lambda s: int(np.int64(s)),  # NumPy converts through `int()`: noted lost
        lambda s: int(np.asarray([s]).sum()),
        lambda s: operator.index(s),  # these drop the trace without a hook: caught
        lambda s: len(range(s)),  # by the check lowering
        lambda s: int(str(s)),
        lambda s: int.__int__(s),
    ],
)
def test_a_size_the_trace_misses_is_fitted_by_the_sampler_never_baked(
    bake: Callable[[int], int],
) -> None:
    fn, dims = lower_dynamic(_entry(bake), ["S"], _fits)
    assert dims.method == "sampled"
    assert "not traced" in dims.declined or "trace was lost" in dims.declined
    assert dims.shape(fn.results[1]) == (_poly_s("S"),)  # not the sample's 5


def test_a_size_the_trace_misses_that_no_polynomial_fits_is_refused() -> None:
    with pytest.raises(LinnetError, match="no polynomial"):
        lower_dynamic(_entry(lambda s: int(np.int64(s)) // 2 * 2), ["S"], _fits)


def test_a_traced_size_that_is_wrong_at_the_check_point_goes_to_the_sampler() -> None:
    """A lowering that pairs a traced size with the wrong value (here: the trace of `S`
    on `S + 1`): the check lowering disagrees, and the sampler fits the truth."""

    def wrong(s: int) -> int:
        if type(s) is Traced:
            return Traced(int.__int__(s) + 1, s.poly)
        return s + 1

    fn, dims = lower_dynamic(_entry(wrong), ["S"], _fits)
    assert dims.method == "sampled"
    assert "traced as `S`" in dims.declined
    assert dims.shape(fn.results[1]) == (_poly_s("S + 1"),)
