"""`std.nn.mlp` (stdlib.md 8): `swiglu` and the `SwiGlu` block against PyTorch eager."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from stdlib_support import StdBlock, StdCases, f64, normal

SOURCE = """module cases

use std.nn.mlp::{swiglu}

pub entry run<*S: Shape, H: Dim, I: Dim, T: Float>(
    x: Tensor[*S, H; T],
    gate: Tensor[I, H; T],
    up: Tensor[I, H; T],
    down: Tensor[H, I; T],
) -> Tensor[*S, H; T] {
    return swiglu(x, gate, up, down)
}
"""

BLOCK = """module cases

use std.nn.mlp::{SwiGlu}

pub block Model<H: Dim, I: Dim> {
    sub mlp: SwiGlu<H, I, f32>

    pub entry forward<*S: Shape>(x: Tensor[*S, H; f32]) -> Tensor[*S, H; f32] {
        return mlp.forward(x)
    }
}
"""


def reference(x, gate, up, down, biases=(None, None, None)):  # type: ignore[no-untyped-def]
    """HF LlamaMLP: `down(silu(gate(x)) * up(x))`, in f64."""
    t = [None if a is None else torch.from_numpy(f64(a)) for a in (x, gate, up, down, *biases)]
    gated = F.silu(F.linear(t[0], t[1], t[4])) * F.linear(t[0], t[2], t[5])
    return F.linear(gated, t[3], t[6]).numpy()


@pytest.mark.parametrize("shape", [(8,), (3, 8), (2, 2, 8)])
def test_swiglu(shape: tuple[int, ...]) -> None:
    std = StdCases(SOURCE)
    rng = np.random.default_rng(80 + len(shape))
    x = normal(rng, shape)
    gate, up, down = normal(rng, [12, 8]), normal(rng, [12, 8]), normal(rng, [8, 12])
    std.expect("run", [x, gate, up, down], [reference(x, gate, up, down)], atol=1e-5)


def test_swiglu_block_paths_and_optional_biases() -> None:
    model = StdBlock(BLOCK, "Model")
    rng = np.random.default_rng(84)
    x = normal(rng, [2, 3, 8])
    weights = {
        "mlp.gate.weight": normal(rng, [12, 8]),
        "mlp.up.weight": normal(rng, [12, 8]),
        "mlp.down.weight": normal(rng, [8, 12]),
    }
    w = [weights[f"mlp.{n}.weight"] for n in ("gate", "up", "down")]
    model.expect({"H": 8, "I": 12}, weights, [x], [reference(x, *w)], atol=1e-5)
    biases = {"mlp.gate.bias": normal(rng, [12]), "mlp.down.bias": normal(rng, [8])}
    expected = reference(x, *w, (biases["mlp.gate.bias"], None, biases["mlp.down.bias"]))
    model.expect({"H": 8, "I": 12}, {**weights, **biases}, [x], [expected], atol=1e-5)
