"""Statements and function bodies (language.md 11.2-11.4, 12.6, 13).

Stage: the last step of checking a function. In: a `FnInfo` whose
signature is resolved. Out: checked statements, local bindings, state
writes, `StaticForInfo`s, and E2101/E2108/E2109 (assignments and returns),
E2114 (`while`), E2120 (returns), E2121 (`static for`).
"""

from __future__ import annotations

from collections.abc import Callable

from linnet.check import assignability, indexing, scans, signatures
from linnet.check.context import Context
from linnet.check.decls import ConstInfo, FnInfo, LocalInfo, MemberInfo, UnresolvedImport
from linnet.check.dims import Dim
from linnet.check.exprs import BodyChecker
from linnet.check.gradclause import (
    ClauseChecker,
    check_clause_return,
    check_grad_clause,
    clause_assigns_state,
)
from linnet.check.kernels import check_write
from linnet.check.members import block_path
from linnet.check.patterns import bind_pattern
from linnet.check.program import StaticForInfo
from linnet.check.scope import Scope, item_scope
from linnet.check.typeconv import resolve_type
from linnet.check.types import (
    ERROR,
    I64,
    ArrayType,
    BlockType,
    CtIntType,
    ErrorType,
    Type,
    scalar,
    show,
)
from linnet.check.unknown import unknown_name
from linnet.diagnostics import Label
from linnet.syntax import ast


def check_function(ctx: Context, fn: FnInfo) -> list[LocalInfo]:
    """Check a function's parameter defaults and body; returns the locals it declared."""
    signatures.ensure_fn(ctx, fn)
    if fn.body_checked or fn.facts is None:
        return []
    fn.body_checked = True
    scope = Scope(fn.scope, item_scope(fn.module, fn.block))
    chk = BodyChecker(ctx, fn.module, fn.block, fn, scope, fn.facts)
    for param in fn.params:
        if param.default is not None:
            t = chk.expr(param.default, param.type)
            assignability.coerce(
                chk, param.default, t, param.type, f"the default of `{param.name}`"
            )
    chk.push_scope()
    body = fn.decl.body
    check_stmts(chk, body.stmts)
    if fn.result is not None and (not body.stmts or not isinstance(body.stmts[-1], ast.ReturnStmt)):
        ctx.error(
            "E2120",
            f"`{fn.name}` must end with a `return`",
            fn.ident.span,
            "no final `return`",
            notes=(f"the declared result type is {show(fn.result)}",),
            help=("end the function with `return value`",),
        )
    return chk.new_locals + check_grad_clause(ctx, fn)


def check_stmts(chk: BodyChecker, stmts: tuple[ast.Stmt, ...]) -> None:
    for s in stmts:
        chk.statement_unbound = set()
        _STATEMENTS[type(s)](chk, s)


def check_let(chk: BodyChecker, s: ast.LetStmt) -> None:
    if s.type is not None:
        t = resolve_type(chk, s.type)
        value = scans.value(chk, s.value, t)
        if not assignability.coerce(chk, s.value, value, t, "the value"):
            t = ERROR  # the annotation or the value is wrong: uses of the name would cascade
        bind_pattern(chk, s.pattern, t, "let")
        return
    value = scans.value(chk, s.value)
    keep = isinstance(s.pattern, ast.NamePattern)
    bind_pattern(chk, s.pattern, assignability.materialize(chk, s.value, value, keep), "let")


def check_var(chk: BodyChecker, s: ast.VarStmt) -> None:
    if s.type is not None:
        t = resolve_type(chk, s.type)
        value = scans.value(chk, s.value, t)
        if not assignability.coerce(chk, s.value, value, t, "the value"):
            t = ERROR  # as for `let`
    else:
        t = assignability.materialize(chk, s.value, scans.value(chk, s.value), True)
    chk.declare_local(s.name, t, "var", mutable=True)


def check_assign(chk: BodyChecker, s: ast.AssignStmt) -> None:
    """11.4 assignment rules: a `var` local or a `state` member of this block."""
    name = s.target.name
    decl = chk.lookup(name)
    if decl is None:
        unknown_name(
            chk,
            name,
            s.target.span,
            f"cannot find `{name}` in this scope",
            "not found",
            "value",
            "declare it with `var` first",
        )
        chk.expr(s.value)
        return
    chk.resolutions[s.target] = decl
    if isinstance(decl, UnresolvedImport):
        chk.expr(s.value)
        return
    if isinstance(chk, ClauseChecker) and isinstance(decl, MemberInfo) and decl.kind == "state":
        clause_assigns_state(chk, s)  # language-extensions 3.2 G7
        return
    target: Type | None = None
    if isinstance(decl, LocalInfo) and decl.mutable:
        target = decl.type
    elif isinstance(decl, MemberInfo) and decl.kind == "state" and decl.block is chk.block:
        signatures.ensure_members(chk.ctx, decl.block)
        decl.used = True
        target = decl.type if decl.type is not None else ERROR
        if chk.fn is not None:
            chk.fn.state_writes.add(decl)
    if target is None:
        _cannot_assign(chk, s, decl)
        chk.expr(s.value)
        return
    value = scans.value(chk, s.value, target)
    if (
        isinstance(target, CtIntType)
        and isinstance(value, CtIntType)
        and (value.value == target.value or chk.facts.prove(value.value, "==", target.value))
    ):
        return
    assignability.coerce(chk, s.value, value, target, f"the new value of `{name}`", code="E2109")


