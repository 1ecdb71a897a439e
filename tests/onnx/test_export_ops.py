"""Every Core IR op kind exported to ONNX, run in ONNX Runtime, against the NumPy reference.

Each test builds a small function with `Builder`, exports it (`export_ir`),
validates the model (`onnx.checker` with shape inference, the text round
trip) and compares ONNX Runtime's results with the interpreter's: integers
and bools bit for bit, floats within the contract (f32 1e-5 relative).
Operands come as inputs and as constants, since the exporter drops guards
for constant divisors and shift amounts.
"""

from __future__ import annotations

import numpy as np
import pytest
from backend_cases import (
    ARITH,
    COMPARE,
    SHAPE,
    binary_operands,
    bitwise_case,
    cast_source,
    const_first,
    division_edge_cases,
    gather_cases,
    one_op,
    random_array,
    rng_for,
    select_cases,
    shift_cases,
    unsigned_large_cases,
    with_const,
)
from export_support import ALL, FLOATS, INTS, check

from linnet.ir.core import Builder, TensorType, numpy_dtype

# -- unary ----------------------------------------------------------------------------------

FLOAT_UNARY = ("exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh")


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("kind", FLOAT_UNARY)
def test_float_unary(kind: str, dtype: str) -> None:
    rng = rng_for(kind, dtype)
    low = 0.05 if kind in ("log", "sqrt", "rsqrt") else -3.0
    x = random_array(rng, dtype, SHAPE, float_range=(low, 3.0))
    check(one_op(kind, [TensorType(SHAPE, dtype)]), [x])


@pytest.mark.parametrize("dtype", [*INTS, *FLOATS])
@pytest.mark.parametrize("kind", ["neg", "abs"])
def test_numeric_unary(kind: str, dtype: str) -> None:
    x = random_array(rng_for(kind, dtype), dtype, SHAPE)
    check(one_op(kind, [TensorType(SHAPE, dtype)]), [x])


@pytest.mark.parametrize("dtype", ["bool", *INTS])
def test_not(dtype: str) -> None:
    x = random_array(rng_for("not", dtype), dtype, SHAPE)
    check(one_op("not", [TensorType(SHAPE, dtype)]), [x])


# -- binary ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [*INTS, *FLOATS])
@pytest.mark.parametrize("kind", ARITH + COMPARE)
def test_numeric_binary(kind: str, dtype: str) -> None:
    a, b = binary_operands(kind, dtype)
    types = [TensorType(a.shape, dtype), TensorType(b.shape, dtype)]
    check(one_op(kind, types), [a, b])


@pytest.mark.parametrize("dtype", ["i32", "u8", "u32", "u64", "f32"])
@pytest.mark.parametrize("kind", ARITH + COMPARE)
def test_binary_with_constants(kind: str, dtype: str) -> None:
    a, b = binary_operands(kind, dtype)
    scalar = b[:1].reshape(())
    check(with_const(kind, a, dtype, scalar), [a])
    check(with_const(kind, a, dtype, b), [a])
    if not (kind in ("div", "rem") and dtype in INTS):
        check(const_first(kind, a, dtype, scalar), [a])


def test_float_nan_and_signed_zero() -> None:
    """`max`/`min` propagate NaN, float `rem` is C fmod (NaN for a zero divisor)."""
    a = np.array([np.nan, 1.0, -0.0, 7.5, -7.5, 1.0, np.inf], np.float32)
    b = np.array([1.0, np.nan, 0.0, 2.0, 2.0, 0.0, 1.0], np.float32)
    for kind in ("max", "min", "rem", "div", "eq", "ne", "lt"):
        check(one_op(kind, [TensorType(a.shape, "f32")] * 2), [a, b])


@pytest.mark.parametrize("dtype", ["bool", *INTS])
@pytest.mark.parametrize("kind", ["and", "or", "xor", "eq", "ne"])
def test_bitwise(kind: str, dtype: str) -> None:
    check(*bitwise_case(kind, dtype))


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("kind", ["shl", "shr"])
def test_shifts_in_and_out_of_range(kind: str, dtype: str) -> None:
    for fn, inputs in shift_cases(kind, dtype):
        check(fn, inputs)


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("kind", ["div", "rem"])
def test_integer_division_edges(kind: str, dtype: str) -> None:
    for fn, inputs in division_edge_cases(kind, dtype):
        check(fn, inputs)


@pytest.mark.parametrize("dtype", ["u64", "u32"])
def test_unsigned_large_values(dtype: str) -> None:
    for fn, inputs in unsigned_large_cases(dtype):
        check(fn, inputs)


# -- casts --------------------------------------------------------------------------------


@pytest.mark.parametrize("target", ALL)
@pytest.mark.parametrize("source", ALL)
def test_cast(source: str, target: str) -> None:
    x = cast_source(rng_for("cast", source, target), source, target)
    check(one_op("cast", [TensorType(x.shape, source)], result=TensorType(x.shape, target)), [x])


