"""Runtime `for` loops and scans to the Core IR `for` op (language-extensions 0.5, 1.5).

Stage: lowering. In: a checked `ForLoop` (statement or scan value), its
`ForInfo`, the current `Frame`. Out: one `for` op in the current region; for a
scan, its stacked values (a tuple of them for a tuple `yield`).

As for `while`, the carried values are the outer `var`s and the state members
the body assigns, found by a scratch lowering of the body (`carried_by`). The
region's arguments are the `i64` loop index then the carried values; it ends
with the next carried values, then the values of the final `yield` converted
to the yield type the checker recorded (literals take their adopted dtype).
The bounds are the dimensions of `ForInfo` evaluated with the bound generics.
"""

from __future__ import annotations

from linnet.check.types import ScalarType, TensorType, TupleType, Type
from linnet.errors import InternalError
from linnet.ir.core import TensorType as IRTensorType
from linnet.ir.core import Value
from linnet.ir.lower.context import Frame, Lowerer, not_supported
from linnet.ir.lower.stmts import carried_by, lower_stmts
from linnet.ir.lower.values import LV, flatten, rebuild, same_structure
from linnet.syntax import ast

INDEX = IRTensorType((), "i64")


def lower_for(lw: Lowerer, fr: Frame, loop: ast.ForLoop) -> LV:
    """Emit the `for` op; returns the scan's value (an empty tuple for the statement form)."""
    from linnet.ir.lower.exprs import lower_expr

    info = lw.program.runtime_fors.get(loop)
    if info is None:
        raise InternalError("`for` without checker information")
    start, stop = fr.env.dim(info.start), fr.env.dim(info.stop)
    stmts = loop.body.stmts
    final: ast.YieldStmt | None = None
    if info.yield_type is not None:
        last = stmts[-1]
        if not isinstance(last, ast.YieldStmt):
            raise InternalError("a scan body without a final `yield`")
        final, stmts = last, stmts[:-1]

    def bind_index() -> None:
        if info.variable is not None:
            fr.locals[info.variable] = lw.b.args[0]

    locals_, paths = carried_by(lw, fr, stmts, [INDEX], bind_index, loop="for")
    initial = {k: fr.locals[k] for k in locals_}
    init: list[Value] = []
    for k in locals_:
        init.extend(flatten(initial[k]))
    init.extend(lw.read_state(p) for p in paths)

    outer = lw.push([INDEX, *(v.type for v in init)])
    args = iter(lw.b.args)
    next(args)
    bind_index()
    for k in locals_:
        fr.locals[k] = rebuild(initial[k], args)
    for p in paths:
        lw.state_values[p] = next(args)
    lower_stmts(lw, fr, stmts)
    results: list[Value] = []
    for k in locals_:
        if not same_structure(initial[k], fr.locals[k]):
            raise not_supported(f"a `for` that changes the kind of `{k.name}`", fr)
        results.extend(flatten(fr.locals[k]))
    results.extend(lw.state_values[p] for p in paths)
    rows: list[Value] = []
    if final is not None and info.yield_type is not None:
        rows = _rows(lw, fr, lower_expr(lw, fr, final.value), info.yield_type)
    body = lw.pop(outer).finish([*results, *rows])
    out = iter(lw.b.add("for", init, {"start": start, "stop": stop}, regions=(body,)))
    for k in locals_:
        fr.locals[k] = rebuild(initial[k], out)
    for p in paths:
        lw.write_state(p, next(out))
    stacked = tuple(out)
    if final is None:
        return ()
    if isinstance(info.yield_type, TupleType):
        return stacked
    (single,) = stacked
    return single


def _rows(lw: Lowerer, fr: Frame, lv: LV, t: Type) -> list[Value]:
    """The IR values of one `yield`, each of its yield type's dtype."""
    if isinstance(t, TupleType):
        if not isinstance(lv, tuple) or len(lv) != len(t.elems):
            raise InternalError(f"tuple yield against {lv!r}")
        out: list[Value] = []
        for item, et in zip(lv, t.elems, strict=True):
            out.extend(_rows(lw, fr, item, et))
        return out
    if not isinstance(t, (ScalarType, TensorType)):
        raise InternalError(f"yield of type {t!r}")
    dtype = fr.env.dtype(t.dtype)
    value = lw.value(lv, dtype)
    if value.type.dtype != dtype:
        raise InternalError(f"yield of {value.type}, expected dtype {dtype}")
    return [value]
