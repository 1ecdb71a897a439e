"""Gradient clauses in the Core IR and the plan (language-extensions 0.5, 3.4).

A `call` of an op with a clause carries a second region, `gradient` (args: the
operands, the result, the incoming gradient; results: the gradients of the
operands in attr `wrt`). The verifier checks its signature, the printer names
it, forward execution ignores it (the interpreter, ONNX), and the plan's
function record of an op holds the clause as its `gradient` region (null for
an op without one).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from linnet.errors import InternalError
from linnet.ir.core import Builder, Function, TensorType
from linnet.ir.interp import run_function
from linnet.ir.printer import print_function
from linnet.ir.verify import verify
from linnet.pipeline import check_source, lower_module_entry, optimize
from linnet.plan.document import build_plan

EXAMPLES = Path(__file__).parents[1] / "conformance" / "valid" / "x3_grad_examples.linnet"
SOURCE = EXAMPLES.read_text(encoding="utf-8")
F6 = TensorType((6,), "f32")


def _objective() -> Function:
    program = check_source(SOURCE)
    return optimize(
        lower_module_entry(program, "examples.custom_grads", "objective", [F6, F6]), check=True
    )


def test_calls_carry_their_clause_as_a_gradient_region() -> None:
    fn = _objective()
    verify(fn)
    calls = {str(op.attrs["callee"]).split("::")[1]: op for op in fn.body.ops if op.kind == "call"}
    assert set(calls) == {"logistic", "snap", "gated", "energy"}
    gated = calls["gated"]
    assert gated.attrs["wrt"] == [0, 1] and len(gated.regions) == 2
    gradient = gated.regions[1]
    assert [a.type for a in gradient.args] == [F6, F6, TensorType((), "f32"), F6, F6]
    assert [v.type for v in gradient.results] == [F6, F6]
    snap = calls["snap"]
    assert snap.attrs["wrt"] == [0]  # `step` is a floating scalar: no gradient
    assert snap.regions[1].results == (snap.regions[1].args[-1],)  # `return dy`
    text = print_function(fn)
    assert text.count("    gradient(") == 4 and "wrt=[0, 1]" in text


def test_forward_execution_runs_the_bodies() -> None:
    rng = np.random.default_rng(0)
    a, b = (rng.normal(size=6).astype(np.float32) for _ in range(2))
    (loss,), _ = run_function(_objective(), {}, {}, [a, b])
    s = 1.0 / (1.0 + np.exp(-a.astype(np.float64)))
    t = np.trunc(b.astype(np.float64) / 0.25) * 0.25
    assert float(loss) == pytest.approx(float(np.sum((s * t) ** 2)), rel=1e-5)


def test_the_onnx_export_ignores_the_clause() -> None:
    from linnet.onnx import export_function

    rng = np.random.default_rng(1)
    a, b = (rng.normal(size=6).astype(np.float32) for _ in range(2))
    session = export_function(SOURCE, "objective", generics={"N": 6}).session()
    names = [i.name for i in session.get_inputs()]
    (loss,) = session.run(None, dict(zip(names, [a, b], strict=True)))
    (expected,), _ = run_function(_objective(), {}, {}, [a, b])
    np.testing.assert_allclose(loss, expected, rtol=1e-6)


def test_the_verifier_checks_the_gradient_signature() -> None:
    b = Builder.for_function([("x", F6)])
    (x,) = b.args
    body = Builder([F6])
    body_region = body.finish([body.args[0]])
    wrong = Builder([F6, F6])  # the result and the gradient are missing
    with pytest.raises(InternalError, match="gradient region args"):
        b.call("m::f", [x], body_region, gradient=wrong.finish([wrong.args[0]]), wrt=[0])
    right = Builder([F6, F6, F6])
    with pytest.raises(InternalError, match="wrt"):
        b.call("m::f", [x], body_region, gradient=right.finish([right.args[2]]), wrt=[1])
    (y,) = b.call("m::f", [x], body_region, gradient=right.finish([right.args[2]]), wrt=[0])
    assert y.type == F6


def test_the_plan_records_the_clause_of_each_op() -> None:
    plan = build_plan(check_source(SOURCE))
    functions = {f["name"].split("::")[1]: f for f in plan["functions"]}  # type: ignore[union-attr, index]
    assert "gradient" not in functions["objective"]
    gated = functions["gated"]["gradient"]
    names = [a["name"] for a in gated["args"]]
    assert names == ["signal", "gate", "limit", "out", "g"]
    ret = gated["ops"][-1]
    assert ret["kind"] == "return" and len(ret["operands"]) == 2
    energy = functions["energy"]["gradient"]
    assert [a["type"]["kind"] for a in energy["args"]] == ["tensor", "scalar", "scalar"]
    plain = build_plan(
        check_source("module m\n\npub op twice(x: f32) -> f32 {\n    return x * 2.0\n}\n")
    )
    assert plain["functions"][0]["gradient"] is None  # type: ignore[index]


def test_an_op_assigning_state_cannot_keep_its_clause() -> None:
    from linnet.errors import LinnetError
    from linnet.ir.bind import bind
    from linnet.ir.lower import lower_entry

    source = """module st

pub block Counter {
    state seen: Tensor[4; f32]

    op bump(x: Tensor[4; f32]) -> Tensor[4; f32] {
        seen = x
        return x * 2.0
    } grad(y, dy) {
        return dy
    }

    pub entry forward(x: Tensor[4; f32]) -> Tensor[4; f32] {
        return bump(x)
    }
}
"""
    model = bind(check_source(source))
    # Such an op is inlined (state updates in program order): its clause would be lost.
    with pytest.raises(LinnetError, match="gradient clause on `bump`, which assigns state"):
        lower_entry(model, "forward", [TensorType((4,), "f32")])
