"""Struct construction programs and helpers shared by the backend tests of language-extensions
section 2 (tests/ir/test_structs.py: the interpreter, linnet.torch, ONNX Runtime;
tests/jax/test_jax_structs.py: linnet.jax).

The reference is the NumPy interpreter (`linnet.ir.interp`) on the lowered entry; results
compare leaf by leaf (dtype, shape, values), and `nesting` says how a Python backend nested
them (a struct is the tuple of its fields in declaration order).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from linnet.ir.core import TensorType, dtype_of_numpy
from linnet.ir.interp import run_function
from linnet.pipeline import check_program, lower_module_entry

CONFORMANCE = Path(__file__).parent / "conformance/valid"
# language-extensions 2.4 (summarize, clipped_spread, describe)
SOURCE = (CONFORMANCE / "x_struct_examples.linnet").read_text()
MORE = (CONFORMANCE / "x_struct_more.linnet").read_text()
VALUES = (CONFORMANCE / "x2_struct_values.linnet").read_text()
X = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
V = np.array([1.0, -2.0, 3.0, 0.5], np.float32)
# An entry with a struct parameter: not specified at the boundary (2.3), refused by name.
STRUCT_PARAMETER = """module boundary

struct Pair {
    a: Tensor[2; f32]
    b: Tensor[2; f32]
}

pub entry f(p: Pair) -> Tensor[2; f32] {
    return p.a + p.b
}
"""
# entry of VALUES -> (inputs, the entry's generics for an ONNX export, the result's nesting)
VALUE_CASES: dict[str, tuple[list[np.ndarray], dict[str, object], object]] = {
    "optional": ([V], {"N": 4}, "*"),
    "branch": ([V, np.array(False)], {"N": 4}, ("*", "*", "*")),
    "looped": ([V, np.array(3, np.int64)], {"N": 4}, (("*", "*", "*"), "*")),
    "optional_fields": ([V], {}, "*"),
    "wrapped": ([V], {}, ((("*", "*"),), "*")),
    "shifted": ([np.arange(5, dtype=np.float32), V], {}, ("*", "*")),
    "packed": ([V.reshape(2, 2), np.array(1.5, np.float32)], {"S": [2, 2]}, (("*", "*"), "*")),
}


def interpret(source: str, entry: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The NumPy reference interpreter's flat results for a module-level entry."""
    program = check_program(source)
    types = [TensorType(a.shape, dtype_of_numpy(a.dtype)) for a in inputs]
    fn = lower_module_entry(program, program.graph.roots[0], entry, types)
    results, _ = run_function(fn, {}, {}, inputs)
    return results


def nesting(value: object) -> object:
    """`*` for a leaf, a tuple of nestings for a tuple."""
    return tuple(nesting(v) for v in value) if isinstance(value, tuple) else "*"


def leaves(value: object) -> list[np.ndarray]:
    """The leaves of a (nested) result, depth first, as NumPy arrays."""
    if isinstance(value, tuple):
        return [leaf for v in value for leaf in leaves(v)]
    return [value.numpy() if isinstance(value, torch.Tensor) else np.asarray(value)]


def assert_same_leaves(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-6)
