"""Helpers that generated JAX source calls where one `jax.numpy` call is not the Linnet op.

Stage: backend runtime, imported by the generated source as `K`. Each helper
computes one Core IR op exactly as the NumPy reference interpreter does
(`linnet.ir.kernels`), on JAX arrays (or NumPy constants, which JAX converts):

- integer `div`/`rem` truncate toward zero (XLA's own semantics) and give 0
  for a zero divisor, the reference's choice (XLA gives -1 and the dividend);
  `INT_MIN / -1` wraps and `INT_MIN % -1` is 0 in XLA already;
- float -> integer casts truncate into i64 (i32 without 64-bit mode) and then
  wrap to the width, as the reference does; XLA's direct conversion
  saturates instead, which differs only where 10.3 leaves the result undefined,
  but keeping one choice keeps every backend equal;
- reductions over an empty axis give the 8.6 identities; f16/bf16 sums,
  products and contractions accumulate in f32 and round once;
- `take` is NumPy advanced indexing with one index tensor per axis.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from linnet.ir.core import FLOAT_DTYPES, numpy_dtype

Array = Any

LOW_FLOATS = frozenset({"f16", "bf16"})


def _int_guard(a: Array, b: Array) -> tuple[Array, Array, Array]:
    a, b = jnp.broadcast_arrays(a, b)
    zero = b == 0
    return a, jnp.where(zero, jnp.ones_like(b), b), zero


def int_div(a: Array, b: Array) -> Array:
    """Truncating integer division; 0 where the divisor is 0."""
    a, safe, zero = _int_guard(a, b)
    return jnp.where(zero, jnp.zeros_like(a), lax.div(a, safe))


def int_rem(a: Array, b: Array) -> Array:
    """C remainder (the dividend's sign); 0 where the divisor is 0."""
    a, safe, zero = _int_guard(a, b)
    return jnp.where(zero, jnp.zeros_like(a), lax.rem(a, safe))


def fmod(a: Array, b: Array) -> Array:
    """Float C `fmod` with broadcasting."""
    a, b = jnp.broadcast_arrays(a, b)
    return lax.rem(a, b)


def float_to_int(x: Array, target: str) -> Array:
    """Truncate toward zero into i64 (i32 without 64-bit mode), then wrap to `target`."""
    wide = jnp.int64 if jax.config.read("jax_enable_x64") else jnp.int32  # type: ignore[no-untyped-call]
    if target == "u64":
        return lax.convert_element_type(x, jnp.uint64)
    truncated = lax.convert_element_type(x, wide)
    return lax.convert_element_type(truncated, numpy_dtype(target))


def to_bool(x: Array) -> Array:
    """Number -> bool is `!= 0` (NaN counts as true)."""
    return jnp.not_equal(x, jnp.zeros((), x.dtype))


def reduce_sum(x: Array, axes: tuple[int, ...], dtype: str) -> Array:
    held = numpy_dtype(dtype)
    if dtype in LOW_FLOATS:
        return jnp.sum(x, axis=axes, dtype=jnp.float32).astype(held)
    return jnp.sum(x, axis=axes, dtype=held)


def reduce_prod(x: Array, axes: tuple[int, ...], dtype: str) -> Array:
    held = numpy_dtype(dtype)
    if dtype in LOW_FLOATS:
        return jnp.prod(x, axis=axes, dtype=jnp.float32).astype(held)
    return jnp.prod(x, axis=axes, dtype=held)


def empty_reduction(kind: str, dtype: str, shape: Sequence[int]) -> np.ndarray[Any, Any]:
    """The value of a reduction over an empty axis (language.md 8.6)."""
    held = numpy_dtype(dtype)
    if kind in ("sum", "prod", "any", "all"):
        value: Any = {"sum": 0, "prod": 1, "any": False, "all": True}[kind]
    elif dtype == "bool":
        value = kind == "min"
    elif dtype in FLOAT_DTYPES:
        value = -np.inf if kind == "max" else np.inf
    else:
        info = np.iinfo(held)
        value = info.min if kind == "max" else info.max
    return np.full(tuple(shape), value, dtype=held)


def contract(
    x: Array,
    y: Array,
    lhs_batch: tuple[int, ...],
    rhs_batch: tuple[int, ...],
    lhs_contract: tuple[int, ...],
    rhs_contract: tuple[int, ...],
    dtype: str,
) -> Array:
    """`dot_general` (result axes: batch, lhs free, rhs free) at full precision."""
    held = numpy_dtype(dtype)
    accumulate = jnp.float32 if dtype in LOW_FLOATS else held
    out = lax.dot_general(
        x,
        y,
        ((lhs_contract, rhs_contract), (lhs_batch, rhs_batch)),
        precision=lax.Precision.HIGHEST,
        preferred_element_type=accumulate,
    )
    return out.astype(held) if accumulate != held else out


def narrow_index(indices: Array) -> Array:
    """64-bit positions as `int32` with the same effect on any axis shorter than 2**31
    (values beyond the `int32` range are clamped to it first, which a clipped or
    out-of-range position reads the same).

    The residuals a gradient keeps are then 32-bit: `jax.grad` transposes a traced
    `gather` after `linnet.jax`'s call has left its `x64_scope` (the loop index of a
    runtime `for` is `i64`), and a 64-bit position there meets 32-bit bounds."""
    dtype = jnp.result_type(indices)
    if dtype not in (jnp.dtype("int64"), jnp.dtype("uint64")):
        return indices
    info = np.iinfo(np.int32)
    return jnp.clip(indices, info.min if dtype == jnp.dtype("int64") else 0, info.max).astype(
        jnp.int32
    )


def gather(x: Array, indices: Array, axis: int) -> Array:
    """`numpy.take(x, indices, axis)` (rank-0 indices remove the axis)."""
    if jnp.shape(x)[axis] < 2**31:
        indices = narrow_index(indices)
    return jnp.take(x, indices, axis=axis, mode="clip")


def take(x: Array, *indices: Array) -> Array:
    """`x[i_0, ..., i_{r-1}]` with one (broadcast) index tensor per axis."""
    if not indices:
        return jnp.asarray(x)
    if max(jnp.shape(x), default=0) < 2**31:
        indices = tuple(narrow_index(i) for i in indices)
    return jnp.asarray(x)[tuple(indices)]
