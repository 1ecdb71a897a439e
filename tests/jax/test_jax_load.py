"""`linnet.jax.load_source` and `load`: the public surface on small programs.

Against the NumPy reference interpreter (`linnet.ir.interp`) or NumPy f64:
a block entry with weights, gradients through `load_source` against a
hand-derived gradient, state entries (`state=` in, `(result, new_state)`
out, across calls, with a `while` loop), tuple results, module-level
entries, `std.random` bit for bit with `jax.random` (64-bit dtypes, with the
caller's `jax_enable_x64` left off), and the errors: gradients through
`load`, bad inputs, unknown paths.
"""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import jax.numpy as jnp  # noqa: E402

import linnet.jax as lj  # noqa: E402
from linnet.errors import LinnetError  # noqa: E402

LOADERS = {"source": lj.load_source, "stablehlo": lj.load}

SCALE = """module doc
pub block Scale<H: Dim> {
    param gain: Tensor[H; f32]
    param bias: Tensor[H; f32]? = none
    pub entry forward<B: Dim>(x: Tensor[B, H; f32]) -> Tensor[B, H; f32] {
        let y = tanh(x * gain)
        return match bias {
            some(b) => y + b
            none => y
        }
    }
}
"""

COUNTER = """module doc
pub block Counter<H: Dim> {
    state total: Tensor[H; f32]
    state calls: Tensor[1; i32]
    pub entry step(x: Tensor[H; f32], n: i32) -> (Tensor[H; f32], Tensor[1; i32]) {
        var acc = x
        var i: i32 = 0
        while i < n {
            acc = acc * 2.0
            i = i + 1
        }
        total = total + acc
        calls = calls + 1
        return (total, calls)
    }
}
"""

RANDOM = """module cases

use std.random::{bits, fold_in, split, uniform}

pub entry draw<N: Dim>(key: Tensor[2; i64]) -> (Tensor[N; i64], Tensor[N, 2; i64], Tensor[N; f32]) {
    return (bits<N>(key), split<N>(key), uniform<N, f32>(key))
}

pub entry fold(key: Tensor[2; i64], data: i32) -> Tensor[2; i64] {
    return fold_in(key, data)
}
"""


def scale_weights(bias: bool) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    weights = {"gain": rng.standard_normal(4).astype(np.float32)}
    if bias:
        weights["bias"] = rng.standard_normal(4).astype(np.float32)
    return weights


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_block_entry_matches_numpy(loader: str, bias: bool) -> None:
    weights = scale_weights(bias)
    f = LOADERS[loader](SCALE, generics={"H": 4}, weights=weights)
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    expected = np.tanh(x.astype(np.float64) * weights["gain"]) + weights.get("bias", 0.0)
    for _ in range(2):  # the second call reuses the compiled entry
        got = np.asarray(f(x))
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    # load_source keeps jnp calls; load's StableHLO is traced from the lean lax program
    assert ("lax.tanh" if loader == "stablehlo" else "jnp.tanh") in f.generated_source()


def test_gradients_through_load_source() -> None:
    weights = scale_weights(False)
    f = lj.load_source(SCALE, generics={"H": 4}, weights=weights)
    x = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)

    def loss(parameters: dict, inputs: jax.Array) -> jax.Array:
        return jnp.sum(f.apply(parameters, inputs) ** 2)

    grads = jax.jit(jax.grad(loss))(f.parameters, x)
    g = weights["gain"].astype(np.float64)
    y = np.tanh(x * g)
    expected = np.sum(2 * y * (1 - y**2) * x, axis=0)
    np.testing.assert_allclose(np.asarray(grads["gain"]), expected, rtol=1e-5, atol=1e-6)
    _, vjp = jax.vjp(lambda inputs: f.apply(f.parameters, inputs), jnp.asarray(x))
    (dx,) = vjp(jnp.ones((3, 4), jnp.float32))
    np.testing.assert_allclose(np.asarray(dx), (1 - y**2) * g, rtol=1e-5, atol=1e-6)


def test_load_refuses_gradients_clearly() -> None:
    f = lj.load(SCALE, generics={"H": 4}, weights=scale_weights(False))
    x = np.ones((2, 4), np.float32)
    with pytest.raises(LinnetError, match=r"not differentiable; use linnet\.jax\.load_source"):
        jax.grad(lambda p: jnp.sum(f.apply(p, x)))(f.parameters)


@pytest.mark.parametrize("loader", LOADERS)
def test_state_entry_with_a_while_loop(loader: str) -> None:
    f = LOADERS[loader](COUNTER, generics={"H": 3})
    x = np.array([1.0, -2.0, 0.5], np.float32)
    state = None
    total = np.zeros(3, np.float64)
    for calls, n in enumerate([0, 1, 3], start=1):
        (acc, count), state = f(x, n, state=state)
        total += x * 2.0**n
        np.testing.assert_allclose(np.asarray(acc), total, rtol=1e-6)
        assert int(count[0]) == calls
        assert sorted(state) == ["calls", "total"]
    assert "lax.while_loop" in f.generated_source()
    zeros = f.initial_state()
    assert not np.asarray(zeros["total"]).any() and int(zeros["calls"][0]) == 0


@pytest.mark.parametrize("loader", LOADERS)
def test_std_random_equals_jax_random_bit_for_bit(loader: str) -> None:
    assert not jax.config.read("jax_enable_x64")
    draw = LOADERS[loader](RANDOM, entry="draw")
    fold = LOADERS[loader](RANDOM, entry="fold")
    for seed in (0, 42, 2**31 + 5):
        key = jax.random.key(seed)
        data = np.asarray(jax.random.key_data(key)).astype(np.int64)
        bits, keys, uniform = draw(data, generics={"N": 16})
        np.testing.assert_array_equal(
            np.asarray(bits), np.asarray(jax.random.bits(key, (16,), jnp.uint32))
        )
        split = [np.asarray(jax.random.key_data(k)) for k in jax.random.split(key, 16)]
        np.testing.assert_array_equal(np.asarray(keys), np.stack(split).astype(np.int64))
        np.testing.assert_array_equal(
            np.asarray(uniform), np.asarray(jax.random.uniform(key, (16,)))
        )
        assert np.asarray(bits).dtype == np.int64
        for value in (3, -1, 7919):
            folded = jax.random.key_data(jax.random.fold_in(key, np.int32(value)))
            np.testing.assert_array_equal(np.asarray(fold(data, value)), np.asarray(folded))
    assert not jax.config.read("jax_enable_x64")  # the scoped x64 did not leak


def test_errors_name_the_problem() -> None:
    f = lj.load_source(SCALE, generics={"H": 4}, weights=scale_weights(False))
    with pytest.raises(LinnetError, match="input `x` has dtype"):
        f(np.ones((2, 4), np.complex64))
    with pytest.raises(LinnetError, match="must be an array"):
        f("text")
    with pytest.raises(LinnetError, match="no param or buffer `nope`"):
        f.apply({"nope": np.ones(4, np.float32)}, np.ones((2, 4), np.float32))
    with pytest.raises(LinnetError, match="has no input `y`"):
        f(y=np.ones((2, 4), np.float32))
    with pytest.raises(LinnetError, match="has no state"):
        f(np.ones((2, 4), np.float32), state={})
    with pytest.raises(LinnetError, match="gain"):
        lj.load_source(SCALE, generics={"H": 4})
