"""Runtime `for` loops and scans exported to ONNX (language-extensions 1.5, decision 20).

Every entry of tests/scan_cases.py runs in onnxruntime against its NumPy f64
reference: a `Loop` with a trip count and scan outputs, the loop variable
`iteration_num + start`; a zero-length range emits no `Loop` (constant empty scan
results, carried values passed through).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from scan_cases import CASE_IDS, CASES, SOURCE, ScanCase, check_results

from linnet.onnx import export_function


def _loops(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    found = []
    for node in graph.node:
        if node.op_type == "Loop":
            found.append(node)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                found.extend(_loops(attr.g))
    return found


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_onnxruntime_matches_the_reference(case: ScanCase) -> None:
    exported = export_function(SOURCE, case.entry, generics=case.generics)
    session = exported.session()
    feeds = {i.name: np.asarray(x) for i, x in zip(session.get_inputs(), case.inputs, strict=True)}
    check_results(case, session.run(None, feeds))


def test_loop_has_a_trip_count_and_scan_outputs() -> None:
    (case,) = [c for c in CASES if c.id == "ramps"]
    model = export_function(SOURCE, "ramps", generics=case.generics).model
    onnx.checker.check_model(model, full_check=True)
    (loop,) = _loops(model.graph)
    assert len(loop.input) == 3 and len(loop.output) == 3  # trip, cond, one carried value
    body = loop.attribute[0].g
    assert [o.type.tensor_type.elem_type for o in body.output] == [
        onnx.TensorProto.BOOL,
        onnx.TensorProto.FLOAT,
        onnx.TensorProto.INT64,
        onnx.TensorProto.FLOAT,
    ]
    assert any(n.op_type == "Add" and n.input[0] == body.input[0].name for n in body.node)


@pytest.mark.parametrize("case_id", ["smooth_empty", "steps_between_empty", "rnn_empty"])
def test_zero_length_ranges_emit_no_loop(case_id: str) -> None:
    (case,) = [c for c in CASES if c.id == case_id]
    model = export_function(SOURCE, case.entry, generics=case.generics).model
    assert _loops(model.graph) == []


def test_nested_scans_nest_loops() -> None:
    (case,) = [c for c in CASES if c.id == "pair_sums"]
    model = export_function(SOURCE, "pair_sums", generics=case.generics).model
    assert len(_loops(model.graph)) == 2


@pytest.mark.parametrize("steps", [4, 0])
def test_state_assigned_in_a_scan(steps: int) -> None:
    from export_support import check
    from scan_cases import stateful_case

    fn, inputs, weights, state = stateful_case(steps)
    check(fn, inputs, weights, state)  # against the interpreter (tests/ir)


def test_dynamic_generics_give_a_runtime_trip_count() -> None:
    """`--dynamic`: bounds that vary with a dynamic generic are computed in the graph."""
    (smooth,) = [c for c in CASES if c.id == "smooth"]
    session = export_function(
        SOURCE, "smooth", generics={"Steps": 5, "D": 3}, dynamic=["Steps", "D"]
    ).session()
    rng = np.random.default_rng(1)
    for shape in ((7, 3), (2, 6), (1, 2)):
        xs = rng.standard_normal(shape).astype(np.float32)
        decay = np.asarray(np.float32(0.25))
        (got,) = session.run(None, {"xs": xs, "decay": decay})
        (expected,) = smooth.reference(xs, decay)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    session = export_function(SOURCE, "steps_between", generics={"N": 5}, dynamic=["N"]).session()
    for n in (6, 2, 1):
        x = rng.standard_normal(n).astype(np.float32)
        (got,) = session.run(None, {"x": x})
        assert got.shape == (n - 1,)
        np.testing.assert_allclose(got, np.diff(x), rtol=1e-6)
