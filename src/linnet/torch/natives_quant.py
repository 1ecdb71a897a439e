"""`std.quant`'s linears on PyTorch: the weight dequantised once, then `F.linear`.

Stage: kernels behind the `natives` finders for `std.quant::linear_int8` and
`std.quant::linear_int4_groups` (generated code calls them as
`natives.linear_int8` / `natives.linear_int4_groups`).

PyTorch's CPU weight-only kernels compute these functions
(`aten._weight_int8pack_mm`: `(x @ q^T) * scale`; `_weight_int4pack_mm_for_cpu`
after a repack to its `(q - 8) * s + z` form), but measured at batch 1 on a
5632 x 2048 weight here they took 49-58 ms (int8) and 67-80 ms (int4)
against 11-13 ms for `F.linear` on the f32 weight. So each quantised weight
is dequantised once, exactly as the std body does it (`f32(q) * scale`, or
`(f32(q) - f32(zero)) * f32(scale)`, cast to `T`), kept, and every call is
`F.linear`: the body's numbers at f32 speed, for f32 memory.

The dequantised weight is cached per packed tensor (it goes with the model)
and recomputed when the packed tensor, its scale or zero points are replaced
or changed in place (their `_version`). Under autograd, with a scale
that requires a gradient, nothing is cached.
"""

from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F

_Key = tuple[int, ...]
_cache: dict[int, tuple[weakref.ref[torch.Tensor], _Key, torch.Tensor]] = {}
"""By `id` of the packed tensor (tensors compare elementwise, so they cannot be dict keys);
an entry goes when its tensor does."""


def _state(*tensors: torch.Tensor) -> _Key:
    return tuple(x for t in tensors for x in (id(t), t._version, t.data_ptr()))


def _cached(packed: torch.Tensor, parts: tuple[torch.Tensor, ...], make: object) -> torch.Tensor:
    assert callable(make)
    if torch.is_grad_enabled() and any(p.requires_grad for p in parts):
        weight: torch.Tensor = make()
        return weight
    key = _state(packed, *parts)
    found = _cache.get(id(packed))
    if found is not None and found[0]() is packed and found[1] == key:
        return found[2]
    with torch.no_grad():
        weight = make()
    if found is None or found[0]() is not packed:
        weakref.finalize(packed, _cache.pop, id(packed), None)
    _cache[id(packed)] = (weakref.ref(packed), key, weight)
    return weight


def dequantize_int8(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return (q.to(torch.float32) * scale.unsqueeze(-1)).to(dtype)


def dequantize_int4_groups(
    packed: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, dtype: torch.dtype
) -> torch.Tensor:
    rows, groups, half = packed.shape
    nibbles = torch.stack([packed & 15, packed >> 4], dim=-1).reshape(rows, groups, 2 * half)
    centred = nibbles.to(torch.float32) - zero.to(torch.float32).unsqueeze(-1)
    weight = centred * scale.to(torch.float32).unsqueeze(-1)
    return weight.reshape(rows, groups * 2 * half).to(dtype)


def linear_int8(
    x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    weight = _cached(q, (scale,), lambda: dequantize_int8(q, scale, x.dtype))
    return F.linear(x, weight, bias)


def linear_int4_groups(
    x: torch.Tensor,
    packed: torch.Tensor,
    scale: torch.Tensor,
    zero: torch.Tensor,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    make = lambda: dequantize_int4_groups(packed, scale, zero, x.dtype)  # noqa: E731
    return F.linear(x, _cached(packed, (scale, zero), make), bias)
