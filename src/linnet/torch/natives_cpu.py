"""`linnet.native`'s C loops for a decode step's small ops: rms_norm, rope, attention and
cache span writes.

Stage: kernels behind `linnet.torch.natives` (`natives.rms_norm`, `rope`,
`attention` and `write_span_in_place` call these first). A decode step runs each of these ops on a few
rows; as aten ops each costs several dispatches, allocations and (attention)
a parallel region, 10-40 microseconds alone and two to three times that in a
decode step, where every linear has just streamed megabytes of weights
through the caches. Here each is one ctypes call into a plain C loop on the
calling thread.

Each returns None where it does not apply (not the CPU, not f32, a gradient
to record, a tensor subclass, a layout or size it does not take), and the
caller runs its aten form. rms_norm and attention compute their std op's
function within f32 reordering (tested against NumPy f64 and the canonical
body); rope gives the aten form's bits, the cache write the same bytes.
"""

from __future__ import annotations

import torch

from linnet.torch.natives_quant import _native_rows, _vector_kernels


def native_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor | None:
    """`std.nn.norm::rms_norm` for f32 on `linnet.native`'s kernel: up to `NATIVE_ROWS` rows
    on the CPU without a gradient to record (a decode step's), else None. One C call in place
    of the aten ops of `F.rms_norm` and the weight's product: a row of 2048 took about 14 us
    that way, 6 here (alone, with the wrapper)."""
    rows = _native_rows(x, weight)
    native = _vector_kernels() if rows else None
    if native is None or weight.dtype is not torch.float32 or not weight.is_contiguous():
        return None
    x = x.contiguous()
    y = torch.empty(x.shape, dtype=torch.float32)
    native.rms_norm(x.data_ptr(), rows, x.shape[-1], weight.data_ptr(), eps, y.data_ptr())
    return y


NATIVE_ROPE = 1024
"""Most rows of `x` (of `D` values) for `native_rope` (a decode step's queries: one a head)."""


def native_write_span(
    cache: torch.Tensor, value: torch.Tensor, low: int, high: int, start: int
) -> bool:
    """`natives.write_span_in_place`'s copy (positions `[low, high)` of the cache from `value`)
    as one C loop of `memcpy`s for contiguous CPU tensors of one dtype, a decode step's
    (rows of `value` up to `NATIVE_ROPE`); False where it does not apply."""
    if (
        type(cache) is not torch.Tensor
        or type(value) is not torch.Tensor
        or not cache.is_cpu
        or not value.is_cpu
        or cache.dtype is not value.dtype
        or not cache.is_contiguous()
        or not value.is_contiguous()
    ):
        return False
    native = _vector_kernels()
    rows = cache.shape[0] * cache.shape[1]
    if native is None or rows * value.shape[2] > NATIVE_ROPE:
        return False
    width = cache.shape[3] * cache.element_size()
    native.write_span(
        cache.data_ptr(), value.data_ptr(), rows, cache.shape[2], value.shape[2], width, low, high,
        start,
    )  # fmt: skip
    return True


def native_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor | None:
    """`natives.rope` in one C pass (bitwise the same products and sums), for a contiguous f32
    `x[..., S, D]` of up to `NATIVE_ROPE` rows and tables `[S, D]` on the CPU without a
    gradient to record, else None: four aten ops fewer per call."""
    if not _native_rows(x, cos, sin, limit=NATIVE_ROPE) or not x.is_contiguous():
        return None
    native = _vector_kernels()
    if (
        native is None
        or cos.dtype is not torch.float32
        or sin.dtype is not torch.float32
        or cos.shape != x.shape[-2:]
        or sin.shape != x.shape[-2:]
        or not cos.is_contiguous()
        or not sin.is_contiguous()
    ):
        return None
    positions, d = x.shape[-2], x.shape[-1]
    y = torch.empty(x.shape, dtype=torch.float32)
    rows = x.numel() // (positions * d)
    native.rope(x.data_ptr(), rows, positions, d, cos.data_ptr(), sin.data_ptr(), y.data_ptr())
    return y


NATIVE_SCORES = 1 << 15
"""Most scores (query rows x heads x keys) for `native_attention`: its loop runs on one thread
with a scalar `expf`, so long contexts keep SDPA (32 heads of a decode step: 1024 keys)."""


def native_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float | torch.Tensor,
    mask: torch.Tensor | None,
    causal: bool,
) -> torch.Tensor | None:
    """`natives.attention` for a few f32 query rows (a decode step's): q `[B, H, Q, D]`, k and
    v `[B, Hk, K, D]`, a boolean mask `[Q, K]` or none, not causal, all contiguous on the CPU
    without a gradient to record; else None. The scale multiplies the dot products (SDPA's
    order; the runtime-scale path multiplies q first): within f32 rounding either way."""
    if isinstance(scale, torch.Tensor):  # read on the host: free on the CPU
        if scale.numel() != 1 or not scale.is_cpu or scale.requires_grad:
            return None
        scale = float(scale)
    if causal or not _native_rows(q, k, v, mask):
        return None
    batch, heads, queries, d = q.shape
    kv_heads, keys = k.shape[1], k.shape[2]
    if queries * heads * keys > NATIVE_SCORES or keys == 0 or batch * heads * queries > 1024:
        return None
    native = _vector_kernels()
    if (
        native is None
        or k.dtype is not torch.float32
        or v.dtype is not torch.float32
        or not (q.is_contiguous() and k.is_contiguous() and v.is_contiguous())
        or (mask is not None and (mask.dtype is not torch.bool or not mask.is_contiguous()))
        or (mask is not None and mask.shape != (queries, keys))
    ):
        return None
    y = torch.empty(q.shape, dtype=torch.float32)
    native.attention(
        q.data_ptr(), k.data_ptr(), v.data_ptr(), None if mask is None else mask.data_ptr(),
        batch, heads, kv_heads, queries, keys, d, scale, y.data_ptr(),
    )  # fmt: skip
    return y
