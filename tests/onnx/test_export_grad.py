"""`--grad` (language-extensions 6): the exported loss and gradients against torch.autograd.

The reference is PyTorch's own autodiff through linnet.torch (`trainable=True` for
params, `requires_grad` inputs for module-level entries), in f64, so the two
differentiate the same program independently: ours in the Core IR (`linnet.ir.grad`),
exported to ONNX and run in ONNX Runtime; PyTorch's on its own ops.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch

import linnet.torch as lt
from linnet.errors import LinnetError
from linnet.onnx import export_function, export_model

ELEMENTWISE = """module objectives

pub entry objective<N: Dim>(a: Tensor[N; f64], b: Tensor[N; f64], k: i32) -> f64
where N > 2 {
    let c = exp(a * 0.3) / (1.0 + abs(b)) - log(1.5 + tanh(a)) * sqrt(b * b + 1.0)
    let d = max(c, b) + min(a, 0.0) * rsqrt(a * a + 2.0) + sin(a) * cos(b)
    let e = select(a > b, d, c * 2.0)
    let running = cumsum(e, axis = 0)
    let head = concat(running[1:], e[:1], axis = 0)
    let spread[i, j] = head[i] * b[j] - a[j]
    let peak[i] = max[j] spread[i, j]
    let total = sum[i] peak[i] * head[i]
    return total + cast<f64>(k) * sum[i] a[i]
}
"""


def _autograd_module_entry(source: str, name: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
    fn = lt.load_function(source, name)
    tensors = [torch.tensor(x, requires_grad=x.dtype == np.float64) for x in inputs]
    loss = fn(*tensors)
    floats = [t for t in tensors if t.requires_grad]
    grads = torch.autograd.grad(loss, floats, allow_unused=True)
    return [loss.detach().numpy(), *(g.numpy() for g in grads)]


def _run(exported, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = exported.session("cpu")
    names = [io.name for io in exported.outputs]
    return dict(zip(names, session.run(names, feeds), strict=True))


def test_module_entry_gradients_equal_autograd() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(7), rng.standard_normal(7)
    k = np.array(3, np.int32)
    exported = export_function(ELEMENTWISE, "objective", generics={"N": 7}, grad=True)
    assert [io.name for io in exported.outputs] == ["loss", "grad0", "grad1"]
    props = {p.key: p.value for p in exported.model.metadata_props}
    assert props["linnet.gradient.grad0"] == "a" and props["linnet.gradient.grad1"] == "b"
    got = _run(exported, {"a": a, "b": b, "k": k})
    loss, ga, gb = _autograd_module_entry(ELEMENTWISE, "objective", [a, b, k])
    np.testing.assert_allclose(got["loss"], loss, rtol=1e-12)
    np.testing.assert_allclose(got["grad0"], ga, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got["grad1"], gb, rtol=1e-10, atol=1e-12)


TIES = """module ties

pub entry peak<N: Dim>(x: Tensor[N; f64]) -> f64 {
    let top = max[i] x[i]
    return top + max(x[0], x[1])
}
"""


def test_ties_split_the_gradient_evenly() -> None:
    x = np.array([2.0, 2.0, 1.0, 2.0])
    got = _run(export_function(TIES, "peak", generics={"N": 4}, grad=True), {"x": x})
    # max over three tied maxima: 1/3 each; max(x0, x1) tied: 1/2 each
    np.testing.assert_allclose(got["grad0"], [1 / 3 + 0.5, 1 / 3 + 0.5, 0.0, 1 / 3])


MODEL = """module tiny_lm

use std.nn.attention::{attention, causal_mask}
use std.nn.embedding::{Embedding}
use std.nn.linear::{Linear}
use std.nn.loss::{cross_entropy}
use std.nn.mlp::{SwiGlu}
use std.nn.norm::{RmsNorm, layer_norm}

