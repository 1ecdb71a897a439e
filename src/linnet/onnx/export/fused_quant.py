"""`std.quant`'s linears on ONNX Runtime: `com.microsoft::MatMulNBits`, or folded at load.

Stage: finders registered in `fused` (`fused=True`, CPU provider, f32).

- `linear_int4_groups(x, packed, scale, zero, bias)`: the weight bytes are
  already MatMulNBits' `B` `[N, k_blocks, block/2]` (unsigned, low nibble
  first) and the scales its `scales`; the kernel reads the zero points packed
  two per byte, low nibble first (an odd count padded with 8, the kernel's
  default), so the one-byte-per-group `zero` of the std layout is packed by a
  few integer nodes (`Pad`, `BitShift`, `BitwiseOr`). The kernel computes
  `(q - zero) * scale` per group and an f32 product (`accuracy_level=1`),
  the std body's function.
- `linear_int8(x, weight, scale, bias)`: dequantised once, not per call.
  `MatMulNBits(bits=8)` computes this function too (`B = q + 128`, zero points
  128), but ONNX Runtime 1.32's CPU kernel has no pre-packed f32 path for 8
  bits (only with int8 activations, `accuracy_level=4`, another function):
  measured 136 ms per decode step of a 1-layer H=1024 model against 9 ms for
  4 bits. So the weight is `f32(q) * scale` (the body's arithmetic) behind an
  `Identity` named `FOLD_MARK`, and the product a `MatMul`: the runtime makes
  those weights initializers, ONNX Runtime folds the dequantisation at load,
  and each call reads f32 weights (f32 speed and memory, int8 on disk).
  With `int8_activations` (the emitter's flag, `load_model(int8_activations=True)`)
  it is `MatMulNBits(bits=8, accuracy_level=4)` instead: `B = q + 128`, every
  zero point 128, the row's scale repeated per block of 128 inputs (or the
  first of 64, 32, 16 that divides `In`: `INT8_BLOCKS`, from
  `linnet.native.activations`, which `linnet.torch`'s kernels follow too), int8 dot products
  (0.1 ms against 0.5 ms for the f32 `MatMul` of a 2816 x 1024 weight).
- `int8_activations` also sets the int4 kernel's `accuracy_level=4`.
- `linear_fp8(x, weight, scale, bias)` and `linear_mxfp4(x, blocks, scales,
  bias)`: ONNX Runtime has no kernel for E4M3 or MXFP4 weights, so they are
  folded like int8: the weight is decoded by lookup tables of the std
  decoders' exact values (`Gather` of the 256 E4M3 bytes; of the 16 E2M1
  codes after `BitShift` / `BitwiseAnd` on the u8 bytes, times a `Gather` of
  the 256 E8M0 powers), behind a `FOLD_MARK` `Identity`, then a `MatMul`.

On the CPU, a session merges the `MatMulNBits` nodes that read the same
activation into one (`linnet.onnx.runtime.siblings`).

The 4-bit block size must be a power of two of at least 16 (the kernel's
requirement); other sizes, other dtypes, and rank-0 inputs inline the body.
The weight-side conversions are ops on the weights alone: when the weights
are constant (initializers, as `linnet.onnx.runtime.constants` makes them)
ONNX Runtime folds them once at load and pre-packs `B`; fed as graph inputs
they run per call, correct but slow.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import helper

from linnet.ir.core import Op, Value
from linnet.native.activations import int8_block
from linnet.onnx.export.graph import Emitter
from linnet.quant.minifloat import decode_e2m1, decode_e8m0, decode_fp8

DOMAIN = "com.microsoft"
OP_TYPE = "MatMulNBits"
QUANTISED_INPUTS = (1, 2, 3)
"""MatMulNBits' weight-side inputs (B, scales, zero_points): constant in a served model."""
F32_ACTIVATIONS = 1
INT8_ACTIVATIONS = 4
"""`MatMulNBits`' `accuracy_level`s: f32 products (the std bodies' function), or
activations rounded to int8 per block (`int8_activations`, llama.cpp's trade)."""
FOLD_MARK = "linnet_fold_"
"""Names an `Identity` node whose input is computed from weights alone and should be
folded once at load (the runtime makes those weights initializers)."""


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
    level = INT8_ACTIVATIONS if em.int8_activations else F32_ACTIVATIONS
    out = em.one(OP_TYPE, names, {**attrs, "accuracy_level": level}, domain=DOMAIN)
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
    """`linear_int8` as a `MatMul` on the dequantised weight marked for folding at load,
    or with `int8_activations` as `MatMulNBits(bits=8)` (zero points 128)."""
    if len(op.operands) not in (3, 4):
        return None
    x, weight, scale = op.operands[:3]
    bias = op.operands[3] if len(op.operands) == 4 else None
    rows, width = em.shape_of(weight)
    if not (isinstance(rows, int) and isinstance(width, int)) or rows == 0 or width == 0:
        return None
    found = _activation(em, x, width)
    if found is None:
        return None
    a, lead = found
    block = int8_block(width)
    if em.int8_activations and block:
        return _int8_nbits(em, a, lead, (weight, scale, bias), rows, width, block)
    column = em.one("Reshape", [em.name(scale), em.ints([rows, 1])])
    dequantised = em.one("Mul", [em.cast(em.name(weight), "i8", "f32"), column])
    marked = em.fresh(FOLD_MARK)
    em.scope.nodes.append(helper.make_node("Identity", [dequantised], [marked], name=marked))
    out = em.one("MatMul", [a, em.one("Transpose", [marked], {"perm": [1, 0]})])
    if bias is not None:
        out = em.one("Add", [out, em.name(bias)])
    if not lead:
        out = em.one("Reshape", [out, em.ints([rows])])
    return [out]


