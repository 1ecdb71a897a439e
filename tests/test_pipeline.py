"""`linnet.pipeline`: the stages in order, check -> bind -> lower -> optimize -> a backend.

The language.md examples go through the public stage functions and run on
the NumPy reference interpreter; results are compared with the same model
written in NumPy f64 (1e-5 relative, the f32 contract of architecture.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from linnet.errors import LinnetError
from linnet.ir.core import TensorType
from linnet.ir.interp import run_function
from linnet.ir.verify import verify
from linnet.pipeline import (
    bind,
    bind_weights,
    check_paths,
    compile_entry,
    load_entry,
    load_model,
    lower,
    lower_module_entry,
    optimize,
)
from linnet.target import Target

VALID = Path(__file__).resolve().parent / "conformance" / "valid"
RNG = np.random.default_rng(3)


def f32(*shape: int) -> np.ndarray[Any, Any]:
    return RNG.standard_normal(shape).astype(np.float32)


def test_stages_one_call_each() -> None:
    program = check_paths([VALID / "spec_tower.linnet"])
    model = bind(program, generics={"H": 3, "Depth": 2})
    assert sorted(model.tensors) == ["extra.gain", "stages.0.gain", "stages.1.gain", "stem.gain"]
    present = model.present_paths(["stem.gain", "stages.0.gain", "stages.1.gain"])
    fn = lower(model, "forward", [TensorType((2, 3), "f32")], present)
    verify(fn)
    optimized = optimize(fn, check=True)
    weights = {p: f32(3) for p in present}
    x = f32(2, 3)
    (got,), _ = run_function(optimized, weights, {}, [x])
    expected = x.astype(np.float64)
    for path in ("stem.gain", "stages.0.gain", "stages.1.gain"):
        expected = expected * weights[path]
    np.testing.assert_allclose(got, expected, rtol=1e-5)


@pytest.mark.parametrize("optionals_present", [True, False])
def test_compile_entry_tiny(optionals_present: bool) -> None:
    generics = {"H": 4, "Inner": 6, "Depth": 2, "Classes": 3, "B": 5}
    compiled = load_entry(
        VALID / "spec_tiny.linnet", Target(generics=generics, optionals_present=optionals_present)
    )
    fn = compiled.function
    verify(fn)
    assert compiled.resolved.input_types == (TensorType((5, 4), "f32"),)
    sizes = {"input": (6, 4), "hidden.0": (6, 6), "hidden.1": (6, 6), "output": (3, 6)}
    weights = {f"{n}.weight": f32(*s) for n, s in sizes.items()}
    if optionals_present:
        weights.update({f"{n}.bias": f32(s[0]) for n, s in sizes.items()})
    assert compiled.resolved.present == frozenset(weights)
    x = f32(5, 4)
    (got,), state = run_function(fn, weights, {}, [x])
    assert state == {}
    h = x.astype(np.float64)
    for i, name in enumerate(sizes):
        h = h @ weights[f"{name}.weight"].T.astype(np.float64)
        if optionals_present:
            h = h + weights[f"{name}.bias"]
        if i < len(sizes) - 1:
            h = np.maximum(h, 0.0)
    np.testing.assert_allclose(got, h, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("extra", [False, True])
def test_weights_from_a_safetensors_file_settle_optional_children(
    tmp_path: Path, extra: bool
) -> None:
    from safetensors.numpy import save_file

    weights = {"stem.gain": f32(3), "stages.0.gain": f32(3), "stages.1.gain": f32(3)}
    if extra:
        weights["extra.gain"] = f32(3)
    checkpoint = tmp_path / "model.safetensors"
    save_file(weights, str(checkpoint))
    target = Target(generics={"H": 3, "Depth": 2, "B": 2})
    compiled = load_entry(VALID / "spec_tower.linnet", target, weights=checkpoint)
    assert compiled.weights is not None
    assert set(compiled.weights.arrays) == set(weights)
    uses_extra = "extra.gain" in {
        op.attrs.get("path") for op in compiled.function.body.ops if op.kind == "param"
    }
    assert uses_extra == extra
    x = f32(2, 3)
    (got,), _ = run_function(compiled.function, compiled.weights.arrays, {}, [x])
    expected = x.astype(np.float64)
    for gain in weights.values():
        expected = expected * gain
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    model = load_model(VALID / "spec_tower.linnet", generics={"H": 3, "Depth": 2})
    assert bind_weights(model, checkpoint).present_groups == (
        frozenset({"extra"}) if extra else frozenset()
    )


def test_state_updates_flow_through() -> None:
    compiled = load_entry(VALID / "spec_memory.linnet", Target(generics={"Slots": 3, "D": 2}))
    fn = compiled.function
    assert set(fn.state_updates) == {"memory.slots", "memory.writes"}
    state: dict[str, Any] = {
        "memory.slots": np.zeros((3, 2), np.float32),
        "memory.writes": np.zeros(1, np.int64),
    }
    table = np.zeros((3, 2))
    for at in range(2):
        value = f32(2)
        (got,), state = run_function(fn, {}, state, [value, np.int32(at)])
        table[at] = value
        np.testing.assert_allclose(got, table.sum(axis=0) + table[0], rtol=1e-5)
    assert state["memory.writes"].tolist() == [2]


def test_module_entry_through_the_pipeline() -> None:
    program = check_paths([VALID / "spec_losses.linnet"])
    fn = lower_module_entry(
        program, program.graph.roots[0], "mean_abs_error",
        [TensorType((2, 3), "f32"), TensorType((2, 3), "f32")],
    )  # fmt: skip
    guess, truth = f32(2, 3), f32(2, 3)
    (got,), _ = run_function(optimize(fn, check=True), {}, {}, [guess, truth])
    np.testing.assert_allclose(got, np.abs(guess - truth).mean(), rtol=1e-5)
    compiled = compile_entry(program, Target(entry="spread", generics={"N": 4}))
    assert compiled.resolved.model is None and compiled.function.name == "spread"


def test_programs_with_errors_stop_before_binding(tmp_path: Path) -> None:
    bad = tmp_path / "bad.linnet"
    bad.write_text("module m\n\npub entry f(x: f32) -> f32 {\n    return y\n}\n", encoding="utf-8")
    with pytest.raises(LinnetError) as info:
        load_entry(bad, Target())
    assert info.value.diagnostics[0].code == "E1201"


def test_docstring_examples() -> None:
    import doctest

    import linnet.pipeline
    import linnet.plan.document

    for module in (linnet.pipeline, linnet.plan.document):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__
