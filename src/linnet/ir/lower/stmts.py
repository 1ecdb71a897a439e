"""Statements and control flow to Core IR (language.md 11.4, 12.6, 13).

Stage: lowering. In: a function body and the current `Frame`. Out: ops in
the current region and the body's `return` value.

- `let` / `var` bind locals; assignments rebind a `var` (SSA, 11.5) or set
  the current value of a `state` member (12.6).
- `static for` is unrolled: over a `sub` array each copy binds the element
  block (13.1); over `a..b` each copy sees the loop variable as an `i64`
  constant (13.2).
- a runtime `for` becomes a `for` op (language-extensions 1.5, `ir.lower.scans`),
  its carried values found as for `while`.
- `while` becomes a `while` op (13.3). Its carried values are the outer
  `var`s and the state members the body assigns. They are found by lowering
  the body once into a scratch region and noting which bindings changed; the
  scratch ops are dropped and the body is lowered again with the carried
  values as region arguments.
"""

from __future__ import annotations

from collections.abc import Callable

from linnet.check.decls import LocalInfo, MemberInfo
from linnet.errors import InternalError
from linnet.ir.core import TensorType, Value
from linnet.ir.lower.context import Frame, Lowerer, local_value, not_supported
from linnet.ir.lower.values import (
    LV,
    ArrayRef,
    BlockRef,
    flatten,
    is_number,
    rebuild,
    same_structure,
)
from linnet.syntax import ast


def lower_body(lw: Lowerer, fr: Frame, body: ast.Body) -> LV | None:
    """Lower a function body; the value of its final `return`, if any (11.3)."""
    for s in body.stmts:
        if isinstance(s, ast.ReturnStmt):
            if s.value is None:
                return None
            from linnet.ir.lower.exprs import lower_expr

            return lower_expr(lw, fr, s.value)
        lower_stmt(lw, fr, s)
    return None


def lower_stmts(lw: Lowerer, fr: Frame, stmts: tuple[ast.Stmt, ...]) -> None:
    for s in stmts:
        if isinstance(s, ast.ReturnStmt):
            raise InternalError("`return` inside a loop body")
        lower_stmt(lw, fr, s)


def lower_stmt(lw: Lowerer, fr: Frame, s: ast.Stmt) -> None:
    _STATEMENTS[type(s)](lw, fr, s)


def _let(lw: Lowerer, fr: Frame, s: ast.LetStmt) -> None:
    from linnet.ir.lower.exprs import bind_pattern, lower_expr

    bind_pattern(lw, fr, s.pattern, lower_expr(lw, fr, s.value))


def _var(lw: Lowerer, fr: Frame, s: ast.VarStmt) -> None:
    from linnet.ir.lower.exprs import lower_expr

    local = lw.program.bindings.get(s.name)
    value = lower_expr(lw, fr, s.value)
    if local is not None:
        fr.locals[local] = local_value(lw, fr, value, local.type)


def _comprehension(lw: Lowerer, fr: Frame, s: ast.ComprehensionStmt) -> None:
    from linnet.ir.lower.index import lower_comprehension

    info = lw.program.comprehensions.get(s)
    if info is None:
        raise InternalError("comprehension without checker information")
    fr.locals[info.local] = lower_comprehension(lw, fr, s)


def _assign(lw: Lowerer, fr: Frame, s: ast.AssignStmt) -> None:
    from linnet.ir.lower.exprs import lower_expr

    decl = lw.program.resolutions.get(s.target)
    value = lower_expr(lw, fr, s.value)
    if isinstance(decl, LocalInfo):
        fr.locals[decl] = local_value(lw, fr, value, decl.type)
        return
    if isinstance(decl, MemberInfo) and decl.kind == "state":
        if fr.instance is None or decl.type is None:
            raise InternalError(f"state `{decl.name}` assigned outside its block")
        path = fr.instance.member_path(decl.name)
        declared = lw.bound.tensors[path].type if lw.bound is not None else None
        if declared is None:
            raise InternalError(f"no state at `{path}`")
        lw.write_state(path, lw.value(value, declared.dtype))
        return
    raise InternalError(f"assignment to {decl!r}")


# ---------------------------------------------------------------- static for


