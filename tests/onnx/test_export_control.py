"""Control flow, calls, path reads and the graph contract of exported models.

`while` -> `Loop` and `if` -> `If` (regions reading enclosing values, params
and state, nested loops, a loop inside a branch) and inlined `call` bodies,
against the NumPy interpreter; then the names, roles and metadata of the
graph contract (`linnet.onnx.export.assemble`), with weights embedded or bound.
"""

from __future__ import annotations

import numpy as np
import pytest
from export_support import check, run_onnx, validate

from linnet.errors import LinnetError
from linnet.ir.core import Builder, Function, TensorType, Value
from linnet.onnx import export_ir

F32 = TensorType((4,), "f32")
I32 = TensorType((), "i32")
BOOL = TensorType((), "bool")


def _loop_function() -> Builder:
    return Builder.for_function([("x", F32), ("n", I32)])


def looping() -> Function:
    b = _loop_function()
    x, n = b.args
    w = b.param("w", F32)
    s = b.state("s", F32)
    offset = b.buffer("offset", F32)

    def cond(inner: Builder, carried: tuple[Value, ...]) -> list[Value]:
        return [inner.binary("lt", carried[0], n)]

    def body(inner: Builder, carried: tuple[Value, ...]) -> list[Value]:
        i, acc = carried
        grown = inner.binary("add", inner.binary("mul", acc, w), s)
        return [inner.binary("add", i, inner.const(1, "i32")), inner.binary("sub", grown, offset)]

    i, acc = b.while_([b.const(0, "i32"), x], cond, body)
    return b.finish_function("loop", [acc, i], {"s": acc})


WEIGHTS = {
    "w": np.array([0.5, 1.0, 2.0, -1.0], np.float32),
    "offset": np.array([0.0, 0.5, 0.25, 1.0], np.float32),
}
STATE = {"s": np.array([1.0, 0.0, -1.0, 0.25], np.float32)}
X = np.array([1.0, 2.0, 3.0, 4.0], np.float32)


@pytest.mark.parametrize("embed", [False, True])
def test_while_reads_params_and_state(embed: bool) -> None:
    fn = looping()
    for steps in (0, 1, 4):
        exported = check(fn, [X, np.array(steps, np.int32)], WEIGHTS, STATE, embed=embed)
    assert [n.op_type for n in exported.model.graph.node].count("Loop") == 1


def test_nested_loops_and_a_loop_inside_a_branch() -> None:
    b = Builder.for_function([("c", BOOL), ("n", I32)])
    c, n = b.args
    one = b.const(1, "i32")

    def count_to(inner: Builder, limit: Value) -> Value:
        (total,) = inner.while_(
            [inner.const(0, "i32")],
            lambda i, v: [i.binary("lt", v[0], limit)],
            lambda i, v: [i.binary("add", v[0], one)],
        )
        return total

    def outer_body(inner: Builder, carried: tuple[Value, ...]) -> list[Value]:
        i, acc = carried
        return [inner.binary("add", i, one), inner.binary("add", acc, count_to(inner, i))]

    _, triangle = b.while_(
        [b.const(0, "i32"), b.const(0, "i32")],
        lambda inner, v: [inner.binary("lt", v[0], n)],
        outer_body,
    )
    (chosen,) = b.if_(
        c,
        lambda inner, _: [count_to(inner, n)],
        lambda inner, _: [inner.binary("mul", n, inner.const(-1, "i32"))],
    )
    fn = b.finish_function("nested", [triangle, chosen])
    for flag in (True, False):
        for steps in (0, 3, 6):
            check(fn, [np.array(flag), np.array(steps, np.int32)])


def test_if_branches_with_several_results() -> None:
    b = Builder.for_function([("c", BOOL), ("x", F32)])
    c, x = b.args
    y, z = b.if_(
        c,
        lambda inner, _: [inner.unary("exp", x), x],
        lambda inner, _: [inner.binary("sub", x, inner.const(1.0, "f32")), inner.unary("neg", x)],
    )
    fn = b.finish_function("branch", [y, z])
    for flag in (True, False):
        exported = check(fn, [np.array(flag), X])
    assert [n.op_type for n in exported.model.graph.node].count("If") == 1