def test_float_to_int_truncates_and_wraps() -> None:
    """Truncation toward zero; small widths wrap through i64 as the reference does."""
    x = np.array([-2.7, 2.7, -0.5, 0.5, 300.5, -200.25, 65537.0, 1e9], np.float32)
    for target in ("i8", "u8", "i16", "u16", "i32", "i64"):
        check(one_op("cast", [TensorType(x.shape, "f32")], result=TensorType(x.shape, target)), [x])


# -- select and shape ops -------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["bool", "i8", "i16", "u16", "u64", "f16", "f32"])
def test_select(dtype: str) -> None:
    for fn, inputs in select_cases(dtype):
        check(fn, inputs)


@pytest.mark.parametrize("dtype", ["f32", "bool", "u16"])
def test_shape_ops(dtype: str) -> None:
    rng = rng_for("shape", dtype)
    x = random_array(rng, dtype, (2, 3, 4))
    b = Builder.for_function([("x", TensorType(x.shape, dtype))])
    (v,) = b.args
    outs = [
        b.broadcast(b.reshape(v, (2, 1, 12)), (5, 2, 3, 12)),
        b.broadcast(v, (2, 3, 4)),
        b.permute(v, (2, 0, 1)),
        b.permute(v, (0, 1, 2)),
        b.slice(v, (0, 1, 0), (2, 3, 4), (1, 1, 2)),
        b.slice(v, (1, 0, 1), (9, 3, 7), (1, 2, 3)),  # stop clamped (language.md 9.3)
        b.slice(v, (0, 3, 0), (2, 3, 4)),  # empty
        b.slice(v, (0, 0, 0), (2, 3, 4)),  # everything
        b.concat([v, v, b.slice(v, (0, 0, 0), (2, 3, 1))], 2),
        b.concat([v, v], 0),
        b.concat([v], 1),
        b.reshape(b.slice(v, (0, 0, 0), (1, 1, 1)), ()),
        b.reshape(b.slice(v, (0, 3, 0), (2, 3, 4)), (0, 5)),  # zero-sized shapes
    ]
    check(b.finish_function("shapes", outs), [x])


@pytest.mark.parametrize("dtype", ["f32", "i64"])
def test_permutes_of_unit_axes_are_reshapes(dtype: str) -> None:
    """A permute that moves only axes of size 1 (a decode step's `[B, 1, N, D]` ->
    `[B, N, 1, D]`) exports as a `Reshape`, with the values of the permute."""
    from linnet.onnx.export.assemble import export_ir
    from linnet.onnx.export.shapes import moves_only_units

    x = random_array(rng_for("unit_permute", dtype), dtype, (2, 1, 3, 1, 4))
    b = Builder.for_function([("x", TensorType(x.shape, dtype))])
    (v,) = b.args
    outs = [
        b.permute(v, (0, 2, 1, 3, 4)),  # only the size-1 axes move: a reshape
        b.permute(v, (1, 0, 3, 2, 4)),
        b.permute(v, (2, 1, 0, 3, 4)),  # sizes 2 and 3 swap: a transpose
    ]
    fn = b.finish_function("unit_permutes", outs)
    check(fn, [x])
    ops = [node.op_type for node in export_ir(fn).model.graph.node]
    assert ops.count("Transpose") == 1 and ops.count("Reshape") == 2
    assert moves_only_units((0, 2, 1, 3), (1, 1, 32, 64))
    assert not moves_only_units((0, 2, 1, 3), (1, 2, 32, 64))


@pytest.mark.parametrize("index_dtype", ["i32", "i64", "u8", "u32", "i8", "u64"])
def test_gather(index_dtype: str) -> None:
    for fn, inputs in gather_cases(index_dtype):
        check(fn, inputs)


def test_take() -> None:
    rng = rng_for("take")
    x = random_array(rng, "i16", (4, 5, 6))
    i0 = rng.integers(0, 4, size=(2, 1)).astype(np.int32)
    i1 = rng.integers(0, 5, size=(3,)).astype(np.int64)
    i2 = rng.integers(0, 6, size=()).astype(np.uint8)
    types = [TensorType(x.shape, "i16"), TensorType(i0.shape, "i32"),
             TensorType(i1.shape, "i64"), TensorType(i2.shape, "u8")]  # fmt: skip
    check(one_op("take", types), [x, i0, i1, i2])
    j = rng.integers(0, 4, size=()).astype(np.int64)
    check(one_op("take", [TensorType((4,), "bool"), TensorType((), "i64")]),
          [random_array(rng, "bool", (4,)), j])  # fmt: skip
    scalar = np.array(3.5, np.float32)
    check(one_op("take", [TensorType((), "f32")]), [scalar])


