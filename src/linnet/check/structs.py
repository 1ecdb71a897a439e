"""Struct construction values: `Name(field = value, ...)` (language-extensions section 2).

Stage: part of the body checker; `check_call` comes here when a call's callee
resolves to a struct declaration (a bare name, an import, or `module.Struct`).
Out: the `StructType` of the value (or the error type), the construction
recorded in `CheckedProgram.constructions` for the lowering, and the
diagnostics of rules S1-S9: E2102 for the arguments (positional, unknown,
repeated, missing fields), E2101 for a value that does not fit its field
(whatever the kind of mismatch), E2111/E2112 explicit generics, E2110 a
generic nothing fixes. Inference is the call machinery's (`calls.Unifier`,
`calls.unify`): a struct's fields are unified like a function's parameters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from linnet.check import assignability, signatures
from linnet.check.calls import Unifier, bind_default, explicit_generics, unify
from linnet.check.calls import _check_args_alone as check_args_alone
from linnet.check.calls import _hint as parameter_hint
from linnet.check.decls import StructInfo
from linnet.check.types import (
    ERROR,
    NONE,
    DTypeVar,
    ErrorType,
    StructType,
    Type,
    in_class,
    show,
)
from linnet.diagnostics import Diagnostic, Label
from linnet.syntax import ast

if TYPE_CHECKING:
    from linnet.check.exprs import BodyChecker


def construct(chk: BodyChecker, call: ast.Call, struct: StructInfo) -> Type:
    """The value `Name<G>(field = value, ...)`, checked by rules S1-S9."""
    signatures.ensure_item_generics(chk.ctx, struct)
    signatures.ensure_struct_fields(chk.ctx, struct)
    given = _named_fields(chk, call, struct)
    if given is None:  # S6: no field type is checked after an argument error
        check_args_alone(chk, call)
        return ERROR
    u = Unifier(struct, None)
    if call.generic_args is not None and not _explicit(chk, call, struct, u):
        check_args_alone(chk, call)
        return ERROR
    if not _unify_fields(chk, call, struct, given, u):
        return ERROR
    for g in struct.generics:  # S8
        s = u.subst
        if g.key in s.dims or g.key in s.packs or g.key in s.dtypes:
            continue
        if g.has_default and g.default is not None:
            bind_default(u, g)
            continue
        chk.ctx.error(
            "E2110",
            f"cannot infer `{g.name}` for `{struct.name}`",
            call.span,
            "not inferable from the fields",
            help=(f"give the generic arguments explicitly: `{struct.name}<...>(...)`",),
        )
        return ERROR
    if not _deferred_dims(chk, struct, given, u) or not _dtype_classes(chk, call, struct, u):
        return ERROR
    for node, lit, var in u.deferred_literals:
        bound_dtype = u.subst.dtypes.get(var)
        if bound_dtype is not None and not assignability.adopt_literal(chk, node, lit, bound_dtype):
            return ERROR
    for name, declared in struct.fields.items():  # a `none` field takes its declared type
        if chk.types.get(given[name]) is NONE:
            chk.adopted[given[name]] = u.subst.apply(declared)
    chk.program.constructions[call] = tuple(given[name] for name in struct.fields)
    return StructType(struct, u.subst)


def _explicit(chk: BodyChecker, call: ast.Call, struct: StructInfo, u: Unifier) -> bool:
    """S1 through the call machinery; its E2111/E2112 point at the whole construction."""
    before = len(chk.ctx.diags)
    ok = explicit_generics(chk, call, struct, u)
    for i in range(before, len(chk.ctx.diags)):
        d = chk.ctx.diags[i]
        if d.code in ("E2111", "E2112") and d.span is not None and d.span != call.span:
            related = (Label(d.span, d.label or "this generic argument"), *d.related)
            chk.ctx.diags[i] = Diagnostic(
                d.code, d.message, call.span, "construction", related, d.notes, d.help
            )
    return ok


def _unify_fields(
    chk: BodyChecker, call: ast.Call, struct: StructInfo, given: dict[str, ast.Expr], u: Unifier
) -> bool:
    """S7: each value against its field, in declaration order; E2101 for any mismatch.

    After the first failure (or a value that already has an error) the remaining values are
    checked on their own: bindings made from a wrong value would only cascade.
    """
    ok = True
    for name, declared in struct.fields.items():
        value = given[name]
        if not ok:
            chk.expr(value)
            continue
        t = chk.expr(value, parameter_hint(u, declared))
        if isinstance(t, ErrorType):
            ok = False
            continue
        reason = unify(chk, u, declared, t, value)
        if reason is None:
            continue
        ok = False
        if reason != "E2104":  # a literal's adoption error is already reported
            _field_mismatch(chk, struct, name, u.subst.apply(declared), declared, t, value)
    return ok


def _field_mismatch(
    chk: BodyChecker,
    struct: StructInfo,
    name: str,
    expected: Type,
    declared: Type,
    found: Type,
    value: ast.Expr,
) -> None:
    notes = [f"the field is declared {show(declared)}", f"the value is {show(found)}"]
    if show(expected) != show(declared):
        notes.insert(1, f"with the generics known so far: {show(expected)}")
    chk.ctx.error(
        "E2101",
        f"field `{name}` of `{struct.name}` expects {show(expected)}, found {show(found)}",
        value.span,
        "field value",
        notes=tuple(notes),
    )


def _deferred_dims(
    chk: BodyChecker, struct: StructInfo, given: dict[str, ast.Expr], u: Unifier
) -> bool:
    """Field dimensions that needed generics bound by a later field (`Tensor[N + 1; f32]`
    before `N`): proved now; a failure is the field's E2101 (S7), not E2202."""
    for declared_dim, found_dim, node in u.deferred_dims:
        want = u.subst.dim(declared_dim)
        if want == found_dim or chk.facts.prove(want, "==", found_dim):
            continue
        name = next((n for n, v in given.items() if v is node), None)
        found = chk.types.get(node)
        if name is not None and found is not None:
            declared = struct.fields[name]
            _field_mismatch(chk, struct, name, u.subst.apply(declared), declared, found, node)
        else:  # a dimension inside a tuple or struct field value
            chk.ctx.error(
                "E2101",
                f"a field of `{struct.name}` needs the dimension "
                f"`{chk.facts.simplify(want)}`, found `{found_dim}`",
                node.span,
                "field value",
            )
        return False
    return True


