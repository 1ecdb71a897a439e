"""Gradient clauses in linnet.torch (language-extensions 3.3, 3.4): the clause is the backward.

Each op with a clause runs as one `torch.autograd.Function`, interpreted and
generated. `torch.autograd.grad` through the examples of 3.5 must give the
clause's gradients, computed here independently in NumPy f64 from the clause
formulas, and not the body's (`snap`'s body has no gradient at all, `gated`'s
is unclipped). Parameters outside `P1..Pk` (scalars, block members) receive none.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import linnet.torch as lt

EXAMPLES = Path(__file__).parents[1] / "conformance" / "valid" / "x3_grad_examples.linnet"
SOURCE = (
    EXAMPLES.read_text(encoding="utf-8")
    + """
pub entry snapped<N: Dim>(x: Tensor[N; f32]) -> Tensor[N; f32] {
    return snap(x, 0.25)
}

pub entry clipped<N: Dim>(s: Tensor[N; f32], g: Tensor[N; f32], limit: f32) -> Tensor[N; f32] {
    return gated(s, g, limit)
}

pub entry squashed<N: Dim>(x: Tensor[N; f64]) -> Tensor[N; f64] {
    return logistic(x)
}

pub entry squared<N: Dim>(v: Tensor[N; f32]) -> f32 {
    return energy(v)
}
"""
)
N = 7
COMPILE = [False, True]


def _leaf(values: np.ndarray) -> torch.Tensor:
    return torch.tensor(values, requires_grad=True)


def _f64(t: torch.Tensor) -> np.ndarray:
    return t.detach().numpy().astype(np.float64)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _data(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.normal(size=N) * 2).astype(np.float32), (rng.normal(size=N) * 2).astype(np.float32)


@pytest.mark.parametrize("compile", COMPILE)
def test_objective_gradients_are_the_clauses(compile: bool) -> None:
    a0, b0 = _data(0)
    a, b = _leaf(a0), _leaf(b0)
    loss = lt.load_function(SOURCE, "objective", compile=compile)(a, b)
    ga, gb = torch.autograd.grad(loss, [a, b])
    # NumPy f64: forward through the bodies, backward through the clauses.
    s = _sigmoid(a0.astype(np.float64))
    t = np.trunc(b0.astype(np.float64) / 0.25) * 0.25
    mixed = s * t
    assert float(loss.detach()) == pytest.approx(float(np.sum(mixed * mixed)), rel=1e-5)
    d_mixed = mixed * 2.0  # energy: v * (2 * de), de = 1
    d_s = np.clip(d_mixed * t, -1.0, 1.0)  # gated, clipped to [-limit, limit]
    d_t = np.clip(d_mixed * s, -1.0, 1.0)
    np.testing.assert_allclose(_f64(ga), d_s * s * (1.0 - s), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_f64(gb), d_t, rtol=1e-5, atol=1e-6)  # snap: straight through
    # Not the body's derivative: the unclipped product rule differs where clipping bites.
    assert np.abs(d_mixed * s).max() > 1.0


@pytest.mark.parametrize("compile", COMPILE)
def test_snap_passes_the_gradient_straight_through(compile: bool) -> None:
    x0, dy0 = _data(1)
    x = _leaf(x0)
    y = lt.load_function(SOURCE, "snapped", compile=compile)(x)
    np.testing.assert_array_equal(y.detach().numpy(), np.trunc(x0 / 0.25) * np.float32(0.25))
    (gx,) = torch.autograd.grad(y, [x], torch.from_numpy(dy0))
    np.testing.assert_array_equal(gx.numpy(), dy0)


@pytest.mark.parametrize("compile", COMPILE)
def test_gated_clips_and_gives_the_scalar_nothing(compile: bool) -> None:
    s0, g0 = _data(2)
    dy0 = np.linspace(-3, 3, N).astype(np.float32)
    s, g, limit = _leaf(s0), _leaf(g0), torch.tensor(0.5, requires_grad=True)
    y = lt.load_function(SOURCE, "clipped", compile=compile)(s, g, limit)
    gs, gg, glimit = torch.autograd.grad(y, [s, g, limit], torch.from_numpy(dy0), allow_unused=True)
    dy = dy0.astype(np.float64)
    np.testing.assert_allclose(_f64(gs), np.clip(dy * g0, -0.5, 0.5), rtol=1e-6)
    np.testing.assert_allclose(_f64(gg), np.clip(dy * s0, -0.5, 0.5), rtol=1e-6)
    assert glimit is None


@pytest.mark.parametrize("compile", COMPILE)
def test_logistic_uses_its_result_in_f64(compile: bool) -> None:
    rng = np.random.default_rng(3)
    x0, dy0 = rng.normal(size=N) * 3, rng.normal(size=N)
    x = _leaf(x0)
    y = lt.load_function(SOURCE, "squashed", compile=compile)(x)
    assert y.dtype == torch.float64
    (gx,) = torch.autograd.grad(y, [x], torch.from_numpy(dy0))
    s = _sigmoid(x0)
    np.testing.assert_allclose(gx.numpy(), dy0 * s * (1.0 - s), rtol=1e-12)


@pytest.mark.parametrize("compile", COMPILE)
def test_energy_has_a_scalar_result(compile: bool) -> None:
    v0, _ = _data(4)
    v = _leaf(v0)
    e = lt.load_function(SOURCE, "squared", compile=compile)(v)
    assert e.shape == ()
    (gv,) = torch.autograd.grad(e * 3.0, [v])
    np.testing.assert_allclose(_f64(gv), v0.astype(np.float64) * 6.0, rtol=1e-6)


def test_without_autograd_the_body_runs_alone() -> None:
    a0, b0 = _data(5)
    with torch.no_grad():
        loss = lt.load_function(SOURCE, "objective")(torch.from_numpy(a0), torch.from_numpy(b0))
    assert loss.grad_fn is None


BLOCK = """module scaled

