"""examples/01-llama on ONNX Runtime: cached `prefill` and `decode` against a full `forward`.

The model is the example itself (transformers' `LlamaForCausalLM` in Linnet,
grouped-query attention, a KV cache per layer in `state`) with its bundled
seeded weights maker, small. Checked: `forward` against the NumPy reference
interpreter; `prefill` then `decode` steps (and a chunked prefill at a start
past 0) equal to the logits of the whole sequence; greedy decoding with
`argmax=True, keep_on_device=True` (the token never leaves the runtime)
equal to the argmax of the full logits; every KV cache updated in place:
the same buffer before and after every step, and no swap.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from linnet.ir.core import TensorType
from linnet.ir.interp import run_function
from linnet.onnx import OnnxModel, load_model

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "01-llama"
Array = np.ndarray[Any, Any]
CONFIG = {"Vocab": 61, "H": 32, "Heads": 4, "KvHeads": 2, "Inner": 48, "Layers": 2,
          "Batch": 1, "MaxSeq": 24, "T": "f32"}  # fmt: skip
LENGTH = 14


def example_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("onnx_llama_weights", EXAMPLE / "make_weights.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def weights() -> dict[str, Array]:
    arrays: dict[str, Array] = example_module().make_weights(CONFIG, seed=3)
    return arrays


@pytest.fixture(scope="module")
def model(weights: dict[str, Array]) -> OnnxModel:
    return load_model(EXAMPLE / "src" / "lib.linnet", generics=CONFIG, weights=weights)


@pytest.fixture(scope="module")
def tokens() -> Array:
    return np.random.default_rng(7).integers(0, CONFIG["Vocab"], (1, LENGTH)).astype(np.int32)


@pytest.fixture(scope="module")
def full(model: OnnxModel, tokens: Array) -> Array:
    logits: Array = model.run_entry("forward", [tokens])
    return logits


def close(actual: Array, expected: Array) -> None:
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=2e-6 * scale)


def test_forward_matches_the_interpreter(
    model: OnnxModel, weights: dict[str, Array], tokens: Array, full: Array
) -> None:
    fn = model.lowered("forward", [TensorType(tokens.shape, "i32")])
    close(full, run_function(fn, weights, {}, [tokens])[0][0])


def test_prefill_then_decode_equals_forward(model: OnnxModel, tokens: Array, full: Array) -> None:
    model.reset_state()
    prompt = 6
    close(model.run_entry("prefill", [tokens[:, :prompt], 0]), full[:, :prompt])
    addresses = {path: model.state_address(path) for path in model.state}
    swaps = model.swaps
    for i in range(prompt, LENGTH):
        close(model.run_entry("decode", [tokens[:, i], i]), full[:, i])
        assert {p: model.state_address(p) for p in model.state} == addresses
    assert model.swaps == swaps  # no step wrote a second cache buffer
    for session in model.sessions:
        if session.entry in ("prefill", "decode"):
            assert set(session.contract.update_modes.values()) == {"in_place"}, session.entry


def test_chunked_prefill(model: OnnxModel, tokens: Array, full: Array) -> None:
    model.reset_state()
    close(model.run_entry("prefill", [tokens[:, :5], 0]), full[:, :5])
    close(model.run_entry("prefill", [tokens[:, 5:9], 5]), full[:, 5:9])
    close(model.run_entry("decode", [tokens[:, 9], 9]), full[:, 9])


def test_cache_contents_after_reset_and_rerun(model: OnnxModel, tokens: Array) -> None:
    model.reset_state()
    assert all(not value.any() for value in model.state.values())
    model.run_entry("prefill", [tokens[:, :4], 0])
    first = model.state
    model.reset_state()
    model.run_entry("prefill", [tokens[:, :4], 0])
    for path, value in model.state.items():
        np.testing.assert_array_equal(value, first[path])
        assert not value[:, :, 4:].any()  # positions past the prompt stay zero


def test_greedy_tokens_stay_on_the_device(model: OnnxModel) -> None:
    """Greedy decoding, each token fed back as the next input without leaving ORT."""
    model.reset_state()
    prompt = np.array([[3, 14, 15, 9, 2]], np.int32)
    first = model.run_entry("prefill", [prompt, 0], argmax=True)
    assert first.dtype == np.int32 and first.shape == (1, 5)
    token = model.place(first[:, -1], "i32")
    chosen = [int(first[0, -1])]
    for position in range(5, 12):
        token = model.run_entry("decode", [token, position], argmax=True, keep_on_device=True)
        assert isinstance(token, ort.OrtValue)
        chosen.append(int(token.numpy()[0]))
    sequence = np.array([[*prompt[0], *chosen]], np.int32)
    logits = model.run_entry("forward", [sequence[:, :-1]])
    np.testing.assert_array_equal(logits[0, 4:].argmax(-1), chosen)
