"""`linnet.onnx.load_model` end to end on ONNX Runtime's CPU provider.

Small models run through the real exporter and `InferenceSession`s; the
oracles are the NumPy reference interpreter (`run_function` on the same
lowered entry) and `linnet.torch` (f32 within 1e-5 relative). Covered: the
session cache per input types, state across calls and `reset_state`, the
in-place cache update, `place`, `keep_on_device`, `argmax`, `cuda_graph` on a
provider without graphs, `providers=` and `session_options=` passed through, and the
errors a user can make (bf16 on the CPU, unknown entries, wrong inputs).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import onnxruntime as ort
import pytest
from onnx_model_support import CACHE_SOURCE, D, S, cache_function, reference_steps

import linnet.onnx
from linnet.errors import LinnetError
from linnet.ir.core import TensorType
from linnet.ir.interp import run_function
from linnet.onnx import load_model

MLP = """module mlp

pub block Mlp<H: Dim, Inner: Dim, Classes: Dim> {
    param w1: Tensor[Inner, H; f32]
    param b1: Tensor[Inner; f32]
    param w2: Tensor[Classes, Inner; f32]

    pub entry forward<B: Dim>(x: Tensor[B, H; f32]) -> Tensor[B, Classes; f32] {
        let h[b, i] = sum[k] x[b, k] * w1[i, k]
        let r = max(h + b1, 0.0)
        let y[b, c] = sum[i] r[b, i] * w2[c, i]
        return y
    }

    pub entry both<B: Dim>(x: Tensor[B, H; f32]) -> (Tensor[B, Classes; f32], Tensor[B; i32]) {
        let y = forward(x)
        let n = fill<i32>([B], cast<i32>(H))
        return (y, n)
    }
}
"""
GENERICS = {"H": 6, "Inner": 10, "Classes": 5}
Array = np.ndarray[Any, Any]


def mlp_weights(seed: int = 0) -> dict[str, Array]:
    rng = np.random.default_rng(seed)
    return {
        "w1": rng.standard_normal((10, 6)).astype(np.float32),
        "b1": rng.standard_normal(10).astype(np.float32),
        "w2": rng.standard_normal((5, 10)).astype(np.float32),
    }


def close(actual: Array, expected: Array) -> None:
    """f32 within 1e-5 relative (to the largest magnitude for elements near zero)."""
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6 * scale)


@pytest.fixture(scope="module")
def mlp() -> linnet.onnx.OnnxModel:
    return load_model(MLP, generics=GENERICS, weights=mlp_weights())


def test_matches_the_interpreter_and_torch(mlp: linnet.onnx.OnnxModel) -> None:
    torch = pytest.importorskip("torch")
    import linnet.torch

    x = np.random.default_rng(1).standard_normal((3, 6)).astype(np.float32)
    got = mlp.run_entry("forward", [x])
    fn = mlp.lowered("forward", [TensorType((3, 6), "f32")])
    close(got, run_function(fn, mlp_weights(), {}, [x])[0][0])
    reference = linnet.torch.load(MLP, generics=GENERICS, weights=mlp_weights())
    with torch.no_grad():
        close(got, reference(torch.from_numpy(x)).numpy())


def test_one_session_per_entry_and_input_types(mlp: linnet.onnx.OnnxModel) -> None:
    before = len(mlp.sessions)
    for batch in (1, 4, 1, 4):
        x = np.ones((batch, 6), np.float32)
        assert mlp.run_entry("forward", [x]).shape == (batch, 5)
    assert len(mlp.sessions) - before <= 2
    keys = {(s.entry, s.contract.result_types) for s in mlp.sessions}
    assert len(keys) == len(mlp.sessions)


def test_several_results_and_named_inputs(mlp: linnet.onnx.OnnxModel) -> None:
    x = np.random.default_rng(2).standard_normal((2, 6)).astype(np.float32)
    y, n = mlp.run_entry("both", {"x": x})
    close(y, mlp.run_entry("forward", [x]))
    np.testing.assert_array_equal(n, np.array([6, 6], np.int32))


def test_weights_are_shared_not_copied(mlp: linnet.onnx.OnnxModel) -> None:
    arrays = mlp_weights()
    model = load_model(MLP, generics=GENERICS, weights=arrays)
    for path, array in arrays.items():
        assert model.weights[path].data_ptr() == array.ctypes.data
    model.run_entry("forward", [np.ones((2, 6), np.float32)])
    model.run_entry("both", [np.ones((2, 6), np.float32)])
    bound = {s.entry: set(s.contract.weights.values()) for s in model.sessions}
    assert bound == {"forward": {"w1", "b1", "w2"}, "both": {"w1", "b1", "w2"}}


def test_update_weights_never_writes_into_the_callers_arrays() -> None:
    """The CPU weights alias the caller's arrays; an update binds a private copy first,
    then overwrites that copy in place (same buffer across later updates)."""
    arrays = mlp_weights()
    kept = {path: array.copy() for path, array in arrays.items()}
    model = load_model(MLP, generics=GENERICS, weights=arrays)
    x = np.random.default_rng(4).standard_normal((2, 6)).astype(np.float32)
    model.run_entry("forward", [x])
    fresh = mlp_weights(seed=7)
    model.update_weights({"w1": fresh["w1"]})
    for path, array in arrays.items():
        np.testing.assert_array_equal(array, kept[path])
    expected = load_model(MLP, generics=GENERICS, weights={**kept, "w1": fresh["w1"]})
    close(model.run_entry("forward", [x]), expected.run_entry("forward", [x]))
    address = model.weights["w1"].data_ptr()
    model.update_weights({"w1": fresh["w1"] * 2.0})
    assert model.weights["w1"].data_ptr() == address
    np.testing.assert_array_equal(arrays["w1"], kept["w1"])
    doubled = load_model(MLP, generics=GENERICS, weights={**kept, "w1": fresh["w1"] * 2.0})
    close(model.run_entry("forward", [x]), doubled.run_entry("forward", [x]))


def test_place_and_keep_on_device(mlp: linnet.onnx.OnnxModel) -> None:
    x = np.random.default_rng(3).standard_normal((2, 6))  # f64: place converts
    placed = mlp.place(x, "f32")
    assert isinstance(placed, ort.OrtValue) and placed.data_type() == "tensor(float)"
    expected = mlp.run_entry("forward", [x.astype(np.float32)])
    close(mlp.run_entry("forward", [placed]), expected)
    kept = mlp.run_entry("forward", [placed], keep_on_device=True)
    assert isinstance(kept, ort.OrtValue)
    close(kept.numpy(), expected)
    again = mlp.run_entry("forward", [placed])  # the earlier result is not overwritten
    close(kept.numpy(), again)


def test_argmax_inside_the_graph(mlp: linnet.onnx.OnnxModel) -> None:
    x = np.random.default_rng(4).standard_normal((7, 6)).astype(np.float32)
    logits = mlp.run_entry("forward", [x])
    tokens = mlp.run_entry("forward", [x], argmax=True)
    assert tokens.dtype == np.int32 and tokens.shape == (7,)
    np.testing.assert_array_equal(tokens, logits.argmax(-1))
    token, n = mlp.run_entry("both", [x], argmax=True)
    np.testing.assert_array_equal(token, tokens)
    np.testing.assert_array_equal(n, np.full(7, 6, np.int32))


def test_cuda_graph_without_a_graph_provider_runs_normally(mlp: linnet.onnx.OnnxModel) -> None:
    x = np.ones((2, 6), np.float32)
    close(mlp.run_entry("forward", [x], cuda_graph=True), mlp.run_entry("forward", [x]))
    assert not any(s.cuda_graph for s in mlp.sessions)


# -- state ---------------------------------------------------------------------------------


def steps(n: int) -> list[tuple[Array, int]]:
    rng = np.random.default_rng(5)
    return [(rng.standard_normal((1, 1, 1, D)).astype(np.float32), (5 * i) % S) for i in range(n)]


def test_state_across_calls_and_reset() -> None:
    weights = {"w": np.array([0.5, -1.0, 2.0, 1.5], np.float32)}
    model = load_model(CACHE_SOURCE, generics={"S": S, "D": D}, weights=weights)
    assert model.entries == ["step"]
    assert set(model.state) == {"cache", "steps"} and not model.state["cache"].any()
    data = steps(6)
    want, final = reference_steps(cache_function(), weights, data)
    address = model.state_address("cache")
    for (x, pos), expected in zip(data, want, strict=True):
        close(model.run_entry("step", [x, pos]), expected)
    close(model.state["cache"], final["cache"])
    np.testing.assert_array_equal(model.state["steps"], [6])
    (session,) = model.sessions
    assert session.contract.update_modes["cache"] == "in_place"
    assert model.state_address("cache") == address  # updated where it lies
    model.reset_state()
    assert model.state_address("cache") == address
    assert not model.state["cache"].any() and not model.state["steps"].any()
    for (x, pos), expected in zip(data, want, strict=True):  # the same run again
        close(model.run_entry("step", [x, pos]), expected)


def test_cache_write_outside_the_cache_changes_nothing() -> None:
    """`write_at` with a position outside `[0, S)` writes nothing (its canonical body).

    The entry boundary refuses such a position given from the host; one placed on the
    device skips that check (linnet.ir.inputs), so the in-place scatter meets it."""
    weights = {"w": np.ones(D, np.float32)}
    model = load_model(CACHE_SOURCE, generics={"S": S, "D": D}, weights=weights)
    data = [(np.full((1, 1, 1, D), 2.0, np.float32), pos) for pos in (3, -1, S, S + 3, 0)]
    want, final = reference_steps(cache_function(), weights, data)
    for (x, pos), expected in zip(data, want, strict=True):
        close(model.run_entry("step", [x, model.place(np.int32(pos))]), expected)
    close(model.state["cache"], final["cache"])


# -- providers and errors -----------------------------------------------------------------


class Recorder:
    """Stands in for `InferenceSession`: records the providers, runs on the CPU."""

    calls: ClassVar[list[list[Any]]] = []
    real = ort.InferenceSession

    def __new__(cls, model: bytes, options: Any = None, providers: Any = None) -> Any:
        cls.calls.append(providers)
        return cls.real(model, options, providers=["CPUExecutionProvider"])


def test_providers_pass_through_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    source = """module p
pub block Twice<N: Dim> {
    pub entry forward(x: Tensor[N; f32]) -> Tensor[N; f32] {
        return x * 2.0
    }
}"""
    monkeypatch.setattr(ort, "InferenceSession", Recorder)
    Recorder.calls = []
    trt = ("TensorrtExecutionProvider", {"trt_fp16_enable": "1", "device_id": 0})
    providers = [trt, ("CUDAExecutionProvider", {"device_id": 0}), "CPUExecutionProvider"]
    model = load_model(source, generics={"N": 3}, providers=providers)
    assert model.device.kind == "cuda"
    plain = model.prepare("forward", [TensorType((3,), "f32")])
    graph = model.prepare("forward", [TensorType((3,), "f32")], cuda_graph=True)
    assert Recorder.calls[0] == providers
    assert Recorder.calls[1][0] == (
        "TensorrtExecutionProvider",
        {"trt_fp16_enable": "1", "device_id": 0, "trt_cuda_graph_enable": "1"},
    )
    assert Recorder.calls[1][1:] == providers[1:]
    assert graph.cuda_graph and not plain.cuda_graph
    cpu = load_model(source, generics={"N": 3}, providers=[("CPUExecutionProvider", {})])
    assert cpu.device.kind == "cpu"
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        with pytest.raises(LinnetError, match="no CUDA provider"):
            model.run_entry("forward", [np.ones(3, np.float32)])


def test_session_options_are_every_sessions_options() -> None:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    model = load_model(MLP, generics=GENERICS, weights=mlp_weights(), session_options=options)
    x = np.random.default_rng(3).standard_normal((2, 6)).astype(np.float32)
    expected = load_model(MLP, generics=GENERICS, weights=mlp_weights()).run_entry("forward", [x])
    np.testing.assert_array_equal(model.run_entry("forward", [x]), expected)
    model.run_entry("both", [x])
    assert len(model.sessions) == 2
    for entry in model.sessions:
        used = entry.session.get_session_options()
        assert used.intra_op_num_threads == 1
        assert used.get_session_config_entry("session.intra_op.allow_spinning") == "0"
        assert used.get_session_config_entry("session.use_env_allocators") == "1"


def test_default_cpu_sessions_spin_as_cpu_spinning_says() -> None:
    """The default CPU options differ from ONNX Runtime's only where `CPU_SPINNING` says
    (ONNX Runtime spins by default: the key is absent there)."""
    from linnet.onnx.runtime.session import CPU_SPINNING

    model = load_model(MLP, generics=GENERICS, weights=mlp_weights())
    model.run_entry("forward", [np.ones((2, 6), np.float32)])
    (entry,) = model.sessions
    used = entry.session.get_session_options()
    assert used.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    assert used.intra_op_num_threads == ort.SessionOptions().intra_op_num_threads
    if CPU_SPINNING:
        with pytest.raises(RuntimeError):
            used.get_session_config_entry("session.intra_op.allow_spinning")
    else:
        assert used.get_session_config_entry("session.intra_op.allow_spinning") == "0"


def test_bf16_on_the_cpu_is_a_clear_error() -> None:
    source = """module b
