"""`while`, `if`, `call`, params/buffers/state and whole entries in the reference interpreter."""

from __future__ import annotations

import math

import numpy as np
import pytest

from linnet.errors import LinnetError
from linnet.ir.core import Builder, Function, Program, TensorType, Value
from linnet.ir.interp import run_entry, run_function

I64 = TensorType((), "i64")
F32x3 = TensorType((3,), "f32")


def loop_function() -> Function:
    """f(n, x): repeat n times {i += 1; x = x * 0.5 + i}; returns (i, x)."""
    b = Builder.for_function([("n", I64), ("x", F32x3)])
    n, x = b.args

    def cond(rb: Builder, carried: tuple[Value, ...]) -> list[Value]:
        return [rb.binary("lt", carried[0], n)]  # reads n from the enclosing region

    def body(rb: Builder, carried: tuple[Value, ...]) -> list[Value]:
        i = rb.binary("add", carried[0], rb.const(1, "i64"))
        scaled = rb.binary("mul", carried[1], rb.const(0.5, "f32"))
        return [i, rb.binary("add", scaled, rb.cast(i, "f32"))]

    i, y = b.while_([b.const(0, "i64"), x], cond, body)
    return b.finish_function("loop", [i, y])


@pytest.mark.parametrize("n", [0, 1, 5])
def test_while_runs_until_the_condition_fails(n: int) -> None:
    x = np.array([1.0, -2.0, 3.5], np.float32)
    (i, y), _ = run_function(loop_function(), {}, {}, [np.array(n, np.int64), x])
    expected = [float(v) for v in x]
    for step in range(1, n + 1):
        expected = [float(np.float32(np.float32(v * 0.5) + step)) for v in expected]
    assert int(i) == n
    assert y.tolist() == expected


def test_if_runs_only_the_taken_branch() -> None:
    b = Builder.for_function([("flag", TensorType((), "bool")), ("x", F32x3)])
    flag, x = b.args
    (out,) = b.if_(
        flag,
        lambda rb, _: [rb.unary("exp", x)],
        lambda rb, _: [rb.binary("sub", x, rb.const(1.0, "f32"))],
    )
    fn = b.finish_function("branch", [out])
    x_value = np.array([0.5, 1.0, -1.0], np.float32)
    (taken,), _ = run_function(fn, {}, {}, [np.array(True), x_value])
    (other,), _ = run_function(fn, {}, {}, [np.array(False), x_value])
    assert taken.tolist() == [float(np.float32(math.exp(v))) for v in x_value.tolist()]
    assert other.tolist() == [v - 1.0 for v in x_value.tolist()]


def test_call_runs_its_body() -> None:
    b = Builder.for_function([("x", F32x3)])

    def silu(rb: Builder, args: tuple[Value, ...]) -> list[Value]:
        (v,) = args
        one = rb.const(1.0, "f32")
        sig = rb.binary("div", one, rb.binary("add", one, rb.unary("exp", rb.unary("neg", v))))
        return [rb.binary("mul", v, sig)]

    (y,) = b.call("std.nn.activation::silu", [b.args[0]], silu, {"T": "f32"})
    fn = b.finish_function("f", [y])
    x = np.array([-1.5, 0.25, 2.0], np.float32)
    (got,), _ = run_function(fn, {}, {}, [x])
    expected = [v / (1.0 + math.exp(-v)) for v in x.astype(np.float64).tolist()]
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def counter_program() -> Program:
    """step(x): count += 1; total += x * w + bias; returns total. State starts at zero."""
    params = {"w": F32x3}
    buffers = {"bias": F32x3}
    state = {"count": I64, "total": F32x3}
    b = Builder.for_function([("x", F32x3)])
    (x,) = b.args
    count = b.binary("add", b.state("count", I64), b.const(1, "i64"))
    term = b.binary("add", b.binary("mul", x, b.param("w", F32x3)), b.buffer("bias", F32x3))
    total = b.binary("add", b.state("total", F32x3), term)
    fn = b.finish_function("step", [total], {"count": count, "total": total})
    return Program(params, buffers, state, {"step": fn}, {})