def fuse_fp8(em: Emitter, op: Op) -> Sequence[str] | None:
    """`linear_fp8` as a `MatMul` on the weight decoded by a 256-entry table, folded at load."""
    if len(op.operands) not in (3, 4):
        return None
    x, weight, scale = op.operands[:3]
    rows, width = em.shape_of(weight)
    if not (isinstance(rows, int) and isinstance(width, int)) or rows == 0 or width == 0:
        return None
    table = em.const(decode_fp8(np.arange(256, dtype=np.uint8)), "f32")
    values = em.one("Gather", [table, em.cast(em.name(weight), "u8", "i32")])
    dequantised = em.one("Mul", [values, em.name(scale)])
    return _folded_matmul(em, x, dequantised, rows, width, op.operands[3:])


def fuse_mxfp4(em: Emitter, op: Op) -> Sequence[str] | None:
    """`linear_mxfp4` as a `MatMul` on the weight decoded by tables (E2M1 codes, E8M0 powers),
    folded at load."""
    if len(op.operands) not in (3, 4):
        return None
    x, blocks, scales = op.operands[:3]
    rows, groups, _ = em.shape_of(blocks)
    if not (isinstance(rows, int) and isinstance(groups, int)) or rows == 0 or groups == 0:
        return None
    packed = em.name(blocks)
    low = em.one("BitwiseAnd", [packed, em.const(np.uint8(15), "u8")])
    high = em.one("BitShift", [packed, em.const(np.uint8(4), "u8")], {"direction": "RIGHT"})
    pairs = em.one("Concat", [em.one("Unsqueeze", [c, em.ints([3])]) for c in (low, high)],
                   {"axis": 3})  # fmt: skip
    codes = em.one("Reshape", [pairs, em.ints([rows, groups, 32])])
    e2m1 = em.const(decode_e2m1(np.arange(16, dtype=np.uint8)), "f32")
    values = em.one("Gather", [e2m1, em.cast(codes, "u8", "i32")])
    e8m0 = em.const(decode_e8m0(np.arange(256, dtype=np.uint8)), "f32")
    powers = em.one("Gather", [e8m0, em.cast(em.name(scales), "u8", "i32")])
    scaled = em.one("Mul", [values, em.one("Unsqueeze", [powers, em.ints([2])])])
    dequantised = em.one("Reshape", [scaled, em.ints([rows, groups * 32])])
    return _folded_matmul(em, x, dequantised, rows, groups * 32, op.operands[3:])


def _folded_matmul(
    em: Emitter, x: Value, dequantised: str, rows: int, width: int, bias: Sequence[Value]
) -> Sequence[str] | None:
    """`x @ dequantised^T (+ bias)`, the weight behind a `FOLD_MARK` `Identity`."""
    found = _activation(em, x, width)
    if found is None:
        return None
    a, lead = found
    marked = em.fresh(FOLD_MARK)
    em.scope.nodes.append(helper.make_node("Identity", [dequantised], [marked], name=marked))
    out = em.one("MatMul", [a, em.one("Transpose", [marked], {"perm": [1, 0]})])
    if bias:
        out = em.one("Add", [out, em.name(bias[0])])
    if not lead:
        out = em.one("Reshape", [out, em.ints([rows])])
    return [out]


def _int8_nbits(
    em: Emitter,
    a: str,
    lead: tuple[object, ...],
    operands: tuple[Value, Value, Value | None],
    rows: int,
    width: int,
    block: int,
) -> Sequence[str]:
    """`B = q + 128` in `[N, K/block, block]`, the row's scale per block, zero points 128."""
    weight, scale, bias = operands
    blocks = width // block
    # q + 128 in one byte: the bits of q read as u8 (Cast wraps modulo 256), top bit flipped;
    # no wider intermediate (at load, ONNX Runtime folds this over the whole weight)
    shifted = em.one(
        "BitwiseXor", [em.cast(em.name(weight), "i8", "u8"), em.const(np.uint8(128), "u8")]
    )
    b = em.one("Reshape", [shifted, em.ints([rows, blocks, block])])
    column = em.one("Reshape", [em.name(scale), em.ints([rows, 1])])
    scales = em.one("Reshape", [em.one("Expand", [column, em.ints([rows, blocks])]), em.ints([-1])])
    zeros = em.one("Expand", [em.const(np.array([128], np.uint8), "u8"), em.ints([rows * blocks])])
    attrs = {"K": width, "N": rows, "bits": 8, "block_size": block}
    return _matmul_nbits(em, a, lead, [b, scales, zeros], bias, attrs)
