"""`std.random` (stdlib.md 19): Threefry known answers, and `jax.random` bit for bit.

`split`, `bits`, `fold_in` and `uniform<_, f32>` must equal JAX's defaults (the
partitionable Threefry-2x32 layout) on many keys; the installed JAX version is
printed in the test summary. `normal` (Box-Muller, cosine branch) and
`categorical` (Gumbel-max) follow their stdlib.md algorithms, recomputed here
in NumPy from JAX's uniform draws, which `uniform` must equal.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
from stdlib_support import BF16, StdCases, f64

SOURCE = """module cases

use std.random::{MASK, bits, categorical, fold_in, normal, split, threefry2x32, uniform}

pub entry rounds<N: Dim>(key: Tensor[2; i64], counter: Tensor[N, 2; i64]) -> Tensor[N, 2; i64] {
    return threefry2x32(key, counter)
}

pub entry draw<N: Dim>(key: Tensor[2; i64]) -> (Tensor[N; i64], Tensor[N, 2; i64], Tensor[N; f32]) {
    return (bits<N>(key), split<N>(key), uniform<N, f32>(key))
}

pub entry fold(key: Tensor[2; i64], data: i32) -> Tensor[2; i64] {
    return fold_in(key, data)
}

pub entry floats<N: Dim, T: Float>(key: Tensor[2; i64]) -> (Tensor[N; T], Tensor[N; T]) {
    return (uniform<N, T>(key), normal<N, T>(key))
}

pub entry sample<B: Dim, V: Dim, T: Float>(
    key: Tensor[2; i64],
    logits: Tensor[B, V; T],
) -> Tensor[B; i32] {
    return categorical(key, logits)
}

