"""Helpers for the ONNX exporter tests: export an IR function, run it in ONNX Runtime, compare.

The oracle is the NumPy reference interpreter (`linnet.ir.interp`); ONNX
Runtime runs our exported graph, fed by graph input name (the contract of
`linnet.onnx.export_assemble`). Integers and bools must agree bit for bit,
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
from onnx import helper, numpy_helper

from linnet.check.checker import check_graph
from linnet.check.modules import load_source
from linnet.check.program import CheckedProgram
from linnet.ir.core import Function, numpy_dtype
from linnet.ir.interp import run_function
from linnet.onnx import ExportedModel, export_ir, model_from_text

ROOT = Path(__file__).resolve().parents[2]
STDLIB = ROOT / "stdlib"

RTOL = {"f16": 2e-3, "bf16": 1.6e-2, "f32": 1e-5, "f64": 1e-12}
ATOL = {"f16": 1e-3, "bf16": 1e-2, "f32": 1e-6, "f64": 1e-12}

INT_RANGES = {
    "i8": (-(2**7), 2**7 - 1),
    "i16": (-(2**15), 2**15 - 1),
    "i32": (-(2**31), 2**31 - 1),
    "i64": (-(2**63), 2**63 - 1),
    "u8": (0, 2**8 - 1),
    "u16": (0, 2**16 - 1),
    "u32": (0, 2**32 - 1),
    "u64": (0, 2**64 - 1),
}
INTS = tuple(INT_RANGES)
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


def assert_close(actual: Array, expected: Array, dtype: str, scale: float = 1.0) -> None:
    """Exact for ints/bools, within the dtype's tolerance for floats (NaNs must match)."""
    assert actual.dtype == numpy_dtype(dtype), (actual.dtype, dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    if dtype in RTOL:
        np.testing.assert_allclose(
            actual.astype(np.float64),
            expected.astype(np.float64),
            rtol=RTOL[dtype] * scale,
            atol=ATOL[dtype] * scale,
            equal_nan=True,
        )
    else:
        np.testing.assert_array_equal(actual, expected)


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


def random_array(rng: np.random.Generator, dtype: str, shape: tuple[int, ...], **kw: Any) -> Array:
    """Random data of `dtype`: ints over the whole range with the extremes, floats in [lo, hi)."""
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype in INT_RANGES:
        lo, hi = kw.get("int_range", INT_RANGES[dtype])
        values = rng.integers(lo, hi, size=shape, endpoint=True, dtype=numpy_dtype(dtype))
        flat = values.reshape(-1)
        if "int_range" not in kw and flat.size >= 2:
            flat[0], flat[1] = lo, hi
        return values
    lo, hi = kw.get("float_range", (-4.0, 4.0))
    return rng.uniform(lo, hi, size=shape).astype(numpy_dtype(dtype))
