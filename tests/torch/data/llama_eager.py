"""A hand-written PyTorch eager Llama with the same math as `llama.linnet`.

The independent reference for the PyTorch backend's model tests and the peer
in bench/torch_backend.py. Written the way Hugging Face writes Llama with a
static cache: RMS norm in f32 then cast and scaled, rotate-half rotary
embeddings, `repeat_kv` for grouped heads, `F.scaled_dot_product_attention`
(`is_causal` for the prefill, a boolean mask over the whole static cache for a
decode step), caches updated in place with `index_copy_`, a SwiGLU MLP.
Its `state_dict` keys are the Linnet parameter paths, so one set of weights
serves both models.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    xf = x.to(torch.float32)
    variance = xf.pow(2).mean(-1, keepdim=True)
    return weight * (xf * torch.rsqrt(variance + eps)).to(x.dtype)


class RmsNorm(nn.Module):
    def __init__(self, hidden: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    if groups == 1:
        return x
    b, heads, s, d = x.shape
    return x[:, :, None].expand(b, heads, groups, s, d).reshape(b, heads * groups, s, d)


class Attention(nn.Module):
    def __init__(self, batch: int, hidden: int, heads: int, kv_heads: int, max_seq: int,
                 dtype: torch.dtype) -> None:  # fmt: skip
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        kv = kv_heads * self.head_dim
        self.q_proj = nn.Linear(hidden, hidden, bias=False, dtype=dtype)
        self.k_proj = nn.Linear(hidden, kv, bias=False, dtype=dtype)
        self.v_proj = nn.Linear(hidden, kv, bias=False, dtype=dtype)
        self.o_proj = nn.Linear(hidden, hidden, bias=False, dtype=dtype)
        shape = (batch, kv_heads, max_seq, self.head_dim)
        self.register_buffer("k_cache", torch.zeros(shape, dtype=dtype), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape, dtype=dtype), persistent=False)

    def project(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        return q, k, v

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               mask: torch.Tensor | None) -> torch.Tensor:  # fmt: skip
        groups = self.heads // self.kv_heads
        dtype = q.dtype
        out = F.scaled_dot_product_attention(
            q.float(), repeat_kv(k, groups).float(), repeat_kv(v, groups).float(),
            attn_mask=mask, is_causal=mask is None and q.shape[2] > 1,
            scale=self.head_dim**-0.5,
        )  # fmt: skip
        b, _, s, _ = q.shape
        return self.o_proj(out.to(dtype).transpose(1, 2).reshape(b, s, -1))

    def prefill(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        q, k, v = self.project(x, cos, sin)
        positions = torch.arange(x.shape[1], device=x.device)
        self.k_cache.index_copy_(2, positions, k)
        self.v_cache.index_copy_(2, positions, v)
        return self.attend(q, k, v, None)

    def decode(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               pos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:  # fmt: skip
        q, k, v = self.project(x, cos, sin)
        self.k_cache.index_copy_(2, pos, k)
        self.v_cache.index_copy_(2, pos, v)
        return self.attend(q, self.k_cache, self.v_cache, mask)


class Mlp(nn.Module):
    def __init__(self, hidden: int, inner: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.gate = nn.Linear(hidden, inner, bias=False, dtype=dtype)
        self.up = nn.Linear(hidden, inner, bias=False, dtype=dtype)
        self.down = nn.Linear(inner, hidden, bias=False, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Layer(nn.Module):
    def __init__(self, batch: int, hidden: int, heads: int, kv_heads: int, inner: int,
                 max_seq: int, dtype: torch.dtype) -> None:  # fmt: skip
        super().__init__()
        self.input_layernorm = RmsNorm(hidden, dtype)
        self.self_attn = Attention(batch, hidden, heads, kv_heads, max_seq, dtype)
        self.post_attention_layernorm = RmsNorm(hidden, dtype)
        self.mlp = Mlp(hidden, inner, dtype)

    def finish(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.mlp(self.post_attention_layernorm(h))


class EagerLlama(nn.Module):
    """`forward(ids)` is the prefill, `decode(ids, pos)` one cached step (as llama.linnet)."""

    def __init__(self, B: int, Vocab: int, H: int, Layers: int, Heads: int, KvHeads: int,
                 Inner: int, MaxSeq: int, dtype: torch.dtype = torch.float32) -> None:  # fmt: skip
        super().__init__()
        self.embed_tokens = nn.Embedding(Vocab, H, dtype=dtype)
        self.layers = nn.ModuleList(
            Layer(B, H, Heads, KvHeads, Inner, MaxSeq, dtype) for _ in range(Layers)
        )
        self.norm = RmsNorm(H, dtype)
        self.lm_head = nn.Linear(H, Vocab, bias=False, dtype=dtype)
        head_dim = H // Heads
        steps = torch.arange(head_dim // 2, dtype=torch.float32)
        inv_freq = torch.exp(steps * (-2.0 * torch.log(torch.tensor(10000.0)) / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.register_buffer("positions", torch.arange(MaxSeq), persistent=False)
        self.dtype = dtype

    def rotary(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        angle = positions.to(torch.float32)[:, None] * self.inv_freq[None, :]
        full = torch.cat((angle, angle), dim=-1)
        return full.cos().to(self.dtype), full.sin().to(self.dtype)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        cos, sin = self.rotary(torch.arange(ids.shape[1], device=ids.device))
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer.finish(x + layer.self_attn.prefill(layer.input_layernorm(x), cos, sin))
        return self.lm_head(self.norm(x))

    def decode(self, ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """`pos` a one-element int64 tensor: the position of the token in `ids` ([B, 1])."""
        cos, sin = self.rotary(pos)
        mask = (self.positions <= pos)[None, :]
        x = self.embed_tokens(ids)
        for layer in self.layers:
            h = layer.self_attn.decode(layer.input_layernorm(x), cos, sin, pos, mask)
            x = layer.finish(x + h)
        return self.lm_head(self.norm(x))
