"""The public surface of `linnet.torch`: `load_function`, source generation, imports, doctests.

Module-level entries (language.md 11.7) are checked against NumPy and against
PyTorch's own losses (an independent implementation of the same math), with
gradients flowing to the inputs.
"""

from __future__ import annotations

import doctest
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import linnet.torch as lt
from linnet.errors import LinnetError

LOSSES = """module losses

use std.nn.loss::{cross_entropy}

pub entry token_loss<N: Dim, V: Dim>(logits: Tensor[N, V; f32], targets: Tensor[N; i64]) -> f32 {
    return cross_entropy(logits, targets, fill<f32>([N], 1.0))
}

pub entry mean_abs_error<B: Dim, N: Dim>(guess: Tensor[B, N; f32], truth: Tensor[B, N; f32]) -> f32
where
    B > 0,
    N > 0
{
    let gap[b, n] = abs(guess[b, n] - truth[b, n])
    return sum[b, n] gap[b, n] / cast<f32>(B * N)
}

fn extremes<N: Dim>(x: Tensor[N; f32]) -> (f32, f32) {
    let low = min[i] x[i]
    let high = max[i] x[i]
    return (low, high)
}

pub entry spread<N: Dim>(x: Tensor[N; f32]) -> (f32, f32, f32) {
    let (low, high) = extremes(x)
    return (low, high, high - low)
}

pub entry clipped_steps<N: Dim>(x: Tensor[N; f32], limit: f32, max_steps: i32) -> (Tensor[N; f32], i32) {
    var current = x
    var steps: i32 = 0
    var going = true
    while going && steps < max_steps {
        current = current * 0.5
        steps = steps + 1
        let peak = max[n] current[n]
        going = peak > limit
    }
    return (current, steps)
}
"""


@pytest.mark.parametrize("compile", [False, True])
def test_load_function_mean_abs_error(compile: bool) -> None:
    f = lt.load_function(LOSSES, "mean_abs_error", compile=compile)
    rng = np.random.default_rng(0)
    guess = torch.tensor(rng.standard_normal((3, 5)), dtype=torch.float32, requires_grad=True)
    truth = torch.tensor(rng.standard_normal((3, 5)), dtype=torch.float32)
    loss = f(guess, truth)
    assert loss.shape == ()
    expected = np.abs(guess.detach().numpy() - truth.numpy()).mean()
    assert loss.item() == pytest.approx(float(expected), rel=1e-6)
    loss.backward()
    reference = guess.detach().clone().requires_grad_(True)
    F.l1_loss(reference, truth).backward()
    assert guess.grad is not None and reference.grad is not None
    torch.testing.assert_close(guess.grad, reference.grad)
    # generics are bound per call from the inputs: another shape works too
    assert f(torch.zeros(2, 2), torch.ones(2, 2)).item() == pytest.approx(1.0)


@pytest.mark.parametrize("compile", [False, True])
def test_load_function_tuples_and_while(compile: bool) -> None:
    spread = lt.load_function(LOSSES, "spread", compile=compile)
    low, high, width = spread(torch.tensor([2.0, -1.0, 5.0]))
    assert (low.item(), high.item(), width.item()) == (-1.0, 5.0, 6.0)
    steps = lt.load_function(LOSSES, "clipped_steps", compile=compile)
    current, count = steps(torch.tensor([8.0, 2.0]), 1.5, 10)
    assert count.item() == 3 and current.tolist() == [1.0, 0.25]
    current, count = steps(x=torch.tensor([8.0, 2.0]), limit=0.1, max_steps=2)
    assert count.item() == 2


@pytest.mark.parametrize("compile", [False, True])
def test_load_function_std_cross_entropy_against_torch(compile: bool) -> None:
    """`std.nn.loss::cross_entropy` is a weighted sum of token losses (stdlib.md 15)."""
    ce = lt.load_function(LOSSES, "cross_entropy", module="std.nn.loss", compile=compile)
    rng = np.random.default_rng(1)
    logits = torch.tensor(rng.standard_normal((6, 11)), dtype=torch.float32, requires_grad=True)
    targets = torch.tensor(rng.integers(0, 11, size=6), dtype=torch.int64)
    weights = torch.tensor(rng.uniform(0, 1, size=6), dtype=torch.float32)
    loss = ce(logits, targets, weights)
    reference_logits = logits.detach().clone().requires_grad_(True)
    reference = (F.cross_entropy(reference_logits, targets, reduction="none") * weights).sum()
    torch.testing.assert_close(loss, reference)
    loss.backward()
    reference.backward()
    assert logits.grad is not None and reference_logits.grad is not None
    torch.testing.assert_close(logits.grad, reference_logits.grad)


