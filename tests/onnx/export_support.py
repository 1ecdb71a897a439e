"""Helpers for the ONNX exporter tests: export an IR function, run it in ONNX Runtime, compare.

The oracle is the NumPy reference interpreter (`linnet.ir.interp`); ONNX
Runtime runs our exported graph, fed by graph input name (the contract of
`linnet.onnx.export.assemble`). Integers and bools must agree bit for bit,
floats within the shared numeric contract (architecture.md "Backends").
Every exported model also passes `onnx.checker` (full check, with shape
inference) unless it uses a contrib kernel, and its text form must parse back.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.checker
from backend_cases import INTS, assert_close
from onnx import helper, numpy_helper

from linnet.check.checker import check_graph
from linnet.check.modules import load_source
from linnet.check.program import CheckedProgram
from linnet.ir.core import Function
from linnet.ir.interp import run_function
from linnet.onnx import ExportedModel, export_ir, model_from_text

ROOT = Path(__file__).resolve().parents[2]
STDLIB = ROOT / "stdlib"

FLOATS = ("f16", "f32", "f64")  # bf16 needs the CUDA provider (tests/onnx/test_export_dtypes.py)
ALL = ("bool", *INTS, *FLOATS)

Array = np.ndarray[Any, Any]


def checked(text: str) -> CheckedProgram:
    """Check `text` (dedented) as the root module; it must be free of errors."""
    graph = load_source(textwrap.dedent(text).lstrip("\n"), "t.linnet", STDLIB)
    assert not graph.has_errors, [(d.code, d.message) for d in graph.diagnostics]
    program = check_graph(graph)
    errors = [(d.code, d.message) for d in program.diagnostics if d.is_error]
    assert not errors, errors
    return program


def validate(exported: ExportedModel, *, contrib: bool = False) -> None:
    """`onnx.checker` (unless contrib kernels are used) and the text round trip."""
    if not contrib:
        onnx.checker.check_model(exported.model, full_check=True)
    reparsed = model_from_text(exported.text())
    assert normalized(reparsed) == normalized(exported.model)


def _tensor(t: onnx.TensorProto) -> tuple[object, ...]:
    array = numpy_helper.to_array(t)
    return (t.name, t.data_type, tuple(t.dims), array.tobytes())


def _attribute(a: onnx.AttributeProto) -> tuple[object, ...]:
    value = helper.get_attribute_value(a)
    if isinstance(value, onnx.TensorProto):
        value = _tensor(value)
    elif isinstance(value, onnx.GraphProto):
        value = _graph(value)
    elif isinstance(value, list):
        value = tuple(value)
    return (a.name, value)


def _graph(g: onnx.GraphProto) -> tuple[object, ...]:
    nodes = tuple(
        (n.op_type, n.domain, tuple(n.input), tuple(n.output), tuple(map(_attribute, n.attribute)))
        for n in g.node
    )
    io = tuple(i.SerializeToString() for i in (*g.input, *g.output))
    return (g.name, nodes, io, tuple(map(_tensor, g.initializer)))


def normalized(model: onnx.ModelProto) -> tuple[object, ...]:
    """A comparable form of a model: tensors by value, not by storage field."""
    props = tuple((p.key, p.value) for p in model.metadata_props)
    opsets = tuple((o.domain, o.version) for o in model.opset_import)
    return (model.ir_version, opsets, props, model.producer_name, _graph(model.graph))


def run_onnx(
    exported: ExportedModel,
    inputs: Sequence[Array],
    weights: Mapping[str, Array] | None = None,
    state: Mapping[str, Array] | None = None,
) -> tuple[list[Array], dict[str, Array]]:
    """Run the exported model on the CPU provider: results in order, new state by path."""
    feeds: dict[str, Array] = {}
    for io in exported.graph_inputs:
        if io.role == "input":
            index = [i.name for i in exported.inputs if i.role == "input"].index(io.name)
            feeds[io.name] = np.asarray(inputs[index])
        elif io.role == "param":
            feeds[io.name] = np.asarray((weights or {})[io.path or ""])
        else:
            feeds[io.name] = np.asarray((state or {})[io.path or ""])
    session = exported.session("cpu")
    names = [io.name for io in exported.outputs]
    values = dict(zip(names, session.run(names, feeds), strict=True))
    results = [values[io.name] for io in exported.outputs if io.role == "output"]
    new_state = {
        io.path or "": values[io.name] for io in exported.outputs if io.role == "next_state"
    }
    return results, new_state


def check(
    fn: Function,
    inputs: Sequence[Array],
    weights: Mapping[str, Array] | None = None,
    state: Mapping[str, Array] | None = None,
    *,
    scale: float = 1.0,
    embed: bool = False,
    **options: Any,
) -> ExportedModel:
    """Export `fn`, validate it, run it in ONNX Runtime and compare with the interpreter."""
    expected, expected_state = run_function(
        fn, dict(weights or {}), dict(state or {}), list(inputs)
    )
    exported = export_ir(fn, weights=weights if embed else None, **options)
    validate(exported, contrib=bool(options.get("fused")))
    actual, actual_state = run_onnx(exported, inputs, weights, state)
    for a, e, v in zip(actual, expected, fn.results, strict=True):
        assert_close(a, e, v.type.dtype, scale)
    for path, value in fn.state_updates.items():
        assert_close(actual_state[path], expected_state[path], value.type.dtype, scale)
    return exported
