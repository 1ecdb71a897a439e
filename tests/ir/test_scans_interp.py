"""Scans in the Core IR: the `for` op's rule and printer, and the NumPy reference interpreter
on every entry of tests/scan_cases.py against its independent f64 reference."""

from __future__ import annotations

import numpy as np
import pytest
from scan_cases import CASE_IDS, CASES, SOURCE, ScanCase, check_results

from linnet.errors import InternalError
from linnet.ir.core import Builder, Region, TensorType
from linnet.ir.interp import run_function
from linnet.ir.ops import infer
from linnet.ir.printer import print_function
from linnet.ir.verify import verify
from linnet.pipeline import check_source, compile_entry
from linnet.target import Target

PROGRAM = check_source(SOURCE)


def compiled(case: ScanCase, optimized: bool = True):  # type: ignore[no-untyped-def]
    target = Target(entry=case.entry, generics=case.generics)
    return compile_entry(PROGRAM, target, optimized=optimized).function


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("optimized", [True, False], ids=["optimized", "unoptimized"])
def test_interpreter_matches_the_reference(case: ScanCase, optimized: bool) -> None:
    fn = compiled(case, optimized)
    verify(fn)
    results, _ = run_function(fn, {}, {}, list(case.inputs))
    check_results(case, results)


def test_printed_for_op() -> None:
    (case,) = [c for c in CASES if c.id == "ramps"]
    text = print_function(compiled(case))
    assert "= for %0 {start=2, stop=5} : f32[3], i64[3], f32[3,3]" in text
    assert "body(%4: i64[], %5: f32[3]):" in text


def _body(carried: list[TensorType], rows: list[TensorType]) -> Region:
    b = Builder.for_function(
        [("i", TensorType((), "i64"))] + [(f"c{k}", t) for k, t in enumerate(carried)]
    )
    index, *values = b.args
    out = [
        b.cast(index, r.dtype) if r.rank == 0 else b.broadcast(b.cast(index, r.dtype), r.shape)
        for r in rows
    ]
    return Region(b.args, b.ops, (*values, *out))


def test_rule_stacks_rows_after_the_carried_values() -> None:
    f32 = TensorType((2,), "f32")
    body = _body([f32], [TensorType((), "i32"), TensorType((3,), "f64")])
    types = infer("for", [f32], {"start": 1, "stop": 4}, [body], None)
    assert types == (f32, TensorType((3,), "i32"), TensorType((3, 3), "f64"))


def test_rule_rejects_malformed_loops() -> None:
    f32 = TensorType((2,), "f32")
    with pytest.raises(InternalError, match="below start"):
        infer("for", [f32], {"start": 3, "stop": 1}, [_body([f32], [])], None)
    with pytest.raises(InternalError, match="region args"):
        infer("for", [], {"start": 0, "stop": 1}, [_body([f32], [])], None)
    with pytest.raises(InternalError, match="should start with"):
        body = _body([f32], [])
        infer("for", [f32], {"start": 0, "stop": 1}, [Region(body.args, body.ops, ())], None)


def test_zero_rows_have_the_declared_shape_and_dtype() -> None:
    (case,) = [c for c in CASES if c.id == "rnn_empty"]
    (hs, h), _ = run_function(compiled(case), {}, {}, list(case.inputs))
    assert hs.shape == (0, 4) and hs.dtype == np.float32
    np.testing.assert_array_equal(h, case.inputs[-1])  # the carried value passes through


@pytest.mark.parametrize("steps", [4, 0])
def test_state_assigned_in_a_scan(steps: int) -> None:
    from scan_cases import stateful_case, stateful_reference

    fn, inputs, weights, state = stateful_case(steps)
    verify(fn)
    (result,), new_state = run_function(fn, weights, state, inputs)
    expected, expected_state = stateful_reference(inputs, weights, state)
    np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(new_state["total"], expected_state["total"], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(new_state["steps"], expected_state["steps"])
