"""ONNX `Loop` with a constant trip count imports as a Linnet runtime `for` (a scan
when it has scan outputs), checked against ONNX Runtime on the original model,
and every scan of tests/scan_cases.py exported to ONNX imports back to a `for`
that equals its NumPy f64 reference."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from scan_cases import CASES, SOURCE, ScanCase, check_results  # noqa: E402

import linnet.torch as lt  # noqa: E402
from linnet.onnx import export_function  # noqa: E402
from linnet.onnx.importer.api import import_onnx  # noqa: E402

RNG = np.random.default_rng(3)


def _loop_model(steps: int, cond_body: str, backwards: bool = False) -> Any:
    """`h = tanh(h * w + xs[i])` for `i` in `0..steps`, each `h` stacked; the body's
    condition is `cond_body` ("pass": the incoming flag; "const": a constant true).
    `backwards` reads row `steps - 1 - i` instead (a reverse RNN)."""
    f = TensorProto.FLOAT
    body_nodes = []
    row_index = "i"
    if backwards:
        last = helper.make_tensor("last", TensorProto.INT64, [], [steps - 1])
        body_nodes += [
            helper.make_node("Constant", [], ["last"], value=last),
            helper.make_node("Sub", ["last", "i"], ["back"]),
        ]
        row_index = "back"
    body_nodes += [
        helper.make_node("Gather", ["xs", row_index], ["row"], axis=0),
        helper.make_node("Mul", ["h_in", "w"], ["hw"]),
        helper.make_node("Add", ["hw", "row"], ["pre"]),
        helper.make_node("Tanh", ["pre"], ["h_out"]),
        helper.make_node("Identity", ["h_out"], ["h_scan"]),
    ]
    if cond_body == "pass":
        body_nodes.append(helper.make_node("Identity", ["cond_in"], ["cond_out"]))
    else:
        value = helper.make_tensor("t", TensorProto.BOOL, [], [True])
        body_nodes.append(helper.make_node("Constant", [], ["cond_out"], value=value))
    body = helper.make_graph(
        body_nodes,
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("h_in", f, [4]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("h_out", f, [4]),
            helper.make_tensor_value_info("h_scan", f, [4]),
        ],
    )
    trip = numpy_helper.from_array(np.array(steps, dtype=np.int64), "trip")
    cond = numpy_helper.from_array(np.array(True), "cond")
    w = numpy_helper.from_array(RNG.standard_normal(4).astype(np.float32) * 0.5, "w")
    loop = helper.make_node("Loop", ["trip", "cond", "h0"], ["h_last", "hs"], body=body)
    graph = helper.make_graph(
        [loop],
        "g",
        [
            helper.make_tensor_value_info("xs", f, [steps, 4]),
            helper.make_tensor_value_info("h0", f, [4]),
        ],
        [
            helper.make_tensor_value_info("h_last", f, [4]),
            helper.make_tensor_value_info("hs", f, [steps, 4]),
        ],
        initializer=[trip, cond, w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


@pytest.mark.parametrize(("cond_body", "backwards"),
                         [("pass", False), ("const", False), ("pass", True)])  # fmt: skip
def test_counted_loop_with_scan_output_is_a_for(
    tmp_path: Path, cond_body: str, backwards: bool
) -> None:
    import onnxruntime as ort

    steps = 300  # unrolled, 300 copies of the body; as a loop, one
    model = _loop_model(steps, cond_body, backwards)
    feeds = {
        "xs": RNG.standard_normal((steps, 4)).astype(np.float32),
        "h0": RNG.standard_normal(4).astype(np.float32),
    }
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)
    result = import_onnx(model, output=tmp_path / "m.linnet", weights=tmp_path / "w")
    assert len(re.findall(rf"= for \w+ in 0\.\.{steps} \{{", result.source)) == 1, result.source
    assert result.source.count("tanh(") == 1 and "yield" in result.source
    bindings = tmp_path / "w" / "bindings.json"
    module = lt.load(
        result.source,
        weights=result.weights if result.weights and result.weights.exists() else None,
        bindings=bindings if bindings.exists() else None,
    )
    with torch.no_grad():
        out = module.run_entry(result.entry, [torch.from_numpy(v) for v in feeds.values()])
    for got, want in zip(out, expected, strict=True):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


LOOPED = [c for c in CASES if not c.id.endswith("_empty")]


@pytest.mark.parametrize("case", LOOPED, ids=[c.id for c in LOOPED])
def test_exported_scans_import_back_as_for_loops(case: ScanCase, tmp_path: Path) -> None:
    model = export_function(SOURCE, case.entry, generics=case.generics).model
    result = import_onnx(model, output=tmp_path / "m.linnet", weights=tmp_path / "w")
    loops = len(re.findall(r"\bfor \w+ in \d+\.\.\d+ \{", result.source))
    assert loops == (2 if case.entry == "pair_sums" else 1), result.source
    bindings = tmp_path / "w" / "bindings.json"
    module = lt.load(
        result.source,
        weights=result.weights if result.weights and result.weights.exists() else None,
        bindings=bindings if bindings.exists() else None,
    )
    with torch.no_grad():
        out = module.run_entry(result.entry, [torch.from_numpy(np.asarray(x)) for x in case.inputs])
    outs = out if isinstance(out, tuple) else (out,)
    check_results(case, [o.numpy() for o in outs])
