"""Pre-packed weights on ONNX Runtime (`linnet.onnx.runtime.prepack`): `run_entry(prepack=N)`.

A session asked to pre-pack binds the `B` weights of its float products, in
graph order and within `N` bytes, as initializers (ONNX Runtime packs them
once); the other weights stay bound inputs shared with every session. Results
must equal NumPy f64 and the plain session's; the packed session is a session
of its own (the plain one is untouched); `update_weights` on a packed weight
makes the next call see the new values, as it does for bound weights.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from linnet.onnx import load_model

Array = np.ndarray[Any, Any]

SOURCE = """module t

pub block Model {
    param first: Tensor[24, 16; f32]
    param second: Tensor[8, 24; f32]
    param third: Tensor[4, 8; f32]
    param gain: Tensor[4; f32]

    pub entry forward<B: Dim>(x: Tensor[B, 16; f32]) -> Tensor[B, 4; f32] {
        let a[b, i] = sum[k] x[b, k] * first[i, k]
        let c[b, j] = sum[i] a[b, i] * second[j, i]
        let y[b, o] = sum[j] c[b, j] * third[o, j]
        return y * gain
    }
}
"""
PRODUCTS = ("first", "second", "third")


def reference(weights: dict[str, Array], x: Array) -> Array:
    result = x.astype(np.float64)
    for path in PRODUCTS:
        result = result @ weights[path].astype(np.float64).T
    out: Array = result * weights["gain"]
    return out


def test_prepacked_products_in_graph_order_within_the_budget() -> None:
    rng = np.random.default_rng(11)
    weights = {
        "first": rng.standard_normal((24, 16)).astype(np.float32),
        "second": rng.standard_normal((8, 24)).astype(np.float32),
        "third": rng.standard_normal((4, 8)).astype(np.float32),
        "gain": np.array([1.0, 2.0, -1.0, 0.5], np.float32),
    }
    model = load_model(SOURCE, weights=weights)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    plain = model.run_entry("forward", [x])
    np.testing.assert_allclose(plain, reference(weights, x), rtol=1e-5, atol=1e-5)
    # first (24*16*4 = 1536 bytes) and second (768) fit in 2400 bytes; third would not
    packed = model.run_entry("forward", [x], prepack=2400)
    np.testing.assert_allclose(packed, reference(weights, x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(packed, plain, rtol=1e-6, atol=1e-6)
    sessions = {s.constant_paths: s for s in model.sessions}
    assert set(sessions) == {frozenset(), frozenset(PRODUCTS[:2])}
    assert model.weight_bytes == 1536 + 768 + 128 + 16
    # the whole budget: every product's weight, never the elementwise `gain`
    model.run_entry("forward", [x], prepack=model.weight_bytes)
    assert {s.constant_paths for s in model.sessions} == {
        frozenset(),
        frozenset(PRODUCTS[:2]),
        frozenset(PRODUCTS),
    }
    # a budget below the first weight packs nothing (the plain session's constants)
    np.testing.assert_array_equal(model.run_entry("forward", [x], prepack=100), plain)

    fresh = rng.standard_normal((24, 16)).astype(np.float32)
    model.update_weights({"first": fresh})
    updated = {**weights, "first": fresh}
    again = model.run_entry("forward", [x], prepack=2400)
    np.testing.assert_allclose(again, reference(updated, x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(model.run_entry("forward", [x]), again, rtol=1e-6, atol=1e-6)
