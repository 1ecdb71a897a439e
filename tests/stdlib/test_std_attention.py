"""`std.nn.attention` (stdlib.md 9) against F.scaled_dot_product_attention and NumPy f64.

Covers `causal_mask` alignment (bottom-right, including Q < K and Q > K),
attention with and without masks, rows whose keys are all masked (the mean of
the values, since a masked score is -1e30 rather than -inf), grouped attention
in HF `repeat_kv` order (and MQA), and the per-row `*_rows` variants.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from stdlib_support import BF16, StdCases, f64, normal

SOURCE = """module cases

use std.nn.attention::{
    attention,
    attention_rows,
    causal_mask,
    decode_mask,
    grouped_attention,
    grouped_attention_rows,
    packed_mask,
}

pub entry mask<Q: Dim, K: Dim>() -> Tensor[Q, K; bool] {
    return causal_mask<Q, K>()
}

pub entry segments_mask<P: Dim>(segments: Tensor[P; i32]) -> Tensor[P, P; bool] {
    return packed_mask(segments)
}

pub entry packed<B: Dim, H: Dim, P: Dim, D: Dim, T: Float>(
    q: Tensor[B, H, P, D; T],
    k: Tensor[B, H, P, D; T],
    v: Tensor[B, H, P, D; T],
    segments: Tensor[P; i32],
) -> Tensor[B, H, P, D; T] {
    return attention(q, k, v, rsqrt(cast<f32>(D)), some(packed_mask(segments)))
}

pub entry rows_mask<K: Dim, B: Dim>(positions: Tensor[B; i32]) -> Tensor[B, 1, K; bool] {
    return decode_mask<B, K>(positions)
}

pub entry plain<B: Dim, H: Dim, Q: Dim, K: Dim, D: Dim, T: Float>(
    q: Tensor[B, H, Q, D; T],
    k: Tensor[B, H, K, D; T],
    v: Tensor[B, H, K, D; T],
) -> Tensor[B, H, Q, D; T] {
    return attention(q, k, v, rsqrt(cast<f32>(D)))
}

pub entry causal<B: Dim, H: Dim, Q: Dim, K: Dim, D: Dim, T: Float>(
    q: Tensor[B, H, Q, D; T],
    k: Tensor[B, H, K, D; T],
    v: Tensor[B, H, K, D; T],
) -> Tensor[B, H, Q, D; T] {
    return attention(q, k, v, rsqrt(cast<f32>(D)), some(causal_mask<Q, K>()))
}

pub entry masked<B: Dim, H: Dim, Q: Dim, K: Dim, D: Dim, T: Float>(
    q: Tensor[B, H, Q, D; T],
    k: Tensor[B, H, K, D; T],
    v: Tensor[B, H, K, D; T],
    scale: f32,
    allowed: Tensor[Q, K; bool],
) -> Tensor[B, H, Q, D; T] {
    return attention(q, k, v, scale, some(allowed))
}

pub entry grouped<B: Dim, H: Dim, Hk: Dim, Q: Dim, K: Dim, D: Dim, T: Float>(
    q: Tensor[B, H, Q, D; T],
    k: Tensor[B, Hk, K, D; T],
    v: Tensor[B, Hk, K, D; T],
    allowed: Tensor[Q, K; bool],
) -> (Tensor[B, H, Q, D; T], Tensor[B, H, Q, D; T], Tensor[B, H, Q, D; T])
where
    Hk > 0,
    H % Hk == 0
{
    let scale = rsqrt(cast<f32>(D))
    return (
        grouped_attention(q, k, v, scale),
        grouped_attention(q, k, v, scale, some(causal_mask<Q, K>())),
        grouped_attention(q, k, v, scale, some(allowed)),
    )
}

pub entry rows<B: Dim, H: Dim, Q: Dim, K: Dim, D: Dim, T: Float>(
    q: Tensor[B, H, Q, D; T],
    k: Tensor[B, H, K, D; T],
    v: Tensor[B, H, K, D; T],
    allowed: Tensor[B, Q, K; bool],
) -> Tensor[B, H, Q, D; T] {
    return attention_rows(q, k, v, 0.3, allowed)
}

