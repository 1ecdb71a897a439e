"""Assignability, literal adoption, defaulting and joins (language.md 5.4, 5.7, 7.3, 7.8).

Stage: helpers of the body checker. A value flows into a context (an
annotation, a parameter, a return, an assignment, an operator's other
operand); these functions decide whether it fits, record the runtime type a
compile-time value adopts (`CheckedProgram.adopted`), and report E2101,
E2103, E2104, E2105, E2109, E2113, E2115 and E2202 when it does not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from linnet.check.shapes import first_shape_difference, types_equal
from linnet.check.types import (
    ERROR,
    F64,
    I64,
    NONE,
    UNIT,
    ArrayType,
    BlockType,
    CtFloatType,
    CtIntType,
    DType,
    ErrorType,
    OptionalType,
    ScalarDType,
    ScalarType,
    ShapeType,
    TensorType,
    TupleType,
    Type,
    float_literal_adopts,
    int_literal_adopts,
    scalar,
    show,
)
from linnet.diagnostics import Label
from linnet.syntax import ast

if TYPE_CHECKING:
    from linnet.check.exprs import BodyChecker


def strip_parens(node: ast.Expr) -> ast.Expr:
    while isinstance(node, ast.Paren):
        node = node.inner
    return node


def adopt_literal(
    chk: BodyChecker, node: ast.Expr, t: CtIntType | CtFloatType, dtype: DType
) -> bool:
    """7.3: may this compile-time value take `dtype`? Records the adoption; E2104/E2105."""
    if isinstance(t, CtIntType):
        if not int_literal_adopts(dtype):
            if isinstance(dtype, ScalarDType):
                chk.ctx.error(
                    "E2104",
                    f"an integer literal cannot have dtype `{dtype}`",
                    node.span,
                    f"expected `{dtype}` here",
                    help=("use `true`/`false` for booleans, or compare: `x != 0`",),
                )
            else:
                chk.ctx.error(
                    "E2104",
                    f"an integer literal cannot adopt the dtype generic `{dtype}`",
                    node.span,
                    f"`{dtype}` might be `bool`",
                    help=(f"constrain the generic with `Numeric`: `{dtype}: Numeric`",),
                )
            return False
        value = t.value.as_int()
        if value is not None and isinstance(dtype, ScalarDType):
            if dtype.is_int and not dtype.min <= value <= dtype.max:
                chk.ctx.error(
                    "E2105",
                    f"the literal `{value}` does not fit in `{dtype}`",
                    node.span,
                    "out of range",
                    notes=(f"`{dtype}` holds {dtype.min} ..= {dtype.max}",),
                )
                return False
            if dtype.is_float and abs(value) > dtype.float_max:
                chk.ctx.error(
                    "E2105",
                    f"the literal `{value}` is beyond the largest finite `{dtype}`",
                    node.span,
                    "out of range",
                )
                return False
    else:
        if not float_literal_adopts(dtype):
            chk.ctx.error(
                "E2104",
                f"a float literal cannot have dtype `{dtype}`",
                node.span,
                f"expected `{dtype}` here",
                help=(
                    f"write an integer literal, or convert explicitly with `cast<{dtype}>(...)`",
                ),
            )
            return False
        fvalue = t.value
        if fvalue is not None and isinstance(dtype, ScalarDType) and abs(fvalue) > dtype.float_max:
            chk.ctx.error(
                "E2105",
                f"the literal `{fvalue!r}` is beyond the largest finite `{dtype}`",
                node.span,
                "out of range",
            )
            return False
    chk.adopted[node] = scalar(dtype)
    return True


def coerce(
    chk: BodyChecker,
    node: ast.Expr,
    actual: Type,
    target: Type,
    what: str,
    code: str | None = None,
) -> bool:
    """Is the value `node` (of type `actual`) assignable to `target` (5.7)? Reports if not.

    `code` overrides the classification (E2109 for assignments); `what` names
    the context in the message ("the returned value", "argument `x`").
    """
    if isinstance(actual, ErrorType) or isinstance(target, ErrorType):
        return True
    if isinstance(target, ScalarType) and isinstance(actual, (CtIntType, CtFloatType)):
        return adopt_literal(chk, node, actual, target.dtype)
    if actual is NONE:
        if isinstance(target, OptionalType):
            chk.adopted[node] = target
            return True
    elif isinstance(target, OptionalType) and isinstance(actual, OptionalType):
        inner = strip_parens(node)
        if isinstance(inner, ast.SomeExpr):
            inner_type = chk.types.get(inner.value, ERROR)
            if coerce(chk, inner.value, inner_type, target.inner, what, code):
                chk.adopted[node] = target
                return True
            return False
    elif (
        isinstance(target, TupleType)
        and isinstance(actual, TupleType)
        and len(target.elems) == len(actual.elems)
    ):
        inner = strip_parens(node)
        if isinstance(inner, ast.TupleExpr):
            ok = True
            for elem, want in zip(inner.elems, target.elems, strict=True):
                ok = coerce(chk, elem, chk.types.get(elem, ERROR), want, what, code) and ok
            if ok:
                chk.adopted[node] = target
            return ok
    if types_equal(actual, target, chk.facts):
        return True
    report_mismatch(chk, node, actual, target, what, code)
    return False


def report_mismatch(
    chk: BodyChecker, node: ast.Expr, actual: Type, target: Type, what: str, code: str | None
) -> None:
    """E2101 / E2103 / E2202 (or `code`) with both types in the notes."""
    span = node.span
    if actual is UNIT:
        chk.ctx.error(
            code or "E2101",
            "this call returns no value",
            span,
            "used as a value here",
            notes=("a function without `-> R` returns nothing (11.3)",),
        )
        return
    notes = [f"expected {show(target)}", f"found {show(actual)}"]
    helps: list[str] = []
    chosen = code
    if (
        isinstance(target, (TensorType, ScalarType))
        and isinstance(actual, (TensorType, ScalarType))
        and type(target) is type(actual)
    ):
        if target.dtype is not actual.dtype:
            chosen = chosen or "E2103"
            message = f"{what} has dtype `{actual.dtype}` but `{target.dtype}` is required"
            helps.append(
                f"there is no implicit promotion: convert with `cast<{target.dtype}>(...)`"
            )
        else:
            assert isinstance(target, TensorType) and isinstance(actual, TensorType)
            chosen = chosen or "E2202"
            message = f"{what} does not have the required shape"
            axis = first_shape_difference(target.shape, actual.shape, chk.facts)
            if axis == -1:
                notes.append(
                    f"the ranks differ: {_axes(len(target.shape))} expected, "
                    f"{_axes(len(actual.shape))} found"
                )
            elif axis is not None:
                notes.append(
                    f"axis {axis} is `{_item(target.shape[axis])}` in the expected type "
                    f"and `{_item(actual.shape[axis])}` here"
                )
            helps.append("state the missing equality in a `where` clause")
            if axis != -1:
                # Equal ranks: an unproven dimension, perhaps from a `where` that failed.
                chk.proof_error(chosen, message, span, notes=tuple(notes), help=tuple(helps))
                return
    else:
        chosen = chosen or "E2101"
        message = f"mismatched types: {what} should be {show(target)}, found {show(actual)}"
        if isinstance(target, OptionalType) and types_equal(actual, target.inner, chk.facts):
            helps.append("wrap the value in `some(...)`")
        elif isinstance(actual, (BlockType, ArrayType)):
            notes.append("blocks are not values; a block type is only allowed as a `sub` type")
        else:
            helps.append(f"give {what} the type {show(target)}, or change the expected type")
    chk.ctx.error(chosen, message, span, notes=tuple(notes), help=tuple(helps))


def _axes(n: int) -> str:
    return f"{n} axis" if n == 1 else f"{n} axes"


def _item(item: object) -> str:
    name = getattr(item, "name", None)
    if name is not None and getattr(item, "is_pack", False):
        return f"*{name}"
    return str(item)


def materialize(chk: BodyChecker, node: ast.Expr, t: Type, keep_symbolic: bool) -> Type:
    """A compile-time value becoming a runtime value without context (5.4).

    Constant integers become `i64`, float literals `f64`, a bare `none` is
    E2113. With `keep_symbolic` (unannotated `let`/`var`), a symbolic
    compile-time integer stays one, so it remains usable in shapes.
    """
    if isinstance(t, CtIntType):
        if keep_symbolic and t.value.as_int() is None:
            return t
        chk.adopted[node] = scalar(I64)
        return scalar(I64)
    if isinstance(t, CtFloatType):
        chk.adopted[node] = scalar(F64)
        return scalar(F64)
    if t is NONE:
        chk.ctx.error(
            "E2113",
            "cannot tell which optional type `none` has",
            node.span,
            "needs a type",
            help=("add a type annotation, e.g. `let x: Tensor[N; f32]? = none`",),
        )
        return ERROR
    if t is UNIT:
        report_mismatch(chk, node, t, ERROR, "", None)
        return ERROR
    if isinstance(t, ShapeType):
        chk.ctx.error(
            "E2101",
            "a shape literal is not a runtime value",
            node.span,
            notes=("shape literals are only accepted where a shape is consumed (7.10)",),
        )
        return ERROR
    if isinstance(t, (BlockType, ArrayType)):
        chk.ctx.error(
            "E2101",
            "blocks are not values",
            node.span,
            notes=("a block type is only allowed as a `sub` member type (12.1)",),
            help=("call its methods or read its members instead",),
        )
        return ERROR
    if isinstance(t, TupleType):
        inner = strip_parens(node)
        if isinstance(inner, ast.TupleExpr) and len(inner.elems) == len(t.elems):
            elems = tuple(
                materialize(chk, e, et, False) for e, et in zip(inner.elems, t.elems, strict=True)
            )
        else:
            elems = tuple(_materialize_type(et) for et in t.elems)
        result = TupleType(elems)
        if any(a is not b for a, b in zip(elems, t.elems, strict=True)):
            chk.adopted[node] = result
        return result
    if isinstance(t, OptionalType) and t.inner.is_compile_time:
        inner = strip_parens(node)
        if isinstance(inner, ast.SomeExpr):
            value_type = materialize(chk, inner.value, chk.types.get(inner.value, ERROR), False)
        else:
            value_type = _materialize_type(t.inner)
        result_opt = OptionalType(value_type)
        chk.adopted[node] = result_opt
        return result_opt
    return t


def _materialize_type(t: Type) -> Type:
    if isinstance(t, CtIntType):
        return scalar(I64)
    if isinstance(t, CtFloatType):
        return scalar(F64)
    if isinstance(t, TupleType):
        return TupleType(tuple(_materialize_type(e) for e in t.elems))
    return t


def join(
    chk: BodyChecker, branches: list[tuple[ast.Expr, Type]], what: str, whole: ast.Expr
) -> Type:
    """Join `if` branches or `match` arms (7.8): E2115 when no branch fits the others."""
    live = [(node, t) for node, t in branches if not isinstance(t, ErrorType)]
    if not live:
        return ERROR
    if all(isinstance(t, CtIntType) for _, t in live):
        # Two compile-time integers join to i64 (7.8).
        for node, _ in live:
            chk.adopted[node] = scalar(I64)
        return scalar(I64)
    if all(isinstance(t, (CtIntType, CtFloatType)) for _, t in live):
        return CtFloatType(None)
    # The result is the first type every other branch is assignable to.
    for _, candidate in live:
        if candidate.is_compile_time:
            continue
        if all(_fits(chk, t, candidate) for _, t in live):
            for node, t in live:
                if t.is_compile_time:
                    coerce(chk, node, t, candidate, what)
            return candidate
    (_, t1), (n2, t2) = _first_conflict(chk, live)
    chk.ctx.error(
        "E2115",
        f"{what} have different types",
        n2.span,
        "this branch differs",
        related=(Label(whole.span, "in this expression"),),
        notes=(f"one branch is {show(t1)}", f"another is {show(t2)}"),
        help=("give every branch the same type (convert with `cast`, or wrap with `some`)",),
    )
    return ERROR


def _fits(chk: BodyChecker, t: Type, target: Type) -> bool:
    if isinstance(t, CtIntType):
        return isinstance(target, ScalarType) and int_literal_adopts(target.dtype)
    if isinstance(t, CtFloatType):
        return isinstance(target, ScalarType) and float_literal_adopts(target.dtype)
    if t is NONE:
        return isinstance(target, OptionalType)
    if isinstance(t, OptionalType) and isinstance(target, OptionalType):
        return (t.inner.is_compile_time and _fits(chk, t.inner, target.inner)) or types_equal(
            t, target, chk.facts
        )
    return types_equal(t, target, chk.facts)


def _first_conflict(
    chk: BodyChecker, live: list[tuple[ast.Expr, Type]]
) -> tuple[tuple[ast.Expr, Type], tuple[ast.Expr, Type]]:
    base = live[0]
    for other in live[1:]:
        if not (_fits(chk, other[1], base[1]) or _fits(chk, base[1], other[1])):
            return base, other
    return base, live[-1]
