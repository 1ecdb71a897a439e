"""The Core IR verifier: well-formed programs pass, each broken invariant is reported."""

from __future__ import annotations

import pytest

from linnet.errors import InternalError
from linnet.ir.core import Builder, Function, Op, Program, Region, TensorType, Value
from linnet.ir.verify import verify

F2 = TensorType((2,), "f32")


def simple() -> tuple[Builder, Value]:
    b = Builder.for_function([("x", F2)])
    return b, b.args[0]


def test_a_well_formed_program_verifies() -> None:
    b, x = simple()
    w = b.param("w", F2)
    s = b.state("s", F2)
    y = b.binary("add", b.binary("mul", x, w), s)
    (z,) = b.if_(b.const(True, "bool"), lambda rb, _: [rb.unary("neg", y)], lambda rb, _: [y])
    fn = b.finish_function("f", [z], {"s": y})
    verify(fn)
    verify(Program({"w": F2}, {}, {"s": F2}, {"f": fn}, {}))


def test_use_before_definition() -> None:
    b, x = simple()
    later = Value(F2)
    b.ops.append(Op("add", (x, later), (Value(F2),), {}))
    b.ops.append(Op("neg", (x,), (later,), {}))
    fn = b.finish_function("f", [later])
    with pytest.raises(
        InternalError,
        match=r"IR verification failed in f: op add reads <Value %\d+ : f32\[2\]>, which is not defined",
    ):
        verify(fn)


def test_values_defined_twice() -> None:
    b, x = simple()
    y = b.unary("neg", x)
    b.ops.append(Op("neg", (x,), (y,), {}))
    with pytest.raises(InternalError, match="is defined twice"):
        verify(b.finish_function("f", [y]))


def test_values_of_a_sibling_region_are_out_of_scope() -> None:
    b, x = simple()
    then = b.nested()
    inner = then.unary("exp", x)  # reads the enclosing x: fine
    then_region = then.finish([inner])
    other = b.nested()
    other_region = other.finish([inner])  # reads a value of the sibling region: not fine
    flag = b.const(False, "bool")
    (out,) = b.if_(flag, then_region, other_region)
    with pytest.raises(InternalError, match="the results of region 1 of op if reads"):
        verify(b.finish_function("f", [out]))


def test_values_inside_a_region_do_not_escape() -> None:
    b, x = simple()
    body = b.nested([F2])
    inside = body.unary("neg", body.args[0])
    (y,) = b.call("std.a::f", [x], body.finish([inside]))
    leak = b.binary("add", y, inside)
    with pytest.raises(InternalError, match="op add reads"):
        verify(b.finish_function("f", [leak]))


def test_tampered_result_types_are_caught() -> None:
    b, x = simple()
    y = b.unary("neg", x)
    y.type = TensorType((3,), "f32")
    with pytest.raises(InternalError, match=r"op neg: declared result types \(f32\[3\]\) differ"):
        verify(b.finish_function("f", [y]))


def test_function_shape_invariants() -> None:
    b, x = simple()
    y = b.unary("neg", x)
    fn = b.finish_function("f", [y])
    broken = Function("f", (("x", Value(F2)),), fn.body, fn.results, {})
    with pytest.raises(InternalError, match="inputs are not the body's args"):
        verify(broken)
    broken = Function("f", fn.inputs, fn.body, (x,), {})
    with pytest.raises(InternalError, match="results are not the body's results"):
        verify(broken)
    dangling = Function("f", fn.inputs, Region(fn.body.args, [], fn.body.results), fn.results, {})
    with pytest.raises(InternalError, match="the results of the function body reads"):
        verify(dangling)


def test_program_paths_and_types() -> None:
    b, x = simple()
    w = b.param("w", F2)
    fn = b.finish_function("f", [b.binary("add", x, w)], {"cache": x})
    with pytest.raises(InternalError, match="op param reads undeclared path w"):
        verify(Program({}, {}, {"cache": F2}, {"f": fn}, {}))
    with pytest.raises(InternalError, match=r"op param reads w as f32\[2\], declared bf16\[2\]"):
        verify(Program({"w": TensorType((2,), "bf16")}, {}, {"cache": F2}, {"f": fn}, {}))
    with pytest.raises(InternalError, match="state update names undeclared path cache"):
        verify(Program({"w": F2}, {}, {}, {"f": fn}, {}))
    with pytest.raises(InternalError, match=r"state update cache is f32\[2\], declared f32\[4\]"):
        verify(Program({"w": F2}, {}, {"cache": TensorType((4,), "f32")}, {"f": fn}, {}))
    verify(fn)  # without a program, paths are not checked


def test_state_updates_must_be_top_level_values() -> None:
    b, x = simple()
    body = b.nested([F2])
    inside = body.unary("neg", body.args[0])
    (y,) = b.call("std.a::f", [x], body.finish([inside]))
    fn = b.finish_function("f", [y], {"s": inside})
    with pytest.raises(InternalError, match="state update s reads"):
        verify(fn)
