"""Control flow, calls and path reads on the JAX backend (the PyTorch backend's cases).

`while` (`lax.while_loop`), `if` (`lax.cond`) and `call` regions, reading
enclosing values, params and state, against the NumPy interpreter as
generated source and as StableHLO on XLA.
"""

from __future__ import annotations

import numpy as np
import pytest
from backend_cases import if_branches_case, while_with_paths_case
from jax_support import check

from linnet.ir.core import Builder, TensorType, Value

F32 = TensorType((4,), "f32")
I32 = TensorType((), "i32")
MODES = ("source", "stablehlo")
BOOL = TensorType((), "bool")


@pytest.mark.parametrize("mode", MODES)
def test_while_reads_params_and_state(mode: str) -> None:
    fn, runs, weights, state = while_with_paths_case()
    for inputs in runs:
        check(fn, inputs, mode, weights, state)


@pytest.mark.parametrize("mode", MODES)
def test_if_branches(mode: str) -> None:
    fn, runs = if_branches_case()
    for inputs in runs:
        check(fn, inputs, mode)


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
