"""Shared helpers of the backend op tests (IR interpreter, linnet.torch, ONNX export).

Every backend is tested op by op against the NumPy reference interpreter on the
same random data, so the one-op functions, the random inputs and the
tolerances live here once. `tests/` is on `pythonpath` (pyproject.toml), so
each test folder imports this module by name.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

from linnet.ir.core import Builder, Function, TensorType, Value, numpy_dtype

RTOL = {"f16": 2e-3, "bf16": 1.6e-2, "f32": 1e-5, "f64": 1e-12}
ATOL = {"f16": 1e-3, "bf16": 1e-2, "f32": 1e-6, "f64": 1e-12}

INT_RANGES = {
    "i8": (-(2**7), 2**7 - 1),
    "i16": (-(2**15), 2**15 - 1),
    "i32": (-(2**31), 2**31 - 1),
    "i64": (-(2**63), 2**63 - 1),
    "u8": (0, 2**8 - 1),
    "u16": (0, 2**16 - 1),
    "u32": (0, 2**32 - 1),
    "u64": (0, 2**64 - 1),
}
INTS = tuple(INT_RANGES)
FLOAT_DTYPES = ("f16", "bf16", "f32", "f64")

SHAPE = (3, 5)
ARITH = ("add", "sub", "mul", "div", "rem", "max", "min")
COMPARE = ("eq", "ne", "lt", "le", "gt", "ge")


def rng_for(*key: object) -> np.random.Generator:
    """A generator seeded from the test's parameters: stable across runs and processes."""
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def random_array(
    rng: np.random.Generator, dtype: str, shape: tuple[int, ...], **kw: Any
) -> np.ndarray:
    """Random data of `dtype`: ints over the whole range with the extremes, floats in [lo, hi)."""
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype in INT_RANGES:
        lo, hi = kw.get("int_range", INT_RANGES[dtype])
        values = rng.integers(lo, hi, size=shape, endpoint=True, dtype=numpy_dtype(dtype))
        flat = values.reshape(-1)
        if "int_range" not in kw and flat.size >= 2:
            flat[0], flat[1] = lo, hi
        return values
    lo, hi = kw.get("float_range", (-4.0, 4.0))
    return rng.uniform(lo, hi, size=shape).astype(numpy_dtype(dtype))


