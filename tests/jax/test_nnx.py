"""`linnet.jax.load_nnx` / `to_nnx`: Flax NNX modules over a small model with every kind of member.

The model has a param, an optional param, a buffer, an array of sub-blocks,
an optional sub-block and a state member, with a forward and a stateful
entry. Checked against `load_source` (the values) and NumPy (the state):
the module tree and its `nnx.state` paths equal the Linnet parameter paths
with the right variable types; `__call__` and the entry methods equal
`load_source`; `nnx.grad` of a loss equals `jax.grad` through `load_source`
(1e-6); one AdamW step through `nnx.Optimizer` equals optax on the raw pytree;
the state lives in `StateVar`s across calls and under `nnx.jit`; `to_nnx` of
`load`, `load_source` and `load_model`; and the errors.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")
nnx = pytest.importorskip("flax.nnx")
optax = pytest.importorskip("optax")

import jax.numpy as jnp  # noqa: E402

import linnet.jax as lj  # noqa: E402
from linnet.errors import LinnetError  # noqa: E402
from linnet.jax.flax_nnx import Buffer, LinnetBlock, StateVar  # noqa: E402

SOURCE = """module doc
block Layer<H: Dim> {
    param weight: Tensor[H, H; f32]
    param bias: Tensor[H; f32]? = none
    pub fn forward<B: Dim>(x: Tensor[B, H; f32]) -> Tensor[B, H; f32] {
        let z[b, o] = sum[i] x[b, i] * weight[o, i]
        let y = tanh(z)
        return match bias {
            some(b) => y + b
            none => y
        }
    }
}

block Gate<H: Dim> {
    param g: Tensor[H; f32]
    pub fn forward<B: Dim>(x: Tensor[B, H; f32]) -> Tensor[B, H; f32] {
        return x * g
    }
}

