"""Helpers for the standard-library tests: run std items on every backend, compare with a reference.

Each test module writes one tiny Linnet module whose module-level entries
(language.md 11.7) wrap std calls, so the generics bind from the inputs.
`StdCases` checks that module once, then runs an entry

- on the NumPy reference interpreter: `linnet.pipeline.lower_module_entry`,
  `optimize`, `linnet.ir.interp.run_function` (lowered once per input types);
- on the PyTorch backend through `linnet.torch.load_function`, interpreted
  and as generated source (`compile=True`), with the backend's native kernels
  enabled, as a user gets it.

`expect` compares every backend's results with an independent reference
(NumPy f64 or PyTorch) written from stdlib.md, never from the Linnet bodies.
`StdBlock` does the same for a root block around std blocks, with weights
bound by path (`pipeline.bind` + `lower` against `linnet.torch.load`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

import linnet.torch as lt
from linnet.check.program import CheckedProgram
from linnet.ir.core import Function, TensorType, dtype_of_numpy
from linnet.ir.interp import run_function
from linnet.pipeline import bind, check_source, lower, lower_module_entry, optimize
from linnet.torch.dtypes import to_numpy
from linnet.torch.function import LinnetFunction

ROOT = Path(__file__).resolve().parents[2]
STDLIB = ROOT / "stdlib"

Array = np.ndarray[Any, Any]
Runs = dict[str, list[Array]]

BF16 = np.dtype(ml_dtypes.bfloat16)
F32_RTOL = 1e-5
"""The f32 contract: results within 1e-5 relative of the f64 reference."""

DEVICE = os.environ.get("LINNET_TEST_DEVICE", "cpu")
"""Where the PyTorch backend runs (tests/torch's variable: `cuda` on a GPU machine)."""


def checked(text: str, path: str = "cases.linnet") -> CheckedProgram:
    """Check `text` against the repository's stdlib; it must have no diagnostics at all."""
    program = check_source(text, path, STDLIB)
    found = [(d.code, d.message) for d in program.diagnostics]
    assert not found, found
    return program


def as_array(value: object) -> Array:
    """An entry input as a NumPy array; Python scalars must already carry a dtype."""
    array = np.asarray(value)
    assert array.dtype != np.dtype(object), value
    return array


def input_type(array: Array) -> TensorType:
    return TensorType(tuple(array.shape), dtype_of_numpy(array.dtype))


def torch_results(out: object, fn: Function) -> list[Array]:
    import torch

    tensors = out if isinstance(out, tuple) else (out,)
    results: list[Array] = []
    for tensor, value in zip(tensors, fn.results, strict=True):
        assert isinstance(tensor, torch.Tensor)
        results.append(to_numpy(tensor, value.type.dtype))
    return results


class StdCases:
    """A checked Linnet module of module-level entries, run on every backend."""

    def __init__(self, text: str, module: str = "cases") -> None:
        self.module = module
        self.program = checked(text, f"{module}.linnet")
        self._lowered: dict[tuple[object, ...], Function] = {}
        self._functions: dict[tuple[str, bool], LinnetFunction] = {}

    def lowered(
        self, name: str, types: Sequence[TensorType], generics: Mapping[str, object] | None
    ) -> Function:
        key = (name, tuple(types), tuple(sorted((generics or {}).items())))
        fn = self._lowered.get(key)
        if fn is None:
            raw = lower_module_entry(self.program, self.module, name, types, generics=generics)
            fn = self._lowered[key] = optimize(raw, check=True)
        return fn

    def function(self, name: str, compiled: bool) -> LinnetFunction:
        found = self._functions.get((name, compiled))
        if found is None:
            found = lt.load_function(
                self.program, name, module=self.module, device=DEVICE, compile=compiled
            )
            self._functions[(name, compiled)] = found
        return found

    def run(
        self, name: str, inputs: Sequence[object], generics: Mapping[str, object] | None = None
    ) -> Runs:
        """Every backend's results of entry `name` (NumPy arrays in the result dtypes)."""
        arrays = [as_array(v) for v in inputs]
        fn = self.lowered(name, [input_type(a) for a in arrays], generics)
        runs: Runs = {"numpy": run_function(fn, {}, {}, arrays)[0]}
        for backend, compiled in (("torch", False), ("torch-compiled", True)):
            out = self.function(name, compiled).call(arrays, generics=generics)
            runs[backend] = torch_results(out, fn)
        for backend, results in runs.items():
            for got, value in zip(results, fn.results, strict=True):
                assert got.shape == value.type.shape, (name, backend, got.shape, value.type)
        return runs

    def result_dtypes(
        self, name: str, inputs: Sequence[object], generics: Mapping[str, object] | None = None
    ) -> list[str]:
        arrays = [as_array(v) for v in inputs]
        fn = self.lowered(name, [input_type(a) for a in arrays], generics)
        return [v.type.dtype for v in fn.results]

    def expect(
        self,
        name: str,
        inputs: Sequence[object],
        expected: Sequence[object],
        *,
        generics: Mapping[str, object] | None = None,
        rtol: float = F32_RTOL,
        atol: float = 1e-6,
    ) -> Runs:
        """Run `name` everywhere and compare each result with `expected` (see `assert_matches`)."""
        runs = self.run(name, inputs, generics)
        for backend, results in runs.items():
            assert len(results) == len(expected), (name, backend)
            for index, (got, want) in enumerate(zip(results, expected, strict=True)):
                assert_matches(got, want, rtol, atol, f"{name} result {index} on {backend}")
        return runs


class StdBlock:
    """A checked root block (around std blocks) with weights bound by path."""

    def __init__(self, text: str, root: str, module: str = "cases") -> None:
        self.program = checked(text, f"{module}.linnet")
        self.root = root

    def run(
        self,
        generics: Mapping[str, object],
        weights: Mapping[str, Array],
        inputs: Sequence[object],
        entry: str = "forward",
    ) -> Runs:
        arrays = [as_array(v) for v in inputs]
        model = bind(self.program, root=self.root, generics=generics)
        fn = lower(model, entry, [input_type(a) for a in arrays], frozenset(weights))
        fn = optimize(fn, check=True)
        runs: Runs = {"numpy": run_function(fn, dict(weights), {}, arrays)[0]}
        for backend, compiled in (("torch", False), ("torch-compiled", True)):
            module = lt.load(
                self.program,
                generics=generics,
                weights=weights,
                root=self.root,
                device=DEVICE,
                compile=compiled,
            )
            runs[backend] = torch_results(module.run_entry(entry, arrays), fn)
        return runs

    def expect(
        self,
        generics: Mapping[str, object],
        weights: Mapping[str, Array],
        inputs: Sequence[object],
        expected: Sequence[object],
        *,
        rtol: float = F32_RTOL,
        atol: float = 1e-6,
    ) -> Runs:
        runs = self.run(generics, weights, inputs)
        for backend, results in runs.items():
            assert len(results) == len(expected), backend
            for index, (got, want) in enumerate(zip(results, expected, strict=True)):
                assert_matches(got, want, rtol, atol, f"{self.root} result {index} on {backend}")
        return runs


def assert_matches(got: Array, want: object, rtol: float, atol: float, what: str) -> None:
    """Integers and booleans bit for bit; floats within `rtol`/`atol` of the f64 reference."""
    expected = np.asarray(want)
    assert got.shape == expected.shape, (what, got.shape, expected.shape)
    if got.dtype.kind in "iub":
        assert expected.dtype.kind in "iub", (what, expected.dtype)
        np.testing.assert_array_equal(got.astype(np.int64), expected.astype(np.int64), what)
        return
    actual = np.asarray(got, np.float64)
    assert np.all(np.isfinite(actual)), what
    np.testing.assert_allclose(actual, np.asarray(expected, np.float64), rtol, atol, err_msg=what)


def normal(rng: np.random.Generator, shape: Sequence[int], dtype: Any = np.float32) -> Array:
    """Standard normal samples (never all zeros) in `dtype`."""
    return rng.standard_normal(tuple(shape)).astype(dtype)


def f64(array: Array) -> Array:
    return np.asarray(array, np.float64)


def native_kernels(fn: Function) -> dict[str, Any]:
    """The `linnet.torch` native kernel chosen for each std `call` in `fn`, by callee."""
    import torch

    from linnet.torch.analysis import walk
    from linnet.torch.natives import find_native
    from linnet.torch.ops import Context

    context = Context.of(walk(fn.body), torch.device(DEVICE))
    found: dict[str, Any] = {}
    for op in walk(fn.body):
        if op.kind == "call":
            native = find_native(op, context)
            if native is not None:
                found[str(op.attrs["callee"])] = native
    return found


def exact_gelu(x: Array) -> Array:
    """`x * Phi(x)` in f64 with the true erf."""
    import math

    xf = f64(x)
    erf = np.vectorize(math.erf, otypes=[np.float64])
    return 0.5 * xf * (1.0 + erf(xf / math.sqrt(2.0)))
