"""`--grad` through gradient clauses (language-extensions 3.4, 6.3, 6.4).

The exported backward pass of an op with a clause is its clause. The reference
is `torch.autograd` through linnet.torch, where each such op is a
`torch.autograd.Function` (tests/torch/test_torch_grad_clause.py checks those
against NumPy): the same gradients must come out of ONNX Runtime, for the
module-level `objective` of 3.5 (section 6.4's example) and for a block whose
op reads a `param` in its clause; and the differentiated entry that `linnet
torch|jax|stablehlo --grad` print must give them on each of those backends.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import linnet.torch as lt
from linnet.cli import main
from linnet.onnx import export_function, export_model
from linnet.onnx.export.result import ExportedModel

EXAMPLES = Path(__file__).parents[1] / "conformance" / "valid" / "x3_grad_examples.linnet"
SOURCE = EXAMPLES.read_text(encoding="utf-8")
N = 6


def _run(exported: ExportedModel, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = exported.session("cpu")
    names = [io.name for io in exported.outputs]
    return dict(zip(names, session.run(names, feeds), strict=True))


def test_objective_gradients_are_the_clauses() -> None:
    rng = np.random.default_rng(0)
    a0, b0 = ((rng.normal(size=N) * 2).astype(np.float32) for _ in range(2))
    exported = export_function(SOURCE, "objective", generics={"N": N}, grad=True)
    assert [io.name for io in exported.outputs] == ["loss", "grad0", "grad1"]
    got = _run(exported, {"a": a0, "b": b0})
    a, b = torch.tensor(a0, requires_grad=True), torch.tensor(b0, requires_grad=True)
    loss = lt.load_function(SOURCE, "objective")(a, b)
    ga, gb = torch.autograd.grad(loss, [a, b])
    np.testing.assert_allclose(got["loss"], loss.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(got["grad0"], ga.numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(got["grad1"], gb.numpy(), rtol=1e-5, atol=1e-7)
    # `snap` has no derivative of its own (a cast to i64): only its clause passes one on.
    assert np.abs(got["grad1"]).max() > 0


BLOCK = """module scaled