pub entry grouped_rows<B: Dim, H: Dim, Hk: Dim, Q: Dim, K: Dim, D: Dim, T: Float>(
    q: Tensor[B, H, Q, D; T],
    k: Tensor[B, Hk, K, D; T],
    v: Tensor[B, Hk, K, D; T],
    allowed: Tensor[B, Q, K; bool],
) -> Tensor[B, H, Q, D; T]
where
    Hk > 0,
    H % Hk == 0
{
    return grouped_attention_rows(q, k, v, 0.3, allowed)
}
"""


@pytest.fixture(scope="module")
def std() -> StdCases:
    return StdCases(SOURCE)


def reference(q, k, v, scale, allowed=None):  # type: ignore[no-untyped-def]
    """NumPy f64 attention; `allowed` broadcasts to `[B, H, Q, K]`. All-masked rows average."""
    qf, kf, vf = f64(q), f64(k), f64(v)
    scores = scale * np.einsum("bhqd,bhkd->bhqk", qf, kf)
    if allowed is not None:
        allowed = np.broadcast_to(allowed, scores.shape)
        scores = np.where(allowed, scores, -np.inf)
        empty = ~allowed.any(-1, keepdims=True)
        scores = np.where(empty, 0.0, scores)  # uniform weights: the mean of the values
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    return np.einsum("bhqk,bhkd->bhqd", weights, vf)


def repeat_kv(x: np.ndarray, groups: int) -> np.ndarray:
    """HF `repeat_kv`: kv head j serves query heads j*groups .. (j+1)*groups - 1."""
    b, hk, s, d = x.shape
    return np.broadcast_to(x[:, :, None], (b, hk, groups, s, d)).reshape(b, hk * groups, s, d)


def sdpa(q, k, v, **kwargs):  # type: ignore[no-untyped-def]
    t = [torch.from_numpy(f64(a)) for a in (q, k, v)]
    return F.scaled_dot_product_attention(*t, **kwargs).numpy()


@pytest.mark.parametrize("shape", [(4, 4), (1, 6), (3, 7), (5, 3), (1, 1)])
def test_causal_mask_is_bottom_right_aligned(std: StdCases, shape: tuple[int, int]) -> None:
    q, k = shape
    expected = np.tril(np.ones((q, k), bool), k=k - q)
    std.expect("mask", [], [expected], generics={"Q": q, "K": k})
    if q < k:  # the last query sees every key
        assert expected[-1].all()


def test_decode_mask_lets_each_row_see_up_to_its_position(std: StdCases) -> None:
    positions = np.array([0, 3, 6, -1, 9], np.int32)  # -1 sees nothing, 9 sees everything
    expected = (np.arange(7)[None, :] <= positions[:, None])[:, None, :]
    std.expect("rows_mask", [positions], [expected], generics={"K": 7})


def test_packed_mask_is_causal_within_each_segment(std: StdCases) -> None:
    segments = np.array([0, 0, 0, 1, 1, 2, 7, 7], np.int32)
    index = np.arange(8)
    expected = (index[None, :] <= index[:, None]) & (segments[None, :] == segments[:, None])
    std.expect("segments_mask", [segments], [expected])


def test_packed_attention_equals_each_sequence_alone(std: StdCases) -> None:
    """Sequences packed end to end attend as if each ran alone with a causal mask."""
    rng = np.random.default_rng(89)
    lengths = [3, 1, 4]
    q, k, v = (normal(rng, [1, 2, 8, 4]) for _ in range(3))
    segments = np.repeat(np.arange(3, dtype=np.int32), lengths)
    pieces, start = [], 0
    for n in lengths:
        part = slice(start, start + n)
        pieces.append(sdpa(q[:, :, part], k[:, :, part], v[:, :, part], is_causal=True))
        start += n
    std.expect("packed", [q, k, v, segments], [np.concatenate(pieces, axis=2)])


def test_attention_without_mask(std: StdCases) -> None:
    rng = np.random.default_rng(90)
    q, k, v = normal(rng, [2, 3, 4, 8]), normal(rng, [2, 3, 6, 8]), normal(rng, [2, 3, 6, 8])
    expected = sdpa(q, k, v)
    np.testing.assert_allclose(expected, reference(q, k, v, 8**-0.5), rtol=1e-12)
    std.expect("plain", [q, k, v], [expected])


@pytest.mark.parametrize("shape", [(5, 5), (3, 7), (1, 6), (5, 3)])
def test_causal_attention(std: StdCases, shape: tuple[int, int]) -> None:
    """Square: SDPA's is_causal. Q < K: bottom-right (not SDPA's top-left is_causal).

    Q > K: the first Q - K queries see no key at all and get the mean of the values.
    """
    q_len, k_len = shape
    rng = np.random.default_rng(91 + q_len + k_len)
    q = normal(rng, [2, 2, q_len, 8])
    k, v = normal(rng, [2, 2, k_len, 8]), normal(rng, [2, 2, k_len, 8])
    allowed = np.tril(np.ones((q_len, k_len), bool), k=k_len - q_len)
    expected = reference(q, k, v, 8**-0.5, allowed)
    seeing = allowed.any(-1)
    with_keys = sdpa(q[:, :, seeing], k, v, attn_mask=torch.from_numpy(allowed[seeing]))
    np.testing.assert_allclose(expected[:, :, seeing], with_keys, rtol=1e-12)
    blind = expected[:, :, ~seeing]
    mean = np.broadcast_to(f64(v).mean(2, keepdims=True), blind.shape)
    np.testing.assert_allclose(blind, mean, rtol=1e-12)
    if q_len == k_len:
        np.testing.assert_allclose(expected, sdpa(q, k, v, is_causal=True), rtol=1e-12)
    elif q_len < k_len:
        assert not np.allclose(expected, sdpa(q, k, v, is_causal=True))
    std.expect("causal", [q, k, v], [expected])


def test_masked_attention_and_all_masked_rows(std: StdCases) -> None:
    rng = np.random.default_rng(95)
    q, k, v = normal(rng, [2, 2, 5, 4]), normal(rng, [2, 2, 6, 4]), normal(rng, [2, 2, 6, 4])
    allowed = rng.random((5, 6)) < 0.5
    allowed[1] = False  # nothing to attend to: the mean of the values
    allowed[3] = True
    allowed[4] = [False, False, False, False, False, True]
    scale = np.float32(0.7)
    expected = reference(q, k, v, 0.7, allowed)
    np.testing.assert_allclose(expected[:, :, 1], f64(v).mean(axis=2), rtol=1e-12)
    np.testing.assert_allclose(expected[:, :, 4], f64(v)[:, :, 5], rtol=1e-12)
    runs = std.expect("masked", [q, k, v, scale, allowed], [expected])
    # the same rows with a mask SDPA can take agree with SDPA
    kept = [0, 2, 3, 4]
    attn_mask = torch.from_numpy(allowed[kept])
    want = sdpa(q[:, :, kept], k, v, attn_mask=attn_mask, scale=0.7)
    for backend, (got,) in runs.items():
        np.testing.assert_allclose(got[:, :, kept], want, rtol=1e-5, atol=1e-6, err_msg=backend)


@pytest.mark.parametrize("heads", [(6, 2), (4, 1), (3, 3)], ids=["gqa", "mqa", "mha"])
def test_grouped_attention_repeat_kv_order(std: StdCases, heads: tuple[int, int]) -> None:
    h, hk = heads
    rng = np.random.default_rng(96 + h + hk)
    q = normal(rng, [2, h, 3, 8])
    k, v = normal(rng, [2, hk, 5, 8]), normal(rng, [2, hk, 5, 8])
    allowed = rng.random((3, 5)) < 0.6
    allowed[0] = False
    kr, vr = repeat_kv(k, h // hk), repeat_kv(v, h // hk)
    causal = np.tril(np.ones((3, 5), bool), k=2)
    expected = [
        reference(q, kr, vr, 8**-0.5),
        reference(q, kr, vr, 8**-0.5, causal),
        reference(q, kr, vr, 8**-0.5, allowed),
    ]
    gqa = sdpa(q, k, v, enable_gqa=True, attn_mask=torch.from_numpy(causal))
    np.testing.assert_allclose(expected[1], gqa, rtol=1e-12, atol=1e-12)
    if 1 < hk < h:  # the other order (tiled heads) would give different numbers
        tiled = np.tile(k, (1, h // hk, 1, 1)), np.tile(v, (1, h // hk, 1, 1))
        assert not np.allclose(expected[0], reference(q, *tiled, 8**-0.5))
    std.expect("grouped", [q, k, v, allowed], expected)


def row_masks(rng: np.random.Generator, b: int, q: int, k: int) -> np.ndarray:
    """Per-row causal masks at different lengths, plus one row with nothing allowed."""
    lengths = rng.integers(q, k + 1, b)
    masks = np.zeros((b, q, k), bool)
    for row, length in enumerate(lengths):
        masks[row, :, :length] = np.tril(np.ones((q, length), bool), k=length - q)
    masks[-1, 0] = False
    return masks


def test_attention_rows(std: StdCases) -> None:
    rng = np.random.default_rng(100)
    q, k, v = normal(rng, [3, 2, 2, 4]), normal(rng, [3, 2, 5, 4]), normal(rng, [3, 2, 5, 4])
    allowed = row_masks(rng, 3, 2, 5)
    expected = reference(q, k, v, 0.3, allowed[:, None])
    std.expect("rows", [q, k, v, allowed], [expected])


def test_grouped_attention_rows(std: StdCases) -> None:
    rng = np.random.default_rng(101)
    q, k, v = normal(rng, [3, 4, 2, 4]), normal(rng, [3, 2, 6, 4]), normal(rng, [3, 2, 6, 4])
    allowed = row_masks(rng, 3, 2, 6)
    expected = reference(q, repeat_kv(k, 2), repeat_kv(v, 2), 0.3, allowed[:, None])
    std.expect("grouped_rows", [q, k, v, allowed], [expected])


def test_bf16_attention_rounds_once(std: StdCases) -> None:
    """Scores, softmax and the weighted sum run in f32; one cast to bf16 at the end."""
    rng = np.random.default_rng(102)
    q, k, v = (normal(rng, [1, 2, 4, 8], BF16) for _ in range(3))
    expected = reference(q, k, v, 8**-0.5, np.tril(np.ones((4, 4), bool)))
    runs = std.expect("causal", [q, k, v], [expected], rtol=2.0**-8 + 1e-5, atol=1e-6)
    assert all(r[0].dtype == BF16 for r in runs.values())
