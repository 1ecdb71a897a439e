"""Kernels that replace the canonical body of a known standard-library `call`.

Stage: consulted by the exporter's `call` rule: standard-operator kernels
are used unless the emitter says `natives=False`, ONNX Runtime's contrib
kernels only with `fused=True`. A `call` keeps an op's canonical body as a region
(architecture.md "Core IR"); a backend may substitute a kernel that
computes the same function within the numeric contract (language.md 1.2,
stdlib.md "Numerics policy"). In: the `call` op and what is known about its
operands. Out: the result names, or None to inline the body instead.

| callee | kernel | providers |
| --- | --- | --- |
| `std.nn.norm::rms_norm` | `SimplifiedLayerNormalization` (ONNX Runtime's contrib op, registered in the default domain), `stash_type=1` | cpu, cuda (f32, f16; bf16 on cuda) |
| `std.nn.softmax::softmax` | ONNX `Softmax(axis=-1)` on f32, cast back to `T` | all |
| `std.nn.activations::sigmoid` | ONNX `Sigmoid` in `T` | all |
| `std.nn.activations::silu` | `x * Sigmoid(x)` in `T` | all |
| `std.nn.activations::gelu_erf` | ONNX `Gelu(approximate="none")` in f32 (`fused_native`) | all |
| `std.nn.activations::gelu` | ONNX `Gelu(approximate="tanh")` in f32 | all |
| `std.nn.norm::layer_norm` | ONNX `LayerNormalization`, `stash_type=1` (f32, f16); with `fused=True` for now | all |
| `std.nn.rope::rope` | contrib `RotaryEmbedding` when the tables' halves are provably equal (`fused_rope`) | cpu (f32, f16) |
| `std.nn.attention::{attention, grouped_attention}` | contrib `GroupQueryAttention` or `MultiHeadAttention` (`fused_attention`) | cpu (f32) |
| `std.quant::linear_int4_groups` | contrib `MatMulNBits` (bits 4, `fused_quant`) | cpu (f32) |
| `std.quant::linear_int8` | `MatMul` on the dequantised weight, folded at load; `MatMulNBits` (bits 8) with `int8_activations` (`fused_quant`) | cpu (f32) |

A kernel is used only when every operand has the expected dtype and the
attributes it needs (`eps`, `scale`) are compile-time constants. Fused models use a
contrib op that `onnx.checker` does not know; the default export
(`fused=False`) contains standard operators only. Each kernel is tested
against the unfused graph and the reference interpreter
(tests/onnx/test_export_fused.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from linnet.ir.core import Op
from linnet.onnx.export.fused_attention import fuse_attention
from linnet.onnx.export.fused_native import (
    known_f32_scalar,
    native_gelu_erf,
    native_gelu_tanh,
    native_layer_norm,
)
from linnet.onnx.export.fused_quant import fuse_fp8, fuse_int4_groups, fuse_int8, fuse_mxfp4
from linnet.onnx.export.fused_rope import fuse_rope
from linnet.onnx.export.graph import Emitter

Finder = Callable[[Emitter, Op], Sequence[str] | None]

_FLOATS_BY_PROVIDER = {"cpu": frozenset({"f32", "f16"}), "cuda": frozenset({"f32", "f16", "bf16"})}


def fuse_rms_norm(em: Emitter, op: Op) -> Sequence[str] | None:
    """`cast<T>(xf * rsqrt(mean(xf^2) + eps)) * weight` as one normalization kernel."""
    if len(op.operands) != 3:
        return None
    x, weight, _ = op.operands
    eps = known_f32_scalar(em, op, 2)
    dtype = x.type.dtype
    if eps is None or dtype not in _FLOATS_BY_PROVIDER[em.provider] or weight.type.dtype != dtype:
        return None
    attrs = {"axis": -1, "epsilon": eps, "stash_type": 1}
    return [em.one("SimplifiedLayerNormalization", [em.name(x), em.name(weight)], attrs)]


def fuse_softmax(em: Emitter, op: Op) -> Sequence[str] | None:
    """Softmax over the last axis in f32 (the spec's precision), cast back to `T`."""
    (x,) = op.operands
    dtype = x.type.dtype
    if x.type.rank == 0 or em.shape_of(x)[-1] == 0:
        return None
    wide = em.cast(em.name(x), dtype, "f32")
    return [em.cast(em.one("Softmax", [wide], {"axis": -1}), "f32", dtype)]


def fuse_sigmoid(em: Emitter, op: Op) -> Sequence[str] | None:
    (x,) = op.operands
    if x.type.dtype == "bf16":
        return None
    return [em.one("Sigmoid", [em.name(x)])]


def fuse_silu(em: Emitter, op: Op) -> Sequence[str] | None:
    (x,) = op.operands
    if x.type.dtype == "bf16":
        return None
    name = em.name(x)
    return [em.one("Mul", [name, em.one("Sigmoid", [name])])]


FUSED: dict[str, Finder] = {
    "std.nn.norm::rms_norm": fuse_rms_norm,
    "std.nn.softmax::softmax": fuse_softmax,
    "std.nn.activations::sigmoid": fuse_sigmoid,
    "std.nn.activations::silu": fuse_silu,
    "std.nn.activations::gelu_erf": native_gelu_erf,
    "std.nn.activations::gelu": native_gelu_tanh,
    "std.nn.norm::layer_norm": native_layer_norm,
    "std.nn.rope::rope": fuse_rope,
    "std.nn.attention::attention": fuse_attention,
    "std.nn.attention::grouped_attention": fuse_attention,
    "std.quant::linear_int4_groups": fuse_int4_groups,
    "std.quant::linear_int8": fuse_int8,
    "std.quant::linear_fp8": fuse_fp8,
    "std.quant::linear_mxfp4": fuse_mxfp4,
}
STANDARD = frozenset(
    {
        "std.nn.softmax::softmax",
        "std.nn.activations::sigmoid",
        "std.nn.activations::silu",
        "std.nn.activations::gelu_erf",
        "std.nn.activations::gelu",
        "std.nn.norm::layer_norm",
    }
)
"""Callees whose kernel is a standard ONNX operator (kept in `fused=False` exports)."""


def fused_call(em: Emitter, op: Op) -> Sequence[str] | None:
    """The kernel's result names for this call, or None to inline its body."""
    callee = str(op.attrs["callee"])
    finder = FUSED.get(callee)
    allowed = em.natives if callee in STANDARD else em.fused
    if finder is None or not allowed:
        return None
    return finder(em, op)
