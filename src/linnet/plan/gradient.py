"""An op's gradient clause in the plan (language-extensions 0.5 and 3.4).

Stage: a helper of `linnet.plan.document`. In: an `op`'s `FnInfo` and its
checked clause (`check.gradclause.GradClauseInfo`). Out: the function
record's `gradient` region: args the op's parameters, then its result and the
incoming gradient (named as the clause names them); ops encoded as a body's
(`linnet.plan.body`), ending in `return` of the gradients of the
differentiated parameters, in declaration order.
"""

from __future__ import annotations

from linnet.check.decls import FnInfo
from linnet.check.gradclause import GradClauseInfo
from linnet.check.types import Type
from linnet.plan.body import BodyEncoder
from linnet.plan.exprs import Json, PlanState


class ClauseEncoder(BodyEncoder):
    """Encodes one gradient clause; `return` returns the gradient type."""

    def __init__(self, state: PlanState, fn: FnInfo, clause: GradClauseInfo) -> None:
        super().__init__(state, fn)
        self.clause = clause

    def result_type(self) -> Type | None:
        return self.clause.gradient_type

    def region(self) -> Json:
        fn = self.fn
        assert fn is not None and fn.result is not None
        args = [self._bind(p, self._value(p.type, p.name)) for p in fn.params]
        for local, ident in (
            (self.clause.result, self.clause.clause.result),
            (self.clause.gradient, self.clause.clause.gradient),
        ):
            value = self._value(fn.result, ident.name)
            args.append(value if local is None else self._bind(local, value))
        self.stmts(self.clause.clause.body.stmts)
        if not self.returned:
            self._emit("return", [], [])
        return {"args": args, "ops": self.ops}