def assert_close(actual: np.ndarray, expected: np.ndarray, dtype: str, scale: float = 1.0) -> None:
    """Exact for ints/bools, within the dtype's tolerance for floats (NaNs must match)."""
    assert actual.dtype == numpy_dtype(dtype), (actual.dtype, dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    if dtype in RTOL:
        np.testing.assert_allclose(
            actual.astype(np.float64),
            expected.astype(np.float64),
            rtol=RTOL[dtype] * scale,
            atol=ATOL[dtype] * scale,
            equal_nan=True,
        )
    else:
        np.testing.assert_array_equal(actual, expected)


def one_op(
    kind: str,
    types: list[TensorType],
    attrs: dict[str, object] | None = None,
    result: TensorType | None = None,
) -> Function:
    """A function of `len(types)` inputs returning one op applied to them."""
    b = Builder.for_function([(f"x{i}", t) for i, t in enumerate(types)])
    out = b.emit(kind, b.args, attrs, type=result)
    return b.finish_function(kind, [out])


def with_const(kind: str, x: np.ndarray, dtype: str, const: np.ndarray) -> Function:
    """`kind(x, const)`: the right operand is a `const` op."""
    b = Builder.for_function([("x", TensorType(x.shape, dtype))])
    out = b.binary(kind, b.args[0], b.const(const, dtype))
    return b.finish_function(kind, [out])


def const_first(kind: str, x: np.ndarray, dtype: str, const: np.ndarray) -> Function:
    """`kind(const, x)`: the left operand is a `const` op."""
    b = Builder.for_function([("x", TensorType(x.shape, dtype))])
    out = b.binary(kind, b.const(const, dtype), b.args[0])
    return b.finish_function(kind, [out])


def binary_operands(kind: str, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """`[3, 5]` and a `[5]` to broadcast along the first axis: no integer division by
    zero, and some equal pairs for the comparisons."""
    rng = rng_for(kind, dtype)
    a = random_array(rng, dtype, SHAPE)
    b = random_array(rng, dtype, SHAPE[1:])
    if kind in ("div", "rem") and dtype in INTS:
        b[b == 0] = 3
    if kind in COMPARE:
        b[:2] = a[0, :2]
    return a, b


def cast_source(rng: np.random.Generator, source: str, target: str) -> np.ndarray:
    """Values of `source` a cast to `target` is defined on (floats to ints in range),
    with signed zeros and a fraction among the floats."""
    if source in FLOAT_DTYPES and target in INTS:
        hi = 100.0 if target in ("i8", "u8") else 3e4 if target in ("i16", "u16") else 1e9
        lo = 0.0 if target.startswith("u") else -hi
        if source == "f16":
            hi, lo = min(hi, 6e4), max(lo, -6e4)
        return random_array(rng, source, (4, 8), float_range=(lo, hi))
    if source in FLOAT_DTYPES:
        x = random_array(rng, source, (4, 8), float_range=(-1e3, 1e3))
        x[0, :3] = [0.0, -0.0, 0.4]
        return x
    return random_array(rng, source, (4, 8))


# -- cumsum (language-extensions 5), shared by the interpreter, torch and ONNX tests ----------

CUMSUM_DTYPES = (*INTS, *FLOAT_DTYPES)
CUMSUM_SHAPE = (4, 9)


def cumsum_reference(x: np.ndarray, axis: int, dtype: str) -> np.ndarray:
    """Exact running sums: integers as Python ints wrapped to the width, floats in f64."""
    if dtype in INT_RANGES:
        lo, hi = INT_RANGES[dtype]
        width = hi - lo + 1
        exact = np.cumsum(x.astype(object), axis=axis)
        wrapped = np.vectorize(lambda v: (int(v) - lo) % width + lo, otypes=[object])(exact)
        return wrapped.astype(numpy_dtype(dtype))
    return np.cumsum(x.astype(np.float64), axis=axis)


def cumsum_data(dtype: str, axis: int) -> np.ndarray:
    rng = rng_for("cumsum", dtype, axis)
    if dtype in FLOAT_DTYPES:
        return random_array(rng, dtype, CUMSUM_SHAPE, float_range=(-2.0, 2.0))
    return random_array(rng, dtype, CUMSUM_SHAPE)


def check_cumsum(actual: np.ndarray, x: np.ndarray, axis: int, dtype: str) -> None:
    """Integers bit for bit; floats within the dtype's tolerance times the length summed."""
    expected = cumsum_reference(x, axis, dtype)
    if dtype in INT_RANGES:
        assert actual.dtype == numpy_dtype(dtype)
        np.testing.assert_array_equal(actual, expected)
    else:
        scale = float(x.shape[axis])
        assert_close(actual, expected.astype(numpy_dtype(dtype)), dtype, scale=scale)


def cumsum_op(dtype: str, axis: int) -> Function:
    return one_op("cumsum", [TensorType(CUMSUM_SHAPE, dtype)], {"axis": axis})


# -- integer edge cases, shared by the torch, JAX and ONNX op tests ---------------------------

Case = tuple[Function, list[np.ndarray]]


def bitwise_case(kind: str, dtype: str) -> Case:
    rng = rng_for(kind, dtype)
    a, b = random_array(rng, dtype, SHAPE), random_array(rng, dtype, SHAPE)
    return one_op(kind, [TensorType(SHAPE, dtype)] * 2), [a, b]


def select_cases(dtype: str) -> list[Case]:
    """`select` with broadcast operands, and with a constant scalar branch as masks write it."""
    rng = rng_for("select", dtype)
    c = random_array(rng, "bool", (3, 1))
    a, b = random_array(rng, dtype, (3, 4)), random_array(rng, dtype, (4,))
    types = [TensorType(c.shape, "bool"), TensorType(a.shape, dtype), TensorType(b.shape, dtype)]
    bb = Builder.for_function(
        [("c", TensorType(c.shape, "bool")), ("a", TensorType(a.shape, dtype))]
    )
    out = bb.select(bb.args[0], bb.args[1], bb.const(b[0], dtype))
    out2 = bb.select(bb.args[0], bb.const(b[1], dtype), bb.args[1])
    return [(one_op("select", types), [c, a, b]), (bb.finish_function("s", [out, out2]), [c, a])]


def shape_ops_case() -> Case:
    """broadcast, permute, strided/clamped/empty slices, concat and a rank-0 reshape in one."""
    x = random_array(rng_for("shape"), "f32", (2, 3, 4))
    b = Builder.for_function([("x", TensorType(x.shape, "f32"))])
    (v,) = b.args
    outs = [
        b.broadcast(b.reshape(v, (2, 1, 12)), (5, 2, 3, 12)),
        b.permute(v, (2, 0, 1)),
        b.slice(v, (0, 1, 0), (2, 3, 4), (1, 1, 2)),
        b.slice(v, (1, 0, 1), (9, 3, 7), (1, 2, 3)),  # stop clamped (language.md 9.3)
        b.slice(v, (0, 3, 0), (2, 3, 4)),  # empty
        b.concat([v, v, b.slice(v, (0, 0, 0), (2, 3, 1))], 2),
        b.concat([v, v], 0),
        b.reshape(b.slice(v, (0, 0, 0), (1, 1, 1)), ()),
    ]
    return b.finish_function("shapes", outs), [x]


def gather_cases(index_dtype: str) -> list[Case]:
    """`gather` on every axis with scalar, vector and matrix indices of `index_dtype`."""
    rng = rng_for("gather", index_dtype)
    x = random_array(rng, "f32", (4, 5, 6))
    cases: list[Case] = []
    for axis in range(3):
        for shape in [(), (3,), (2, 3)]:
            idx = rng.integers(0, x.shape[axis], size=shape).astype(numpy_dtype(index_dtype))
            types = [TensorType(x.shape, "f32"), TensorType(idx.shape, index_dtype)]
            cases.append((one_op("gather", types, {"axis": axis}), [x, idx]))
    return cases


def shift_cases(kind: str, dtype: str) -> list[Case]:
    """Amounts outside 0..width-1 (negative too): 0 for shl, the sign fill for shr; as an
    input, as a constant, and constant amounts in range (the guard an exporter may drop)."""
    rng = rng_for(kind, dtype)
    width = numpy_dtype(dtype).itemsize * 8
    x = random_array(rng, dtype, (4, 2 * width + 4))
    amounts = np.arange(-2 if dtype.startswith("i") else 0, 2 * width + 2)[: x.shape[1]]
    bits = np.resize(amounts, x.shape[1]).astype(numpy_dtype(dtype))
    types = [TensorType(x.shape, dtype), TensorType(bits.shape, dtype)]
    in_range = np.array([0, 1, width - 1], numpy_dtype(dtype))
    return [
        (one_op(kind, types), [x, bits]),
        (with_const(kind, x, dtype, bits), [x]),
        (with_const(kind, x[:, :3], dtype, in_range), [x[:, :3]]),
    ]


def division_edge_cases(kind: str, dtype: str) -> list[Case]:
    """Zero divisors give 0 and INT_MIN / -1 wraps (the reference's choices), without trapping."""
    info = np.iinfo(numpy_dtype(dtype))
    a = np.array([info.min, info.max, 7, -7 if info.min < 0 else 9, 0, 5], numpy_dtype(dtype))
    b = np.array([-1 if info.min < 0 else 3, 0, -2 if info.min < 0 else 2, 2, 0, 0],
                 numpy_dtype(dtype))  # fmt: skip
    types = [TensorType(a.shape, dtype)] * 2
    return [(one_op(kind, types), [a, b]), (with_const(kind, a, dtype, b), [a])]


UNSIGNED_KINDS = ("div", "rem", "max", "min", "lt", "ge", "shr", "mul", "sub")


def unsigned_large_cases(dtype: str) -> list[Case]:
    """u32/u64 values past the signed range: division, comparisons, shifts, wrapping."""
    rng = rng_for("udiv", dtype)
    top = 2**64 - 1 if dtype == "u64" else 2**32 - 1
    a = rng.integers(0, top, size=64, endpoint=True, dtype=numpy_dtype(dtype))
    b = rng.integers(1, top, size=64, endpoint=True, dtype=numpy_dtype(dtype))
    b[:16] = rng.integers(1, 1000, size=16)
    a[:4] = [top, top - 1, 2**63 if dtype == "u64" else 2**31, 0]
    b[4:8] = [top, 2**63 + 1 if dtype == "u64" else 2**31 + 1, 1, top - 1]
    cases = []
    for kind in UNSIGNED_KINDS:
        operand = b if kind != "shr" else (b % 70).astype(b.dtype)
        cases.append((one_op(kind, [TensorType(a.shape, dtype)] * 2), [a, operand]))
    return cases


# -- control flow, shared by the torch and JAX control tests ---------------------------------

_F32x4 = TensorType((4,), "f32")


def while_with_paths_case() -> tuple[
    Function, list[list[np.ndarray]], dict[str, Any], dict[str, Any]
]:
    """A `while` whose body reads a param, a buffer and state and writes the state: the
    function, inputs for 0, 1 and 4 steps, the weights and the state."""
    b = Builder.for_function([("x", _F32x4), ("n", TensorType((), "i32"))])
    x, n = b.args
    w = b.param("w", _F32x4)
    s = b.state("s", _F32x4)
    offset = b.buffer("offset", _F32x4)

    def cond(inner: Builder, carried: tuple[Value, ...]) -> list[Value]:
        return [inner.binary("lt", carried[0], n)]

    def body(inner: Builder, carried: tuple[Value, ...]) -> list[Value]:
        i, acc = carried
        grown = inner.binary("add", inner.binary("mul", acc, w), s)
        return [inner.binary("add", i, inner.const(1, "i32")), inner.binary("sub", grown, offset)]

    i, acc = b.while_([b.const(0, "i32"), x], cond, body)
    fn = b.finish_function("loop", [acc, i], {"s": acc})
    weights = {
        "w": np.array([0.5, 1.0, 2.0, -1.0], np.float32),
        "offset": np.array([0.0, 0.5, 0.25, 1.0], np.float32),
    }
    state = {"s": np.array([1.0, 0.0, -1.0, 0.25], np.float32)}
    x_in = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    inputs = [[x_in, np.array(steps, np.int32)] for steps in (0, 1, 4)]
    return fn, inputs, weights, state


def if_branches_case() -> tuple[Function, list[list[np.ndarray]]]:
    """An `if` reading an enclosing value in both branches, with inputs for each branch."""
    b = Builder.for_function([("c", TensorType((), "bool")), ("x", _F32x4)])
    c, x = b.args
    (y,) = b.if_(
        c,
        lambda inner, _: [inner.unary("exp", x)],
        lambda inner, _: [inner.binary("sub", x, inner.const(1.0, "f32"))],
    )
    fn = b.finish_function("branch", [y])
    x_in = np.array([0.0, 1.0, -1.0, 2.0], np.float32)
    return fn, [[np.array(flag), x_in] for flag in (True, False)]