def test_state_updates_carry_between_calls() -> None:
    program = counter_program()
    weights = {
        "w": np.array([1.0, 2.0, 3.0], np.float32),
        "bias": np.array([0.5, 0.5, 0.5], np.float32),
    }
    x = np.array([1.0, -1.0, 0.25], np.float32)
    (first,), state = run_entry(program, "step", weights, None, [x])
    (second,), state = run_entry(program, "step", weights, state, [x])
    assert int(state["count"]) == 2
    assert first.tolist() == [1.5, -1.5, 1.25]
    assert second.tolist() == [3.0, -3.0, 2.5]
    assert state["total"].tolist() == second.tolist()


def test_missing_and_mistyped_weights_name_the_path() -> None:
    program = counter_program()
    x = np.zeros(3, np.float32)
    weights = {"w": np.zeros(3, np.float32), "bias": np.zeros(3, np.float32)}
    with pytest.raises(LinnetError, match=r"weight bias \(f32\[3\]\) is missing"):
        run_entry(program, "step", {"w": np.zeros(3, np.float32)}, None, [x])
    bad = {"w": np.zeros(4, np.float32), "bias": np.zeros(3, np.float32)}
    with pytest.raises(LinnetError, match=r"weight w: expected f32\[3\]"):
        run_entry(program, "step", bad, None, [x])
    with pytest.raises(LinnetError, match="entry decode does not exist"):
        run_entry(program, "decode", {}, None, [x])
    zeros = {"count": np.zeros((), np.int64), "total": np.zeros(3, np.float32)}
    with pytest.raises(LinnetError, match="param w has no value"):
        run_function(program.entries["step"], {}, zeros, [x], buffers={})
    with pytest.raises(LinnetError, match=r"state total: expected f32\[3\]"):
        run_function(program.entries["step"], weights, {**zeros, "total": np.zeros(3)}, [x])


@pytest.mark.parametrize("n", [0, 3, 6])
def test_nested_loops_read_enclosing_values(n: int) -> None:
    """total = sum over i < n of (sum over j < i of j * scale), with a call inside the inner body."""
    b = Builder.for_function([("n", I64), ("scale", TensorType((), "f32"))])
    n_value, scale = b.args
    one = b.const(1, "i64")

    def inner_body(rb: Builder, c: tuple[Value, ...]) -> list[Value]:
        j, acc = c

        def term(cb: Builder, args: tuple[Value, ...]) -> list[Value]:
            return [cb.binary("mul", cb.cast(args[0], "f32"), scale)]

        (t,) = rb.call("std.test::term", [j], term)
        return [rb.binary("add", j, one), rb.binary("add", acc, t)]

    def outer_body(rb: Builder, c: tuple[Value, ...]) -> list[Value]:
        i, total = c
        _, partial = rb.while_(
            [rb.const(0, "i64"), rb.const(0.0, "f32")],
            lambda cb, ic: [cb.binary("lt", ic[0], i)],  # reads the outer loop's value
            inner_body,
        )
        return [rb.binary("add", i, one), rb.binary("add", total, partial)]

    _, total = b.while_(
        [b.const(0, "i64"), b.const(0.0, "f32")],
        lambda cb, c: [cb.binary("lt", c[0], n_value)],
        outer_body,
    )
    fn = b.finish_function("nested", [total])
    (got,), _ = run_function(fn, {}, {}, [np.array(n, np.int64), np.array(0.5, np.float32)])
    assert float(got) == sum(j * 0.5 for i in range(n) for j in range(i))


def test_every_op_kind_has_an_interpreter_rule() -> None:
    from linnet.ir.interp import REGION_AND_SOURCE_RULES
    from linnet.ir.kernels import KERNELS
    from linnet.ir.ops import OP_KINDS

    assert set(KERNELS) | set(REGION_AND_SOURCE_RULES) == OP_KINDS
    assert not set(KERNELS) & set(REGION_AND_SOURCE_RULES)