def _static_for(lw: Lowerer, fr: Frame, s: ast.StaticForStmt) -> None:
    info = lw.program.static_fors.get(s)
    if info is None:
        raise InternalError("`static for` without checker information")
    if info.mode == "range":
        assert info.start is not None and info.stop is not None
        start, stop = fr.env.dim(info.start), fr.env.dim(info.stop)
        for i in range(start, stop):
            if info.variable is not None:
                fr.locals[info.variable] = lw.const(i, "i64")
            lower_stmts(lw, fr, s.body.stmts)
        return
    from linnet.ir.lower.exprs import lower_expr

    array = lower_expr(lw, fr, s.iter)
    if not isinstance(array, ArrayRef):
        raise InternalError(f"`static for` over {array!r}")
    for instance in array.instances:
        if info.variable is not None:
            fr.locals[info.variable] = BlockRef(instance)
        lower_stmts(lw, fr, s.body.stmts)


# ---------------------------------------------------------------- while


def _while(lw: Lowerer, fr: Frame, s: ast.WhileStmt) -> None:
    locals_, paths = carried_by(lw, fr, s.body.stmts)
    initial = {k: fr.locals[k] for k in locals_}
    init: list[Value] = []
    for k in locals_:
        init.extend(flatten(initial[k]))
    init.extend(lw.read_state(p) for p in paths)
    types = [v.type for v in init]

    def enter() -> None:
        args = iter(lw.b.args)
        for k in locals_:
            fr.locals[k] = rebuild(initial[k], args)
        for p in paths:
            lw.state_values[p] = next(args)

    from linnet.ir.lower.exprs import lower_expr

    outer = lw.push(types)
    enter()
    before = dict(lw.state_values)
    cond = lw.value(lower_expr(lw, fr, s.cond), "bool")
    if lw.state_values != before:
        raise not_supported("a `while` condition that assigns state", fr)
    cond_region = lw.pop(outer).finish([cond])
    outer = lw.push(types)
    enter()
    lower_stmts(lw, fr, s.body.stmts)
    results: list[Value] = []
    for k in locals_:
        if not same_structure(initial[k], fr.locals[k]):
            raise not_supported(f"a `while` that changes the kind of `{k.name}`", fr)
        results.extend(flatten(fr.locals[k]))
    results.extend(lw.state_values[p] for p in paths)
    body_region = lw.pop(outer).finish(results)
    final = iter(lw.b.add("while", init, {}, regions=(cond_region, body_region)))
    for k in locals_:
        fr.locals[k] = rebuild(initial[k], final)
    for p in paths:
        lw.write_state(p, next(final))


def carried_by(
    lw: Lowerer,
    fr: Frame,
    stmts: tuple[ast.Stmt, ...],
    args: list[TensorType] | None = None,
    enter: Callable[[], None] | None = None,
    loop: str = "while",
) -> tuple[list[LocalInfo], list[str]]:
    """The outer locals and state paths a loop body assigns (a scratch lowering, then undone).

    `args` and `enter` give the scratch region its arguments and bind them (a `for`
    binds its loop variable); `loop` names the loop in messages.
    """
    locals_before = dict(fr.locals)
    state_before = dict(lw.state_values)
    written_before = dict(lw.state_written)
    outer = lw.push(args or [])
    try:
        if enter is not None:
            enter()
        lower_stmts(lw, fr, stmts)
    finally:
        lw.pop(outer)
    changed = [k for k, v in locals_before.items() if _rebound(v, fr.locals.get(k))]
    paths = [p for p in lw.state_written if lw.state_values.get(p) is not state_before.get(p)]
    fr.locals.clear()
    fr.locals.update(locals_before)
    lw.state_values = state_before
    lw.state_written = written_before
    for k in changed:
        if is_number(locals_before[k]):
            raise not_supported(f"a `{loop}` that reassigns the compile-time value `{k.name}`", fr)
    return changed, paths


def _for(lw: Lowerer, fr: Frame, s: ast.ForLoop) -> None:
    from linnet.ir.lower.scans import lower_for

    lower_for(lw, fr, s)


def _rebound(before: LV, after: LV | None) -> bool:
    """Whether an assignment gave a local a new value (numbers compare by value)."""
    if is_number(before) and is_number(after):
        return before != after
    return after is not before


_STATEMENTS: dict[type, Callable[[Lowerer, Frame, ast.Stmt], None]] = {
    ast.LetStmt: _let,  # type: ignore[dict-item]
    ast.VarStmt: _var,  # type: ignore[dict-item]
    ast.ComprehensionStmt: _comprehension,  # type: ignore[dict-item]
    ast.AssignStmt: _assign,  # type: ignore[dict-item]
    ast.StaticForStmt: _static_for,  # type: ignore[dict-item]
    ast.WhileStmt: _while,  # type: ignore[dict-item]
    ast.ForLoop: _for,  # type: ignore[dict-item]
}