pub block Scaler<H: Dim> {
    param gain: Tensor[H; f32]

    op squash(x: Tensor[H; f32]) -> Tensor[H; f32] {
        return tanh(x) * gain
    } grad(y, dy) {
        return dy * (gain - y * y / gain)
    }

    pub entry forward(x: Tensor[H; f32]) -> Tensor[H; f32] {
        return squash(x) * gain
    }
}
"""


@pytest.mark.parametrize("compile", COMPILE)
def test_a_block_op_reads_its_members_in_the_clause(compile: bool) -> None:
    gain0 = np.array([0.5, 1.5, 2.0, -1.0], np.float32)
    model = lt.load(
        BLOCK, generics={"H": 4}, weights={"gain": gain0}, compile=compile, trainable=True
    )
    x0 = np.array([0.3, -1.2, 2.0, 0.1], np.float32)
    x = _leaf(x0)
    out = model(x)
    (gain,) = [p for _, p in model.named_parameters()]
    gx, ggain = torch.autograd.grad(out.sum(), [x, gain])
    g = gain0.astype(np.float64)
    y = np.tanh(x0.astype(np.float64)) * g
    # The outer `* gain` is differentiated normally; the op gives `gain` nothing itself.
    np.testing.assert_allclose(_f64(gx), g * (g - y * y / g), rtol=1e-5)
    np.testing.assert_allclose(_f64(ggain), y, rtol=1e-5)


def test_the_standalone_module_keeps_the_clauses() -> None:
    from linnet.ir.core import TensorType
    from linnet.pipeline import check_source, lower_module_entry, optimize
    from linnet.torch.codegen import CompiledFunction
    from linnet.torch.standalone import standalone_source

    f32 = TensorType((N,), "f32")
    fn = optimize(
        lower_module_entry(check_source(SOURCE), "examples.custom_grads", "objective", [f32, f32])
    )
    text = standalone_source(
        CompiledFunction(fn, torch.device("cpu"), hoist_weights=False).generated, "t"
    )
    assert text.count("clauses.apply(") == 4
    namespace: dict[str, object] = {}
    exec(compile(text, "<standalone>", "exec"), namespace)  # our own generated module
    a0, b0 = _data(6)
    a, b = _leaf(a0), _leaf(b0)
    (loss,), _ = namespace["run"]({}, {}, a, b)  # type: ignore[operator]
    expected = lt.load_function(SOURCE, "objective")
    a2, b2 = _leaf(a0), _leaf(b0)
    for got, want in zip(
        torch.autograd.grad(loss, [a, b]),
        torch.autograd.grad(expected(a2, b2), [a2, b2]),
        strict=True,
    ):
        torch.testing.assert_close(got, want)
