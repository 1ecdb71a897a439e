"""Kernels through Pallas in the generated JAX (language-extensions 4.5, 4.7), interpret mode.

Each kernel of examples/kernels/tiles.linnet (a row softmax, a tiled matmul
with a K loop, an atomic histogram, a weighted prefix sum in a runtime `for`...) runs through `pl.pallas_call`
with `interpret=True` (`LINNET_PALLAS_INTERPRET=1`) and is compared with its
op's body run by the NumPy reference interpreter, on inputs whose ragged edges
the masks guard. Without the interpret switch on a CPU, and when the kernel's
`where` clause fails, the generated code inlines the body instead.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax")

from linnet.check.program import CheckedProgram
from linnet.ir.core import Function, Op, TensorType
from linnet.ir.interp import run_function
from linnet.ir.lower import lower_function
from linnet.ir.passes import optimize
from linnet.pipeline import check_program

TILES = Path(__file__).parents[2] / "examples" / "kernels" / "tiles.linnet"
RNG = np.random.default_rng(47)


@pytest.fixture(scope="module")
def program() -> CheckedProgram:
    return check_program(TILES.read_text(encoding="utf-8"), None)


def lowered(program: CheckedProgram, entry: str, inputs: list[np.ndarray]) -> tuple[Function, Op]:
    types = [TensorType(a.shape, "f32" if a.dtype == np.float32 else "i32") for a in inputs]
    fn = optimize(lower_function(program, program.graph.roots[0], entry, types))
    call = next(op for op in fn.body.ops if op.kind == "call")
    return fn, call


CASES = [
    ("row_softmax", [RNG.standard_normal((7, 50), dtype=np.float32) * 4], 1e-6),
    ("row_softmax", [RNG.standard_normal((3, 64), dtype=np.float32)], 1e-6),
    (
        "product",
        [
            RNG.standard_normal((37, 45), dtype=np.float32),
            RNG.standard_normal((45, 21), dtype=np.float32),
        ],
        1e-5,
    ),
    (
        "product",
        [
            RNG.standard_normal((32, 16), dtype=np.float32),
            RNG.standard_normal((16, 48), dtype=np.float32),
        ],
        1e-5,
    ),
    ("lengths", [RNG.standard_normal((5, 150), dtype=np.float32), np.array(0.5, np.float32)], 1e-6),
    ("lengths", [RNG.standard_normal((3, 40), dtype=np.float32), np.array(-2.0, np.float32)], 0.0),
    ("histogram", [RNG.integers(-4, 21, 300).astype(np.int32)], 0.0),
    ("histogram", [RNG.integers(0, 16, 128).astype(np.int32)], 0.0),
    ("parts", [RNG.standard_normal(200, dtype=np.float32)], 0.0),
    ("running", [RNG.standard_normal((9, 50), dtype=np.float32)], 1e-5),  # a runtime `for`
    ("running", [RNG.standard_normal((1, 32), dtype=np.float32)], 1e-6),
]


@pytest.mark.parametrize(("entry", "inputs", "tolerance"), CASES)
def test_kernel_equals_body(
    program: CheckedProgram,
    entry: str,
    inputs: list[np.ndarray],
    tolerance: float,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from linnet.jax import pallas
    from linnet.jax.codegen import generate

    monkeypatch.setenv("LINNET_PALLAS_INTERPRET", "1")
    fn, call = lowered(program, entry, inputs)
    assert pallas.explain(call) is None
    bodies, _ = run_function(fn, {}, {}, inputs)
    key = call.attrs["kernel_instance"].key
    before = pallas.LAUNCHES[key]
    generated = generate(fn)
    assert "_kernel" in generated.source  # the launch replaced the inlined body
    results, _ = generated.entry({}, {}, *inputs)
    assert pallas.LAUNCHES[key] == before + 1
    assert len(results) == len(bodies)
    for result, body in zip(results, bodies, strict=True):
        scale = max(float(np.abs(body).max()), 1.0)
        assert np.abs(np.asarray(result, np.float64) - body).max() <= tolerance * scale


def test_body_runs_without_pallas_or_where(
    program: CheckedProgram, monkeypatch: pytest.MonkeyPatch
) -> None:
    from linnet.jax import pallas
    from linnet.jax.codegen import generate

    monkeypatch.delenv("LINNET_PALLAS_INTERPRET", raising=False)
    x = RNG.standard_normal((2, 30), dtype=np.float32)
    fn, call = lowered(program, "row_softmax", [x])
    if pallas.jax.default_backend() != "gpu":
        assert "LINNET_PALLAS_INTERPRET" in str(pallas.explain(call))
        assert "_kernel" not in generate(fn).source
    monkeypatch.setenv("LINNET_PALLAS_INTERPRET", "1")
    wide = RNG.standard_normal((2, 100), dtype=np.float32)  # C = 100 > BC = 64
    fn, call = lowered(program, "row_softmax", [wide])
    assert "where" in str(pallas.explain(call))
    generated = generate(fn)
    assert "_kernel" not in generated.source
    (result,), _ = generated.entry({}, {}, wide)
    (body,), _ = run_function(fn, {}, {}, [wide])
    assert np.abs(np.asarray(result) - body).max() <= 1e-6


def test_gradient_is_the_bodys(program: CheckedProgram, monkeypatch: pytest.MonkeyPatch) -> None:
    # the kernel computes the value; jax.grad differentiates the op's body (4.5 "Gradients")
    import jax
    import jax.numpy as jnp

    from linnet.jax import pallas
    from linnet.jax.codegen import generate

    monkeypatch.setenv("LINNET_PALLAS_INTERPRET", "1")
    a = RNG.standard_normal((37, 45), dtype=np.float32)
    b = RNG.standard_normal((45, 21), dtype=np.float32)
    w = RNG.standard_normal((37, 21), dtype=np.float32)
    fn, call = lowered(program, "product", [a, b])
    entry = generate(fn).entry
    key = call.attrs["kernel_instance"].key
    before = pallas.LAUNCHES[key]

    def loss(x: jax.Array, y: jax.Array) -> jax.Array:
        (out,), _ = entry({}, {}, x, y)
        return jnp.sum(out * w)

    ga, gb = jax.grad(loss, argnums=(0, 1))(a, b)
    assert pallas.LAUNCHES[key] == before + 1
    np.testing.assert_allclose(np.asarray(ga), w @ b.T, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(gb), a.T @ w, rtol=1e-4, atol=1e-4)


def test_kernel_forward_clause_backward(monkeypatch: pytest.MonkeyPatch) -> None:
    # an op with a kernel and a gradient clause (x4_kernel_clause; language-extensions
    # 3.3, 4.5): Pallas computes the value inside the clause's custom_vjp, whose
    # backward is the clause's straight-through `dy`, not the clip's derivative
    import jax
    import jax.numpy as jnp

    from linnet.jax import pallas
    from linnet.jax.codegen import generate

    monkeypatch.setenv("LINNET_PALLAS_INTERPRET", "1")
    clause = TILES.parents[2] / "tests" / "conformance" / "valid" / "x4_kernel_clause.linnet"
    checked = check_program(clause.read_text(encoding="utf-8"), None)
    x = RNG.standard_normal(100, dtype=np.float32) * 2
    w = RNG.standard_normal(100, dtype=np.float32)
    fn, call = lowered(checked, "main", [x])
    assert pallas.explain(call) is None
    key = call.attrs["kernel_instance"].key
    generated = generate(fn)
    assert "_kernel" in generated.source and "clauses.apply" in generated.source

    def loss(v: jax.Array) -> jax.Array:
        (out,), _ = generated.entry({}, {}, v)
        return jnp.sum(out * w)

    before = pallas.LAUNCHES[key]
    (value,), _ = generated.entry({}, {}, x)
    np.testing.assert_array_equal(np.asarray(value), np.clip(x, -1.0, 1.0))
    np.testing.assert_array_equal(np.asarray(jax.grad(loss)(x)), w)
    assert pallas.LAUNCHES[key] == before + 2  # the plain call and the gradient's forward


def test_runtime_for_in_64_bit_mode(
    program: CheckedProgram, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the loop variable is `i64` when JAX keeps 64-bit values (x64_scope), else int32
    from linnet.jax import pallas
    from linnet.jax.codegen import generate
    from linnet.jax.dtypes import x64_scope

    monkeypatch.setenv("LINNET_PALLAS_INTERPRET", "1")
    x = RNG.standard_normal((5, 40), dtype=np.float32)
    fn, call = lowered(program, "running", [x])
    key = call.attrs["kernel_instance"].key
    before = pallas.LAUNCHES[key]
    with x64_scope(True):
        (result,), _ = generate(fn).entry({}, {}, x)
    assert pallas.LAUNCHES[key] == before + 1
    weighted = x.astype(np.float64) * (np.arange(5)[:, None] + 1)
    np.testing.assert_allclose(
        np.asarray(result), np.cumsum(weighted, axis=0), rtol=1e-5, atol=1e-5
    )
