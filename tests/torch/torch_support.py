"""Helpers for the PyTorch backend tests: run one IR function three ways and compare.

The oracle is the NumPy reference interpreter (`linnet.ir.interp`); the backend
runs the same function interpreted (`Runner`) and as generated source
(`generate`). Integers and bools must agree bit for bit, floats within the
shared numeric contract (architecture.md "Backends").
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from backend_cases import INTS, assert_close

from linnet.ir.core import Function
from linnet.ir.interp import run_function
from linnet.torch.codegen import generate
from linnet.torch.dtypes import to_numpy, to_torch
from linnet.torch.runner import Runner

MODES = ("runner", "codegen")
CPU = torch.device("cpu")
# The op, native and control-flow tests run on this device (CUDA checks set it to "cuda").
DEVICE = torch.device(os.environ.get("LINNET_TEST_DEVICE", "cpu"))

# Relative tolerances per float dtype (f32: the 1e-5 contract).
FLOATS = ("f16", "bf16", "f32", "f64")
ALL = ("bool", *INTS, *FLOATS)


def run_torch(
    fn: Function,
    inputs: Sequence[np.ndarray],
    mode: str,
    weights: Mapping[str, np.ndarray] | None = None,
    state: Mapping[str, np.ndarray] | None = None,
    *,
    dtypes: Mapping[str, str] | None = None,
    natives: bool = True,
) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
    """Run `fn` on the PyTorch backend (`mode` runner or codegen), NumPy in and out.

    `dtypes` gives the Linnet dtype of each weight/state path (inferred from NumPy otherwise).
    """
    from linnet.ir.core import dtype_of_numpy

    def dtype_of(path: str, array: np.ndarray) -> str:
        return (dtypes or {}).get(path) or dtype_of_numpy(array.dtype)

    w = {p: to_torch(a, dtype_of(p, a), DEVICE) for p, a in (weights or {}).items()}
    s = {p: to_torch(a, dtype_of(p, a), DEVICE) for p, a in (state or {}).items()}
    tensors = [
        to_torch(a, v.type.dtype, DEVICE) for a, (_, v) in zip(inputs, fn.inputs, strict=True)
    ]
    if mode == "runner":
        results, updates = Runner(fn, DEVICE, hoist_weights=True, natives=natives)(w, s, tensors)
    else:
        gen = generate(fn, DEVICE, hoist_weights=True, natives=natives)
        hoisted = gen.prologue(w) if gen.prologue is not None else ()
        results, updates = gen.entry(w, s, hoisted, *tensors)
    out = [to_numpy(r, v.type.dtype) for r, v in zip(results, fn.results, strict=True)]
    for r, v in zip(out, fn.results, strict=True):
        assert r.shape == v.type.shape, (r.shape, v.type)
    new_state = {p: to_numpy(t, fn.state_updates[p].type.dtype) for p, t in updates.items()}
    return out, new_state


def check(
    fn: Function,
    inputs: Sequence[np.ndarray],
    mode: str,
    weights: Mapping[str, np.ndarray] | None = None,
    state: Mapping[str, np.ndarray] | None = None,
    *,
    scale: float = 1.0,
    natives: bool = True,
) -> list[np.ndarray]:
    """Compare the backend with the interpreter on one function; return the backend's results."""
    expected, expected_state = run_function(
        fn, dict(weights or {}), dict(state or {}), list(inputs)
    )
    actual, actual_state = run_torch(fn, inputs, mode, weights, state, natives=natives)
    for a, e, v in zip(actual, expected, fn.results, strict=True):
        assert_close(a, e, v.type.dtype, scale)
    for path, value in fn.state_updates.items():
        assert_close(actual_state[path], expected_state[path], value.type.dtype, scale)
    return actual
