"""Standard-operator kernels for GELU and layer norm (opset 17/20 `Gelu`, `LayerNormalization`).

Stage: finders registered in `fused` (used unless the emitter says
`natives=False`). Each returns the result names, or None to inline the
canonical body.

- `gelu` / `gelu_erf` compute in f32 and cast back to `T` (stdlib.md
  section 5), so every `T` goes through `Cast(f32) -> Gelu -> Cast(T)`:
  ONNX Runtime's CPU provider has `Gelu` for f32 and f16 but not f64 with
  `approximate="none"` (no f64 `Erf`). `Gelu(approximate="none")` evaluates
  `erf` directly instead of the Abramowitz & Stegun polynomial of the body
  (absolute error < 7.5e-8 in Phi), so both stay within that bound of exact
  GELU.
- `layer_norm` becomes `LayerNormalization(axis=-1, stash_type=1)`: statistics
  in f32, as the body computes them; f32 and f16 only (the CPU kernel's dtypes),
  with a compile-time `eps`.
"""

from __future__ import annotations

from collections.abc import Sequence

from linnet.ir.core import Op, TensorType
from linnet.onnx.export.graph import Emitter

_LAYER_NORM_DTYPES = frozenset({"f32", "f16"})


def known_f32_scalar(em: Emitter, op: Op, index: int) -> float | None:
    """The compile-time value of the f32 scalar operand `index`, or None."""
    if index >= len(op.operands):
        return None
    value = op.operands[index]
    known = em.known.get(value)
    if value.type != TensorType((), "f32") or known is None:
        return None
    return float(known)


def _gelu(em: Emitter, op: Op, approximate: str) -> Sequence[str] | None:
    (x,) = op.operands
    dtype = x.type.dtype
    wide = em.cast(em.name(x), dtype, "f32")
    return [em.cast(em.one("Gelu", [wide], {"approximate": approximate}), "f32", dtype)]


def native_gelu_erf(em: Emitter, op: Op) -> Sequence[str] | None:
    """Exact GELU as `Gelu(approximate="none")` in f32."""
    return _gelu(em, op, "none")


def native_gelu_tanh(em: Emitter, op: Op) -> Sequence[str] | None:
    """The tanh-approximated GELU as `Gelu(approximate="tanh")` in f32."""
    return _gelu(em, op, "tanh")


def native_layer_norm(em: Emitter, op: Op) -> Sequence[str] | None:
    """`cast<T>(normalised) * weight (+ bias)` as one `LayerNormalization` (f32 statistics)."""
    if len(op.operands) not in (3, 4):
        return None
    x, weight = op.operands[0], op.operands[1]
    bias = op.operands[2] if len(op.operands) == 4 else None
    eps = known_f32_scalar(em, op, len(op.operands) - 1)
    dtype = x.type.dtype
    dtypes = {weight.type.dtype} | ({bias.type.dtype} if bias is not None else set())
    if eps is None or dtype not in _LAYER_NORM_DTYPES or dtypes != {dtype} or x.type.rank == 0:
        return None
    inputs = [em.name(x), em.name(weight)] + ([em.name(bias)] if bias is not None else [])
    attrs = {"axis": -1, "epsilon": eps, "stash_type": 1}
    return [em.one("LayerNormalization", inputs, attrs)]