pub block Scaler<H: Dim> {
    param gain: Tensor[H; f32]
    param shift: Tensor[H; f32]

    op squash(x: Tensor[H; f32], s: Tensor[H; f32]) -> Tensor[H; f32] {
        return tanh(x) * gain + s
    } grad(y, dy) {
        let slope = gain - (y - s) * (y - s) / gain
        return (dy * slope, dy * 0.5)
    }

    pub entry loss(x: Tensor[H; f32]) -> f32 {
        let out = squash(x * gain, shift)
        return sum[h] out[h] * out[h]
    }
}
"""


def test_block_gradients_through_a_clause_equal_autograd() -> None:
    rng = np.random.default_rng(1)
    weights = {
        "gain": rng.normal(size=4).astype(np.float32) + 2.0,
        "shift": rng.normal(size=4).astype(np.float32),
    }
    x0 = rng.normal(size=4).astype(np.float32)
    exported = export_model(BLOCK, generics={"H": 4}, entry="loss", grad=True)
    paths = {io.name: io.path for io in exported.outputs if io.name.startswith("grad")}
    assert list(paths.values()) == ["gain", "shift"]
    feeds = {"x": x0} | {io.name: weights[io.path] for io in exported.inputs if io.role == "param"}
    got = _run(exported, feeds)
    reference = lt.load(BLOCK, generics={"H": 4}, weights=weights, trainable=True)
    loss = reference.run_entry("loss", [x0])
    loss.backward()
    by_path = dict(reference.named_parameters())
    np.testing.assert_allclose(got["loss"], loss.detach().numpy(), rtol=1e-6)
    for name, path in paths.items():
        grad = by_path[path].grad
        assert grad is not None
        np.testing.assert_allclose(got[name], grad.numpy(), rtol=1e-5, atol=1e-6, err_msg=path)
    # NumPy f64 from the clause: `shift` gets dy * 0.5, not the body's dy.
    g, s = weights["gain"].astype(np.float64), weights["shift"].astype(np.float64)
    out = np.tanh(x0 * g) * g + s
    to_shift = next(name for name, path in paths.items() if path == "shift")
    np.testing.assert_allclose(got[to_shift], 2.0 * out * 0.5, rtol=1e-5)


def test_the_cli_exports_section_6_4(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "custom_grads.linnet"
    path.write_text(SOURCE, encoding="utf-8")
    out = tmp_path / "objective_grad.onnx"
    code = main(
        ["onnx", "--grad", "--entry", "objective", "--bind", "N=6", "--output", str(out), str(path)]
    )
    assert code == 0, capsys.readouterr().err
    import onnx

    model = onnx.load(str(out))
    assert [o.name for o in model.graph.output] == ["loss", "grad0", "grad1"]


@pytest.mark.parametrize("backend", ["interpreter", "torch", "torch-generated", "jax", "stablehlo"])
def test_every_grad_exporter_gives_the_clauses(backend: str) -> None:
    """The differentiated entry (what `linnet torch|jax|stablehlo --grad` print) on each
    backend against torch.autograd through the clauses."""
    from linnet.ir.core import TensorType
    from linnet.ir.grad import differentiate_entry
    from linnet.ir.interp import run_function
    from linnet.ir.regions import clause_region
    from linnet.pipeline import check_source, lower_module_entry, optimize

    f32 = TensorType((N,), "f32")
    program = check_source(SOURCE)
    lowered = optimize(
        lower_module_entry(program, "examples.custom_grads", "objective", [f32, f32])
    )
    fn, names = differentiate_entry(lowered)
    fn = optimize(fn)
    assert names == ["a", "b"]
    assert not any(clause_region(op) for op in fn.body.ops)  # each clause is spent
    rng = np.random.default_rng(2)
    a0, b0 = ((rng.normal(size=N) * 2).astype(np.float32) for _ in range(2))
    if backend == "interpreter":
        got, _ = run_function(fn, {}, {}, [a0, b0])
    elif backend.startswith("torch"):
        from linnet.torch.codegen import CompiledFunction
        from linnet.torch.runner import Runner

        cpu = torch.device("cpu")
        run = (
            CompiledFunction(fn, cpu, hoist_weights=False)
            if backend == "torch-generated"
            else Runner(fn, cpu, hoist_weights=False)
        )
        results, _ = run({}, {}, [torch.from_numpy(a0), torch.from_numpy(b0)])
        got = [r.numpy() for r in results]
    else:
        pytest.importorskip("jax")
        from linnet.jax.execute import run_function_jax

        got, _ = run_function_jax(fn, [a0, b0], {}, {}, stablehlo=backend == "stablehlo")
    a, b = torch.tensor(a0, requires_grad=True), torch.tensor(b0, requires_grad=True)
    loss = lt.load_function(SOURCE, "objective")(a, b)
    want = [loss.detach().numpy(), *(g.numpy() for g in torch.autograd.grad(loss, [a, b]))]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-5, atol=1e-7)


def test_an_op_with_a_kernel_exports_its_body_and_clause() -> None:
    # x4_kernel_clause: `--grad` exports run the op's body forward (never the kernel, 4.5)
    # and its straight-through clause backward, not the clip's derivative
    kernel_clause = EXAMPLES.with_name("x4_kernel_clause.linnet").read_text(encoding="utf-8")
    source = kernel_clause + (
        "\npub entry loss(x: Tensor[100; f32]) -> f32 {\n"
        "    let y = clipped(x, 1.0)\n"
        "    return sum[i] y[i] * y[i]\n"
        "}\n"
    )
    x = (np.random.default_rng(3).normal(size=100) * 2).astype(np.float32)
    exported = export_function(source, "loss", generics={}, grad=True)
    got = _run(exported, {"x": x})
    clipped = np.clip(x, -1.0, 1.0)
    np.testing.assert_allclose(got["loss"], np.sum(clipped.astype(np.float64) ** 2), rtol=1e-6)
    np.testing.assert_array_equal(got["grad0"], 2 * clipped)