pub block Net<H: Dim, L: Dim> {
    sub layers: [Layer<H>; L]
    sub gate: Gate<H>? = none
    buffer scale: Tensor[H; f32]
    state total: Tensor[H; f32]
    state calls: Tensor[1; i32]
    pub entry forward<B: Dim>(x: Tensor[B, H; f32]) -> Tensor[B, H; f32] {
        return run(x)
    }
    fn run<B: Dim>(x: Tensor[B, H; f32]) -> Tensor[B, H; f32] {
        var h = x * scale
        static for layer in layers {
            h = layer.forward(h)
        }
        return match gate {
            some(g) => g.forward(h)
            none => h
        }
    }
    pub entry accumulate(x: Tensor[1, H; f32]) -> Tensor[H; f32] {
        let y = run(x)
        let s[h] = sum[b] y[b, h]
        total = total + s
        calls = calls + 1
        return total
    }
}
"""

H, L = 4, 2


def weights(gate: bool) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    arrays = {
        "scale": rng.uniform(0.5, 1.5, H).astype(np.float32),
        "layers.0.weight": rng.standard_normal((H, H)).astype(np.float32) * 0.5,
        "layers.0.bias": rng.standard_normal(H).astype(np.float32),
        "layers.1.weight": rng.standard_normal((H, H)).astype(np.float32) * 0.5,
    }
    if gate:
        arrays["gate.g"] = rng.standard_normal(H).astype(np.float32)
    return arrays


def flat(state: Any) -> dict[str, Any]:
    """`nnx.State` as Linnet path -> variable."""
    return {".".join(str(p) for p in path): v for path, v in nnx.to_flat_state(state)}


@pytest.mark.parametrize("gate", [True, False], ids=["gate", "no-gate"])
def test_modules_follow_the_blocks_and_paths_equal_parameter_paths(gate: bool) -> None:
    arrays = weights(gate)
    module = lj.load_nnx(SOURCE, generics={"H": H, "L": L}, weights=arrays)
    assert type(module).__name__ == "Net" and isinstance(module, nnx.Module)
    assert isinstance(module.layers, nnx.List) and len(module.layers) == L
    assert all(type(layer).__name__ == "Layer" for layer in module.layers)
    assert type(module.layers[0]) is type(module.layers[1])
    assert isinstance(module.layers[0], LinnetBlock)
    assert not hasattr(module.layers[1], "bias")  # an absent optional param
    assert hasattr(module, "gate") == gate  # an absent optional sub
    state = flat(nnx.state(module))
    expected = {*arrays, "total", "calls"}
    assert set(state) == expected == set(module.parameter_paths())
    assert set(flat(nnx.state(module, nnx.Param))) == {p for p in arrays if p != "scale"}
    assert isinstance(module.scale, Buffer) and not isinstance(module.scale, nnx.Param)
    assert isinstance(module.total, StateVar) and isinstance(module.calls, StateVar)
    for path, array in arrays.items():
        np.testing.assert_array_equal(np.asarray(state[path][...]), array)


@pytest.mark.parametrize("gate", [True, False], ids=["gate", "no-gate"])
def test_calls_equal_load_source(gate: bool) -> None:
    arrays = weights(gate)
    generics = {"H": H, "L": L}
    module = lj.load_nnx(SOURCE, generics=generics, weights=arrays)
    reference = lj.load_source(SOURCE, generics=generics, weights=arrays)
    x = np.random.default_rng(1).standard_normal((3, H)).astype(np.float32)
    want = np.asarray(reference(x))
    np.testing.assert_array_equal(np.asarray(module(x)), want)
    np.testing.assert_array_equal(np.asarray(module.forward(x)), want)
    np.testing.assert_array_equal(np.asarray(module.run_entry("forward", x=x)), want)
    assert sorted(module.entries) == ["accumulate", "forward"]


def test_state_is_kept_in_state_variables_also_under_nnx_jit() -> None:
    arrays = weights(True)
    module = lj.load_nnx(SOURCE, generics={"H": H, "L": L}, weights=arrays)
    reference = lj.load_source(SOURCE, generics={"H": H, "L": L}, weights=arrays)
    rng = np.random.default_rng(2)
    rows = [rng.standard_normal((1, H)).astype(np.float32) for _ in range(4)]
    step = nnx.jit(lambda m, x: m.accumulate(x))
    expected = np.zeros(H, np.float64)
    for calls, x in enumerate(rows, start=1):
        got = module.accumulate(x) if calls % 2 else step(module, x)
        expected += np.asarray(reference(x), np.float64).sum(axis=0)
        np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(np.asarray(module.total[...]), expected, rtol=1e-6, atol=1e-6)
        assert int(module.calls[...][0]) == calls
    module.reset_state()
    assert not np.asarray(module.total[...]).any() and int(module.calls[...][0]) == 0


def loss_of(out: Any, target: np.ndarray) -> Any:
    return jnp.mean((out - target) ** 2)


def test_nnx_grad_equals_jax_grad_through_load_source() -> None:
    arrays = weights(True)
    generics = {"H": H, "L": L}
    module = lj.load_nnx(SOURCE, generics=generics, weights=arrays)
    f = lj.load_source(SOURCE, generics=generics, weights=arrays)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, H)).astype(np.float32)
    target = rng.standard_normal((5, H)).astype(np.float32)
    grads = nnx.jit(nnx.grad(lambda m: loss_of(m(x), target)))(module)
    trained = {p: a for p, a in f.parameters.items() if p != "scale"}
    want = jax.grad(lambda p: loss_of(f.apply(p, x), target))(trained)
    got = flat(grads)
    assert set(got) == set(want)
    for path, value in want.items():
        assert float(jnp.abs(value).max()) > 0, path
        np.testing.assert_allclose(
            np.asarray(got[path][...]), np.asarray(value), rtol=1e-6, atol=1e-6, err_msg=path
        )


def test_one_adamw_step_through_nnx_optimizer_equals_optax() -> None:
    arrays = weights(True)
    generics = {"H": H, "L": L}
    module = lj.load_nnx(SOURCE, generics=generics, weights=arrays)
    f = lj.load_source(SOURCE, generics=generics, weights=arrays)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((5, H)).astype(np.float32)
    target = rng.standard_normal((5, H)).astype(np.float32)
    tx = optax.adamw(1e-2, weight_decay=0.1)

    optimizer = nnx.Optimizer(module, tx, wrt=nnx.Param)

    @nnx.jit
    def train_step(m: Any, opt: Any) -> Any:
        loss, grads = nnx.value_and_grad(lambda m: loss_of(m(x), target))(m)
        opt.update(m, grads)
        return loss

    loss = train_step(module, optimizer)

    params = {p: a for p, a in f.parameters.items() if p != "scale"}
    raw_loss, grads = jax.value_and_grad(lambda p: loss_of(f.apply(p, x), target))(params)
    opt_state = tx.init(params)
    updates, _ = tx.update(grads, opt_state, params)
    stepped = optax.apply_updates(params, updates)
    np.testing.assert_allclose(float(loss), float(raw_loss), rtol=1e-6)
    now = flat(nnx.state(module, nnx.Param))
    for path, value in stepped.items():
        got = np.asarray(now[path][...])
        assert not np.array_equal(got, arrays[path]), f"{path} did not move"
        np.testing.assert_allclose(got, np.asarray(value), rtol=1e-6, atol=1e-6, err_msg=path)
    np.testing.assert_array_equal(np.asarray(module.scale[...]), arrays["scale"])  # a buffer
    # the module runs with its new values
    np.testing.assert_allclose(
        np.asarray(module(x)), np.asarray(f.apply(stepped, x)), rtol=1e-6, atol=1e-6
    )


@pytest.mark.parametrize("loader", ["load_source", "load", "load_model"])
def test_to_nnx_of_loaded_functions_and_models(loader: str) -> None:
    arrays = weights(False)
    generics = {"H": H, "L": L}
    loaded = getattr(lj, loader)(SOURCE, generics=generics, weights=arrays)
    x = np.random.default_rng(5).standard_normal((1, H)).astype(np.float32)
    if loader == "load_model":
        loaded.run_entry("accumulate", [x])  # its state is copied into the module
    module = lj.to_nnx(loaded)
    reference = lj.load_source(SOURCE, generics=generics, weights=arrays)
    np.testing.assert_array_equal(np.asarray(module(x)), np.asarray(reference(x)))
    step = np.asarray(reference(x)).sum(axis=0)
    runs = 2 if loader == "load_model" else 1
    np.testing.assert_allclose(np.asarray(module.accumulate(x)), runs * step, rtol=1e-6)
    grads = nnx.grad(lambda m: jnp.sum(m(x)))(module)  # differentiable, whatever the loader
    assert set(flat(grads)) == {"layers.0.weight", "layers.0.bias", "layers.1.weight"}


def test_entry_picks_call_and_module_level_entries() -> None:
    arrays = weights(False)
    module = lj.load_nnx(SOURCE, generics={"H": H, "L": L}, weights=arrays, entry="accumulate")
    x = np.ones((1, H), np.float32)
    np.testing.assert_array_equal(np.asarray(module(x)), np.asarray(module.total[...]))
    plain = lj.load_nnx("""module doc
