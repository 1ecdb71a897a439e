"""A counted `Loop` as a Linnet runtime `for` (language-extensions 1) instead of unrolled.

Stage: ONNX import (and the StableHLO importer, whose `stablehlo.while` loops
reach translation as `Loop` nodes), translation. The `Loop` translator
(`control.loop`) tries this first; it applies when the trip count is a
constant `n > 0`, the initial condition is true (or absent), and the body's
condition output folds to `true` once its inputs are bound (the body never
stops early). The body is translated once, into the statements of

    var h = h0                      // one `var` per carried value the body changes
    let ys = for i in 0..n {        // a scan when the body has scan outputs
        ...                         // the body, reading `i`, `h` and outer values
        h = h_next
        yield y                     // `yield (y1, y2)` for several scan outputs
    }

A carried value the body passes through unchanged (JAX passes a scan's `xs`
and parameters along this way) is no `var`: the body reads the outer value.
Anything the body cannot express with a runtime counter (a slice whose
bounds depend on it, say) makes `try_for_loop` undo what it did and return
False; the caller then unrolls the loop as before.
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np

from linnet.check.dims import Dim
from linnet.onnx.importer.graph import REGISTRY
from linnet.onnx.importer.ops._common import mark_nonneg
from linnet.sourcegen import build
from linnet.sourcegen.graph import Graph
from linnet.sourcegen.outline import names_read
from linnet.sourcegen.state import defined_name
from linnet.sourcegen.translate import Context, _is_literal, numpy_dtype_name
from linnet.sourcegen.values import Value
from linnet.syntax import ast

__all__ = ["try_for_loop"]

_T = TypeVar("_T")


def try_for_loop(
    ctx: Context, body: Graph, count: int, carried: list[Value], start: int = 0
) -> bool:
    """Translate the `Loop` of `ctx` as a `for` over `start..start + count` (see the
    module docstring; the body's iteration number is then the loop variable, which an
    ONNX `Loop` always counts from 0); False (with nothing changed) when it cannot be one."""
    from linnet.sourcegen import driver

    t = ctx.t
    n = len(carried)
    if count <= 0 or len(body.inputs) != 2 + n or len(body.outputs) < 1 + n:
        return False
    saved_body, t.body = t.body, []
    saved_refusals, saved_notes = len(t.refusals), len(t.notes)
    saved_uses = {k: dict(v) for k, v in t.uses.items()}
    saved_consts = dict(t.const_exprs)
    pending = [v for v in t.values.values() if v.expr is None]

    def undo() -> bool:
        t.body = saved_body
        del t.refusals[saved_refusals:]
        del t.notes[saved_notes:]
        t.uses.clear()
        t.uses.update(saved_uses)
        t.const_exprs.clear()
        t.const_exprs.update(saved_consts)
        for v in pending:
            v.expr = None
        return False

    loop_var = t.locals.fresh("i")
    names = [t.locals.fresh(_hint(ctx, j, "carry")) for j in range(n)]
    counter = Value((), "i64", expr=build.name(loop_var))
    if start >= 0:
        mark_nonneg(ctx, counter)
    t.values[body.inputs[0].name] = counter
    t.values[body.inputs[1].name] = ctx.constant(np.array(True))
    inner: list[Value] = []
    for info, value, name in zip(body.inputs[2:], carried, names, strict=True):
        inner.append(Value(value.shape, value.dtype, expr=build.name(name)))
        t.values[info.name] = inner[-1]
    for key, arr in {**body.initializers, **body.constants}.items():
        arr = np.asarray(arr)
        t.values[key] = Value(
            tuple(Dim.const(int(s)) for s in arr.shape), numpy_dtype_name(arr.dtype), const=arr
        )
    if driver.translate_nodes(t, REGISTRY, body.nodes):
        return undo()
    if any(info.name not in t.values for info in body.outputs):
        return undo()
    outs = [t.values[info.name] for info in body.outputs]
    going = outs[0].const
    if going is None or not bool(np.asarray(going).reshape(-1)[0]):
        return undo()
    for j, value in enumerate(carried):
        outs[1 + j] = _same_shape(ctx, outs[1 + j], value)
    for value, new in zip(carried, outs[1 : 1 + n], strict=True):
        same = value.dtype == new.dtype and value.rank == new.rank
        if not same or not all(
            ctx.equal(a, b) for a, b in zip(value.shape, new.shape, strict=True)
        ):
            return undo()
    scans = outs[1 + n :]
    if any(s.dtype == "bool" and s.const is not None for s in scans):
        return undo()  # a constant bool yield has no typed spelling worth the loop

    stmts, t.body = t.body, saved_body
    made = {defined_name(s) for s in stmts} - {None}
    # Outer constants first written inside the body must not read its locals.
    for v in pending:
        if v.expr is not None and names_read(v.expr) & made:
            v.expr = None
    for const_key, const_expr in list(t.const_exprs.items()):
        if const_key not in saved_consts and names_read(const_expr) & made:
            del t.const_exprs[const_key]

    changed = [j for j in range(n) if outs[1 + j] is not inner[j]]
    # The body was translated with provisional names for the carried values: those it
    # passes through unchanged read the outer value itself, the others are the `var`s,
    # named now (so the first is `carry`, whatever the pass-throughs took).
    for name in names:
        t.locals.release(name)
    subst: dict[str, ast.Expr] = {}
    for j in range(n):
        if j in changed:
            final = t.locals.fresh(_hint(ctx, j, "carry"))
            subst[names[j]] = build.name(final)
            names[j] = final
        else:
            subst[names[j]] = _outer(ctx, carried[j])
    stmts = [_substitute(s, subst) for s in stmts]
    seen: set[int] = set()
    for out in [*outs[1 + n :], *outs[1 : 1 + n]]:
        if out.expr is not None and id(out) not in seen:
            seen.add(id(out))
            out.expr = _substitute(out.expr, subst)
    var_names = {names[j] for j in changed}
    finals: list[ast.Expr] = []
    for value in [*(outs[1 + j] for j in changed), *scans]:
        expr = ctx.ref(value)
        if names_read(expr) & var_names:
            # Reads a carried value before this step's assignments: bind it first.
            local = t.locals.fresh("step")
            stmts.append(_let(local, expr))
            expr = build.name(local)
        elif _is_literal(expr) and value.dtype != "bool":
            expr = build.call("cast", expr, generics=[build.named_type(value.dtype)])
        finals.append(expr)
    stmts = _drop_unread(stmts, finals)
    for j, expr in zip(changed, finals, strict=False):
        stmts.append(ast.AssignStmt(build.ident(names[j]), expr, build.SPAN))
    yields = finals[len(changed) :]
    if yields:
        stacked = yields[0] if len(yields) == 1 else build.tuple_expr(yields)
        stmts.append(ast.YieldStmt(stacked, build.SPAN))
    loop = ast.ForLoop(
        build.ident(loop_var),
        build.int_lit(start),
        build.int_lit(start + count),
        ast.Body(tuple(stmts), build.SPAN),
        build.SPAN,
    )
    for j in changed:
        init = ctx.ref(carried[j])
        annotation = build.named_type(carried[j].dtype) if _is_literal(init) else None
        t.body.append(ast.VarStmt(build.ident(names[j]), annotation, init, build.SPAN))
    scan_names = [t.locals.fresh(_hint(ctx, n + k, "rows")) for k in range(len(scans))]
    if not scans:
        t.body.append(loop)
    else:
        pattern: ast.Pattern = (
            ast.NamePattern(build.ident(scan_names[0]), build.SPAN)
            if len(scans) == 1
            else ast.TuplePattern(
                tuple(ast.NamePattern(build.ident(s), build.SPAN) for s in scan_names),
                False,
                build.SPAN,
            )
        )
        t.body.append(ast.LetStmt(pattern, None, loop, build.SPAN))
    for j in range(n):
        if j in changed:
            value = Value(carried[j].shape, carried[j].dtype, expr=build.name(names[j]))
            t.local_values[names[j]] = value
            ctx.output(j, value)
        else:
            ctx.output(j, carried[j])
    for k, (name, s) in enumerate(zip(scan_names, scans, strict=True)):
        value = Value((Dim.const(count), *s.shape), s.dtype, expr=build.name(name))
        t.local_values[name] = value
        ctx.output(n + k, value)
    ctx.note(
        f"Loop `{ctx.node.label}`: {count} iterations kept as a runtime `for`"
        + (f" scan ({len(scans)} stacked)" if scans else "")
    )
    return True


def _same_shape(ctx: Context, new: Value, old: Value) -> Value:
    """`new` in `old`'s static shape when only unit axes differ (a `[1]` the body got from
    a 0-d parameter, stored as `Tensor[1]`, for a scalar carry): a `var` keeps its type."""
    a, b = new.static_shape(), old.static_shape()
    if a is None or b is None or a == b or new.dtype != old.dtype:
        return new
    if int(np.prod(a)) != int(np.prod(b)):
        return new
    if not b:
        expr = build.index(ctx.ref(new), [build.int_lit(0)] * len(a))
    else:
        expr = build.call("reshape", ctx.ref(new), ctx.shape_lit(old.shape))
    return ctx.let(expr, old.shape, old.dtype, "carried")


def _hint(ctx: Context, i: int, default: str) -> str:
    out = ctx.node.outputs[i] if i < len(ctx.node.outputs) else ""
    want = ctx.t.preferred.get(out) if out else None
    return want or default


def _outer(ctx: Context, value: Value) -> ast.Expr:
    """An expression for an outer value the body reads in place of a pass-through `var`:
    a name or member as is, anything else bound to a local before the loop."""
    expr = ctx.ref(value)
    if isinstance(expr, ast.Name | ast.Member) or _is_literal(expr):
        return expr
    return ctx.ref(ctx.let(expr, value.shape, value.dtype, "invariant"))


def _substitute(node: _T, subst: dict[str, ast.Expr]) -> _T:
    """`node` with the names in `subst` read as the expressions given."""
    from linnet.sourcegen.outline import transform

    def fn(n: object) -> object:
        if isinstance(n, ast.Name) and n.ident.name in subst:
            return subst[n.ident.name]
        return None

    out: _T = transform(node, fn)
    return out


def _let(name: str, expr: ast.Expr) -> ast.Stmt:
    return ast.LetStmt(ast.NamePattern(build.ident(name), build.SPAN), None, expr, build.SPAN)


def _drop_unread(stmts: list[ast.Stmt], finals: list[ast.Expr]) -> list[ast.Stmt]:
    """The body without `let`s nothing in it reads (translators leave a few behind)."""
    while True:
        read: set[str] = set()
        for expr in finals:
            read |= names_read(expr)
        for s in stmts:
            read |= names_read(s)
        kept = [s for s in stmts if defined_name(s) is None or defined_name(s) in read]
        if len(kept) == len(stmts):
            return stmts
        stmts = kept
