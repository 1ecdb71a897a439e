"""Core IR data structures and the Builder (the contract every stage builds to)."""

from __future__ import annotations

import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from linnet.errors import InternalError
from linnet.ir import DTYPES, Builder, Function, Op, Program, Region, TensorType, Value
from linnet.ir.core import dtype_bits, dtype_of_numpy, numpy_dtype


def test_tensor_type_is_a_hashable_value() -> None:
    a = TensorType((2, 3), "f32")
    assert a == TensorType((2, 3), "f32") and hash(a) == hash(TensorType((2, 3), "f32"))
    assert a != TensorType((2, 3), "bf16")
    assert str(a) == "f32[2,3]" and str(TensorType((), "bool")) == "bool[]"
    assert (a.rank, a.size) == (2, 6)
    assert TensorType((4, 0), "i8").size == 0 and TensorType((), "i8").size == 1


def test_values_are_identities_with_unique_ids() -> None:
    t = TensorType((2,), "f32")
    a, b = Value(t, "x"), Value(t, "x")
    assert a != b and len({a, b}) == 2
    assert a.id != b.id
    assert repr(a) == f"<Value %{a.id} x : f32[2]>"


def test_dtype_table_round_trips_through_numpy() -> None:
    assert DTYPES == (
        "bool",
        "i8",
        "i16",
        "i32",
        "i64",
        "u8",
        "u16",
        "u32",
        "u64",
        "f16",
        "bf16",
        "f32",
        "f64",
    )
    for dtype in DTYPES:
        assert dtype_of_numpy(numpy_dtype(dtype)) == dtype
        assert numpy_dtype(dtype).itemsize * 8 == dtype_bits(dtype)
    assert numpy_dtype("bf16") == np.dtype(ml_dtypes.bfloat16)
    with pytest.raises(InternalError, match="complex128"):
        dtype_of_numpy(np.dtype(np.complex128))


def test_builder_infers_types_and_records_ops() -> None:
    b = Builder.for_function([("x", TensorType((2, 3), "f32")), ("ids", TensorType((4,), "i32"))])
    x, ids = b.args
    assert (x.name, ids.name) == ("x", "ids")
    w = b.param("embed.weight", TensorType((10, 3), "f32"))
    rows = b.gather(w, ids, axis=0)
    total = b.contract(x, rows, lhs_contract=(1,), rhs_contract=(1,))
    scaled = b.binary("mul", total, b.const(0.5, "f32"))
    flat = b.reshape(scaled, [8])
    fn = b.finish_function("embed", [flat])
    assert isinstance(fn, Function)
    assert [op.kind for op in fn.body.ops] == [
        "param",
        "gather",
        "contract",
        "const",
        "mul",
        "reshape",
    ]
    assert rows.type == TensorType((4, 3), "f32")
    assert total.type == TensorType((2, 4), "f32")
    assert fn.results == (flat,) and fn.body.results == (flat,)
    assert fn.inputs == (("x", x), ("ids", ids)) and fn.body.args == (x, ids)
    reshape = fn.body.ops[-1]
    assert reshape.attrs == {"shape": (8,)} and reshape.result is flat


def test_builder_normalises_attrs_to_int_tuples() -> None:
    b = Builder()
    x = b.const(np.ones((2, 3)), "f64")
    y = b.permute(x, np.array([1, 0]))
    z = b.slice(y, [0, 1], [3, 2])
    op = b.ops[-1]
    assert op.attrs == {"start": (0, 1), "stop": (3, 2), "step": (1, 1)}
    assert all(type(v) is int for v in op.attrs["start"])  # type: ignore[attr-defined]
    assert z.type == TensorType((3, 1), "f64")
    with pytest.raises(InternalError, match="reshape shape must be a sequence of integers"):
        b.reshape(x, None)  # type: ignore[arg-type]


def test_builder_rejections_are_internal_errors_naming_the_op() -> None:
    b = Builder()
    x = b.const([1.0, 2.0], "f32")
    i = b.const([1, 2], "i32")
    with pytest.raises(InternalError, match="op add: operands must share one dtype, got f32, i32"):
        b.binary("add", x, i)
    with pytest.raises(InternalError, match="op reduce"):
        b.reduce(x, "sum", [3])
    with pytest.raises(InternalError, match="unknown op kind 'matmul'"):
        b.emit("matmul", [x, x])
    assert [op.kind for op in b.ops] == ["const", "const"]  # nothing half-added


def test_multi_result_ops_and_regions() -> None:
    b = Builder.for_function([("n", TensorType((), "i64"))])
    (n,) = b.args
    i, acc = b.while_(
        [b.const(0, "i64"), b.const(1.0, "f32")],
        lambda rb, c: [rb.binary("lt", c[0], n)],
        lambda rb, c: [
            rb.binary("add", c[0], rb.const(1, "i64")),
            rb.binary("mul", c[1], rb.const(2.0, "f32")),
        ],
    )
    loop = b.ops[-1]
    assert loop.results == (i, acc) and len(loop.regions) == 2
    assert isinstance(loop.regions[0], Region) and loop.regions[0].args[0].type == TensorType(
        (), "i64"
    )
    with pytest.raises(InternalError, match="has 2 results, not one"):
        _ = loop.result
    program = Program({}, {}, {}, {"loop": b.finish_function("loop", [acc])}, {"N": 4})
    assert program.entries["loop"].results == (acc,)
    assert isinstance(loop, Op)


def test_importing_the_ir_loads_no_numpy() -> None:
    code = "import sys, linnet.ir, linnet.ir.ops, linnet.ir.verify, linnet.ir.printer; print('numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_docstring_examples_run() -> None:
    import doctest

    import linnet.ir.core
    import linnet.ir.interp
    import linnet.ir.passes

    for module in (linnet.ir.core, linnet.ir.interp, linnet.ir.passes):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__


def test_public_surface() -> None:
    import linnet.ir
    import linnet.ir.passes

    assert linnet.ir.__all__ == [
        "DTYPES",
        "Builder",
        "Function",
        "Op",
        "Program",
        "Region",
        "TensorType",
        "Value",
    ]
    assert {"optimize", "optimize_program", "fold", "cse", "dce", "simplify_ops"} <= set(
        linnet.ir.passes.__all__
    )