# -- reductions and contraction ---------------------------------------------------------------

REDUCE_AXES = [(), (0,), (1,), (2,), (0, 2), (0, 1, 2)]


@pytest.mark.parametrize("dtype", ["i8", "i32", "u16", "u64", "f16", "f32", "f64"])
@pytest.mark.parametrize("kind", ["sum", "prod", "max", "min"])
def test_reduce_numeric(kind: str, dtype: str) -> None:
    rng = rng_for("reduce", kind, dtype)
    low, high = (0.5, 1.5) if kind == "prod" else (-4.0, 4.0)
    x = random_array(rng, dtype, (3, 4, 5), float_range=(low, high))
    for axes in REDUCE_AXES:
        fn = one_op("reduce", [TensorType(x.shape, dtype)], {"kind": kind, "axes": axes})
        check(fn, [x], scale=4.0 if dtype == "f16" else 1.0)


@pytest.mark.parametrize("kind", ["any", "all"])
def test_reduce_bool(kind: str) -> None:
    x = random_array(rng_for(kind), "bool", (3, 4, 5))
    x[0] = kind == "all"  # a row where every element agrees
    for axes in REDUCE_AXES:
        check(one_op("reduce", [TensorType(x.shape, "bool")], {"kind": kind, "axes": axes}), [x])


@pytest.mark.parametrize("dtype", ["bool", "i8", "i32", "u64", "f16", "f32"])
def test_reduce_empty_axes(dtype: str) -> None:
    """Reducing a zero-length axis gives the identities of language.md 8.6."""
    x = np.zeros((3, 0, 2), numpy_dtype(dtype))
    kinds = ["any", "all"] if dtype == "bool" else ["sum", "prod", "max", "min"]
    for kind in kinds:
        for axes in [(1,), (0, 1), (0, 1, 2)]:
            check(one_op("reduce", [TensorType(x.shape, dtype)], {"kind": kind, "axes": axes}), [x])


CONTRACTS = [
    # lhs shape, rhs shape, lhs_batch, rhs_batch, lhs_contract, rhs_contract
    ((3, 4), (4, 5), (), (), (1,), (0,)),
    ((2, 3, 4), (5, 4), (), (), (2,), (1,)),  # F.linear form: Gemm with transB
    ((4, 3), (4, 5), (), (), (0,), (0,)),  # lhs stored transposed: Gemm with transA
    ((4,), (5, 4), (), (), (0,), (1,)),  # vector . matrix^T
    ((4,), (4,), (), (), (0,), (0,)),  # dot
    ((3,), (5,), (), (), (), ()),  # outer
    ((2, 3, 4), (2, 4, 5), (0,), (0,), (2,), (1,)),  # batched
    ((2, 6, 3, 4), (2, 6, 5, 4), (0, 1), (0, 1), (3,), (3,)),  # attention scores
    ((3, 2, 4, 5), (5, 2, 4), (1,), (1,), (2, 3), (2, 0)),  # batch in the middle, two contractions
    ((2, 3, 4), (3, 4, 5), (), (), (1, 2), (0, 1)),  # two contracting axes, no batch
    ((2, 0, 4), (4, 5), (), (), (2,), (0,)),  # empty free axis
    ((2, 3, 0), (0, 5), (), (), (2,), (0,)),  # empty contraction: zeros
]


@pytest.mark.parametrize("dtype", ["i8", "i32", "u32", "u64", "f16", "f32", "f64"])
@pytest.mark.parametrize("case", range(len(CONTRACTS)))
def test_contract(case: int, dtype: str) -> None:
    lhs_shape, rhs_shape, lb, rb, lc, rc = CONTRACTS[case]
    rng = rng_for("contract", case, dtype)
    a = random_array(rng, dtype, lhs_shape, float_range=(-1.0, 1.0))
    b = random_array(rng, dtype, rhs_shape, float_range=(-1.0, 1.0))
    attrs = {"lhs_batch": lb, "rhs_batch": rb, "lhs_contract": lc, "rhs_contract": rc}
    fn = one_op("contract", [TensorType(a.shape, dtype), TensorType(b.shape, dtype)], attrs)
    check(fn, [a, b], scale=4.0 if dtype == "f16" else 1.0)


@pytest.mark.parametrize("dtype", ["u8", "i16", "i32", "i64", "u64", "f16", "f32", "f64"])
def test_iota_and_const(dtype: str) -> None:
    b = Builder.for_function([])
    value = random_array(rng_for("const", dtype), dtype, (2, 3))
    outs = [
        b.iota(7, dtype),
        b.const(value, dtype),
        b.const(value[0, 0], dtype),
        b.binary("add", b.iota(3, dtype), b.iota(3, dtype)),
    ]
    check(b.finish_function("sources", outs), [])
