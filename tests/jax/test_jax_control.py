"""Control flow, calls and path reads on the JAX backend (the PyTorch backend's cases).

`while` (`lax.while_loop`), `if` (`lax.cond`) and `call` regions, reading
enclosing values, params and state, against the NumPy interpreter as
generated source and as StableHLO on XLA.
"""

from __future__ import annotations

import numpy as np
import pytest
from jax_support import check

from linnet.ir.core import Builder, TensorType, Value

F32 = TensorType((4,), "f32")
I32 = TensorType((), "i32")
MODES = ("source", "stablehlo")
BOOL = TensorType((), "bool")


@pytest.mark.parametrize("mode", MODES)
def test_while_reads_params_and_state(mode: str) -> None:
    b = Builder.for_function([("x", F32), ("n", I32)])
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
    fn = b.finish_function("loop", [acc, i], {"s": acc})
    weights = {
        "w": np.array([0.5, 1.0, 2.0, -1.0], np.float32),
        "offset": np.array([0.0, 0.5, 0.25, 1.0], np.float32),
    }
    state = {"s": np.array([1.0, 0.0, -1.0, 0.25], np.float32)}
    x_in = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    for steps in (0, 1, 4):
        check(fn, [x_in, np.array(steps, np.int32)], mode, weights, state)


@pytest.mark.parametrize("mode", MODES)
def test_if_branches(mode: str) -> None:
    b = Builder.for_function([("c", BOOL), ("x", F32)])
    c, x = b.args
    (y,) = b.if_(
        c,
        lambda inner, _: [inner.unary("exp", x)],
        lambda inner, _: [inner.binary("sub", x, inner.const(1.0, "f32"))],
    )
    fn = b.finish_function("branch", [y])
    x_in = np.array([0.0, 1.0, -1.0, 2.0], np.float32)
    for flag in (True, False):
        check(fn, [np.array(flag), x_in], mode)


@pytest.mark.parametrize("mode", MODES)
def test_call_of_an_unknown_op_runs_its_body(mode: str) -> None:
    b = Builder.for_function([("x", F32)])
    (x,) = b.args
    outer = b.binary("mul", x, b.const(2.0, "f32"))

    def body(inner: Builder, args: tuple[Value, ...]) -> list[Value]:
        # the body reads `outer` from the enclosing region as well as its argument
        return [inner.binary("add", args[0], outer), inner.unary("neg", args[0])]

    first, second = b.call("user.ops::pair", [x], body, {"N": 4})
    fn = b.finish_function("calls", [first, second])
    check(fn, [np.array([1.0, -2.0, 3.0, 0.5], np.float32)], mode)