pub block Scale<N: Dim> {
    param gain: Tensor[N; bf16]
    pub entry forward(x: Tensor[N; bf16]) -> Tensor[N; bf16] {
        return x * gain
    }
}"""
    import ml_dtypes

    gain = np.ones(3, ml_dtypes.bfloat16)
    model = load_model(source, generics={"N": 3}, weights={"gain": gain})
    with pytest.raises(LinnetError, match="bf16") as info:
        model.run_entry("forward", [np.ones(3, ml_dtypes.bfloat16)])
    assert "CPU" in str(info.value)


def test_input_errors_name_the_problem(mlp: linnet.onnx.OnnxModel) -> None:
    with pytest.raises(LinnetError, match="no entry `decode`"):
        mlp.run_entry("decode", [])
    with pytest.raises(LinnetError, match="input `x`"):
        mlp.run_entry("forward", [np.ones((2, 6), np.float64)])
    with pytest.raises(LinnetError, match="must be a NumPy array or an OrtValue"):
        mlp.run_entry("forward", [[1.0] * 6])
    with pytest.raises(LinnetError, match="no input `y`"):
        mlp.run_entry("forward", {"y": np.ones((1, 6), np.float32)})
    with pytest.raises(LinnetError, match="no weights given"):
        load_model(MLP, generics=GENERICS)


def test_docstring_examples_run() -> None:
    import doctest

    import linnet.onnx.runtime.model

    failures, tried = doctest.testmod(linnet.onnx.runtime.model)
    assert tried > 0 and failures == 0
