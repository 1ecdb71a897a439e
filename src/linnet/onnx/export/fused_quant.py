"""`std.quant`'s linears as ONNX Runtime's `com.microsoft::MatMulNBits` (weight-only kernels).

Stage: finders registered in `fused` (`fused=True`, CPU provider, f32).

- `linear_int4_groups(x, packed, scale, zero, bias)`: the weight bytes are
  already MatMulNBits' `B` `[N, k_blocks, block/2]` (unsigned, low nibble
  first) and the scales its `scales`; the kernel reads the zero points packed
  two per byte, low nibble first (an odd count padded with 8, the kernel's
  default), so the one-byte-per-group `zero` of the std layout is packed by a
  few integer nodes (`Pad`, `BitShift`, `BitwiseOr`). The kernel computes
  `(q - zero) * scale` per group and an f32 product (`accuracy_level=1`),
  the std body's function.
- `linear_int8(x, weight, scale, bias)`: MatMulNBits with `bits=8`, `B` the
  int8 weight offset to unsigned (`q + 128`), every zero point 128 and the
  row's scale repeated over its blocks (the largest power of two from 16 to
  128 that divides `In`): `(q + 128 - 128) * scale`, the same function.

The block size must be a power of two of at least 16 (the kernel's
requirement); other sizes, other dtypes, and rank-0 inputs inline the body.
The conversions are integer ops on the weights alone: when the weights are
constant (initializers, as `linnet.onnx.runtime` makes them for these nodes)
ONNX Runtime folds them once at load and pre-packs `B`; fed as graph inputs
they run per call, correct but slow.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from linnet.ir.core import Op, Value
from linnet.onnx.export.graph import Emitter

DOMAIN = "com.microsoft"
OP_TYPE = "MatMulNBits"
QUANTISED_INPUTS = (1, 2, 3)
"""MatMulNBits' weight-side inputs (B, scales, zero_points): constant in a served model."""


def _block_ok(size: int) -> bool:
    return size >= 16 and size & (size - 1) == 0


def _activation(em: Emitter, x: Value, width: int) -> tuple[str, tuple[object, ...]] | None:
    """`x` as `[..., K]` of rank >= 2 (a vector gets a leading 1), with its lead shape."""
    shape = em.shape_of(x)
    if not shape or shape[-1] != width or x.type.dtype != "f32" or em.provider != "cpu":
        return None
    if len(shape) == 1:
        return em.one("Reshape", [em.name(x), em.ints([1, width])]), ()
    return em.name(x), tuple(shape[:-1])


def _matmul_nbits(
    em: Emitter,
    a: str,
    lead: tuple[object, ...],
    inputs: list[str],
    bias: Value | None,
    attrs: dict[str, int],
) -> Sequence[str]:
    names = [a, *inputs, "", em.name(bias) if bias is not None else ""]
    while names[-1] == "":
        names.pop()
    out = em.one(OP_TYPE, names, {**attrs, "accuracy_level": 1}, domain=DOMAIN)
    if not lead:
        out = em.one("Reshape", [out, em.ints([attrs["N"]])])
    return [out]


def _packed_zero_points(em: Emitter, zero: Value, rows: int, groups: int) -> str:
    """`[Out, G]` u8 -> `[Out * ceil(G/2)]`, two per byte, low nibble first, padded with 8."""
    name = em.name(zero)
    if groups % 2:
        pads = em.ints([0, 0, 0, 1])
        name = em.one("Pad", [name, pads, em.const(np.uint8(8), "u8")])
    pairs = em.one("Reshape", [name, em.ints([rows, (groups + 1) // 2, 2])])
    axes = em.ints([2])
    low = em.one("Slice", [pairs, em.ints([0]), em.ints([1]), axes])
    high = em.one("Slice", [pairs, em.ints([1]), em.ints([2]), axes])
    shifted = em.one("BitShift", [high, em.const(np.uint8(4), "u8")], {"direction": "LEFT"})
    return em.one("Reshape", [em.one("BitwiseOr", [low, shifted]), em.ints([-1])])


def fuse_int4_groups(em: Emitter, op: Op) -> Sequence[str] | None:
    """`linear_int4_groups` as `MatMulNBits(bits=4, block_size=2 * Half)`."""
    if len(op.operands) not in (4, 5):
        return None
    x, packed, scale, zero = op.operands[:4]
    bias = op.operands[4] if len(op.operands) == 5 else None
    rows, groups, half = em.shape_of(packed)
    if not all(isinstance(d, int) and d > 0 for d in (rows, groups, half)):
        return None
    assert isinstance(rows, int) and isinstance(groups, int) and isinstance(half, int)
    if not _block_ok(2 * half) or scale.type.dtype != "f32":
        return None
    found = _activation(em, x, groups * 2 * half)
    if found is None:
        return None
    a, lead = found
    scales = em.one("Reshape", [em.name(scale), em.ints([-1])])
    zeros = _packed_zero_points(em, zero, rows, groups)
    attrs = {"K": groups * 2 * half, "N": rows, "bits": 4, "block_size": 2 * half}
    return _matmul_nbits(em, a, lead, [em.name(packed), scales, zeros], bias, attrs)


def fuse_int8(em: Emitter, op: Op) -> Sequence[str] | None:
    """`linear_int8` as `MatMulNBits(bits=8)` with zero points 128 (see the module docstring)."""
    if len(op.operands) not in (3, 4):
        return None
    x, weight, scale = op.operands[:3]
    bias = op.operands[3] if len(op.operands) == 4 else None
    rows, width = em.shape_of(weight)
    if not (isinstance(rows, int) and isinstance(width, int) and rows > 0 and width > 0):
        return None
    block = next((b for b in (128, 64, 32, 16) if width % b == 0), 0)
    found = _activation(em, x, width)
    if not block or found is None:
        return None
    a, lead = found
    blocks = width // block
    wide = em.one("Add", [em.cast(em.name(weight), "i8", "i32"), em.const(np.int32(128), "i32")])
    unsigned = em.cast(wide, "i32", "u8")
    b = em.one("Reshape", [unsigned, em.ints([rows, blocks, block])])
    column = em.one("Reshape", [em.name(scale), em.ints([rows, 1])])
    scales = em.one("Reshape", [em.one("Expand", [column, em.ints([rows, blocks])]), em.ints([-1])])
    zeros = em.one("Expand", [em.const(np.array([128], np.uint8), "u8"), em.ints([rows * blocks])])
    attrs = {"K": width, "N": rows, "bits": 8, "block_size": block}
    return _matmul_nbits(em, a, lead, [b, scales, zeros], bias, attrs)
