"""ONNX lowering rules for casts, elementwise unary and binary ops, and `select`.

Stage: part of the exporter's op table (IR op kind -> rule). Each rule emits
ONNX nodes computing exactly what `linnet.ir.kernels` defines, on the dtypes
`dtypes` chooses. Where ONNX and the IR part ways the rule says how:

- integer `div` truncates toward zero like ONNX `Div`, but division by zero
  is defined as 0 by the reference while ONNX Runtime raises, and
  `INT_MIN / -1` traps on x86: the divisor is replaced by 1 where it is 0 or
  -1 and the quotient fixed up (`0 - a` wraps for -1, 0 for 0). A constant
  divisor that is neither skips the guards.
- integer `rem` is ONNX `Mod` with `fmod=1` (C's truncating remainder, the
  dividend's sign), with the same guard: `fmod(a, 1) = 0` is also the
  reference's value for divisors 0 and -1.
- shifts: ONNX `BitShift` exists for unsigned types only and leaves
  out-of-range amounts unspecified. Signed values shift as their unsigned
  bit pattern (`Cast` between same-width integers keeps the bits);
  an arithmetic `shr` of a negative value is `~((~x) >> n)`. Amounts outside
  `0 .. width-1` give 0 for `shl` and the sign fill for `shr`, as
  `kernels.py` says, by clamping the amount and selecting.
- casts follow `kernels.kernel_cast`: float -> int truncates (ONNX `Cast`
  truncates too) through i64 for widths below 64, so out-of-range values
  wrap as the reference's do; bf16 meets ints, bools and f64 through f32.
- `not` is `Not` on bool and `BitwiseNot` on integers; `and`/`or`/`xor` alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from linnet.ir.core import FLOAT_DTYPES, SIGNED_DTYPES, UNSIGNED_DTYPES, Op, dtype_bits
from linnet.onnx.export.dtypes import (
    SMALL_INTS,
    arithmetic_dtype,
    compare_dtype,
    function_dtype,
    select_dtype,
)
from linnet.onnx.export.graph import Emitter, Rule

_UNSIGNED_OF = {"i32": "u32", "i64": "u64", "u32": "u32", "u64": "u64"}


# -- helpers shared with the other rule modules --------------------------------------------


def ir_cast(em: Emitter, name: str, source: str, target: str) -> str:
    """The IR `cast` from `source` to `target` (language.md 10.3, `kernels.kernel_cast`)."""
    if source == target:
        return name
    if source in ("f16", "bf16") and target != "f32":
        # Widening to f32 is exact, so going through it changes no result; ONNX
        # Runtime lacks many direct bf16 conversions.
        return ir_cast(em, em.cast(name, source, "f32"), "f32", target)
    if target == "bf16":
        # The reference converts f64 and integers to bf16 through f32 (kernels.py).
        return em.cast(ir_cast(em, name, source, "f32"), "f32", "bf16")
    to_narrow_int = target not in FLOAT_DTYPES and target != "bool" and dtype_bits(target) < 64
    if source in FLOAT_DTYPES and to_narrow_int:  # truncate to i64, then wrap to the width
        return em.cast(em.cast(name, source, "i64"), "i64", target)
    return em.cast(name, source, target)


def select(em: Emitter, cond: str, a: str, b: str, dtype: str) -> str:
    """`Where(cond, a, b)` for any IR dtype (through `select_dtype` where `Where` lacks one)."""
    s = select_dtype(dtype)
    chosen = em.one("Where", [cond, em.cast(a, dtype, s), em.cast(b, dtype, s)])
    return em.cast(chosen, s, dtype)


def operand_dtype(op: Op) -> str:
    return op.operands[0].type.dtype


def _known_values(em: Emitter, op: Op, index: int) -> npt.NDArray[Any] | None:
    return em.known.get(op.operands[index])


# -- cast and select --------------------------------------------------------------------------


def lower_cast(em: Emitter, op: Op) -> Sequence[str]:
    return [ir_cast(em, em.name(op.operands[0]), operand_dtype(op), op.results[0].type.dtype)]


def lower_select(em: Emitter, op: Op) -> Sequence[str]:
    cond, a, b = (em.name(v) for v in op.operands)
    return [select(em, cond, a, b, op.results[0].type.dtype)]


# -- unary ------------------------------------------------------------------------------------

_FUNCTIONS = {
    "exp": "Exp",
    "log": "Log",
    "sqrt": "Sqrt",
    "sin": "Sin",
    "cos": "Cos",
    "tanh": "Tanh",
}


def lower_function(em: Emitter, op: Op) -> Sequence[str]:
    """The float functions, bf16 computed in f32 (the reference computes them wider still)."""
    dtype = operand_dtype(op)
    work = function_dtype(dtype)
    x = em.cast(em.name(op.operands[0]), dtype, work)
    if op.kind == "rsqrt":
        y = em.one("Reciprocal", [em.one("Sqrt", [x])])
    else:
        y = em.one(_FUNCTIONS[op.kind], [x])
    return [em.cast(y, work, dtype)]


def lower_neg(em: Emitter, op: Op) -> Sequence[str]:
    dtype = operand_dtype(op)
    work = arithmetic_dtype(dtype)
    x = em.cast(em.name(op.operands[0]), dtype, work)
    if dtype in UNSIGNED_DTYPES:
        y = em.one("Sub", [em.const(0, work), x])  # two's-complement negation wraps
    else:
        y = em.one("Neg", [x])
    return [em.cast(y, work, dtype)]


def lower_abs(em: Emitter, op: Op) -> Sequence[str]:
    dtype = operand_dtype(op)
    x = em.name(op.operands[0])
    if dtype in UNSIGNED_DTYPES:
        return [x]
    work = arithmetic_dtype(dtype)
    return [em.cast(em.one("Abs", [em.cast(x, dtype, work)]), work, dtype)]


def lower_not(em: Emitter, op: Op) -> Sequence[str]:
    kind = "Not" if operand_dtype(op) == "bool" else "BitwiseNot"
    return [em.one(kind, [em.name(op.operands[0])])]


# -- binary -----------------------------------------------------------------------------------

_ARITHMETIC = {"add": "Add", "sub": "Sub", "mul": "Mul", "max": "Max", "min": "Min"}
_COMPARE = {
    "eq": "Equal",
    "lt": "Less",
    "le": "LessOrEqual",
    "gt": "Greater",
    "ge": "GreaterOrEqual",
}
_LOGICAL = {"and": ("And", "BitwiseAnd"), "or": ("Or", "BitwiseOr"), "xor": ("Xor", "BitwiseXor")}


def _widened(em: Emitter, op: Op, work: str) -> tuple[str, str]:
    dtype = operand_dtype(op)
    a, b = (em.cast(em.name(v), dtype, work) for v in op.operands)
    return a, b


def lower_arithmetic(em: Emitter, op: Op) -> Sequence[str]:
    dtype = operand_dtype(op)
    work = arithmetic_dtype(dtype)
    a, b = _widened(em, op, work)
    return [em.cast(em.one(_ARITHMETIC[op.kind], [a, b]), work, dtype)]


def lower_compare(em: Emitter, op: Op) -> Sequence[str]:
    work = compare_dtype(operand_dtype(op))
    a, b = _widened(em, op, work)
    if op.kind == "ne":
        return [em.one("Not", [em.one("Equal", [a, b])])]
    return [em.one(_COMPARE[op.kind], [a, b])]


def lower_logical(em: Emitter, op: Op) -> Sequence[str]:
    boolean, bitwise = _LOGICAL[op.kind]
    a, b = (em.name(v) for v in op.operands)
    return [em.one(boolean if operand_dtype(op) == "bool" else bitwise, [a, b])]


def _divisor_is_safe(em: Emitter, op: Op, dtype: str) -> bool:
    """True when the divisor is a constant with no 0 (and no -1 for wide signed dtypes)."""
    known = _known_values(em, op, 1)
    if known is None or np.any(known == 0):
        return False
    return dtype not in SIGNED_DTYPES or dtype in SMALL_INTS or not np.any(known == -1)


def _guarded_divisor(em: Emitter, b: str, dtype: str, work: str) -> tuple[str, str | None, str]:
    """(zero mask, minus-one mask or None, divisor with 1 in their places), all in `work`."""
    zero = em.one("Equal", [b, em.const(0, work)])
    bad = zero
    minus_one = None
    if dtype in SIGNED_DTYPES and dtype not in SMALL_INTS:  # INT_MIN / -1 overflows in `work`
        minus_one = em.one("Equal", [b, em.const(-1, work)])
        bad = em.one("Or", [zero, minus_one])
    return zero, minus_one, select(em, bad, em.const(1, work), b, work)


def lower_div(em: Emitter, op: Op) -> Sequence[str]:
    dtype = operand_dtype(op)
    work = arithmetic_dtype(dtype)
    a, b = _widened(em, op, work)
    if dtype in FLOAT_DTYPES or _divisor_is_safe(em, op, dtype):
        return [em.cast(em.one("Div", [a, b]), work, dtype)]
    zero, minus_one, safe = _guarded_divisor(em, b, dtype, work)
    quotient = em.one("Div", [a, safe])
    if minus_one is not None:
        negated = em.one("Sub", [em.const(0, work), quotient])  # wraps for INT_MIN
        quotient = select(em, minus_one, negated, quotient, work)
    quotient = select(em, zero, em.const(0, work), quotient, work)
    return [em.cast(quotient, work, dtype)]


def lower_rem(em: Emitter, op: Op) -> Sequence[str]:
    dtype = operand_dtype(op)
    if dtype in FLOAT_DTYPES:
        work = function_dtype(dtype)  # bf16 fmod in f32 is exact, then rounds back exactly
        a, b = _widened(em, op, work)
        return [em.cast(em.one("Mod", [a, b], {"fmod": 1}), work, dtype)]
    work = arithmetic_dtype(dtype)
    a, b = _widened(em, op, work)
    if not _divisor_is_safe(em, op, dtype):
        _, _, b = _guarded_divisor(em, b, dtype, work)
    return [em.cast(em.one("Mod", [a, b], {"fmod": 1}), work, dtype)]


def _constant_in_range(em: Emitter, op: Op, width: int) -> bool:
    known = _known_values(em, op, 1)
    return known is not None and bool(np.all((known >= 0) & (known < width)))


def lower_shift(em: Emitter, op: Op) -> Sequence[str]:
    dtype = operand_dtype(op)
    work = arithmetic_dtype(dtype)
    bits = _UNSIGNED_OF[work]
    width = dtype_bits(dtype)
    x, amount = _widened(em, op, work)
    in_range: str | None = None
    if not _constant_in_range(em, op, width):
        below = em.one("Less", [amount, em.const(width, work)])
        if dtype in SIGNED_DTYPES:
            in_range = em.one("And", [em.one("GreaterOrEqual", [amount, em.const(0, work)]), below])
        else:
            in_range = below
    signed_right = op.kind == "shr" and dtype in SIGNED_DTYPES
    if in_range is not None:
        # Out-of-range amounts: shl and unsigned shr select 0 below; signed shr clamps
        # to width - 1, which leaves exactly the sign fill.
        fill = width - 1 if signed_right else 0
        amount = select(em, in_range, amount, em.const(fill, work), work)
    if signed_right:
        negative = em.one("Less", [x, em.const(0, work)])
        flipped = select(em, negative, em.one("BitwiseNot", [x]), x, work)  # >= 0
        shifted = _bit_shift(em, flipped, amount, work, bits, "RIGHT")
        result = select(em, negative, em.one("BitwiseNot", [shifted]), shifted, work)
    else:
        direction = "LEFT" if op.kind == "shl" else "RIGHT"
        result = _bit_shift(em, x, amount, work, bits, direction)
        if in_range is not None:
            result = select(em, in_range, result, em.const(0, work), work)
    return [em.cast(result, work, dtype)]


def _bit_shift(em: Emitter, x: str, amount: str, work: str, bits: str, direction: str) -> str:
    """`BitShift` on the unsigned bit pattern of `x` (same-width casts keep the bits)."""
    shifted = em.one(
        "BitShift", [em.cast(x, work, bits), em.cast(amount, work, bits)], {"direction": direction}
    )
    return em.cast(shifted, bits, work)


RULES: dict[str, Rule] = {
    "cast": lower_cast,
    "select": lower_select,
    **dict.fromkeys(("exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh"), lower_function),
    "neg": lower_neg,
    "abs": lower_abs,
    "not": lower_not,
    **dict.fromkeys(_ARITHMETIC, lower_arithmetic),
    **dict.fromkeys((*_COMPARE, "ne"), lower_compare),
    **dict.fromkeys(_LOGICAL, lower_logical),
    "div": lower_div,
    "rem": lower_rem,
    "shl": lower_shift,
    "shr": lower_shift,
}
