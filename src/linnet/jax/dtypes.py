"""Linnet dtypes on JAX: every one is native to XLA, some need 64-bit mode.

Stage: shared by the JAX backend (code generator, loaders, StableHLO export).
XLA has every Linnet dtype (bool, i8-i64, u8-u64, f16, bf16, f32, f64), so,
unlike the PyTorch backend, nothing is emulated. JAX, though, truncates
64-bit dtypes to 32 bits unless `jax_enable_x64` is on. The backend never
flips that global setting: a function whose types include `i64`, `u64` or
`f64` runs (and is traced and lowered) inside the scoped `jax.enable_x64(True)`
context (`x64_scope`), and the setting of the caller is untouched afterwards.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import jax

from linnet.ir.core import Function
from linnet.ir.regions import walk

WIDE = frozenset({"i64", "u64", "f64"})
"""Dtypes JAX keeps only with `jax_enable_x64`."""

JNP_NAMES = {
    "bool": "jnp.bool_", "i8": "jnp.int8", "i16": "jnp.int16", "i32": "jnp.int32",
    "i64": "jnp.int64", "u8": "jnp.uint8", "u16": "jnp.uint16", "u32": "jnp.uint32",
    "u64": "jnp.uint64", "f16": "jnp.float16", "bf16": "jnp.bfloat16", "f32": "jnp.float32",
    "f64": "jnp.float64",
}  # fmt: skip
"""How generated source spells each dtype."""


def needs_x64(fn: Function) -> bool:
    """Whether any value of `fn` (inputs, op results, region arguments) has a 64-bit dtype."""
    if any(v.type.dtype in WIDE for _, v in fn.inputs):
        return True
    for op in walk(fn.body):
        if any(v.type.dtype in WIDE for v in (*op.operands, *op.results)):
            return True
        if any(a.type.dtype in WIDE for region in op.regions for a in region.args):
            return True
    return False


@contextlib.contextmanager
def x64_scope(enabled: bool) -> Iterator[None]:
    """`jax.enable_x64(True)` for the block when `enabled`, else nothing (scoped, never global)."""
    if not enabled:
        yield
        return
    with jax.enable_x64(True):
        yield
