"""A Llama-shaped model with a KV cache: lowered, run for prefill then decode, timed.

The model uses the standard library the way a real one does (embedding, RMS
norm, rotary tables, grouped-query attention, SwiGLU, cache writes into
`state`). The reference is an independent NumPy f64 Llama over the whole
sequence without a cache: prefill logits must match it, and a decode step
after the prefill must match the last position of the full sequence.
"""

from __future__ import annotations

import time

import numpy as np
from lower_support import bound, close, execute, kinds, lowered, t, weights

from linnet.ir.bind import BoundModel

LLAMA = """
module t

use std.nn.linear::{Linear}
use std.nn.norm::{RmsNorm}
use std.nn.attention::{grouped_attention}
use std.nn.rope::{rope}
use std.nn.mlp::{SwiGlu}
use std.nn.embedding::{Embedding}
use std.nn.cache::{write_span}

pub block Attention<H: Dim, Heads: Dim, KvHeads: Dim, MaxLen: Dim, T: Float>
where
    Heads > 0,
    KvHeads > 0,
    H % Heads == 0,
    Heads % KvHeads == 0,
    (H / Heads) % 2 == 0,
    MaxLen > 0
{
    sub q_proj: Linear<H, H, T>
    sub k_proj: Linear<H, KvHeads * (H / Heads), T>
    sub v_proj: Linear<H, KvHeads * (H / Heads), T>
    sub o_proj: Linear<H, H, T>
    state k_cache: Tensor[1, KvHeads, MaxLen, H / Heads; T]
    state v_cache: Tensor[1, KvHeads, MaxLen, H / Heads; T]

    pub fn forward<S: Dim>(
        x: Tensor[1, S, H; T],
        cos_t: Tensor[S, H / Heads; T],
        sin_t: Tensor[S, H / Heads; T],
        at: i32,
        mask: Tensor[S, MaxLen; bool],
    ) -> Tensor[1, S, H; T]
    where S > 0 {
        let q = permute(reshape(q_proj.forward(x), [1, S, Heads, H / Heads]), [0, 2, 1, 3])
        let k = permute(reshape(k_proj.forward(x), [1, S, KvHeads, H / Heads]), [0, 2, 1, 3])
        let v = permute(reshape(v_proj.forward(x), [1, S, KvHeads, H / Heads]), [0, 2, 1, 3])
        k_cache = write_span(k_cache, rope(k, cos_t, sin_t), at)
        v_cache = write_span(v_cache, v, at)
        let scale = rsqrt(cast<f32>(H / Heads))
        let out = grouped_attention(rope(q, cos_t, sin_t), k_cache, v_cache, scale, some(mask))
        return o_proj.forward(reshape(permute(out, [0, 2, 1, 3]), [1, S, H]))
    }
}

pub block Layer<H: Dim, Heads: Dim, KvHeads: Dim, Inner: Dim, MaxLen: Dim, T: Float>
where
    Heads > 0,
    KvHeads > 0,
    H % Heads == 0,
    Heads % KvHeads == 0,
    (H / Heads) % 2 == 0,
    MaxLen > 0
{
    sub input_layernorm: RmsNorm<H, T>
    sub self_attn: Attention<H, Heads, KvHeads, MaxLen, T>
    sub post_attention_layernorm: RmsNorm<H, T>
    sub mlp: SwiGlu<H, Inner, T>

    pub fn forward<S: Dim>(
        x: Tensor[1, S, H; T],
        cos_t: Tensor[S, H / Heads; T],
        sin_t: Tensor[S, H / Heads; T],
        at: i32,
        mask: Tensor[S, MaxLen; bool],
    ) -> Tensor[1, S, H; T]
    where S > 0 {
        let h = x + self_attn.forward(input_layernorm.forward(x), cos_t, sin_t, at, mask)
        return h + mlp.forward(post_attention_layernorm.forward(h))
    }
}

pub block Llama<
    Vocab: Dim,
    H: Dim,
    Heads: Dim,
    KvHeads: Dim,
    Inner: Dim,
    Layers: Dim,
    MaxLen: Dim = 16,
    T: Float = f32,
>
where
    Heads > 0,
    KvHeads > 0,
    H % Heads == 0,
    Heads % KvHeads == 0,
    (H / Heads) % 2 == 0,
    MaxLen > 0
{
    sub embed_tokens: Embedding<Vocab, H, T>
    sub layers: [Layer<H, Heads, KvHeads, Inner, MaxLen, T>; Layers]
    sub norm: RmsNorm<H, T>
    sub lm_head: Linear<H, Vocab, T>

    pub entry forward<S: Dim>(
        ids: Tensor[1, S; i32],
        cos_t: Tensor[S, H / Heads; T],
        sin_t: Tensor[S, H / Heads; T],
        at: i32,
    ) -> Tensor[1, S, Vocab; T]
    where S > 0 {
        let query_pos = iota<i32>(S) + at
        let key_pos = iota<i32>(MaxLen)
        let mask[q, k] = key_pos[k] <= query_pos[q]
        var x = embed_tokens.forward(ids)
        static for layer in layers {
            x = layer.forward(x, cos_t, sin_t, at, mask)
        }
        return lm_head.forward(norm.forward(x))
    }
}
"""

