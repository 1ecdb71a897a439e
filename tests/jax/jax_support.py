"""Helpers for the JAX backend tests: run one IR function through generated JAX source.

The oracle is the NumPy reference interpreter (`linnet.ir.interp`); the
backend runs the same function as generated `jax.numpy` source under
`jax.jit` (`linnet.jax.codegen`), and as StableHLO text compiled by XLA
(`linnet.jax.stablehlo`). `check_together` compiles many one-op cases as one
function, since an XLA compile per case would dominate the run time. Integers and bools must agree bit for bit, floats
within the shared numeric contract (architecture.md "Backends").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pytest
from backend_cases import assert_close

from linnet.ir.core import Function, Op, Region, Value
from linnet.ir.interp import run_function

# The generated source runs under jax.jit; the StableHLO path also exports and reparses every
# case with XLA, so the whole op matrix there is a slow check (`make test-slow`); a
# one-function-per-op-family subset runs by default (test_jax_stablehlo.py).
MODES = ("source", pytest.param("stablehlo", marks=pytest.mark.slow))


def run_jax(
    fn: Function,
    inputs: Sequence[np.ndarray],
    mode: str,
    weights: Mapping[str, np.ndarray] | None = None,
    state: Mapping[str, np.ndarray] | None = None,
) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
    """Run `fn` on the JAX backend (`mode` source or stablehlo), NumPy in and out."""
    from linnet.jax.execute import run_function_jax

    return run_function_jax(fn, inputs, weights or {}, state or {}, stablehlo=mode == "stablehlo")


def check(
    fn: Function,
    inputs: Sequence[np.ndarray],
    mode: str,
    weights: Mapping[str, np.ndarray] | None = None,
    state: Mapping[str, np.ndarray] | None = None,
    *,
    scale: float = 1.0,
) -> list[np.ndarray]:
    """Compare the backend with the interpreter on one function; return the backend's results."""
    expected, expected_state = run_function(
        fn, dict(weights or {}), dict(state or {}), list(inputs)
    )
    actual, actual_state = run_jax(fn, inputs, mode, weights, state)
    for a, e, v in zip(actual, expected, fn.results, strict=True):
        assert a.shape == v.type.shape, (a.shape, v.type)
        assert_close(a, e, v.type.dtype, scale)
    for path, value in fn.state_updates.items():
        assert_close(actual_state[path], expected_state[path], value.type.dtype, scale)
    return actual


def check_together(
    cases: Sequence[tuple[Function, Sequence[np.ndarray]]], mode: str, *, scale: float = 1.0
) -> None:
    """`check` of several independent functions compiled as one (one XLA compile, not many).

    The functions' bodies are concatenated (their values are distinct objects,
    so the SSA form holds); each result is compared with the interpreter's and
    a mismatch names the function it came from and its position in `cases`.
    """
    inputs: list[tuple[str, Value]] = []
    args: list[Value] = []
    ops: list[Op] = []
    results: list[Value] = []
    arrays: list[np.ndarray] = []
    owners: list[str] = []
    for index, (fn, values) in enumerate(cases):
        inputs.extend(fn.inputs)
        args.extend(fn.body.args)
        ops.extend(fn.body.ops)
        results.extend(fn.results)
        arrays.extend(values)
        owners.extend(f"case {index} ({fn.name})" for _ in fn.results)
    body = Region(tuple(args), ops, tuple(results))
    together = Function("together", tuple(inputs), body, tuple(results), {})
    expected, _ = run_function(together, {}, {}, arrays)
    actual, _ = run_jax(together, arrays, mode)
    for a, e, v, owner in zip(actual, expected, results, owners, strict=True):
        try:
            assert a.shape == v.type.shape, (a.shape, v.type)
            assert_close(a, e, v.type.dtype, scale)
        except AssertionError as failure:
            raise AssertionError(f"{owner}: {failure}") from None
