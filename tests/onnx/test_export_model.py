"""`export_model` and `export_function` from Linnet source: weights, state, dtypes, errors.

A small block with an optional bias, a stack of children and a state
counter is exported with its weights embedded (from arrays, a SafeTensors
file, a bindings map, with `cast_dtype`) or bound by name, and run for several
calls with the state fed back, against the NumPy interpreter; a module-level
entry is exported with `export_function`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from backend_cases import assert_close
from export_support import run_onnx, validate

from linnet.errors import LinnetError
from linnet.ir.interp import run_function
from linnet.onnx import ExportedModel, export_function, export_model
from linnet.weights import save_safetensors

TOWER = """\
module tower

use std.nn.norm::{rms_norm}

pub block Scale<H: Dim, T: Float> {
    param gain: Tensor[H; T]
    param bias: Tensor[H; T]? = none

    pub fn forward<B: Dim>(x: Tensor[B, H; T]) -> Tensor[B, H; T] {
        let y = x * gain
        return match bias {
            some(b) => y + b
            none => y
        }
    }
}

pub block Tower<H: Dim, Depth: Dim, T: Float = f32> {
    sub stem: Scale<H, T>
    sub stages: [Scale<H, T>; Depth]
    param norm: Tensor[H; T]
    state count: Tensor[1; i64]
    state total: Tensor[H; T]

    pub entry forward<B: Dim>(x: Tensor[B, H; T]) -> Tensor[B, H; T] {
        var y = stem.forward(x)
        static for stage in stages {
            y = stage.forward(y)
        }
        count = count + 1
        total = total + y[0]
        return rms_norm(y, norm) + total
    }

    pub entry peek() -> Tensor[1; i64] {
        return count
    }
}

