"""The standard library's ops lowered and run against independent NumPy f64 math (stdlib.md).

Module-level entries call each op; the references below are written from the
stdlib documentation (HF / PyTorch conventions), not from the Linnet bodies.
`op` calls must stay `call` regions named `module::op`.
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
import pytest
from lower_support import checked, close, execute, kinds, t

from linnet.check.program import CheckedProgram
from linnet.ir.core import Function, TensorType
from linnet.ir.lower import lower_function
from linnet.ir.verify import verify

SOURCE = """
module t

use std.nn.linear::{linear}
use std.nn.softmax::{softmax}
use std.nn.norm::{rms_norm, layer_norm, group_norm}
use std.nn.attention::{attention, causal_mask, grouped_attention}
use std.nn.rope::{rope}
use std.nn.mlp::{swiglu}
use std.nn.activations::{gelu, gelu_erf, silu}
use std.nn.decoding::{argmax}
use std.nn.cache::{write_at, write_rows, write_slots}
use std.nn.embedding::{embedding}
use std.nn.loss::{cross_entropy, log_softmax}
use std.nn.conv::{conv2d}
use std.nn.pool::{max_pool2d}
use std.random

pub entry lin<*S: Shape, I: Dim, O: Dim>(x: Tensor[*S, I; f32], w: Tensor[O, I; f32], b: Tensor[O; f32]) -> (Tensor[*S, O; f32], Tensor[*S, O; f32]) {
    return (linear(x, w), linear(x, w, some(b)))
}
pub entry sm<*S: Shape, N: Dim, T: Float>(x: Tensor[*S, N; T]) -> Tensor[*S, N; T] { return softmax(x) }
pub entry rn<*S: Shape, H: Dim, T: Float>(x: Tensor[*S, H; T], w: Tensor[H; T]) -> Tensor[*S, H; T] { return rms_norm(x, w) }
pub entry ln<B: Dim, H: Dim>(x: Tensor[B, H; f32], w: Tensor[H; f32], b: Tensor[H; f32]) -> (Tensor[B, H; f32], Tensor[B, H; f32]) {
    return (layer_norm(x, w, some(b), eps = 0.001), layer_norm(x, w))
}
pub entry gn<B: Dim, C: Dim, H: Dim, W: Dim>(x: Tensor[B, C, H, W; f32], w: Tensor[C; f32], b: Tensor[C; f32]) -> Tensor[B, C, H, W; f32]
where C % 2 == 0 {
    return group_norm<B, C, H, W, 2, f32>(x, w, b)
}
pub entry att<B: Dim, H: Dim, Q: Dim, K: Dim, D: Dim>(q: Tensor[B, H, Q, D; f32], k: Tensor[B, H, K, D; f32], v: Tensor[B, H, K, D; f32]) -> Tensor[B, H, Q, D; f32] {
    return attention(q, k, v, 0.5, some(causal_mask<Q, K>()))
}
pub entry gqa<B: Dim, H: Dim, Hk: Dim, S: Dim, D: Dim>(q: Tensor[B, H, S, D; f32], k: Tensor[B, Hk, S, D; f32], v: Tensor[B, Hk, S, D; f32]) -> Tensor[B, H, S, D; f32]
where Hk > 0, H % Hk == 0 {
    return grouped_attention(q, k, v, 0.25)
}
pub entry rp<B: Dim, H: Dim, S: Dim, D: Dim>(x: Tensor[B, H, S, D; f32], c: Tensor[S, D; f32], s: Tensor[S, D; f32]) -> Tensor[B, H, S, D; f32] where D % 2 == 0 {
    return rope(x, c, s)
}
pub entry sg<B: Dim, H: Dim, I: Dim>(x: Tensor[B, H; f32], g: Tensor[I, H; f32], u: Tensor[I, H; f32], d: Tensor[H, I; f32]) -> Tensor[B, H; f32] {
    return swiglu(x, g, u, d)
}
pub entry acts<N: Dim>(x: Tensor[N; f32]) -> (Tensor[N; f32], Tensor[N; f32], Tensor[N; f32]) {
    return (gelu(x), gelu_erf(x), silu(x))
}
pub entry am<*S: Shape, N: Dim>(x: Tensor[*S, N; f32]) -> Tensor[*S; i32] { return argmax(x) }
pub entry wa<B: Dim, H: Dim, S: Dim, D: Dim>(c: Tensor[B, H, S, D; f32], v: Tensor[B, H, 1, D; f32], at: i32) -> Tensor[B, H, S, D; f32]
where S > 0 {
    return write_at(c, v, at)
}
pub entry wr<B: Dim, H: Dim, S: Dim, D: Dim>(c: Tensor[B, H, S, D; f32], v: Tensor[B, H, 1, D; f32], at: Tensor[B; i32]) -> Tensor[B, H, S, D; f32]
where S > 0 {
    return write_rows(c, v, at)
}
pub entry wss<B: Dim, H: Dim, S: Dim, M: Dim, N: Dim, D: Dim>(c: Tensor[B, H, S, D; f32], v: Tensor[M, H, N, D; f32], slots: Tensor[M; i32], at: i32) -> Tensor[B, H, S, D; f32]
where S > 0, N > 0, M > 0 {
    return write_slots(c, v, slots, at)
}
pub entry emb<*S: Shape, V: Dim, H: Dim>(ids: Tensor[*S; i32], table: Tensor[V, H; bf16]) -> Tensor[*S, H; bf16] { return embedding(ids, table) }
pub entry ce<N: Dim, V: Dim>(logits: Tensor[N, V; f32], targets: Tensor[N; i64], w: Tensor[N; f32]) -> (f32, Tensor[N, V; f32]) {
    return (cross_entropy(logits, targets, w), log_softmax(logits))
}
pub entry conv<B: Dim, Ci: Dim, Co: Dim, H: Dim, W: Dim>(x: Tensor[B, Ci, H, W; f32], w: Tensor[Co, Ci, 3, 3; f32], b: Tensor[Co; f32]) -> Tensor[B, Co, (H + 2 - 3) / 2 + 1, (W + 2 - 3) / 2 + 1; f32] {
    return conv2d<B, Ci, Co, H, W, 3, 2, 1, f32>(x, w, some(b))
}
pub entry pool<B: Dim, C: Dim, H: Dim, W: Dim>(x: Tensor[B, C, H, W; f32]) -> Tensor[B, C, (H + 2 - 3) / 2 + 1, (W + 2 - 3) / 2 + 1; f32] {
    return max_pool2d<B, C, H, W, 3, 2, 1, f32>(x)
}
pub entry fry<N: Dim>(key: Tensor[2; i64], counter: Tensor[N, 2; i64]) -> Tensor[N, 2; i64] { return random.threefry2x32(key, counter) }
pub entry draws<N: Dim>(key: Tensor[2; i64], data: i32) -> (Tensor[N; i64], Tensor[N, 2; i64], Tensor[2; i64], Tensor[N; f32], Tensor[N; f32]) {
    return (random.bits<N>(key), random.split<N>(key), random.fold_in(key, data), random.uniform<N, f32>(key), random.normal<N, f32>(key))
}
pub entry pick<B: Dim, V: Dim>(key: Tensor[2; i64], logits: Tensor[B, V; f32]) -> Tensor[B; i32] {
    return random.categorical(key, logits)
}
"""


@functools.cache
def _program() -> CheckedProgram:
    return checked(SOURCE)


def lower(
    name: str, inputs: list[TensorType], generics: dict[str, object] | None = None
) -> Function:
    fn = lower_function(_program(), "t", name, inputs, generics=generics)
    verify(fn)
    return fn


def callees(fn: Function) -> list[str]:
    return [str(op.attrs["callee"]) for op in fn.body.ops if op.kind == "call"]


rng = np.random.default_rng(5)


def rand(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def softmax_ref(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("lead", [(2, 3), (4,), ()])
def test_linear(lead: tuple[int, ...]) -> None:
    fn = lower("lin", [t((*lead, 5)), t((3, 5)), t((3,))])
    assert callees(fn) == ["std.nn.linear::linear"] * 2
    assert kinds(fn).count("contract") == 2
    x, w, b = rand(*lead, 5), rand(3, 5), rand(3)
    (plain, biased), _ = execute(fn, [x, w, b])
    y = x.astype(np.float64) @ w.T
    close(plain, y)
    close(biased, y + b)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_softmax_and_rms_norm(dtype: str) -> None:
    npd = np.float32 if dtype == "f32" else ml_dtypes.bfloat16
    tol = 1e-5 if dtype == "f32" else 2e-2
    x, w = rand(2, 3, 8).astype(npd), rand(8).astype(npd)
    (y,), _ = execute(lower("sm", [t((2, 3, 8), dtype)]), [x])
    assert y.dtype == npd
    close(y, softmax_ref(x.astype(np.float64)), rtol=tol, atol=tol)
    (y,), _ = execute(lower("rn", [t((2, 3, 8), dtype), t((8,), dtype)]), [x, w])
    xd = x.astype(np.float64)
    ref = xd / np.sqrt((xd**2).mean(axis=-1, keepdims=True) + 1e-5) * w.astype(np.float64)
    close(y, ref, rtol=tol, atol=tol)


def test_layer_norm_and_group_norm() -> None:
    x, w, b = rand(3, 6), rand(6), rand(6)
    (with_bias, plain), _ = execute(lower("ln", [t((3, 6)), t((6,)), t((6,))]), [x, w, b])
    xd = x.astype(np.float64)
    mu, var = xd.mean(-1, keepdims=True), xd.var(-1, keepdims=True)
    close(with_bias, (xd - mu) / np.sqrt(var + 1e-3) * w + b)
    close(plain, (xd - mu) / np.sqrt(var + 1e-5) * w)
    x4 = rand(2, 4, 3, 3)
    (y,), _ = execute(lower("gn", [t((2, 4, 3, 3)), t((4,)), t((4,))]), [x4, w[:4], b[:4]])
    g = x4.astype(np.float64).reshape(2, 2, -1)
    n = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)).reshape(
        2, 4, 3, 3
    )
    close(y, n * w[:4, None, None] + b[:4, None, None], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("q_len", "k_len"), [(4, 4), (1, 5), (2, 5)])
def test_attention_with_causal_mask(q_len: int, k_len: int) -> None:
    b, h, d = 2, 3, 4
    fn = lower("att", [t((b, h, q_len, d)), t((b, h, k_len, d)), t((b, h, k_len, d))])
    assert callees(fn) == ["std.nn.attention::causal_mask", "std.nn.attention::attention"]
    q, k, v = rand(b, h, q_len, d), rand(b, h, k_len, d), rand(b, h, k_len, d)
    (y,), _ = execute(fn, [q, k, v])
    scores = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k) * 0.5
    allowed = np.arange(k_len)[None, :] <= np.arange(q_len)[:, None] + (k_len - q_len)
    weights = softmax_ref(np.where(allowed, scores, -1e30))
    close(y, np.einsum("bhqk,bhkd->bhqd", weights, v), rtol=1e-4)


def test_grouped_query_attention_repeats_kv_heads() -> None:
    q, k, v = rand(1, 4, 3, 2), rand(1, 2, 3, 2), rand(1, 2, 3, 2)
    fn = lower("gqa", [t((1, 4, 3, 2)), t((1, 2, 3, 2)), t((1, 2, 3, 2))])
    (y,), _ = execute(fn, [q, k, v])
    kk, vv = np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1)
    scores = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), kk) * 0.25
    close(y, np.einsum("bhqk,bhkd->bhqd", softmax_ref(scores), vv), rtol=1e-4)


def test_rope_rotates_half() -> None:
    x, c, s = rand(1, 2, 3, 4), rand(3, 4), rand(3, 4)
    (y,), _ = execute(lower("rp", [t((1, 2, 3, 4)), t((3, 4)), t((3, 4))]), [x, c, s])
    rotated = np.concatenate([-x[..., 2:], x[..., :2]], axis=-1)
    close(y, x.astype(np.float64) * c + rotated.astype(np.float64) * s)


def test_swiglu_and_activations() -> None:
    x, g, u, d = rand(2, 4), rand(6, 4), rand(6, 4), rand(4, 6)
    (y,), _ = execute(lower("sg", [t((2, 4)), t((6, 4)), t((6, 4)), t((4, 6))]), [x, g, u, d])
    xd = x.astype(np.float64)
    gate = xd @ g.T
    close(y, (gate / (1 + np.exp(-gate)) * (xd @ u.T)) @ d.T, rtol=1e-4)
    z = rand(7) * 3
    (tanh_gelu, erf_gelu, silu), _ = execute(lower("acts", [t((7,))]), [z])
    zd = z.astype(np.float64)
    close(tanh_gelu, 0.5 * zd * (1 + np.tanh(0.7978845608 * (zd + 0.044715 * zd**3))))
    from math import erf

    close(erf_gelu, zd * 0.5 * (1 + np.vectorize(erf)(zd / np.sqrt(2))), rtol=1e-5, atol=1e-6)
    close(silu, zd / (1 + np.exp(-zd)))


def test_argmax_takes_the_first_maximum() -> None:
    x = np.array([[[1, 3, 3, 0], [5, 1, 5, 5]], [[0, 0, 0, 0], [-1, -2, 7, 7]]], np.float32)
    (y,), _ = execute(lower("am", [t((2, 2, 4))]), [x])
    np.testing.assert_array_equal(y, np.argmax(x, axis=-1).astype(np.int32))


def test_cache_writes() -> None:
    cache, value = rand(2, 2, 5, 3), rand(2, 2, 1, 3)
    (y,), _ = execute(
        lower("wa", [t((2, 2, 5, 3)), t((2, 2, 1, 3)), t((), "i32")]), [cache, value, np.int32(3)]
    )
    expected = cache.copy()
    expected[:, :, 3] = value[:, :, 0]
    np.testing.assert_array_equal(y, expected)
    at = np.array([4, 0], np.int32)
    (y,), _ = execute(
        lower("wr", [t((2, 2, 5, 3)), t((2, 2, 1, 3)), t((2,), "i32")]), [cache, value, at]
    )
    expected = cache.copy()
    for row in range(2):
        expected[row, :, at[row]] = value[row, :, 0]
    np.testing.assert_array_equal(y, expected)
    big = rand(4, 2, 5, 3)
    span = rand(2, 2, 2, 3)
    slots = np.array([3, 1], np.int32)
    fn = lower("wss", [t((4, 2, 5, 3)), t((2, 2, 2, 3)), t((2,), "i32"), t((), "i32")])
    (y,), _ = execute(fn, [big, span, slots, np.int32(2)])
    expected = big.copy()
    for m, slot in enumerate(slots):
        expected[slot, :, 2:4] = span[m]
    np.testing.assert_array_equal(y, expected)


def test_embedding_in_bf16() -> None:
    table = rand(6, 4).astype(ml_dtypes.bfloat16)
    ids = np.array([[5, 0, 2]], np.int32)
    fn = lower("emb", [t((1, 3), "i32"), t((6, 4), "bf16")])
    assert "gather" in kinds(fn)
    (y,), _ = execute(fn, [ids, table])
    np.testing.assert_array_equal(y, table[ids])


def test_cross_entropy_and_log_softmax() -> None:
    logits = rand(4, 6)
    targets = np.array([0, 5, 2, 2], np.int64)
    w = np.array([1.0, 0.5, 0.0, 2.0], np.float32)
    (loss, lp), _ = execute(lower("ce", [t((4, 6)), t((4,), "i64"), t((4,))]), [logits, targets, w])
    x = logits.astype(np.float64)
    ref_lp = (
        x
        - x.max(-1, keepdims=True)
        - np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True))
    )
    close(lp, ref_lp)
    close(loss, -(w * ref_lp[np.arange(4), targets]).sum(), rtol=1e-5)


def test_conv2d_and_max_pool() -> None:
    x, w, b = rand(1, 2, 5, 4), rand(3, 2, 3, 3), rand(3)
    fn = lower("conv", [t((1, 2, 5, 4)), t((3, 2, 3, 3)), t((3,))])
    assert "contract" in kinds(fn)
    (y,), _ = execute(fn, [x, w, b])
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = np.zeros((1, 3, 3, 2))
    for i in range(3):
        for j in range(2):
            patch = padded[:, :, 2 * i : 2 * i + 3, 2 * j : 2 * j + 3]
            ref[:, :, i, j] = np.einsum("bckl,ockl->bo", patch, w)
    close(y, ref + b[None, :, None, None], rtol=1e-4, atol=1e-5)
    (p,), _ = execute(lower("pool", [t((1, 2, 5, 4))]), [x])
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    ref = np.array(
        [
            [
                [
                    [padded[0, c, 2 * i : 2 * i + 3, 2 * j : 2 * j + 3].max() for j in range(2)]
                    for i in range(3)
                ]
                for c in range(2)
            ]
        ]
    )
    np.testing.assert_array_equal(p, ref)


# ---------------------------------------------------------------- std.random (Appendix A)

MASK = 0xFFFFFFFF


def threefry_ref(key: tuple[int, int], counter: tuple[int, int]) -> tuple[int, int]:
    """Threefry-2x32, 20 rounds, written from Random123's description."""
    k0, k1 = key
    ks = (k0, k1, k0 ^ k1 ^ 0x1BD11BDA)
    x0, x1 = (counter[0] + k0) & MASK, (counter[1] + k1) & MASK
    rotations = ((13, 15, 26, 6), (17, 29, 16, 24))
    for group in range(5):
        for r in rotations[group % 2]:
            x0 = (x0 + x1) & MASK
            x1 = ((x1 << r) | (x1 >> (32 - r))) & MASK
            x1 ^= x0
        x0 = (x0 + ks[(group + 1) % 3]) & MASK
        x1 = (x1 + ks[(group + 2) % 3] + group + 1) & MASK
    return x0, x1


