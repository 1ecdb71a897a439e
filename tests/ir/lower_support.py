"""Helpers for the binding and lowering tests: check, bind, lower, verify, run.

Every lowered function goes through the verifier, and is also run after the
optimizing passes (with the verifier between passes), so each test compares
the raw lowering and the optimized IR against its NumPy f64 reference.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from linnet.check.checker import check_graph
from linnet.check.modules import load_source
from linnet.check.program import CheckedProgram
from linnet.ir.bind import BoundModel, bind
from linnet.ir.core import Function, TensorType, numpy_dtype
from linnet.ir.interp import run_function
from linnet.ir.lower import lower_entry, lower_function
from linnet.ir.passes import optimize
from linnet.ir.verify import verify

ROOT = Path(__file__).resolve().parents[2]
STDLIB = ROOT / "stdlib"

Array = np.ndarray[Any, Any]


def checked(text: str) -> CheckedProgram:
    """Check `text` (dedented) as the root module; it must be free of errors."""
    graph = load_source(textwrap.dedent(text).lstrip("\n"), "t.linnet", STDLIB)
    assert not graph.has_errors, [(d.code, d.message) for d in graph.diagnostics]
    program = check_graph(graph)
    errors = [(d.code, d.message) for d in program.diagnostics if d.is_error]
    assert not errors, errors
    return program


def bound(
    text: str, generics: Mapping[str, object] | None = None, root: str | None = None
) -> BoundModel:
    return bind(checked(text), root=root, generics=generics or {})


def t(shape: Sequence[int], dtype: str = "f32") -> TensorType:
    return TensorType(tuple(shape), dtype)


def lowered(
    model: BoundModel,
    entry: str,
    inputs: Sequence[TensorType],
    present: Iterable[str] | None = None,
) -> Function:
    """Lower an entry (all params present by default) and verify it."""
    available = set(model.tensors) if present is None else set(present)
    fn = lower_entry(model, entry, inputs, available)
    verify(fn)
    return fn


def module_function(text: str, name: str, inputs: Sequence[TensorType]) -> Function:
    program = checked(text)
    fn = lower_function(program, "t", name, inputs)
    verify(fn)
    return fn


def execute(
    fn: Function,
    inputs: Sequence[object],
    params: Mapping[str, object] | None = None,
    state: Mapping[str, object] | None = None,
) -> tuple[list[Array], dict[str, Array]]:
    """Run `fn` raw and optimized; both must agree exactly. Returns the raw run."""
    results, new_state = run_function(fn, params or {}, state or {}, inputs)
    fast = optimize(fn, check=True)
    results2, state2 = run_function(fast, params or {}, state or {}, inputs)
    for a, b in zip(results, results2, strict=True):
        np.testing.assert_array_equal(a, b)
    for path in new_state:
        np.testing.assert_array_equal(new_state[path], state2[path])
    return results, new_state


def weights(model: BoundModel, rng: np.random.Generator, scale: float = 1.0) -> dict[str, Array]:
    """Random params/buffers for every tensor of a bound model (state excluded)."""
    out: dict[str, Array] = {}
    for path, bt in model.tensors.items():
        if bt.kind != "state":
            out[path] = random_array(rng, bt.type, scale)
    return out


def random_array(rng: np.random.Generator, tt: TensorType, scale: float = 1.0) -> Array:
    dtype = numpy_dtype(tt.dtype)
    if tt.dtype == "bool":
        return rng.random(tt.shape) < 0.5
    if tt.dtype.startswith(("i", "u")):
        return rng.integers(0, 5, tt.shape).astype(dtype)
    return (rng.standard_normal(tt.shape) * scale).astype(dtype)


def kinds(fn: Function) -> list[str]:
    """Every op kind in `fn`, nested regions included, in order."""
    out: list[str] = []

    def walk(ops: Iterable[Any]) -> None:
        for op in ops:
            out.append(op.kind)
            for region in op.regions:
                walk(region.ops)

    walk(fn.body.ops)
    return out


def close(actual: Array, expected: Array, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    np.testing.assert_allclose(np.asarray(actual, np.float64), expected, rtol=rtol, atol=atol)