def test_call_of_an_unknown_op_is_inlined() -> None:
    b = Builder.for_function([("x", F32)])
    (x,) = b.args
    outer = b.binary("mul", x, b.const(2.0, "f32"))

    def body(inner: Builder, args: tuple[Value, ...]) -> list[Value]:
        # the body reads `outer` from the enclosing region as well as its argument
        return [inner.binary("add", args[0], outer), inner.unary("neg", args[0])]

    first, second = b.call("user.ops::pair", [x], body, {"N": 4})
    exported = check(b.finish_function("calls", [first, second]), [X])
    assert {n.op_type for n in exported.model.graph.node} >= {"Add", "Neg"}


# -- the graph contract ---------------------------------------------------------------------


def test_contract_names_roles_and_metadata() -> None:
    exported = export_ir(looping())
    graph = exported.model.graph
    assert graph.name == "main"
    assert [i.name for i in graph.input] == ["x", "n", "param0", "param1", "state0"]
    assert [o.name for o in graph.output] == ["output0", "output1", "next_state0"]
    props = {p.key: p.value for p in exported.model.metadata_props}
    assert props["linnet.path.param0"] == "w"
    assert props["linnet.path.param1"] == "offset"
    assert props["linnet.state.state0"] == "s"
    assert props["linnet.next_state.next_state0"] == "s"
    assert props["linnet.entry"] == "loop"
    roles = [(io.name, io.role, io.path) for io in (*exported.inputs, *exported.outputs)]
    assert roles == [
        ("x", "input", None),
        ("n", "input", None),
        ("param0", "param", "w"),
        ("param1", "param", "offset"),
        ("state0", "state", "s"),
        ("output0", "output", None),
        ("output1", "output", None),
        ("next_state0", "next_state", "s"),
    ]
    assert not exported.model.graph.initializer


def test_embedded_weights_are_initializers() -> None:
    exported = export_ir(looping(), weights=WEIGHTS)
    graph = exported.model.graph
    assert [i.name for i in graph.input] == ["x", "n", "state0"]
    assert [t.name for t in graph.initializer] == ["param0", "param1"]
    validate(exported)
    results, new_state = run_onnx(exported, [X, np.array(2, np.int32)], None, STATE)
    assert results[1] == 2 and "s" in new_state


def test_state_written_without_being_read_and_read_without_being_written() -> None:
    b = Builder.for_function([("x", F32)])
    (x,) = b.args
    counter = b.state("counter", I32)
    bumped = b.binary("add", counter, b.const(1, "i32"))
    fn = b.finish_function("f", [b.state("scale", F32)], {"last": x, "counter": bumped})
    exported = check(
        fn,
        [X],
        state={"counter": np.array(4, np.int32), "scale": X * 2, "last": X * 0},
    )
    props = {p.key: p.value for p in exported.model.metadata_props}
    assert props["linnet.state.state0"] == "counter"
    assert props["linnet.state.state1"] == "scale"
    assert props["linnet.next_state.next_state2"] == "last"
    assert props["linnet.next_state.next_state0"] == "counter"
    assert [o.name for o in exported.model.graph.output] == [
        "output0", "next_state2", "next_state0"
    ]  # fmt: skip


def test_input_names_that_look_generated_are_renamed() -> None:
    b = Builder.for_function([("t0", F32), ("param0", F32), ("", F32)])
    a, p, c = b.args
    fn = b.finish_function("f", [b.binary("add", b.binary("add", a, p), c)])
    exported = check(fn, [X, X, X])
    assert [i.name for i in exported.model.graph.input] == ["t0_", "param0_", "input2"]


def test_missing_or_mismatched_weights_are_errors() -> None:
    with pytest.raises(LinnetError, match="the weights lack `offset`"):
        export_ir(looping(), weights={"w": WEIGHTS["w"]})
    wrong = {**WEIGHTS, "w": WEIGHTS["w"].astype(np.float64)}
    with pytest.raises(LinnetError, match="weight `w` is float64"):
        export_ir(looping(), weights=wrong)
