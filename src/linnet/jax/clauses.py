"""Ops with a gradient clause as `jax.custom_vjp` functions (language-extensions 3.4).

Stage: backend, called by the generated `jax.numpy` source (`clauses.apply`,
`linnet.jax.codegen`). A `call` op with a `gradient` region becomes one
custom-VJP primitive over all of its arguments: the forward rule runs the
op's body and keeps the arguments and the result as residuals; the backward
rule runs the clause and returns one cotangent per argument: the clause's
gradients at the `wrt` positions, `jnp.zeros_like` for the other floating
arguments (floating scalars; values the body or clause read from outside,
passed explicitly so that nothing is closed over), and zeros of dtype
`jax.dtypes.float0` for integer and `bool` arrays.

`forward(*args)` runs the body; `backward(*args, result, grad)` the clause,
returning one array per `wrt` position (a tuple when there are several).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

Array = Any


def _zero_cotangent(x: Array) -> Array:
    dtype = jnp.result_type(x)
    if jnp.issubdtype(dtype, jnp.floating):
        return jnp.zeros_like(x)
    return np.zeros(jnp.shape(x), dtype=jax.dtypes.float0)


def apply(
    forward: Callable[..., Array],
    backward: Callable[..., Any],
    wrt: Sequence[int],
    *args: Array,
) -> Array:
    """The op's value; under `jax.grad`/`jax.vjp` its clause is the backward rule."""
    positions = {index: k for k, index in enumerate(wrt)}

    @jax.custom_vjp
    def op(*xs: Array) -> Array:
        return forward(*xs)

    def op_forward(*xs: Array) -> tuple[Array, tuple[tuple[Array, ...], Array]]:
        y = forward(*xs)
        return y, (xs, y)

    def op_backward(residuals: tuple[tuple[Array, ...], Array], grad: Array) -> tuple[Array, ...]:
        xs, y = residuals
        found = backward(*xs, y, grad)
        gradients = found if isinstance(found, tuple | list) else (found,)
        return tuple(
            gradients[positions[i]] if i in positions else _zero_cotangent(x)
            for i, x in enumerate(xs)
        )

    op.defvjp(op_forward, op_backward)
    return op(*args)
