"""Gradient clauses: `op f(...) -> R { body } grad(y, dy) { ... }` (language-extensions 3.2).

Stage: checking, right after a function's body (`stmts.check_function`). In: a
`FnInfo` whose declaration carries a `GradClause`. Out: E2125 for clauses that
cannot apply (rules G1-G4, each at its primary span, and then the clause body
is not checked: G5); E1205/E1207 for the two names (G6); the clause body
checked as a function body whose result type is the gradient type `GT` (G7,
G8), by a `ClauseChecker`, which `stmts` consults for `return` (E2101, E2103,
E2202 against `GT`) and for `state` assignments (E2125: a clause has no
effects). What the lowering needs is kept in `CheckedProgram.grad_clauses`.

Scope (G7): the op's generics, `where` facts and parameters, the two names
(both of the result type `R`, exempt from W1002 like parameters) and, for an
op of a block, the block's members; the op body's locals are not visible
(the clause starts from the function scope, not the body's).
"""

from __future__ import annotations

from linnet.check import assignability
from linnet.check.collect import check_declared_name
from linnet.check.context import Context
from linnet.check.decls import FnInfo, LocalInfo
from linnet.check.exprs import BodyChecker
from linnet.check.scope import Scope, item_scope
from linnet.check.types import (
    ERROR,
    ScalarType,
    TensorType,
    TupleType,
    Type,
    is_float,
    show,
)
from linnet.diagnostics import Label
from linnet.records import record
from linnet.syntax import ast


@record(eq=False)
class GradClauseInfo:
    """A checked clause: its two names, the differentiated parameters and `GT`.

    `wrt` are the positions of `P1..Pk` among the op's parameters (3.2); `result`
    and `gradient` are None for a name written `_`.
    """

    clause: ast.GradClause
    result: LocalInfo | None
    gradient: LocalInfo | None
    wrt: tuple[int, ...]
    gradient_type: Type


class ClauseChecker(BodyChecker):
    """The body checker of a clause: `return` checks against `GT`, `state` is read-only."""

    __slots__ = ("gradient_type",)

    def __init__(self, ctx: Context, fn: FnInfo, scope: Scope, gradient_type: Type) -> None:
        assert fn.facts is not None
        super().__init__(ctx, fn.module, fn.block, fn, scope, fn.facts)
        self.gradient_type = gradient_type


def is_differentiated(t: Type) -> bool:
    """A tensor of a floating dtype or `Float` generic (3.2); scalars never are."""
    return isinstance(t, TensorType) and is_float(t.dtype)


def _floating_result(t: Type | None) -> bool:
    return isinstance(t, TensorType | ScalarType) and is_float(t.dtype)


def check_grad_clause(ctx: Context, fn: FnInfo) -> list[LocalInfo]:
    """G1-G9 for `fn`'s clause (if any); returns the locals the clause declared (for lints)."""
    clause = fn.decl.grad
    if clause is None or fn.facts is None:
        return []
    wrt = _applicable(ctx, fn, clause)
    if wrt is None:
        return []  # G5
    param_types = [fn.params[i].type for i in wrt]
    gradient_type = param_types[0] if len(param_types) == 1 else TupleType(tuple(param_types))
    scope = Scope(fn.scope, item_scope(fn.module, fn.block))
    chk = ClauseChecker(ctx, fn, scope, gradient_type)
    chk.push_scope()
    names = _declare_names(chk, fn, clause)
    from linnet.check.stmts import check_stmts

    check_stmts(chk, clause.body.stmts)
    stmts = clause.body.stmts
    if not stmts or not isinstance(stmts[-1], ast.ReturnStmt):
        ctx.error(
            "E2120",
            f"the gradient clause of `{fn.name}` must end with a `return`",
            clause.head,
            "no final `return`",
            notes=(f"the clause returns the gradients, of type {show(gradient_type)}",),
            help=("end the clause with `return gradient`",),
        )
    ctx.program.grad_clauses[fn] = GradClauseInfo(clause, *names, tuple(wrt), gradient_type)
    return [loc for loc in chk.new_locals if loc not in names]