pub entry spread<N: Dim>(x: Tensor[N; f32]) -> (f32, Tensor[N; f32]) {
    let low = min[i] x[i]
    return (max[i] x[i] - low, x - low)
}
"""

GENERICS = {"H": 4, "Depth": 2, "B": 3}
PATHS = ["stem.gain", "stem.bias", "stages.0.gain", "stages.1.gain", "stages.1.bias", "norm"]


ALL_PATHS = [*PATHS, "stages.0.bias"]


def _weights(dtype: type = np.float32, paths: list[str] = PATHS) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {path: rng.uniform(0.5, 1.5, 4).astype(dtype) for path in paths}


def _run_calls(exported: ExportedModel, weights: dict[str, np.ndarray], calls: int = 3) -> None:
    """Call the model `calls` times, feeding `next_state` back as `state`; compare each call."""
    fn = exported.function
    state = {"count": np.zeros(1, np.int64), "total": np.zeros(4, np.float32)}
    expected_state = dict(state)
    rng = np.random.default_rng(1)
    for _ in range(calls):
        x = rng.normal(size=(3, 4)).astype(np.float32)
        expected, expected_state = run_function(fn, weights, expected_state, [x])
        actual, new_state = run_onnx(exported, [x], weights, state)
        assert_close(actual[0], expected[0], "f32")
        state = {**state, **new_state}
        for path in ("count", "total"):
            assert_close(state[path], expected_state[path], str(fn.state_updates[path].type.dtype))
    assert int(state["count"][0]) == calls


def test_block_with_weights_embedded() -> None:
    weights = _weights()
    exported = export_model(TOWER, generics=GENERICS, weights=weights, std_root=_std())
    validate(exported)
    assert exported.embedded
    assert [t.name for t in exported.model.graph.initializer] == [
        io.name for io in exported.inputs if io.role == "param"
    ]
    assert [i.name for i in exported.model.graph.input] == ["x", "state0", "state1"]
    assert [o.name for o in exported.model.graph.output] == [
        "output0",
        "next_state0",
        "next_state1",
    ]
    _run_calls(exported, weights)


def test_block_with_params_bound_by_name() -> None:
    """Without weights every optional param counts as present (`linnet onnx` does the same)."""
    exported = export_model(TOWER, generics=GENERICS, std_root=_std())
    validate(exported)
    assert not exported.embedded and not exported.model.graph.initializer
    props = {p.key: p.value for p in exported.model.metadata_props}
    params = {props[f"linnet.path.{io.name}"] for io in exported.inputs if io.role == "param"}
    assert params == set(ALL_PATHS)
    _run_calls(exported, _weights(paths=ALL_PATHS))


def test_absent_optional_params_follow_the_checkpoint(tmp_path: Path) -> None:
    """Weights from a SafeTensors file without the optional biases: they are not read."""
    weights = {p: a for p, a in _weights().items() if not p.endswith("bias")}
    file = tmp_path / "tower.safetensors"
    save_safetensors(weights, file)
    exported = export_model(TOWER, generics=GENERICS, weights=file, std_root=_std())
    paths = {io.path for io in exported.inputs if io.role == "param"}
    assert paths == set(weights)
    _run_calls(exported, weights)


def test_bindings_map_checkpoint_names() -> None:
    weights = _weights()
    renamed = {f"model.{p}": a for p, a in weights.items()}
    bindings = {p: f"model.{p}" for p in weights}
    exported = export_model(
        TOWER, generics=GENERICS, weights=renamed, bindings=bindings, std_root=_std()
    )
    _run_calls(exported, weights)


@pytest.mark.parametrize("dtype", ["f16", "f64"])
def test_cast_dtype_converts_an_f32_checkpoint(dtype: str) -> None:
    generics = {**GENERICS, "T": dtype}
    with pytest.raises(LinnetError):
        export_model(TOWER, generics=generics, weights=_weights(), std_root=_std())
    exported = export_model(
        TOWER, generics=generics, weights=_weights(), cast_dtype=True, std_root=_std()
    )
    expected_type = onnx.TensorProto.FLOAT16 if dtype == "f16" else onnx.TensorProto.DOUBLE
    assert {t.data_type for t in exported.model.graph.initializer} == {expected_type}
    validate(exported)


def test_other_entries_and_a_module_level_entry() -> None:
    exported = export_model(TOWER, generics={"H": 4, "Depth": 1}, entry="peek", std_root=_std())
    assert [i.name for i in exported.model.graph.input] == ["state0"]
    results, _ = run_onnx(exported, [], None, {"count": np.array([5], np.int64)})
    assert results[0].tolist() == [5]
    spread = export_model(TOWER, generics={"N": 4}, entry="spread", root=None, std_root=_std())
    assert spread.function.name == "spread"


def test_export_function() -> None:
    exported = export_function(TOWER, "spread", generics={"N": 5}, std_root=_std())
    validate(exported)
    assert [o.name for o in exported.model.graph.output] == ["output0", "output1"]
    x = np.array([3.0, -1.0, 4.0, 1.5, 9.0], np.float32)
    (width, shifted), _ = run_onnx(exported, [x])
    assert float(width) == 10.0 and shifted.tolist() == (x + 1.0).tolist()


def test_export_function_of_a_std_module() -> None:
    """Any function of a loaded module, here an `op` of the standard library."""
    exported = export_function(
        TOWER, "rms_norm", generics={"S": "2", "H": 3, "T": "f32"}, module="std.nn.norm",
        std_root=_std(),
    )  # fmt: skip
    assert [io.name for io in exported.inputs] == ["x", "weight", "eps"]
    x = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 0.0]], np.float32)
    w = np.array([1.0, 0.5, 2.0], np.float32)
    (y,), _ = run_onnx(exported, [x, w, np.array(1e-5, np.float32)])
    expected = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5) * w
    np.testing.assert_allclose(y, expected, rtol=1e-5)


def test_errors_name_the_problem() -> None:
    with pytest.raises(LinnetError, match="missing generic `B`"):
        export_model(TOWER, generics={"H": 4, "Depth": 2}, std_root=_std())
    with pytest.raises(LinnetError, match="missing generic `N`"):
        export_function(TOWER, "spread", generics={}, std_root=_std())
    with pytest.raises(LinnetError, match="unknown generic `M`"):
        export_function(TOWER, "spread", generics={"N": 2, "M": 1}, std_root=_std())
    with pytest.raises(LinnetError, match="has errors"):
        export_model("module broken\npub entry f() -> f32 { return x }\n", generics={})
    with pytest.raises(LinnetError, match="takes no weights"):
        export_model(TOWER, generics={"N": 4}, entry="spread", weights={}, std_root=_std())


def _std() -> Path:
    return Path(__file__).resolve().parents[2] / "stdlib"
