"""Every example under examples/ exported to ONNX and run in ONNX Runtime against the interpreter.

Each example's root block is bound with small generics from one shared table
(`GENERICS`, overridden per example in `EXAMPLES`), every entry is lowered
with small entry generics, exported with its params as graph inputs, and run
twice in a row, the second call on the state the first one left, with random
weights and inputs: integer inputs are small (valid token ids, positions and
type ids for every example), floats standard normal. Results and new state
must match the NumPy reference within the f32 contract. An example this
table cannot bind is an expected failure naming the missing generic, so a new
example shows up here instead of being skipped silently.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from export_support import ROOT, STDLIB, check

from linnet.check.decls import BlockInfo
from linnet.ir.bind import bind, find_root
from linnet.ir.core import Function, numpy_dtype
from linnet.ir.interp import run_function
from linnet.pipeline import check_paths, lower, optimize
from linnet.target import entry_input_types

EXAMPLES_DIR = ROOT / "examples"

GENERICS: dict[str, object] = {
    "Vocab": 11, "H": 8, "Heads": 2, "KvHeads": 1, "NumHeads": 2, "Inner": 16, "Layers": 2,
    "Batch": 1, "MaxSeq": 8, "Positions": 8, "MaxPos": 8, "TypeVocab": 2,
    "In": 4, "Out": 3, "Depth": 1, "Classes": 3, "Labels": 3,
    "TextH": 8, "TextHeads": 2, "TextInner": 16, "TextLayers": 1,
    "VisionH": 8, "VisionHeads": 2, "VisionInner": 16, "VisionLayers": 1,
    "Channels": 3, "Patch": 2, "Grid": 2, "Proj": 4, "T": "f32",
}  # fmt: skip
ENTRY_GENERICS: dict[str, object] = {"B": 2, "S": 3, "I": 1, "Steps": 2, "P": 5}
SHAPE_PACK = "2,3"

# Per example: the root block where the file has several, and generic overrides.
EXAMPLES: dict[str, dict[str, Any]] = {
    "vit": {"root": "ViTForImageClassification"},
    "01-linear": {"generics": {"S": SHAPE_PACK}},
}


def example_dirs() -> list[str]:
    return sorted(p.name for p in EXAMPLES_DIR.iterdir() if (p / "src" / "lib.linnet").exists())


def _rng(*key: object) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def _array(rng: np.random.Generator, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.startswith(("i", "u")):
        # Small: a valid token id, type id and cache position in every example.
        return rng.integers(0, 2, size=shape).astype(numpy_dtype(dtype))
    return rng.normal(0.0, 1.0, size=shape).astype(numpy_dtype(dtype))


def _bound_generics(root: BlockInfo, overrides: Mapping[str, object]) -> dict[str, object]:
    given: dict[str, object] = {}
    for g in root.generics:
        if g.name in overrides:
            given[g.name] = overrides[g.name]
        elif g.name in GENERICS:
            given[g.name] = GENERICS[g.name]
        elif not g.has_default:
            pytest.xfail(f"no value for generic `{g.name}` of `{root.name}` in GENERICS")
    return given


@pytest.mark.parametrize("example", example_dirs())
def test_example_entries_run_in_onnx_runtime(example: str) -> None:
    config = EXAMPLES.get(example, {})
    program = check_paths([EXAMPLES_DIR / example / "src" / "lib.linnet"], STDLIB)
    errors = [d.message for d in program.diagnostics if d.is_error]
    assert not errors, errors
    root = find_root(program, config.get("root"))
    overrides = dict(config.get("generics", {}))
    model = bind(program, root=root.name, generics=_bound_generics(root, overrides))
    rng = _rng(example)
    weights = {
        path: (_array(rng, t.type.dtype, t.type.shape) * 0.3).astype(numpy_dtype(t.type.dtype))
        if t.type.dtype.startswith("f")
        else _array(rng, t.type.dtype, t.type.shape)
        for path, t in model.tensors.items()
        if t.kind != "state"
    }
    state = {
        path: np.zeros(t.type.shape, numpy_dtype(t.type.dtype))
        for path, t in model.tensors.items()
        if t.kind == "state"
    }
    exported_entries = []
    for name, signature in model.entries.items():
        fn = _lowered(model, name, signature, overrides, set(weights))
        for _call in range(2):
            inputs = [_array(rng, v.type.dtype, v.type.shape) for _, v in fn.inputs]
            check(fn, inputs, weights, state, scale=4.0)
            _, state = run_function(fn, weights, state, inputs)
        exported_entries.append(name)
    assert exported_entries


def _lowered(
    model: Any, name: str, signature: Any, overrides: Mapping[str, object], present: set[str]
) -> Function:
    generics = {
        g.name: overrides.get(
            g.name, SHAPE_PACK if g.kind == "Shape" else ENTRY_GENERICS.get(g.name)
        )
        for g in signature.fn.generics
        if not g.has_default
    }
    missing = [k for k, v in generics.items() if v is None]
    if missing:
        pytest.xfail(f"no value for entry generic `{missing[0]}` of `{name}`")
    input_types = entry_input_types(signature, generics)
    return optimize(lower(model, name, input_types, frozenset(present), generics=generics))


def test_examples_are_discovered() -> None:
    """Guards the discovery: the seed examples are among the ones this test runs."""
    assert {"01-llama", "01-linear", "tiny"} <= set(example_dirs())
