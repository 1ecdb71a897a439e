"""Control flow, calls, path reads and hoisting on the PyTorch backend.

`while`, `if` and `call` regions (reading enclosing values, params and state),
against the NumPy interpreter on both paths; and the split of a function into
a once-per-weights prologue (`linnet.torch.analysis.hoist`).
"""

from __future__ import annotations

import numpy as np
import pytest
from backend_cases import if_branches_case, while_with_paths_case
from torch_support import MODES, check

from linnet.ir.core import Builder, TensorType, Value
from linnet.torch.analysis import hoist

F32 = TensorType((4,), "f32")
I32 = TensorType((), "i32")
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
@pytest.mark.parametrize("natives", [True, False])
def test_call_of_an_unknown_op_runs_its_body(mode: str, natives: bool) -> None:
    b = Builder.for_function([("x", F32)])
    (x,) = b.args
    outer = b.binary("mul", x, b.const(2.0, "f32"))

    def body(inner: Builder, args: tuple[Value, ...]) -> list[Value]:
        # the body reads `outer` from the enclosing region as well as its argument
        return [inner.binary("add", args[0], outer), inner.unary("neg", args[0])]

    first, second = b.call("user.ops::pair", [x], body, {"N": 4})
    fn = b.finish_function("calls", [first, second])
    check(fn, [np.array([1.0, -2.0, 3.0, 0.5], np.float32)], mode, natives=natives)


def test_hoisting_splits_static_from_dynamic() -> None:
    b = Builder.for_function([("x", F32)])
    (x,) = b.args
    table = b.unary("cos", b.cast(b.iota(4, "i32"), "f32"))  # shapes only
    w = b.param("w", F32)
    scaled = b.unary("exp", w)  # weights only
    s = b.state("s", F32)
    mixed = b.binary("add", b.binary("mul", x, table), scaled)
    out = b.binary("add", mixed, s)
    fn = b.finish_function("f", [out, table], {"s": out})

    with_weights = hoist(fn, weights=True)
    kinds = [op.kind for op in with_weights.ops]
    assert kinds == ["cast", "cos", "exp"]
    assert set(with_weights.frontier) == {table, scaled}
    assert with_weights.weights == ("w",)
    assert x not in with_weights.static and s not in with_weights.static

    trainable = hoist(fn, weights=False)
    assert [op.kind for op in trainable.ops] == ["cast", "cos"]
    assert scaled not in trainable.static and trainable.weights == ()


@pytest.mark.parametrize("mode", MODES)
def test_static_results_are_copies(mode: str) -> None:
    """A result computed once must not alias the cache: callers may write into it."""
    from torch_support import CPU

    from linnet.torch.codegen import CompiledFunction
    from linnet.torch.runner import Runner

    b = Builder.for_function([])
    table = b.unary("sin", b.cast(b.iota(3, "i32"), "f32"))
    fn = b.finish_function("f", [table])
    run = (
        Runner(fn, CPU, hoist_weights=True)
        if mode == "runner"
        else CompiledFunction(fn, CPU, hoist_weights=True)
    )
    first, _ = run({}, {}, [])
    first[0].add_(100.0)
    second, _ = run({}, {}, [])
    np.testing.assert_allclose(second[0].numpy(), np.sin(np.arange(3, dtype=np.float32)))


def test_loops_in_generated_source() -> None:
    from torch_support import CPU

    from linnet.torch.codegen import generate

    b = Builder.for_function([("n", I32)])
    (n,) = b.args
    (count,) = b.while_(
        [b.const(0, "i32")],
        lambda inner, c: [inner.binary("lt", c[0], n)],
        lambda inner, c: [inner.binary("add", c[0], inner.const(2, "i32"))],
    )
    source = generate(b.finish_function("count", [count]), CPU, hoist_weights=True).source
    assert "while True:" in source and "break" in source
