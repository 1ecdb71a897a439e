"""`--grad` through runtime `for` loops and scans (language-extensions 6.3) against torch.autograd.

The exporter differentiates `for` ops itself (`linnet.ir.grad_scan`: the carried values
each iteration starts from are stacked, the iterations replayed backwards); the
reference is PyTorch's autodiff through linnet.torch on the same source, in f64.
"""

from __future__ import annotations

import numpy as np
import pytest
from scan_cases import GRAD_CASES, GRAD_SOURCE, autograd_reference

import linnet.torch as lt
from linnet.onnx import export_function, export_model


def _exported(name: str, generics: dict[str, int], inputs: list[np.ndarray]) -> list[np.ndarray]:
    exported = export_function(GRAD_SOURCE, name, generics=generics, grad=True)
    session = exported.session("cpu")
    feeds = {i.name: x for i, x in zip(session.get_inputs(), inputs, strict=True)}
    names = [io.name for io in exported.outputs]
    assert names == ["loss", *(f"grad{k}" for k in range(len(inputs)))]
    return session.run(names, feeds)


@pytest.mark.parametrize(("name", "generics", "inputs"), GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_exported_gradients_equal_autograd(
    name: str, generics: dict[str, int], inputs: list[np.ndarray]
) -> None:
    got = _exported(name, generics, inputs)
    expected = autograd_reference(name, inputs)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)


BLOCK = """module cell

pub block Cell<I: Dim, H: Dim> {
    param w: Tensor[H, I; f64]
    param u: Tensor[H, H; f64]
    buffer scale: Tensor[H; f64]

    pub entry loss<T: Dim>(xs: Tensor[T, I; f64]) -> f64 {
        var h = fill<f64>([H], 0.0)
        let hs = for t in 0..T {
            let x = xs[t]
            let a[i] = sum[j] w[i, j] * x[j]
            let r[i] = sum[k] u[i, k] * h[k]
            h = tanh(a + r) * scale
            yield h
        }
        return sum[t, i] hs[t, i] * hs[t, i]
    }
}
"""


def test_block_params_get_gradients_through_a_scan() -> None:
    rng = np.random.default_rng(3)
    weights = {
        "w": rng.standard_normal((4, 3)),
        "u": rng.standard_normal((4, 4)) * 0.5,
        "scale": rng.random(4) + 0.5,
    }
    xs = rng.standard_normal((6, 3))
    sizes = {"I": 3, "H": 4}
    exported = export_model(BLOCK, generics={**sizes, "T": 6}, entry="loss", grad=True)
    grad_paths = {io.name: io.path for io in exported.outputs if io.name.startswith("grad")}
    assert list(grad_paths.values()) == ["w", "u"]  # params only, not the buffer
    feeds = {"xs": xs}
    feeds |= {io.name: weights[io.path] for io in exported.inputs if io.role in ("param", "buffer")}
    session = exported.session("cpu")
    names = [io.name for io in exported.outputs]
    got = dict(zip(names, session.run(names, feeds), strict=True))
    reference = lt.load(BLOCK, generics=sizes, weights=weights, trainable=True)
    loss = reference.run_entry("loss", [xs])
    loss.backward()
    np.testing.assert_allclose(got["loss"], loss.detach().numpy(), rtol=1e-12)
    by_path = dict(reference.named_parameters())
    for name, path in grad_paths.items():
        np.testing.assert_allclose(got[name], by_path[path].grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(("name", "generics", "inputs"), GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_differentiated_ir_verifies_and_interprets_alike(
    name: str, generics: dict[str, int], inputs: list[np.ndarray]
) -> None:
    from linnet.ir.grad import differentiate_entry
    from linnet.ir.interp import run_function
    from linnet.ir.verify import verify
    from linnet.pipeline import check_source, compile_entry
    from linnet.target import Target

    fn = compile_entry(check_source(GRAD_SOURCE), Target(entry=name, generics=generics)).function
    differentiated, _ = differentiate_entry(fn)
    verify(differentiated)
    got, _ = run_function(differentiated, {}, {}, inputs)
    for g, e in zip(got, autograd_reference(name, inputs), strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)
