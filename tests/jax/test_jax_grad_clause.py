"""Gradient clauses in linnet.jax (language-extensions 3.4): `jax.custom_vjp` per clause call.

`jax.grad` through the generated source of `load_source` must give the
clause's gradients (NumPy f64 from the clause formulas, and the same as
`torch.autograd` through linnet.torch), with zero cotangents for floating
scalars, integer arrays (`float0`) and block members read by the op.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from linnet.jax import load_source  # noqa: E402

EXAMPLES = Path(__file__).parents[1] / "conformance" / "valid" / "x3_grad_examples.linnet"
SOURCE = (
    EXAMPLES.read_text(encoding="utf-8")
    + """
pub op picked<N: Dim>(x: Tensor[N; f32], rows: Tensor[N; i32], scale: f32) -> f32 {
    return sum[n] x[n] * cast<f32>(rows[n]) * scale
} grad(y, dy) {
    return cast<f32>(rows) * (dy * 10.0)
}

pub entry mixed<N: Dim>(x: Tensor[N; f32], rows: Tensor[N; i32], scale: f32) -> f32 {
    return picked(x, rows, scale) * scale
}
"""
)
N = 6


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def test_objective_gradients_are_the_clauses() -> None:
    rng = np.random.default_rng(0)
    a0, b0 = ((rng.normal(size=N) * 2).astype(np.float32) for _ in range(2))
    f = load_source(SOURCE, entry="objective", generics={"N": N})
    ga, gb = jax.grad(lambda a, b: f(a, b), argnums=(0, 1))(a0, b0)
    s = _sigmoid(a0.astype(np.float64))
    t = np.trunc(b0.astype(np.float64) / 0.25) * 0.25
    d_mixed = 2.0 * s * t
    d_s = np.clip(d_mixed * t, -1.0, 1.0)
    np.testing.assert_allclose(np.asarray(ga), d_s * s * (1.0 - s), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        np.asarray(gb), np.clip(d_mixed * s, -1.0, 1.0), rtol=1e-5, atol=1e-6
    )


def test_the_generated_source_applies_each_clause() -> None:
    from linnet.ir.core import TensorType
    from linnet.jax.codegen import generate
    from linnet.pipeline import check_source, lower_module_entry, optimize

    f32 = TensorType((N,), "f32")
    program = check_source(SOURCE)
    fn = optimize(lower_module_entry(program, "examples.custom_grads", "objective", [f32, f32]))
    source = generate(fn).source
    assert source.count("clauses.apply(") == 4 and source.count("def backward") == 4


def test_the_same_gradients_as_linnet_torch() -> None:
    torch = pytest.importorskip("torch")
    import linnet.torch as lt

    rng = np.random.default_rng(1)
    a0, b0 = ((rng.normal(size=N) * 2).astype(np.float32) for _ in range(2))
    f = load_source(SOURCE, entry="objective", generics={"N": N})
    got = jax.grad(lambda a, b: f(a, b), argnums=(0, 1))(a0, b0)
    a, b = torch.tensor(a0, requires_grad=True), torch.tensor(b0, requires_grad=True)
    want = torch.autograd.grad(lt.load_function(SOURCE, "objective")(a, b), [a, b])
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), w.numpy(), rtol=1e-6, atol=1e-7)


def test_scalars_and_integer_arrays_get_zero_cotangents() -> None:
    x0 = np.linspace(-1, 1, N).astype(np.float32)
    rows = np.arange(N, dtype=np.int32)
    f = load_source(SOURCE, entry="mixed", generics={"N": N})
    value = f(x0, rows, np.float32(0.5))
    assert float(value) == pytest.approx(float(np.sum(x0 * rows) * 0.25), rel=1e-6)
    gx, gscale = jax.grad(lambda x, s: f(x, rows, s), argnums=(0, 1))(x0, np.float32(0.5))
    # d/dx: the clause, rows * (dy * 10) with dy = scale = 0.5 (not the body's rows * scale)
    np.testing.assert_allclose(np.asarray(gx), rows * 5.0, rtol=1e-6)
    # d/dscale: only the outer product's rule (the op gives its scalar nothing)
    assert float(gscale) == pytest.approx(float(np.sum(x0 * rows) * 0.5), rel=1e-5)


BLOCK = """module scaled

pub block Scaler<H: Dim> {
    param gain: Tensor[H; f32]

    op squash(x: Tensor[H; f32]) -> Tensor[H; f32] {
        return tanh(x) * gain
    } grad(y, dy) {
        return dy * (gain - y * y / gain)
    }

    pub entry forward(x: Tensor[H; f32]) -> f32 {
        return sum[h] squash(x)[h] * gain[h]
    }
}
"""


def test_a_block_op_reads_its_members_without_closing_over_them() -> None:
    gain0 = np.array([0.5, 1.5, 2.0, -1.0], np.float32)
    x0 = np.array([0.3, -1.2, 2.0, 0.1], np.float32)
    f = load_source(BLOCK, generics={"H": 4}, weights={"gain": gain0})
    gx, ggain = jax.grad(lambda x, g: f.apply({"gain": g}, x), argnums=(0, 1))(x0, gain0)
    g = gain0.astype(np.float64)
    y = np.tanh(x0.astype(np.float64)) * g
    np.testing.assert_allclose(np.asarray(gx), g * (g - y * y / g), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(ggain), y, rtol=1e-5)


def test_a_float_generic_clause_in_f64() -> None:
    source = SOURCE + (
        "\npub entry squashed<N: Dim>(x: Tensor[N; f64]) -> f64 {\n"
        "    return sum[n] logistic(x)[n]\n}\n"
    )
    x0 = np.linspace(-3.0, 3.0, N)
    f = load_source(source, entry="squashed", generics={"N": N})
    before = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", True)  # traced f64 inputs need x64 on the caller's side
    try:
        gx = jax.grad(lambda x: f(x))(x0)
    finally:
        jax.config.update("jax_enable_x64", before)
    assert np.asarray(gx).dtype == np.float64
    s = _sigmoid(x0)
    np.testing.assert_allclose(np.asarray(gx), s * (1.0 - s), rtol=1e-12)