def _dtype_classes(chk: BodyChecker, call: ast.Call, struct: StructInfo, u: Unifier) -> bool:
    """S8: every bound dtype generic satisfies its class (E2112 at the construction)."""
    for g in struct.generics:
        if g.kind in ("Dim", "Shape"):
            continue
        assert isinstance(g.key, DTypeVar)
        bound = u.subst.dtypes.get(g.key)
        if bound is not None and not in_class(bound, g.kind):
            chk.ctx.error(
                "E2112",
                f"`{bound}` does not satisfy `{g.kind}` for `{g.name}` of `{struct.name}`",
                call.span,
                f"`{g.name}` must be {g.kind}",
                related=(Label(g.ident.span, "constrained here"),),
            )
            return False
    return True


def _named_fields(
    chk: BodyChecker, call: ast.Call, struct: StructInfo
) -> dict[str, ast.Expr] | None:
    """S2-S5: every argument named, a field, given once; every field given."""
    given: dict[str, ast.Expr] = {}
    ok = True
    for arg in call.args:
        if arg.name is None:
            chk.ctx.error(
                "E2102",
                "struct fields are given by name",
                arg.value.span,
                "positional argument",
                help=(f"write `{struct.name}(field = value, ...)`",),
            )
            ok = False
            continue
        name = arg.name.name
        if name not in struct.fields:
            fields = ", ".join(f"`{f}`" for f in struct.fields) or "none"
            chk.ctx.error(
                "E2102",
                f"`{struct.name}` has no field `{name}`",
                arg.name.span,
                "unknown field",
                notes=(f"its fields: {fields}",),
            )
            ok = False
        elif name in given:
            chk.ctx.error(
                "E2102", f"field `{name}` is given twice", arg.name.span, "repeated field"
            )
            ok = False
        else:
            given[name] = arg.value
    if not ok:
        return None
    missing = [f for f in struct.fields if f not in given]
    if missing:
        shown = ", ".join(f"`{f}`" for f in missing)
        plural = "s" if len(missing) > 1 else ""
        chk.ctx.error(
            "E2102",
            f"missing field{plural} {shown} for `{struct.name}`",
            call.span,
            "incomplete construction",
        )
        return None
    return given
