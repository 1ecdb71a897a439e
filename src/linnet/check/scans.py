"""Runtime `for` loops, scans and `yield` (language-extensions 1.2, 1.3).

Stage: part of checking a function body (called from `check.stmts` for the
statement form, for `yield`, and for the values of `let`, `var`, assignments
and `return`; from the expression dispatch for a `for` anywhere else).
In: a `ForLoop` or `YieldStmt` node. Out: the type of a scan (its yields
stacked on a new leading axis of `stop - start` rows), `ForInfo` in
`CheckedProgram.runtime_fors`, and the diagnostics of rules F1-F9:
E2123 (bounds), E2208 (negative length), E2124 (misplaced scans and
`yield`s), E2101 (values that cannot be stacked). E2108 (assigning the loop
variable), E2120 (`return` in the body) and E2109 (carried `var`s) come from
the ordinary statement rules, with the loop counted in `loop_depth`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from linnet.check import assignability
from linnet.check.dims import Dim
from linnet.check.program import ForInfo
from linnet.check.types import (
    ERROR,
    I64,
    CtFloatType,
    CtIntType,
    ErrorType,
    ScalarType,
    TensorType,
    TupleType,
    Type,
    scalar,
    show,
)
from linnet.syntax import ast

if TYPE_CHECKING:
    from linnet.check.exprs import BodyChecker

_BIND_FIRST = "bind the loop first: `let ys = for ...`"


def value(chk: BodyChecker, e: ast.Expr, expected: Type | None = None) -> Type:
    """The value of a `let`, `var`, assignment or `return`: the one place a scan may stand (F5)."""
    if isinstance(e, ast.ForLoop) and chk.kernel is not None:  # B16
        chk.ctx.error(
            "E2127",
            "scans are not available in kernels",
            e.span,
            "a scan in a kernel",
            notes=("a kernel may use a statement `for`, `while` and `static for`",),
            help=("write each row with `store` inside a statement `for`",),
        )
        check_loop(chk, e, scan=True, expected=None, reported=True)
        return ERROR
    if isinstance(e, ast.ForLoop):
        t = check_loop(chk, e, scan=True, expected=expected)
        chk.types[e] = t
        return t
    return chk.expr(e, expected)


def check_misplaced(chk: BodyChecker, e: ast.ForLoop, expected: Type | None) -> Type:
    """A `for` as an argument, in parentheses, a tuple element, ...: E2124 (F5)."""
    chk.ctx.error(
        "E2124",
        "a `for` with a value must be the whole value of `let`, `var`, an assignment or `return`",
        e.span,
        "a scan here",
        help=(_BIND_FIRST,),
    )
    check_loop(chk, e, scan=True, expected=None, reported=True)
    return ERROR


def check_statement(chk: BodyChecker, s: ast.ForLoop) -> None:
    """The statement form: no value, so no `yield` in its body (F7)."""
    check_loop(chk, s, scan=False, expected=None)


def check_misplaced_yield(chk: BodyChecker, s: ast.YieldStmt) -> None:
    """A `yield` anywhere but at the end of a scan body (F7)."""
    chk.expr(s.value)
    chk.ctx.error(
        "E2124",
        "`yield` ends the body of a `for` that gives a value",
        s.span,
        "misplaced `yield`",
        notes=(
            "it may only be the last statement of a `for` bound by `let`, `var`, an "
            "assignment or `return`, not part of a statement `for`, a `while`, a `static for`, "
            "a function body or a nested block, nor followed by other statements",
        ),
        help=("end the scan's body with `yield value`",),
    )


def check_loop(
    chk: BodyChecker,
    loop: ast.ForLoop,
    *,
    scan: bool,
    expected: Type | None,
    reported: bool = False,
) -> Type:
    """Check the bounds and body of a `for`; for a scan, its stacked type (1.3).

    `reported`: the loop already has an error (misplaced), so a missing `yield`
    is not reported a second time.
    """
    from linnet.check.stmts import check_stmts

    start = _bound(chk, loop.start)
    stop = _bound(chk, loop.stop)
    length: Dim | None = None
    if start is not None and stop is not None:
        if chk.facts.prove(stop, ">=", start):
            length = chk.facts.simplify(stop - start)
        else:
            chk.proof_error(
                "E2208",
                "this range may have a negative length",
                loop.range_span,
                "length not provably >= 0",
                notes=(f"the length is `{chk.facts.simplify(stop - start)}`",),
                help=("state the fact, e.g. `where N > 0` for `1..N`",),
            )
    chk.push_scope()
    variable = chk.declare_local(loop.var, scalar(I64), "for")
    chk.loop_depth += 1
    stmts = loop.body.stmts
    final = stmts[-1] if scan and stmts and isinstance(stmts[-1], ast.YieldStmt) else None
    check_stmts(chk, stmts[:-1] if final is not None else stmts)
    yielded: Type = ERROR
    if final is not None:
        yielded = _yield_type(chk, final.value, _unstack(expected))
    elif scan and not reported and not any(isinstance(x, ast.YieldStmt) for x in stmts):
        # (a `yield` before other statements is reported where it stands, F7)
        chk.ctx.error(
            "E2124",
            "this `for` gives a value, so its body must end with `yield`",
            loop.span,
            "no final `yield`",
            help=("end the body with `yield value`",),
        )
    chk.loop_depth -= 1
    chk.pop_scope()
    if start is not None and stop is not None:
        chk.program.runtime_fors[loop] = ForInfo(
            start, stop, variable, yielded if scan and final is not None else None
        )
    if not scan or length is None or isinstance(yielded, ErrorType):
        return ERROR
    return _stack(yielded, length)


def _bound(chk: BodyChecker, e: ast.Expr) -> Dim | None:
    """F1: a bound is a compile-time integer; E2123 otherwise."""
    t = chk.expr(e)
    if isinstance(t, CtIntType):
        return t.value
    if not isinstance(t, ErrorType):
        chk.ctx.error(
            "E2123",
            "the bounds of a `for` are compile-time integers",
            e.span,
            f"found {show(t)}",
            notes=("the number of iterations is fixed at compile time",),
            help=("use `while` for a count known only at run time",),
        )
    return None


def _yield_type(chk: BodyChecker, e: ast.Expr, hint: Type | None) -> Type:
    """F8, F9: the runtime type of one yield value (literals adopt the hint, else i64/f64)."""
    t = chk.expr(e, hint)
    if isinstance(t, ErrorType):
        return ERROR
    if not _stackable(t):
        chk.ctx.error(
            "E2101",
            "this value cannot be stacked",
            e.span,
            f"found {show(t)}",
            notes=(
                f"the value has type {show(t)}; a `yield` gives a scalar, a tensor or a "
                "tuple of at least two of them",
            ),
        )
        return ERROR
    if isinstance(hint, ScalarType) and isinstance(t, (CtIntType, CtFloatType)):
        if not assignability.coerce(chk, e, t, hint, "the yielded value"):
            return ERROR
        return hint
    return assignability.materialize(chk, e, t, False)


def _stackable(t: Type) -> bool:
    if isinstance(t, TupleType):
        return len(t.elems) >= 2 and all(_row(x) for x in t.elems)
    return _row(t)


def _row(t: Type) -> bool:
    return isinstance(t, (ScalarType, TensorType, CtIntType, CtFloatType))


def _unstack(expected: Type | None) -> Type | None:
    """The type one `yield` should have for the scan to have `expected` (F9)."""
    if isinstance(expected, TupleType):
        return TupleType(tuple(_unstack(x) or ERROR for x in expected.elems))  # ERROR: no hint
    if isinstance(expected, TensorType) and expected.shape and isinstance(expected.shape[0], Dim):
        rest = expected.shape[1:]
        return TensorType(rest, expected.dtype) if rest else scalar(expected.dtype)
    return None


def _stack(t: Type, n: Dim) -> Type:
    """1.3: a scalar becomes `Tensor[n; D]`, a tensor gains a leading `n`, tuples per element."""
    if isinstance(t, TupleType):
        return TupleType(tuple(_stack(x, n) for x in t.elems))
    if isinstance(t, ScalarType):
        return TensorType((n,), t.dtype)
    if isinstance(t, TensorType):
        return TensorType((n, *t.shape), t.dtype)
    return ERROR