pub entry mask() -> i64 {
    return MASK
}
"""

U32 = 2**32


@pytest.fixture(scope="module")
def std() -> StdCases:
    return StdCases(SOURCE)


def key(k0: int, k1: int) -> np.ndarray:
    return np.array([k0, k1], np.int64)


def many_keys(count: int) -> np.ndarray:
    """Edge keys (zeros, all ones, mixed) and random 32-bit words."""
    rng = np.random.default_rng(200)
    edges = np.array([[0, 0], [0, 42], [U32 - 1, U32 - 1], [U32 - 1, 0], [1, U32 - 1]])
    return np.concatenate([edges, rng.integers(0, U32, (count - len(edges), 2))]).astype(np.int64)


KEYS = many_keys(40)


def test_mask(std: StdCases) -> None:
    std.expect("mask", [], [np.int64(U32 - 1)])


@pytest.mark.parametrize(
    ("k", "counter", "expected"),
    [
        ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
        ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
        ((U32 - 1, U32 - 1), (U32 - 1, U32 - 1), (0x1CB996FC, 0xBB002BE7)),
    ],
    ids=["zeros", "pi", "ones"],
)
def test_threefry_random123_known_answers(
    std: StdCases, k: tuple[int, int], counter: tuple[int, int], expected: tuple[int, int]
) -> None:
    std.expect("rounds", [key(*k), np.array([counter], np.int64)], [np.array([expected])])
    # in a batch, each counter pair is encrypted on its own
    batch = np.array([(1, 2), counter, counter], np.int64)
    runs = std.run("rounds", [key(*k), batch])
    for backend, (got,) in runs.items():
        assert got[1:].tolist() == [list(expected)] * 2, backend
        assert got[0].tolist() != list(expected), backend


# stdlib.md's known answers for jax.random.key(0) and key(42) (key data [0, 0] and [0, 42])
KNOWN = {
    (0, 0): {
        "bits": [4070199207, 4202968722, 1427181096, 2012915765],
        "split": [[1797259609, 2579123966], [928981903, 3453687069], [4146024105, 2718843009]],
        "uniform": [
            0.9476670026779175,
            0.9785798788070679,
            0.33229148387908936,
            0.46866846084594727,
        ],
        "normal": [-1.2007260, -2.7189660],
        "fold_in": {3: [2467461003, 3840466878], -1: [743310391, 3789761811]},
    },
    (0, 42): {
        "bits": [2098992034, 2919706841, 2646866425, 2409546199],
        "split": [[1832780943, 270669613], [64467757, 2916123636], [2465931498, 255383827]],
        "uniform": [
            0.48870956897735596,
            0.6797971725463867,
            0.6162714958190918,
            0.5610160827636719,
        ],
        "normal": [-0.8626987, -1.3996174],
        "fold_in": {3: [3134548294, 894150801]},
    },
}


@pytest.mark.parametrize("k", list(KNOWN), ids=["key0", "key42"])
def test_stdlib_md_known_answers(std: StdCases, k: tuple[int, int]) -> None:
    known = KNOWN[k]
    for backend, (words, keys, floats) in std.run("draw", [key(*k)], generics={"N": 4}).items():
        assert words.tolist() == known["bits"], backend
        assert keys[:3].tolist() == known["split"], backend
        assert floats.tolist() == known["uniform"], backend  # exact f32 values
    for data, folded in known["fold_in"].items():
        std.expect("fold", [key(*k), np.int32(data)], [np.array(folded)])
    uniform2 = np.float32(known["uniform"][:2])
    std.expect(
        "floats",
        [key(*k)],
        [uniform2, known["normal"]],
        generics={"N": 2, "T": "f32"},
        rtol=1e-6,
        atol=1e-6,
    )


@functools.cache
def jax_draws(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """bits, split key data and f32 uniform (`(n,)` each) of every key in `KEYS`, from JAX.

    One jitted, vmapped function per `n`, with JAX's default PRNG settings.
    """
    import jax
    import jax.numpy as jnp

    random = jax.random

    def one(data: Any) -> tuple[Any, Any, Any]:
        k = random.wrap_key_data(data)
        words = random.bits(k, (n,), jnp.uint32)
        return words, random.key_data(random.split(k, n)), random.uniform(k, (n,), jnp.float32)

    out = jax.jit(jax.vmap(one))(jnp.asarray(KEYS, dtype=jnp.uint32))
    words, split, uniform = (np.asarray(a) for a in out)
    return words.astype(np.int64), split.astype(np.int64), uniform


@pytest.mark.parametrize(("count", "n"), [(40, 5), (4, 1), (4, 33)])
def test_bits_split_uniform_match_jax(std: StdCases, jax_random: Any, count: int, n: int) -> None:
    words, split, uniform = jax_draws(n)
    for index, k in enumerate(KEYS[:count]):
        runs = std.run("draw", [k], generics={"N": n})
        for backend, (got_words, got_split, got_uniform) in runs.items():
            where = f"key {k.tolist()} N={n} on {backend}"
            np.testing.assert_array_equal(got_words, words[index], where)
            np.testing.assert_array_equal(got_split, split[index], where)
            assert got_uniform.dtype == np.float32
            # bit for bit: compare the f32 encodings, not values within a tolerance
            np.testing.assert_array_equal(
                got_uniform.view(np.uint32), uniform[index].view(np.uint32), where
            )


def test_fold_in_matches_jax(std: StdCases, jax_random: Any) -> None:
    """Including negative data, which JAX casts to uint32 (wraps)."""
    import jax
    import jax.numpy as jnp

    keys = KEYS
    rng = np.random.default_rng(201)
    fixed = [0, 1, -1, 2**31 - 1, -(2**31)]
    data = np.array(fixed + rng.integers(-(2**31), 2**31, 3).tolist(), np.int32)
    wrapped = jax.vmap(jax_random.wrap_key_data)(jnp.asarray(keys, dtype=jnp.uint32))
    fold = jax.vmap(jax.vmap(jax_random.fold_in, (None, 0)), (0, None))
    expected = np.asarray(jax.vmap(jax.vmap(jax_random.key_data))(fold(wrapped, data)), np.int64)
    for i, k in enumerate(keys):
        picks = data if i < 4 else data[[i % len(data)]]  # every value on a few keys
        for d in picks:
            j = int(np.flatnonzero(data == d)[0])
            std.expect("fold", [k, d], [expected[i, j]])


@pytest.mark.parametrize("dtype", ["bf16", "f16", "f32"])
def test_normal_box_muller_and_uniform_casts(std: StdCases, jax_random: Any, dtype: str) -> None:
    """normal<N>: sqrt(-2 log(1 - u[i])) cos(2 pi u[N + i]) on u = uniform<2N, f32>, cast to T.

    u is JAX's f32 uniform (which `uniform` equals bit for bit); the reference
    works in f64 from those f32 values. Non-f32 `uniform` is the f32 value cast.
    """
    n = 64
    np_dtype = {"bf16": BF16, "f16": np.float16, "f32": np.float32}[dtype]
    step = {"bf16": 2.0**-8, "f16": 2.0**-11, "f32": 1e-5}[dtype]
    _, _, u = jax_draws(2 * n)
    # partitionable layout: word i depends on i alone, so uniform<N> is a prefix of uniform<2N>
    u_n = u[:, :n]
    for index, k in enumerate(KEYS[:6]):
        uf = f64(u[index])
        radius = np.sqrt(-2.0 * np.log(1.0 - uf[:n]))
        z = radius * np.cos(2.0 * np.pi * uf[n:])
        runs = std.run("floats", [k], generics={"N": n, "T": dtype})
        for backend, (got_u, got_z) in runs.items():
            assert got_u.dtype == np_dtype and got_z.dtype == np_dtype
            np.testing.assert_array_equal(f64(got_u), f64(u_n[index].astype(np_dtype)), backend)
            # f32 log and cos: about 1e-6 absolute per unit of radius, then one cast to T
            bound = step * np.abs(z) + 2e-6 * (1.0 + radius)
            assert np.all(np.abs(f64(got_z) - z) <= bound), (backend, np.abs(f64(got_z) - z).max())


def test_categorical_gumbel_max(std: StdCases, jax_random: Any) -> None:
    """argmax_v (f32(logits) + g), g = -log(-log(1 - u)), u = uniform<B*V, f32> row-major."""
    b, v = 4, 10
    keys = KEYS[:16]
    _, _, u = jax_draws(128)
    u = u[:, : b * v]  # a prefix, as above
    rng = np.random.default_rng(202)
    logits = rng.standard_normal((b, v)).astype(np.float32)
    logits[3] = -5.0
    logits[3, 7] = 60.0  # a certain winner
    for index, k in enumerate(keys):
        uf = f64(u[index]).reshape(b, v)
        noisy = f64(logits) + -np.log(-np.log(1.0 - uf))
        ordered = np.sort(noisy, axis=-1)
        assert np.all(ordered[:, -1] - ordered[:, -2] > 1e-4)  # no near ties in f32
        expected = np.argmax(noisy, axis=-1)
        assert expected[3] == 7
        runs = std.expect("sample", [k, logits], [expected])
        assert all(r[0].dtype == np.int32 for r in runs.values())
    # bf16 logits are widened to f32 before the noise is added
    half = logits.astype(BF16)
    uf = f64(u[0]).reshape(b, v)
    expected = np.argmax(f64(half) + -np.log(-np.log(1.0 - uf)), axis=-1)
    std.expect("sample", [keys[0], half], [expected])


def test_categorical_follows_the_softmax_distribution(std: StdCases) -> None:
    """400 rows with the same logits draw independently: frequencies match softmax (chi-square)."""
    logits = np.tile(np.float32([1.0, 0.0, -1.0, 2.0]), (400, 1))
    probs = np.exp(f64(logits[0])) / np.exp(f64(logits[0])).sum()
    draws = std.run("sample", [key(7, 11), logits])["numpy"][0]
    counts = np.bincount(draws, minlength=4)
    chi2 = (((counts - 400 * probs) ** 2) / (400 * probs)).sum()
    assert chi2 < 16.3, (counts, probs)  # p = 0.001 for 3 degrees of freedom