CONFIG = {"Vocab": 11, "H": 8, "Heads": 4, "KvHeads": 2, "Inner": 12, "Layers": 2}
HEAD_DIM = 2


def rotary(positions: np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray]:
    inv = 1.0 / (10000 ** (np.arange(0, dim, 2) / dim))
    angles = np.outer(positions, inv)
    angles = np.concatenate([angles, angles], axis=-1)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def reference(w: dict[str, np.ndarray], ids: np.ndarray) -> np.ndarray:
    """HF-style Llama over the whole sequence, in f64, causal, no cache."""
    f = {k: v.astype(np.float64) for k, v in w.items()}
    s = ids.shape[1]
    cos, sin = (a.astype(np.float64) for a in rotary(np.arange(s), HEAD_DIM))

    def rms(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
        return x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-5) * weight

    def rope(x: np.ndarray) -> np.ndarray:
        half = x.shape[-1] // 2
        return x * cos + np.concatenate([-x[..., half:], x[..., :half]], -1) * sin

    x = f["embed_tokens.weight"][ids[0]]
    for i in range(CONFIG["Layers"]):
        p = f"layers.{i}."
        h = rms(x, f[p + "input_layernorm.weight"])
        q = (h @ f[p + "self_attn.q_proj.weight"].T).reshape(s, 4, HEAD_DIM).transpose(1, 0, 2)
        k = (h @ f[p + "self_attn.k_proj.weight"].T).reshape(s, 2, HEAD_DIM).transpose(1, 0, 2)
        v = (h @ f[p + "self_attn.v_proj.weight"].T).reshape(s, 2, HEAD_DIM).transpose(1, 0, 2)
        q, k = rope(q), rope(k)
        k, v = np.repeat(k, 2, axis=0), np.repeat(v, 2, axis=0)
        scores = q @ k.transpose(0, 2, 1) / np.sqrt(HEAD_DIM)
        scores = np.where(np.tril(np.ones((s, s), bool)), scores, -np.inf)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        attn = (probs @ v).transpose(1, 0, 2).reshape(s, -1)
        x = x + attn @ f[p + "self_attn.o_proj.weight"].T
        h = rms(x, f[p + "post_attention_layernorm.weight"])
        gate = h @ f[p + "mlp.gate.weight"].T
        up = h @ f[p + "mlp.up.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ f[p + "mlp.down.weight"].T
    return (rms(x, f["norm.weight"]) @ f["lm_head.weight"].T)[None]


def _model() -> BoundModel:
    return bound(LLAMA, CONFIG)


def _inputs(ids: np.ndarray, start: int) -> list[object]:
    cos, sin = rotary(np.arange(start, start + ids.shape[1]), HEAD_DIM)
    return [ids.astype(np.int32), cos, sin, np.int32(start)]


def test_prefill_then_decode_matches_the_full_sequence() -> None:
    model = _model()
    rng = np.random.default_rng(1)
    w = weights(model, rng, scale=0.5)
    present = {p for p in w if not p.endswith(".bias")}
    params = {p: w[p] for p in present}
    ids = rng.integers(0, 11, (1, 5))
    full = reference(params, ids)
    sig = [t((1, 4), "i32"), t((4, 2)), t((4, 2)), t((), "i32")]
    prefill = lowered(model, "forward", sig, present)
    assert len(prefill.state_updates) == 4
    assert kinds(prefill).count("param") == len(present)
    state = {
        p: np.zeros(bt.type.shape, np.float32)
        for p, bt in model.tensors.items()
        if bt.kind == "state"
    }
    (logits,), state = execute(prefill, _inputs(ids[:, :4], 0), params, state)
    close(logits, full[:, :4], rtol=1e-4, atol=1e-5)
    assert np.count_nonzero(state["layers.1.self_attn.k_cache"][0, :, 4:]) == 0
    decode = lowered(
        model, "forward", [t((1, 1), "i32"), t((1, 2)), t((1, 2)), t((), "i32")], present
    )
    (logits,), state = execute(decode, _inputs(ids[:, 4:], 4), params, state)
    close(logits, full[:, 4:], rtol=1e-4, atol=1e-5)


def test_lowering_is_fast_and_linear_in_layers() -> None:
    sig = [t((1, 3), "i32"), t((3, 2)), t((3, 2)), t((), "i32")]
    model = _model()
    lowered(model, "forward", sig)  # warm up imports and caches
    start = time.perf_counter()
    fn = lowered(model, "forward", sig)
    elapsed = time.perf_counter() - start
    assert elapsed < 0.5, f"lowering a 2-layer Llama took {elapsed:.3f} s"
    counts = []
    for layers in (2, 3, 5):
        deeper = bound(LLAMA, {**CONFIG, "Layers": layers})
        counts.append(len(kinds(lowered(deeper, "forward", sig))))
    assert counts[2] - counts[0] == 3 * (counts[1] - counts[0])
    assert counts[0] == len(kinds(fn))