def _applicable(ctx: Context, fn: FnInfo, clause: ast.GradClause) -> list[int] | None:
    """G1-G4: the differentiated parameter positions, or None after reporting E2125."""
    if fn.kind != "op":
        reject_clause(ctx, fn.kind, fn.name, clause)
        return None
    if not _floating_result(fn.result):
        related: tuple[Label, ...] = ()
        if fn.decl.result is not None:
            result = show(fn.result) if fn.result is not None else "this type"
            related = (Label(fn.decl.result.span, f"the result is {result}"),)
        ctx.error(
            "E2125",
            f"an op with `grad` returns one floating tensor or scalar; `{fn.name}` does not",
            clause.head,
            "no gradient flows into this result",
            related=related,
            notes=("the result must have a dtype of f16, bf16, f32, f64 or a `Float` generic",),
        )
        return None
    for param, node in zip(fn.params, fn.decl.params.params, strict=True):
        if not isinstance(param.type, TensorType | ScalarType):
            ctx.error(
                "E2125",
                f"a parameter of an op with `grad` is a tensor or a scalar; `{param.name}` is "
                f"{show(param.type)}",
                node.span,
                "neither tensor nor scalar",
                related=(Label(clause.head, "gradient clause here"),),
            )
            return None
    wrt = [i for i, p in enumerate(fn.params) if is_differentiated(p.type)]
    if not wrt:
        ctx.error(
            "E2125",
            f"no parameter of `{fn.name}` takes a gradient",
            clause.head,
            "nothing to differentiate",
            notes=("only tensors of a floating dtype take a gradient; floating scalars take none",),
        )
        return None
    return wrt


def reject_clause(ctx: Context, kind: str, name: str, clause: ast.GradClause) -> None:
    """G1: E2125 at the clause head of a `fn`, `entry` or `kernel`."""
    ctx.error(
        "E2125",
        f"only an `op` takes a `grad` clause; `{name}` is {_article(kind)}",
        clause.head,
        "gradient clause on " + _article(kind),
        help=(f"declare it as an `op`: `op {name}(...) -> R {{ ... }} grad(y, dy) {{ ... }}`",),
    )


def _article(kind: str) -> str:
    return f"an `{kind}`" if kind[:1] in "aeiou" else f"a `{kind}`"


def _declare_names(
    chk: ClauseChecker, fn: FnInfo, clause: ast.GradClause
) -> tuple[LocalInfo | None, LocalInfo | None]:
    """G6: the two names (E1205 when they repeat each other or a parameter, E1207 for
    prelude names), bound to the result type; a clashing name is bound to the error
    type, so its uses do not cascade."""
    assert fn.result is not None
    params = {p.name: p for p in fn.params}
    out: list[LocalInfo | None] = []
    for ident, other in ((clause.result, None), (clause.gradient, clause.result)):
        t: Type = fn.result
        first = params.get(ident.name)
        if ident.name == "_":
            out.append(None)
            continue
        if first is not None or (other is not None and other.name == ident.name):
            earlier = first.ident if first is not None else other
            assert earlier is not None
            what = "parameter" if first is not None else "gradient-clause name"
            chk.ctx.error(
                "E1205",
                f"the name `{ident.name}` is defined more than once",
                ident.span,
                "redefined here",
                related=(Label(earlier.span, f"first defined here, as a {what}"),),
                help=("pick distinct names for the result and its gradient",),
            )
            t = ERROR
        elif not check_declared_name(chk.ctx, ident, "gradient-clause name"):
            t = ERROR
        local = LocalInfo(ident.name, ident, t, "param")
        chk.scope.table[ident.name] = local
        chk.program.bindings[ident] = local
        out.append(local)
    return out[0], out[1]


def check_clause_return(chk: ClauseChecker, s: ast.ReturnStmt) -> None:
    """G8: the returned value must be assignable to `GT`."""
    target = chk.gradient_type
    if s.value is None:
        chk.ctx.error(
            "E2101",
            f"a gradient clause must return the gradients, of type {show(target)}",
            s.span,
            "missing value",
        )
        return
    value = chk.expr(s.value, target)
    assignability.coerce(chk, s.value, value, target, "the returned gradient")


def clause_assigns_state(chk: ClauseChecker, s: ast.AssignStmt) -> None:
    """G7: a clause has no effects; the value is still checked."""
    chk.ctx.error(
        "E2125",
        "a gradient clause has no effects: it cannot assign state",
        s.span,
        "state assigned in a gradient clause",
        help=("compute the gradient from the parameters, the result and its gradient",),
    )
    chk.expr(s.value)