def _cannot_assign(chk: BodyChecker, s: ast.AssignStmt, decl: object) -> None:
    name = s.target.name
    helps = ("declare it with `var`, or assign a `state` member of this block",)
    related: tuple[Label, ...] = ()
    if isinstance(decl, LocalInfo):
        what = "a parameter" if decl.kind == "param" else "declared without `var`"
        related = (Label(decl.ident.span, "declared here without `var`"),)
        if decl.kind == "param":
            helps = ("parameters are immutable; copy it into a `var` first",)
    elif isinstance(decl, MemberInfo):
        what = f"a `{decl.kind}` member"
        related = (Label(decl.ident.span, f"declared here as `{decl.kind}`"),)
        if decl.kind == "state":
            helps = ("only the functions of a block assign its state",)
    elif isinstance(decl, ConstInfo):
        what = "a constant"
        related = (Label(decl.ident.span, "declared here as a constant"),)
    else:
        what = "not a variable"
    # With a declaration to point at, its label says why and the target has none (16.3).
    label = "" if related else what
    chk.ctx.error(
        "E2108", f"`{name}` cannot be assigned", s.target.span, label, related=related, help=helps
    )


def check_return(chk: BodyChecker, s: ast.ReturnStmt) -> None:
    fn = chk.fn
    if chk.kernel is not None:
        from linnet.check.kernels import check_kernel_return

        check_kernel_return(chk, s)
        return
    if chk.loop_depth > 0:
        chk.ctx.error(
            "E2120",
            "`return` is not allowed inside a loop",
            s.span,
            "return in a loop",
            notes=("a function has exactly one exit, its final `return`",),
            help=("assign a `var` in the loop and return it after the loop",),
        )
    if fn is None:
        return
    if isinstance(chk, ClauseChecker):
        check_clause_return(chk, s)  # language-extensions 3.2 G8
        return
    if fn.result is None:
        if s.value is not None:
            chk.expr(s.value)
            chk.ctx.error(
                "E2101",
                f"`{fn.name}` does not declare a result type",
                s.value.span,
                "unexpected value",
                help=("declare one: `-> T`, or write `return` alone",),
            )
        return
    if s.value is None:
        chk.ctx.error(
            "E2101",
            f"`{fn.name}` must return a value of type {show(fn.result)}",
            s.span,
            "missing value",
        )
        return
    value = scans.value(chk, s.value, fn.result)
    assignability.coerce(chk, s.value, value, fn.result, "the returned value")


def check_static_for(chk: BodyChecker, s: ast.StaticForStmt) -> None:
    info: StaticForInfo | None = None
    chk.push_scope()
    if s.stop is not None:
        start = _range_bound(chk, s.iter)
        stop = _range_bound(chk, s.stop)
        local: LocalInfo | None = None
        if isinstance(s.pattern, ast.NamePattern):
            local = chk.declare_local(s.pattern.name, scalar(I64), "for")
        else:
            bind_pattern(chk, s.pattern, scalar(I64), "for")
        if start is not None and stop is not None:
            info = StaticForInfo("range", local, length=stop - start, start=start, stop=stop)
    else:
        t = chk.expr(s.iter)
        elem: Type = ERROR
        path: tuple[str, ...] = ()
        if isinstance(t, ArrayType):
            elem = t.elem
            path = (*(block_path(chk, s.iter) or ()), "*")
        elif not isinstance(t, ErrorType):
            chk.ctx.error(
                "E2121",
                f"`static for` needs a `sub` array or a range `a..b`, found {show(t)}",
                s.iter.span,
                "not a structural array",
                notes=("the number of iterations has to be fixed at compile time",),
            )
        bind_pattern(chk, s.pattern, elem, "for", block_path=path if path else None)
        if isinstance(t, ArrayType) and isinstance(elem, BlockType):
            var = (
                chk.program.bindings.get(s.pattern.name)
                if isinstance(s.pattern, ast.NamePattern)
                else None
            )
            info = StaticForInfo("array", var, length=t.length, array_path=path[:-1])
    chk.loop_depth += 1
    check_stmts(chk, s.body.stmts)
    chk.loop_depth -= 1
    chk.pop_scope()
    if info is not None:
        chk.program.static_fors[s] = info


def _range_bound(chk: BodyChecker, node: ast.Expr) -> Dim | None:
    t = chk.expr(node)
    if isinstance(t, CtIntType):
        return t.value
    if not isinstance(t, ErrorType):
        chk.ctx.error(
            "E2121",
            "a `static for` range bound must be a compile-time integer",
            node.span,
            f"found {show(t)}",
            notes=("the number of iterations has to be fixed at compile time",),
        )
    return None


def check_while(chk: BodyChecker, s: ast.WhileStmt) -> None:
    chk.condition(s.cond, "`while`")
    chk.push_scope()
    chk.loop_depth += 1
    check_stmts(chk, s.body.stmts)
    chk.loop_depth -= 1
    chk.pop_scope()


def check_comprehension(chk: BodyChecker, s: ast.ComprehensionStmt) -> None:
    indexing.check_comprehension(chk, s)


_STATEMENTS: dict[type, Callable[[BodyChecker, ast.Stmt], None]] = {
    ast.LetStmt: check_let,  # type: ignore[dict-item]
    ast.VarStmt: check_var,  # type: ignore[dict-item]
    ast.AssignStmt: check_assign,  # type: ignore[dict-item]
    ast.ReturnStmt: check_return,  # type: ignore[dict-item]
    ast.StaticForStmt: check_static_for,  # type: ignore[dict-item]
    ast.WhileStmt: check_while,  # type: ignore[dict-item]
    ast.ComprehensionStmt: check_comprehension,  # type: ignore[dict-item]
    ast.ForLoop: scans.check_statement,  # type: ignore[dict-item]
    ast.YieldStmt: scans.check_misplaced_yield,  # type: ignore[dict-item]
    ast.WriteStmt: check_write,  # type: ignore[dict-item]
}