pub block TinyLm<Vocab: Dim, H: Dim, Heads: Dim, Inner: Dim, T: Float = f64>
where H % Heads == 0, Heads > 0 {
    sub embed: Embedding<Vocab, H, T>
    sub norm: RmsNorm<H, T>
    sub qkv: Linear<H, 3 * H, T>
    sub out: Linear<H, H, T>
    sub mlp: SwiGlu<H, Inner, T>
    param ln_weight: Tensor[H; T]
    param ln_bias: Tensor[H; T]
    sub head: Linear<H, Vocab, T>
    buffer unused_scale: Tensor[H; T]

    pub entry loss<S: Dim>(tokens: Tensor[1, S; i32], targets: Tensor[S; i64]) -> f32 {
        let x = embed.forward(tokens)
        let projected = qkv.forward(norm.forward(x))
        let q = reshape(projected[:, :, 0:H], [1, S, Heads, H / Heads])
        let k = reshape(projected[:, :, H:2 * H], [1, S, Heads, H / Heads])
        let v = reshape(projected[:, :, 2 * H:3 * H], [1, S, Heads, H / Heads])
        let mixed = attention(
            permute(q, [0, 2, 1, 3]),
            permute(k, [0, 2, 1, 3]),
            permute(v, [0, 2, 1, 3]),
            0.5,
            some(causal_mask<S, S>()),
        )
        let h = x + out.forward(reshape(permute(mixed, [0, 2, 1, 3]), [1, S, H]))
        let y = layer_norm(h + mlp.forward(h), ln_weight, some(ln_bias))
        let logits = reshape(head.forward(y), [S, Vocab])
        return cross_entropy(logits, targets, fill<f32>([S], 1.0))
    }
}
"""
SIZES = {"Vocab": 11, "H": 8, "Heads": 2, "Inner": 12}


def test_block_entry_gradients_equal_autograd() -> None:
    from linnet.ir.bind import bind
    from linnet.pipeline import check_source

    rng = np.random.default_rng(1)
    model = bind(check_source(MODEL), generics=SIZES)
    weights = {
        path: rng.standard_normal(t.type.shape) * 0.3
        for path, t in model.tensors.items()
        if t.kind in ("param", "buffer")
    }
    tokens = rng.integers(0, SIZES["Vocab"], size=(1, 5)).astype(np.int32)
    targets = rng.integers(0, SIZES["Vocab"], size=5).astype(np.int64)

    exported = export_model(MODEL, generics={**SIZES, "S": 5}, entry="loss", grad=True)
    grad_paths = {io.name: io.path for io in exported.outputs if io.name.startswith("grad")}
    params = [p for p, t in model.tensors.items() if t.kind == "param"]
    assert list(grad_paths.values()) == params  # every param, in manifest order; no buffer
    feeds = {"tokens": tokens, "targets": targets}
    feeds |= {io.name: weights[io.path] for io in exported.inputs if io.role == "param"}
    feeds |= {io.name: weights[io.path] for io in exported.inputs if io.role == "buffer"}
    got = _run(exported, feeds)

    reference = lt.load(MODEL, generics=SIZES, weights=weights, trainable=True)
    loss = reference.run_entry("loss", [tokens, targets])
    loss.backward()
    np.testing.assert_allclose(got["loss"], loss.detach().numpy(), rtol=1e-6)
    by_path = dict(reference.named_parameters())
    for name, path in grad_paths.items():
        np.testing.assert_allclose(
            got[name], by_path[path].grad.numpy(), rtol=1e-5, atol=1e-6, err_msg=path
        )


def test_refusals_name_the_cause() -> None:
    vector = (
        "module v\npub entry f<N: Dim>(x: Tensor[N; f32]) -> Tensor[N; f32] {\n    return x\n}\n"
    )
    with pytest.raises(LinnetError, match="one floating scalar"):
        export_function(vector, "f", generics={"N": 3}, grad=True)
    integer = (
        "module i\npub entry f<N: Dim>(x: Tensor[N; i32]) -> i32 {\n    return sum[i] x[i]\n}\n"
    )
    with pytest.raises(LinnetError, match="floating scalar"):
        export_function(integer, "f", generics={"N": 3}, grad=True)
    looped = """module w
pub entry f<N: Dim>(x: Tensor[N; f32]) -> f32 {
    var y = x
    var i: i32 = 0
    while i < 3 {
        y = y * 2.0
        i = i + 1
    }
    return sum[n] y[n]
}
"""
    with pytest.raises(LinnetError, match="while"):
        export_function(looped, "f", generics={"N": 3}, grad=True)


def test_cli_grad(tmp_path) -> None:
    import subprocess
    import sys

    source = tmp_path / "objective.linnet"
    source.write_text(ELEMENTWISE)
    out = tmp_path / "objective.onnx"
    done = subprocess.run(
        [sys.executable, "-m", "linnet", "onnx", "--grad", "--entry", "objective",
         "--bind", "N=6", "--output", str(out), str(source)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    model = onnx.load(out)
    assert [o.name for o in model.graph.output] == ["loss", "grad0", "grad1"]


def test_cli_grad_on_the_other_exporters(tmp_path) -> None:
    """`linnet torch|jax|stablehlo --grad`: the same gradients, named by GRADIENTS / an attribute."""
    import importlib.util
    import subprocess
    import sys

    source = tmp_path / "objective.linnet"
    source.write_text(ELEMENTWISE)
    args = ["--grad", "--entry", "objective", "--bind", "N=5", str(source)]

    def cli(command: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "linnet", command, *args], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    module_path = tmp_path / "objective_grad.py"
    module_path.write_text(cli("torch"))
    spec = importlib.util.spec_from_file_location("objective_grad", module_path)
    assert spec is not None and spec.loader is not None
    generated = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generated)  # the source linnet itself just generated
    assert generated.GRADIENTS == ["a", "b"]
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal(5), rng.standard_normal(5)
    results, _ = generated.run(
        {}, {}, torch.tensor(a), torch.tensor(b), torch.tensor(2, dtype=torch.int32)
    )
    expected = _autograd_module_entry(ELEMENTWISE, "objective", [a, b, np.array(2, np.int32)])
    for got, want in zip(results, expected, strict=True):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-12)

    assert "GRADIENTS = ['a', 'b']" in cli("jax")
    assert 'linnet.gradients = ["a", "b"]' in cli("stablehlo")


def test_state_outputs_follow_the_gradients() -> None:
    """6.2: the loss, one gradient per param, then the new state; state is a constant."""
    source = """module s
pub block Running<N: Dim> {
    param w: Tensor[N; f32]
    state total: Tensor[N; f32]

    pub entry loss(x: Tensor[N; f32]) -> f32 {
        total = total + x
        return sum[i] w[i] * total[i] * total[i]
    }
}
"""
    exported = export_model(source, generics={"N": 3}, entry="loss", grad=True)
    assert [(io.name, io.path) for io in exported.outputs] == [
        ("loss", None),
        ("grad0", "w"),
        ("next_state0", "total"),
    ]
    x, w, before = np.float32([1, 2, 3]), np.float32([0.5, -1, 2]), np.float32([1, 1, 1])
    got = _run(exported, {"x": x, "param0": w, "state0": before})
    after = before + x
    np.testing.assert_allclose(got["loss"], (w * after * after).sum(), rtol=1e-6)
    np.testing.assert_allclose(got["grad0"], after * after, rtol=1e-6)
    np.testing.assert_allclose(got["next_state0"], after)