pub entry twice(x: Tensor[3; f32]) -> Tensor[3; f32] {
    return x * 2.0
}
""")
    assert flat(nnx.state(plain)) == {}
    np.testing.assert_array_equal(np.asarray(plain(np.ones(3, np.float32))), [2.0, 2.0, 2.0])


def test_errors_name_the_problem() -> None:
    module = lj.load_nnx(SOURCE, generics={"H": H, "L": L}, weights=weights(False))
    with pytest.raises(LinnetError, match="no entry `decode`"):
        module.run_entry("decode", np.ones((1, H), np.float32))
    with pytest.raises(LinnetError, match="has no input `y`"):
        module(y=np.ones((1, H), np.float32))
    with pytest.raises(LinnetError, match="no entry `nope`"):
        lj.load_nnx(SOURCE, generics={"H": H, "L": L}, weights=weights(False), entry="nope")
    del module.scale
    with pytest.raises(LinnetError, match="lacks the variable `scale`"):
        module(np.ones((1, H), np.float32))
    with pytest.raises(LinnetError, match="to_nnx takes"):
        lj.to_nnx(object())  # type: ignore[arg-type]
    with pytest.raises(LinnetError, match=r"layers\.0\.weight"):
        lj.load_nnx(SOURCE, generics={"H": H, "L": L}, weights={"scale": np.ones(4, np.float32)})


def test_a_member_named_like_a_module_attribute_is_refused_clearly() -> None:
    clash = """module doc
pub block Odd<H: Dim> {
    param train: Tensor[H; f32]
    pub entry forward(x: Tensor[H; f32]) -> Tensor[H; f32] {
        return x * train
    }
}
"""
    with pytest.raises(LinnetError, match=r"member `train` of block `Odd` \(path `train`\)"):
        lj.load_nnx(clash, generics={"H": 2}, weights={"train": np.ones(2, np.float32)})
    f = lj.load_source(clash, generics={"H": 2}, weights={"train": np.ones(2, np.float32)})
    np.testing.assert_array_equal(np.asarray(f(np.ones(2, np.float32))), [1.0, 1.0])