def test_threefry_known_answers() -> None:
    fn = lower("fry", [t((2,), "i64"), t((2, 2), "i64")])
    key = np.array([MASK, MASK], np.int64)
    counter = np.array([[0, 0], [MASK, MASK]], np.int64)
    (out,), _ = execute(fn, [key, counter])
    assert threefry_ref((0, 0), (0, 0)) == (0x6B200159, 0x99BA4EFE)
    assert threefry_ref((MASK, MASK), (MASK, MASK)) == (0x1CB996FC, 0xBB002BE7)
    assert tuple(out[1]) == (0x1CB996FC, 0xBB002BE7)
    zero = np.zeros(2, np.int64)
    (out,), _ = execute(fn, [zero, np.zeros((2, 2), np.int64)])
    assert tuple(out[0]) == (0x6B200159, 0x99BA4EFE)


def test_random_draws_bit_for_bit() -> None:
    n = 5
    fn = lower("draws", [t((2,), "i64"), t((), "i32")], {"N": n})
    key = (0x12345678, 0x9ABCDEF0)
    (bits, split, folded, uniform, normal), _ = execute(fn, [np.array(key, np.int64), np.int32(-3)])
    pairs = [threefry_ref(key, (0, i)) for i in range(n)]
    np.testing.assert_array_equal(bits, [a ^ b for a, b in pairs])
    np.testing.assert_array_equal(split, pairs)
    np.testing.assert_array_equal(folded, threefry_ref(key, (0, (-3) & MASK)))
    expected_u = (np.array([a ^ b for a, b in pairs], np.int64) >> 9).astype(
        np.float32
    ) * np.float32(2**-23)
    np.testing.assert_array_equal(uniform, expected_u)
    words = [a ^ b for a, b in (threefry_ref(key, (0, i)) for i in range(2 * n))]
    u = (np.array(words, np.int64) >> 9).astype(np.float64) * 2**-23
    box_muller = np.sqrt(-2 * np.log(1 - u[:n])) * np.cos(2 * np.pi * u[n:])
    close(normal, box_muller, rtol=1e-5, atol=1e-5)


def test_categorical_is_gumbel_max() -> None:
    key = (1, 2)
    logits = rand(3, 4)
    (picked,), _ = execute(
        lower("pick", [t((2,), "i64"), t((3, 4))]), [np.array(key, np.int64), logits]
    )
    words = [a ^ b for a, b in (threefry_ref(key, (0, i)) for i in range(12))]
    u = ((np.array(words, np.int64) >> 9).astype(np.float32) * np.float32(2**-23)).reshape(3, 4)
    noisy = logits.astype(np.float64) - np.log(-np.log(1 - u.astype(np.float64)))
    np.testing.assert_array_equal(picked, np.argmax(noisy, axis=-1))
