"""`std.nn.parallel` as JAX collectives over a named mesh axis, with the gradients of 7.3.

Stage: backend helpers, called by the generated source (bound as `TP`) of an entry that
`linnet.jax.parallel` runs under `jax.shard_map` (language-extensions 7.3):

- `all_reduce(x, axis)`: `jax.lax.psum`; its gradient is the identity on each shard;
- `all_gather(x, axis)`: `jax.lax.all_gather(x, axis, axis=last, tiled=True)`, the
  shards' blocks side by side in shard order; its gradient is each shard's own slice;
- `shared(x, axis)`: `x`; its gradient is summed over the shards (`psum`).

The gradients are spelled out (`jax.custom_vjp`) rather than left to JAX's transposes so
that they are the conjugate pairs of 7.3 on every shard, exactly as linnet.torch's; the
shard_map boundary (`linnet.jax.parallel`) makes the per-shard gradients the gradients of
the whole model. `cotangent_scale` is that boundary's tool: the identity, whose gradient
is multiplied by a constant.

`collective_call(op)` is the generated-source spelling of a marked call (codegen).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
from jax import lax

from linnet.ir.core import Op
from linnet.ir.parallel import MARK

ALIAS = "TP"  # the generated source's name for this module
_psum: Any = lax.psum  # untyped in jax's stubs


@partial(jax.custom_vjp, nondiff_argnums=(1,))
def all_reduce(x: Any, axis: str) -> Any:
    """The sum of `x` over the shards of mesh axis `axis`, on every shard."""
    return _psum(x, axis)


def _all_reduce_forward(x: Any, axis: str) -> tuple[Any, None]:
    return _psum(x, axis), None


def _all_reduce_backward(axis: str, residual: None, g: Any) -> tuple[Any]:
    return (g,)


all_reduce.defvjp(_all_reduce_forward, _all_reduce_backward)


@partial(jax.custom_vjp, nondiff_argnums=(1,))
def shared(x: Any, axis: str) -> Any:
    """`x`, read whole by every shard: its gradient is summed over the shards."""
    return x


def _shared_forward(x: Any, axis: str) -> tuple[Any, None]:
    return x, None


def _shared_backward(axis: str, residual: None, g: Any) -> tuple[Any]:
    return (_psum(g, axis),)


shared.defvjp(_shared_forward, _shared_backward)


@partial(jax.custom_vjp, nondiff_argnums=(1,))
def all_gather(x: Any, axis: str) -> Any:
    """The shards' `[R, N]` blocks side by side along the last axis: `[R, Shards * N]`."""
    return lax.all_gather(x, axis, axis=x.ndim - 1, tiled=True)


def _all_gather_forward(x: Any, axis: str) -> tuple[Any, int]:
    return all_gather(x, axis), int(x.shape[-1])


def _all_gather_backward(axis: str, width: int, g: Any) -> tuple[Any]:
    start = lax.axis_index(axis) * width
    return (lax.dynamic_slice_in_dim(g, start, width, axis=g.ndim - 1),)


all_gather.defvjp(_all_gather_forward, _all_gather_backward)


@partial(jax.custom_vjp, nondiff_argnums=(1,))
def cotangent_scale(x: Any, factor: float) -> Any:
    """`x`; its gradient is multiplied by `factor`."""
    return x


def _scale_forward(x: Any, factor: float) -> tuple[Any, None]:
    return x, None


def _scale_backward(factor: float, residual: None, g: Any) -> tuple[Any]:
    return (g * factor,)


cotangent_scale.defvjp(_scale_forward, _scale_backward)

_SPELLING = {
    "std.nn.parallel::all_reduce": "all_reduce",
    "std.nn.parallel::all_gather": "all_gather",
    "std.nn.parallel::shared": "shared",
}


def collective_call(op: Op) -> str | None:
    """`TP.all_reduce({0}, 'axis')` for a call marked with a mesh axis name, else None."""
    axis = op.attrs.get(MARK)
    name = _SPELLING.get(str(op.attrs.get("callee")))
    if not isinstance(axis, str) or name is None:
        return None
    return f"{ALIAS}.{name}({{0}}, {axis!r})"
