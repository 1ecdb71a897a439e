"""Quantised weights as session constants on ONNX Runtime (`linnet.onnx.runtime.constants`).

The weights behind `MatMulNBits` and the folded int8 dequantisation become
in-memory initializers of the session (so ONNX Runtime pre-packs or folds
them once); every other weight stays a bound input. Results must equal the
std bodies' (NumPy f64 here), and `update_weights` on such a weight must make
the next call see the new values (the session holding the old ones is
dropped), as it does for bound weights.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from linnet.onnx import load_model
from linnet.quant import int4_groups, int8_rows

Array = np.ndarray[Any, Any]

SOURCE = """module t

use std.quant::{Int4GroupLinear, Int8Linear}

pub block Model {
    sub four: Int4GroupLinear<64, 8, 32, f32>
    sub eight: Int8Linear<8, 4, f32>
    param gain: Tensor[4; f32]

    pub entry forward<B: Dim>(x: Tensor[B, 64; f32]) -> Tensor[B, 4; f32] {
        return eight.forward(four.forward(x)) * gain
    }
}
"""


def reference(weights: dict[str, Array], x: Array) -> Array:
    packed, scale, zero = (weights[f"four.{k}"] for k in ("weight", "scale", "zero"))
    q = np.stack([packed & 15, packed >> 4], axis=-1).reshape(8, 2, 32).astype(np.float64)
    four = ((q - zero[..., None]) * scale[..., None].astype(np.float64)).reshape(8, 64)
    eight = weights["eight.weight"].astype(np.float64) * weights["eight.scale"][:, None]
    inputs = x.astype(np.float64)[..., weights["four.order"]] if "four.order" in weights else x
    result: Array = (inputs.astype(np.float64) @ four.T) @ eight.T * weights["gain"]
    return result


def test_quantised_weights_are_session_constants_and_update() -> None:
    rng = np.random.default_rng(5)
    packed, scale, zero = int4_groups(rng.standard_normal((8, 64)).astype(np.float32), 32)
    q8, s8 = int8_rows(rng.standard_normal((4, 8)).astype(np.float32))
    weights = {
        "four.weight": packed, "four.scale": scale, "four.zero": zero,
        "eight.weight": q8, "eight.scale": s8, "gain": np.full(4, 2.0, np.float32),
    }  # fmt: skip
    model = load_model(SOURCE, weights=weights)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    np.testing.assert_allclose(model.run_entry("forward", [x]), reference(weights, x), rtol=1e-5)
    (session,) = model.sessions
    quantised = {p for p in weights if p != "gain"}
    assert session.constant_paths == quantised
    assert set(session.contract.weights.values()) == set(weights)

    changed = {**weights, "four.zero": (zero + 1) % 16, "eight.weight": -q8}
    model.update_weights({"four.zero": changed["four.zero"], "eight.weight": -q8})
    assert model.sessions == []
    got = model.run_entry("forward", [x])
    np.testing.assert_allclose(got, reference(changed, x), rtol=1e-5, atol=1e-6)
    model.update_weights({"gain": np.full(4, 3.0, np.float32)})  # a bound weight: rebound
    assert len(model.sessions) == 1
    np.testing.assert_allclose(model.run_entry("forward", [x]), got * 1.5, rtol=1e-5)


def test_act_order_permutes_the_inputs_of_the_kernel() -> None:
    """`Int4GroupLinear.order` (GPTQ act-order): `take_inputs`, then `MatMulNBits`."""
    rng = np.random.default_rng(6)
    packed, scale, zero = int4_groups(rng.standard_normal((8, 64)).astype(np.float32), 32)
    q8, s8 = int8_rows(rng.standard_normal((4, 8)).astype(np.float32))
    weights = {
        "four.weight": packed, "four.scale": scale, "four.zero": zero,
        "four.order": rng.permutation(64).astype(np.int32),
        "eight.weight": q8, "eight.scale": s8, "gain": np.ones(4, np.float32),
    }  # fmt: skip
    model = load_model(SOURCE, weights=weights)
    x = rng.standard_normal((2, 64)).astype(np.float32)
    np.testing.assert_allclose(model.run_entry("forward", [x]), reference(weights, x), rtol=1e-5)
    (session,) = model.sessions
    assert "MatMulNBits" in {n.op_type for n in session.proto.graph.node}
    assert "four.order" not in session.constant_paths


def test_one_session_options_object_serves_every_session_of_every_model() -> None:
    """The caller's `session_options` is shared by all sessions (`load_model`), and the
    in-memory files of the constants are registered on it: each session's files have
    names of their own, so a second session, a second model with other weights on the
    same object, and the session remade after `update_weights` each read their own."""
    import onnxruntime as ort

    rng = np.random.default_rng(7)
    options = ort.SessionOptions()
    options.add_session_config_entry("session.intra_op.allow_spinning", "1")
    models, cases = [], []
    for _ in range(2):
        packed, scale, zero = int4_groups(rng.standard_normal((8, 64)).astype(np.float32), 32)
        q8, s8 = int8_rows(rng.standard_normal((4, 8)).astype(np.float32))
        weights = {
            "four.weight": packed, "four.scale": scale, "four.zero": zero,
            "eight.weight": q8, "eight.scale": s8, "gain": np.ones(4, np.float32),
        }  # fmt: skip
        models.append(load_model(SOURCE, weights=weights, session_options=options))
        cases.append(weights)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    close = {"rtol": 1e-5, "atol": 1e-4}  # f32 sums of terms near 20 (vs f64)
    for model, weights in zip(models, cases, strict=True):
        np.testing.assert_allclose(model.run_entry("forward", [x]), reference(weights, x), **close)
    changed = {**cases[0], "eight.weight": -cases[0]["eight.weight"]}
    models[0].update_weights({"eight.weight": changed["eight.weight"]})
    np.testing.assert_allclose(models[0].run_entry("forward", [x]), reference(changed, x), **close)
    np.testing.assert_allclose(models[1].run_entry("forward", [x]), reference(cases[1], x), **close)
