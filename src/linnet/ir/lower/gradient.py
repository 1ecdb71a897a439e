"""An op's gradient clause lowered to the `gradient` region of its `call` (language-extensions 3.4).

Stage: lowering (`calls._op_call`). In: the op's frame (its generics and
parameters as lowered for this call), the call's operands and result types, and
the checked clause (`check.gradclause.GradClauseInfo`). Out: a region whose
args are the operands, the result and the incoming gradient, returning the
gradients of the differentiated parameters (`P1..Pk`), and their operand
positions (the `call`'s `wrt` attr).

The clause body is lowered like a function body, in the op's frame: its
parameters are the region's first args, the two names its last two (3.2 G7).
Parameters of an op with a clause are tensors or scalars (G3), so each is one
operand. Member reads of a block op go through the `Lowerer` as in the body.
"""

from __future__ import annotations

from collections.abc import Sequence

from linnet.check.gradclause import GradClauseInfo
from linnet.errors import InternalError
from linnet.ir.core import Region, Value
from linnet.ir.lower.context import Frame, Lowerer
from linnet.ir.lower.values import flatten


def gradient_region(
    lw: Lowerer,
    frame: Frame,
    operands: Sequence[Value],
    results: Sequence[Value],
    clause: GradClauseInfo,
) -> tuple[Region, list[int]]:
    """The clause as a region (args: operands, result, gradient) and the `wrt` positions."""
    from linnet.ir.lower.stmts import lower_body

    fn = frame.fn
    assert fn is not None
    if len(results) != 1:
        raise InternalError(f"{fn!r}: an op with a gradient clause has one result")
    params = [frame.locals[p] for p in fn.params]
    if [len(flatten(p)) for p in params] != [1] * len(params):
        raise InternalError(f"{fn!r}: each parameter of an op with a clause is one value")
    result_type = results[0].type
    outer = lw.push([*(v.type for v in operands), result_type, result_type])
    saved = dict(frame.locals)
    try:
        args = lw.b.args
        for p, arg in zip(fn.params, args, strict=False):
            frame.locals[p] = arg
        for local, arg in ((clause.result, args[-2]), (clause.gradient, args[-1])):
            if local is not None:
                frame.locals[local] = arg
        value = lower_body(lw, frame, clause.clause.body)
        if value is None:
            raise InternalError(f"the gradient clause of {fn!r} returned no value")
        gradients = flatten(lw.materialize(value, clause.gradient_type, frame.env))
    finally:
        inner = lw.pop(outer)
        frame.locals.clear()
        frame.locals.update(saved)
    return inner.finish(gradients), list(clause.wrt)
