"""Sibling weight-only products merged into one `MatMulNBits` (`linnet.onnx.runtime.siblings`).

Linears that read the same activation (q/k/v, gate/up) run as one kernel on
their weights concatenated along the output axis, then a `Split`. Every
column is computed as before, so the merged session must give the std
bodies' results (the NumPy reference interpreter, on the model's own Core
IR) and, with `int8_activations`, the unmerged session's results (up to
f32 rounding: the kernel may tile a longer output axis differently). Three
groups: three int4 linears over 3 groups of 32 inputs (an odd group count:
each row's packed zero points end in a pad nibble), two with a bias, two
int8 linears (`MatMulNBits(bits=8)` under `int8_activations`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest

import linnet.onnx.runtime.session as session_module
from linnet.ir.core import TensorType
from linnet.ir.interp import run_function
from linnet.onnx import load_model
from linnet.onnx.runtime.siblings import merge_siblings
from linnet.quant import int4_groups, int8_rows

Array = np.ndarray[Any, Any]

SOURCE = """module t

use std.quant::{Int4GroupLinear, Int8Linear}

pub block Model {
    sub q: Int4GroupLinear<96, 8, 32, f32>
    sub k: Int4GroupLinear<96, 4, 32, f32>
    sub v: Int4GroupLinear<96, 6, 32, f32>
    sub gate: Int4GroupLinear<96, 5, 32, f32>
    sub up: Int4GroupLinear<96, 7, 32, f32>
    sub left: Int8Linear<96, 3, f32>
    sub right: Int8Linear<96, 9, f32>

    pub entry forward<B: Dim>(x: Tensor[B, 96; f32]) -> (
        Tensor[B, 8; f32], Tensor[B, 4; f32], Tensor[B, 6; f32], Tensor[B, 5; f32],
        Tensor[B, 7; f32], Tensor[B, 3; f32], Tensor[B, 9; f32],
    ) {
        let h = x * 0.5
        return (
            q.forward(h), k.forward(h), v.forward(h), gate.forward(x), up.forward(x),
            left.forward(h), right.forward(h),
        )
    }
}
"""
ROWS = {"q": 8, "k": 4, "v": 6, "gate": 5, "up": 7}


def _weights(rng: np.random.Generator) -> dict[str, Array]:
    weights: dict[str, Array] = {}
    for name, rows in ROWS.items():
        packed, scale, zero = int4_groups(rng.standard_normal((rows, 96)).astype(np.float32), 32)
        weights |= {f"{name}.weight": packed, f"{name}.scale": scale, f"{name}.zero": zero}
    for name in ("gate", "up"):
        weights[f"{name}.bias"] = rng.standard_normal(ROWS[name]).astype(np.float32)
    for name, rows in (("left", 3), ("right", 9)):
        q8, s8 = int8_rows(rng.standard_normal((rows, 96)).astype(np.float32))
        weights |= {f"{name}.weight": q8, f"{name}.scale": s8}
    return weights


def _run(weights: dict[str, Array], x: Array, *, merge: bool, int8: bool) -> Any:
    previous = session_module.MERGE_SIBLINGS
    session_module.MERGE_SIBLINGS = merge
    try:
        model = load_model(SOURCE, weights=weights, int8_activations=int8)
        return model, model.run_entry("forward", [x])
    finally:
        session_module.MERGE_SIBLINGS = previous


@pytest.mark.parametrize("int8", [False, True])
def test_siblings_run_as_one_kernel_with_the_same_results(int8: bool) -> None:
    rng = np.random.default_rng(11)
    weights = _weights(rng)
    x = rng.standard_normal((3, 96)).astype(np.float32)
    model, merged = _run(weights, x, merge=True, int8=int8)
    (session,) = model.sessions
    graph = merge_siblings(session.proto, session.contract.weights).graph
    kinds = Counter(n.op_type for n in graph.node)
    # q/k/v, gate/up (biases concatenated too) and, as MatMulNBits(bits=8), left/right
    assert kinds["MatMulNBits"] == (3 if int8 else 2)
    assert kinds["Split"] == (3 if int8 else 2)
    sizes = sorted(
        next(a.i for a in n.attribute if a.name == "N")
        for n in graph.node
        if n.op_type == "MatMulNBits"
    )
    assert sizes == sorted([12, 18] + ([12] if int8 else []))
    _, plain = _run(weights, x, merge=False, int8=int8)
    fn = model.lowered("forward", [TensorType(x.shape, "f32")])
    expected, _ = run_function(fn, weights, {}, [x])
    for got, unmerged, want in zip(merged, plain, expected, strict=True):
        # the same products; the kernel may tile a longer N differently (f32 rounding)
        np.testing.assert_allclose(got, unmerged, rtol=1e-5, atol=1e-5)
        if not int8:  # int8 activations are another function (test_export_quant)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_graph_without_siblings_is_left_as_it_is() -> None:
    rng = np.random.default_rng(12)
    weights = _weights(rng)
    model, _ = _run(
        weights, rng.standard_normal((1, 96)).astype(np.float32), merge=True, int8=False
    )
    (session,) = model.sessions
    lone = {k: v for k, v in session.contract.weights.items() if v.startswith("left.")}
    assert merge_siblings(session.proto, lone) is session.proto