def test_load_function_errors() -> None:
    f = lt.load_function(LOSSES, "mean_abs_error")
    with pytest.raises(LinnetError, match="truth"):
        f(torch.zeros(2, 3), torch.zeros(2, 4))  # N conflicts
    with pytest.raises(LinnetError, match="guess"):
        f(torch.zeros(2, 3, dtype=torch.float64), torch.zeros(2, 3))
    with pytest.raises(LinnetError, match="nothing"):
        lt.load_function(LOSSES, "nothing")
    with pytest.raises(LinnetError, match="errors"):
        lt.load_function("module broken\npub entry f() -> f32 { return y }", "f")


def test_generated_source_of_a_module_and_a_function() -> None:
    source = """module scale
pub block Scale<H: Dim> {
    param gain: Tensor[H; f32]
    pub entry forward<B: Dim>(x: Tensor[B, H; f32]) -> Tensor[B, H; f32] {
        return x * gain
    }
}"""
    m = lt.load(source, generics={"H": 2}, weights={"gain": np.ones(2, np.float32)}, compile=True)
    with pytest.raises(LinnetError, match="not run"):
        m.generated_source()
    m(torch.ones(3, 2))
    text = m.generated_source()
    assert "def entry(W, S, H, x):" in text and "W['gain']" in text
    from linnet.ir.core import TensorType

    other = m.generated_source("forward", [TensorType((5, 2), "f32")])
    assert "f32[5,2]" in other
    assert lt.generate_source(m.lowered()) == other
    interpreted = lt.load(source, generics={"H": 2}, weights={"gain": np.ones(2, np.float32)})
    with pytest.raises(LinnetError, match="compile=True"):
        interpreted.generated_source()


def test_entry_generics_and_numpy_inputs() -> None:
    """A generic no input determines comes from `generics=`; NumPy arrays are accepted."""
    source = """module grid
pub block Grid<H: Dim> {
    param gain: Tensor[H; f32]
    pub entry positions<S: Dim>() -> Tensor[S, H; f32] {
        let rows = cast<f32>(iota<i32>(S))
        let out[s, h] = rows[s] * gain[h]
        return out
    }
    pub entry forward(x: Tensor[H; f32]) -> Tensor[H; f32] {
        return x * gain
    }
}"""
    for compile in (False, True):
        m = lt.load(source, generics={"H": 2}, weights={"gain": np.array([1.0, 10.0], np.float32)},
                    compile=compile)  # fmt: skip
        out = m.run_entry("positions", [], generics={"S": 3})
        assert out.tolist() == [[0.0, 0.0], [1.0, 10.0], [2.0, 20.0]]
        with pytest.raises(LinnetError, match="S"):
            m.run_entry("positions", [])
        assert m(np.array([2.0, 3.0], np.float32)).tolist() == [2.0, 30.0]


def test_shape_generics_given_explicitly() -> None:
    """A `Shape` generic's value is a list: the per-shape cache still takes it."""
    source = """module grid
pub block Scale<H: Dim> {
    param gain: Tensor[H; f32]
    pub entry scale<*S: Shape>(x: Tensor[*S, H; f32]) -> Tensor[*S, H; f32] {
        return x * gain
    }
}"""
    m = lt.load(source, generics={"H": 2}, weights={"gain": np.array([1.0, 10.0], np.float32)})
    for shape in ([2, 3], [2, 3], [4]):
        x = np.ones((*shape, 2), np.float32)
        out = m.run_entry("scale", [x], generics={"S": shape})
        assert out.shape == (*shape, 2) and out[..., 1].min() == 10.0
    with pytest.raises(LinnetError, match="S"):
        m.run_entry("scale", [np.ones((4, 2), np.float32)], generics={"S": [5]})


def test_importing_linnet_does_not_import_torch() -> None:
    code = "import sys, linnet, linnet.ir, linnet.weights; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_public_api() -> None:
    assert sorted(lt.__all__) == [
        "LinnetFunction", "LinnetModule", "export_linnet", "generate_source", "load", "load_function",
    ]  # fmt: skip


@pytest.mark.parametrize("module", ["linnet.torch.load", "linnet.torch.function"])
def test_doctests(module: str) -> None:
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0
