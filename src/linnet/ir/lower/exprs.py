"""Expressions to Core IR (language.md 7, 14): literals, names, operators, members, `if`, `match`.

Stage: lowering. In: an expression node, the checker's side tables, and the
current `Frame`. Out: an LV (see `values`).

Compile-time values fold in Python as the checker folds them (6.1: integer
`/` `%` on two compile-time integers are floor division and remainder; a float
literal keeps literal arithmetic in f64, 7.3). When the checker recorded that
a compile-time value adopts a dtype in its context (`CheckedProgram.adopted`,
7.3), the folded number becomes a constant of that dtype right at that node.
Runtime operators map one to one onto IR ops; integer `/` and `%` are the IR's
truncating `div`/`rem` (7.5). `&&`/`||` evaluate both operands (they only ever
see scalar `bool`s, and expressions have no effects but state writes).

A runtime `if` becomes an `if` op with two regions (only the selected branch
runs, 7.8; state a branch assigns is carried out as extra results). Inside
index notation, where the condition is a per-element value, it becomes a
`select`. `match` is resolved while lowering: optionals are known once the
weights are (14.4), enum values are constants.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from linnet.check.decls import (
    ConstInfo,
    EnumVariant,
    FnInfo,
    GenericInfo,
    IndexVar,
    LocalInfo,
    MemberInfo,
    ModuleInfo,
)
from linnet.check.dims import Symbol
from linnet.check.types import ScalarType, StructType, Type
from linnet.errors import InternalError, LinnetError
from linnet.ir.core import Builder, Value
from linnet.ir.lower.context import Frame, Lowerer, local_value, not_supported
from linnet.ir.lower.values import (
    LV,
    ArrayRef,
    BlockRef,
    IxVal,
    Opt,
    ShapeLV,
    flatten,
    is_number,
    rebuild,
    same_structure,
)
from linnet.ir.size_decisions import COMPARISONS, at, note
from linnet.syntax import ast

BINARY_KINDS = {
    "+": "add",
    "-": "sub",
    "*": "mul",
    "/": "div",
    "%": "rem",
    "==": "eq",
    "!=": "ne",
    "<": "lt",
    "<=": "le",
    ">": "gt",
    ">=": "ge",
    "&": "and",
    "|": "or",
    "^": "xor",
    "&&": "and",
    "||": "or",
}

SIZE_DECISIONS = {**{op: op for op in COMPARISONS}, "/": "floor", "%": "mod"}
"""Folded operators whose outcome `linnet.ir.size_decisions` records (dynamic exports)."""


def lower_expr(lw: Lowerer, fr: Frame, e: ast.Expr) -> LV:
    """Lower one expression; a compile-time number adopts its recorded dtype here (7.3)."""
    lv = _DISPATCH[type(e)](lw, fr, e)
    if is_number(lv) and not isinstance(lv, bool):
        t = lw.program.adopted.get(e)
        if isinstance(t, ScalarType):
            assert isinstance(lv, (int, float))
            return lw.const(lv, fr.env.dtype(t.dtype))
    return lv


# ---------------------------------------------------------------- small forms


def _int(lw: Lowerer, fr: Frame, e: ast.IntLit) -> LV:
    return e.value


def _float(lw: Lowerer, fr: Frame, e: ast.FloatLit) -> LV:
    return e.value


def _bool(lw: Lowerer, fr: Frame, e: ast.BoolLit) -> LV:
    return e.value


def _none(lw: Lowerer, fr: Frame, e: ast.NoneLit) -> LV:
    return Opt(None)


def _string(lw: Lowerer, fr: Frame, e: ast.StringLit) -> LV:
    raise InternalError("string literals are not values")


def _paren(lw: Lowerer, fr: Frame, e: ast.Paren) -> LV:
    return lower_expr(lw, fr, e.inner)


def _tuple(lw: Lowerer, fr: Frame, e: ast.TupleExpr) -> LV:
    return tuple(lower_expr(lw, fr, x) for x in e.elems)


def _some(lw: Lowerer, fr: Frame, e: ast.SomeExpr) -> LV:
    return Opt(lower_expr(lw, fr, e.value))


def _shape(lw: Lowerer, fr: Frame, e: ast.ShapeLit) -> LV:
    dims: list[int] = []
    for x in e.elems:
        d = lower_expr(lw, fr, x)
        if not isinstance(d, int) or isinstance(d, bool):
            raise InternalError(f"shape element lowered to {d!r}")
        dims.append(d)
    return ShapeLV(tuple(dims))


# ---------------------------------------------------------------- names and members


def _name(lw: Lowerer, fr: Frame, e: ast.Name) -> LV:
    decl = lw.program.resolutions.get(e)
    if isinstance(decl, LocalInfo):
        found = fr.locals.get(decl)
        if found is None:
            raise InternalError(f"local `{decl.name}` has no value in {fr.where}")
        return found
    if isinstance(decl, MemberInfo):
        if fr.instance is None:
            raise InternalError(f"member `{decl.name}` read outside a block")
        return member_value(lw, fr, fr.instance, decl)
    if isinstance(decl, GenericInfo):
        key = decl.key
        if not isinstance(key, Symbol) or key.is_pack:
            raise InternalError(f"generic `{decl.name}` used as a value")
        return fr.env.dims[key]
    if isinstance(decl, ConstInfo):
        return const_value(lw, fr, decl)
    if isinstance(decl, ModuleInfo):
        return decl
    if isinstance(decl, IndexVar):
        raise InternalError(f"index `{decl.name}` used as a value")
    raise InternalError(f"name `{e.ident.name}` resolves to {decl!r}")


def const_value(lw: Lowerer, fr: Frame, c: ConstInfo) -> LV:
    """A constant's folded value (14.1): typed constants become IR constants."""
    value = c.value
    if value is None:
        raise InternalError(f"constant `{c.name}` has no folded value")
    if isinstance(value, EnumVariant):
        return value
    if isinstance(c.type, ScalarType):
        return lw.const(value, fr.env.dtype(c.type.dtype))
    return value


def member_value(lw: Lowerer, fr: Frame, instance: object, member: MemberInfo) -> LV:
    """A block member read (12.3): a param/buffer read, the current state, or a child."""
    from linnet.ir.bind import BlockInstance

    assert isinstance(instance, BlockInstance)
    path = instance.member_path(member.name)
    if member.kind == "state":
        return lw.read_state(path)
    if member.kind in ("param", "buffer"):
        if member.optional or _declared_optional(lw, path):
            return Opt(lw.read_tensor(path)) if lw.is_present(path) else Opt(None)
        return lw.read_tensor(path)
    child = instance.subs.get(member.name)
    if child is None:
        raise InternalError(f"no child `{member.name}` in {instance!r}")
    if isinstance(child, list):
        return ArrayRef(child)
    bound = lw.bound
    assert bound is not None
    if path in bound.optional_subs:
        return Opt(BlockRef(child)) if lw.is_present(path) else Opt(None)
    return BlockRef(child)


def _declared_optional(lw: Lowerer, path: str) -> bool:
    bound = lw.bound
    assert bound is not None
    return bound.tensors[path].optional


def _member(lw: Lowerer, fr: Frame, e: ast.Member) -> LV:
    decl = lw.program.resolutions.get(e)
    if isinstance(decl, EnumVariant):
        return decl
    if isinstance(decl, ConstInfo):
        return const_value(lw, fr, decl)
    if isinstance(decl, MemberInfo):
        saved = fr.ix
        fr.ix = None
        try:
            target = lower_expr(lw, fr, e.target)
        finally:
            fr.ix = saved
        if not isinstance(target, BlockRef):
            raise InternalError(f"member `{decl.name}` of {target!r}")
        return member_value(lw, fr, target.instance, decl)
    if isinstance(decl, FnInfo):
        raise InternalError(f"function `{decl.name}` used as a value")
    struct = lw.program.types.get(e.target)
    if isinstance(struct, StructType):
        value = lower_expr(lw, fr, e.target)
        if isinstance(value, tuple):
            return value[list(struct.info.fields).index(e.name.name)]
    raise not_supported(f"reading `.{e.name.name}` of a struct", fr)


# ---------------------------------------------------------------- operators


def _unary(lw: Lowerer, fr: Frame, e: ast.Unary) -> LV:
    x = lower_expr(lw, fr, e.operand)
    if e.op == "+":
        return x
    if is_number(x):
        assert isinstance(x, (int, float))
        if e.op == "!":
            return not x
        return -x
    kind = "not" if e.op == "!" else "neg"
    if isinstance(x, IxVal) or fr.ix is not None:
        from linnet.ir.lower.index import as_ix

        ixv = as_ix(lw, x, None)
        return IxVal(lw.b.unary(kind, ixv.value), ixv.axes)
    return lw.b.unary(kind, lw.value(x))


def _binary(lw: Lowerer, fr: Frame, e: ast.Binary) -> LV:
    left = lower_expr(lw, fr, e.left)
    right = lower_expr(lw, fr, e.right)
    op = e.op
    if is_number(left) and is_number(right):
        folded = fold(op, left, right)  # type: ignore[arg-type]
        if op in SIZE_DECISIONS:
            note(SIZE_DECISIONS[op], op, left, right, folded, at(e.span))
        return folded
    if isinstance(left, EnumVariant) and isinstance(right, EnumVariant):
        same = left.enum is right.enum and left.name == right.name
        return same if op == "==" else not same
    from linnet.ir.lower.prelude import elementwise

    return elementwise(lw, fr, BINARY_KINDS[op], [left, right])


def fold(op: str, a: int | float, b: int | float) -> int | float | bool:
    """Two compile-time values (6.1 for integers, f64 literal arithmetic for floats, 7.3)."""
    if op in ("&&", "&"):
        return (a and b) if isinstance(a, bool) else int(a) & int(b)
    if op in ("||", "|"):
        return (a or b) if isinstance(a, bool) else int(a) | int(b)
    if op == "^":
        return (a != b) if isinstance(a, bool) else int(a) ^ int(b)
    if op in ("==", "!=", "<", "<=", ">", ">="):
        return {
            "==": a == b,
            "!=": a != b,
            "<": a < b,
            "<=": a <= b,
            ">": a > b,
            ">=": a >= b,
        }[op]
    if isinstance(a, int) and isinstance(b, int):
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if b == 0:
            raise LinnetError(f"division by zero in a compile-time integer `{a} {op} {b}`")
        return a // b if op == "/" else a % b
    x, y = float(a), float(b)
    if op == "+":
        return x + y
    if op == "-":
        return x - y
    if op == "*":
        return x * y
    if op == "/":
        if y == 0.0:
            return math.copysign(math.inf, x) * math.copysign(1.0, y) if x != 0 else math.nan
        return x / y
    return math.fmod(x, y) if y != 0.0 else math.nan


# ---------------------------------------------------------------- calls and indexing


def _call(lw: Lowerer, fr: Frame, e: ast.Call) -> LV:
    from linnet.ir.lower.calls import lower_call

    fields = lw.program.constructions.get(e)
    if fields is not None:
        # A struct value is the tuple of its fields in declaration order (language-extensions
        # 2.3): entry results flatten it depth first, as they flatten tuples.
        return tuple(lower_expr(lw, fr, value) for value in fields)
    return lower_call(lw, fr, e)


def _index(lw: Lowerer, fr: Frame, e: ast.Index) -> LV:
    from linnet.ir.lower.slicing import lower_index

    return lower_index(lw, fr, e)


def _reduction(lw: Lowerer, fr: Frame, e: ast.Reduction) -> LV:
    from linnet.ir.lower.index import lower_reduction

    return lower_reduction(lw, fr, e)


# ---------------------------------------------------------------- if and match


def _if(lw: Lowerer, fr: Frame, e: ast.IfExpr) -> LV:
    cond = lower_expr(lw, fr, e.cond)
    if isinstance(cond, bool):
        return lower_expr(lw, fr, e.then if cond else e.otherwise)  # decided at compile time
    result_type = lw.program.adopted.get(e) or lw.program.types.get(e)
    if fr.ix is not None or isinstance(cond, IxVal) or (isinstance(cond, Value) and cond.type.rank):
        # Per-element conditions (index notation, or a scalar function applied
        # elementwise inside it) choose with `select`.
        then = lower_expr(lw, fr, e.then)
        other = lower_expr(lw, fr, e.otherwise)
        from linnet.ir.lower.prelude import elementwise

        dtype = _dtype_of(result_type, fr)
        return elementwise(lw, fr, "select", [cond, then, other], dtype)
    return runtime_if(lw, fr, lw.value(cond), e.then, e.otherwise, result_type)


def _dtype_of(t: Type | None, fr: Frame) -> str | None:
    return fr.env.dtype(t.dtype) if isinstance(t, ScalarType) else None


def runtime_if(
    lw: Lowerer,
    fr: Frame,
    cond: Value,
    then: ast.Expr,
    otherwise: ast.Expr,
    result_type: Type | None,
) -> LV:
    """An `if` op (7.8): each branch a region; state a branch assigns becomes a result too."""
    before = dict(lw.state_values)
    written = dict(lw.state_written)
    branches: list[tuple[LV, dict[str, Value], list[Value], Builder]] = []
    for branch in (then, otherwise):
        outer = lw.push([])
        lv = lw.materialize(lower_expr(lw, fr, branch), result_type, fr.env)
        changed = {p: v for p, v in lw.state_values.items() if before.get(p) is not v}
        inner = lw.pop(outer)
        branches.append((lv, changed, flatten(lv), inner))
        lw.state_values = dict(before)
        lw.state_written = dict(written)
    (lv_t, st_t, flat_t, b_t), (lv_e, st_e, flat_e, b_e) = branches
    if not same_structure(lv_t, lv_e):
        raise not_supported("an `if` whose branches differ in optional or block values", fr)
    paths = list(dict.fromkeys([*st_t, *st_e]))
    res_t = flat_t + [st_t.get(p) or lw.read_state(p) for p in paths]
    res_e = flat_e + [st_e.get(p) or lw.read_state(p) for p in paths]
    results = lw.b.if_(cond, b_t.finish(res_t), b_e.finish(res_e))
    it = iter(results)
    lv = rebuild(lv_t, it)
    lw.state_written = written
    for p in paths:
        lw.write_state(p, next(it))
    return lv


def _match(lw: Lowerer, fr: Frame, e: ast.MatchExpr) -> LV:
    """`match` (14.3) resolved statically: optionals by presence, enums by value (14.4)."""
    scrutinee = lower_expr(lw, fr, e.scrutinee)
    if not isinstance(scrutinee, (Opt, EnumVariant)):
        raise not_supported("`match` on a value known only at run time", fr)
    for arm in e.arms:
        p = arm.pattern
        if isinstance(scrutinee, Opt):
            if isinstance(p, ast.SomePattern):
                if scrutinee.value is None:
                    continue
                bind_pattern(lw, fr, p.inner, scrutinee.value)
            elif isinstance(p, ast.NonePattern):
                if scrutinee.value is not None:
                    continue
            elif isinstance(p, ast.NamePattern):
                bind_pattern(lw, fr, p, scrutinee)
            else:
                raise InternalError("tuple pattern as a match arm")
            return lower_expr(lw, fr, arm.value)
        assert isinstance(p, ast.NamePattern)
        variant = lw.program.resolutions.get(p.name)
        if isinstance(variant, EnumVariant):
            if variant.name != scrutinee.name:
                continue
        else:
            bind_pattern(lw, fr, p, scrutinee)
        return lower_expr(lw, fr, arm.value)
    raise InternalError("no `match` arm matched")


def _scan(lw: Lowerer, fr: Frame, e: ast.ForLoop) -> LV:
    from linnet.ir.lower.scans import lower_for

    return lower_for(lw, fr, e)


def bind_pattern(lw: Lowerer, fr: Frame, p: ast.Pattern, lv: LV) -> None:
    """Bind an irrefutable pattern (11.4) to a lowered value."""
    if isinstance(p, ast.NamePattern):
        local = lw.program.bindings.get(p.name)
        if local is not None:
            fr.locals[local] = local_value(lw, fr, lv, local.type)
        return
    if isinstance(p, ast.TuplePattern):
        if not isinstance(lv, tuple) or len(lv) != len(p.elems):
            raise InternalError(f"tuple pattern against {lv!r}")
        for sub, item in zip(p.elems, lv, strict=True):
            bind_pattern(lw, fr, sub, item)
        return
    raise InternalError("refutable pattern outside `match`")


_DISPATCH: dict[type, Callable[[Lowerer, Frame, ast.Expr], LV]] = {
    ast.IntLit: _int,  # type: ignore[dict-item]
    ast.FloatLit: _float,  # type: ignore[dict-item]
    ast.BoolLit: _bool,  # type: ignore[dict-item]
    ast.NoneLit: _none,  # type: ignore[dict-item]
    ast.StringLit: _string,  # type: ignore[dict-item]
    ast.Name: _name,  # type: ignore[dict-item]
    ast.Paren: _paren,  # type: ignore[dict-item]
    ast.Unary: _unary,  # type: ignore[dict-item]
    ast.Binary: _binary,  # type: ignore[dict-item]
    ast.Call: _call,  # type: ignore[dict-item]
    ast.Member: _member,  # type: ignore[dict-item]
    ast.Index: _index,  # type: ignore[dict-item]
    ast.TupleExpr: _tuple,  # type: ignore[dict-item]
    ast.SomeExpr: _some,  # type: ignore[dict-item]
    ast.ShapeLit: _shape,  # type: ignore[dict-item]
    ast.Reduction: _reduction,  # type: ignore[dict-item]
    ast.IfExpr: _if,  # type: ignore[dict-item]
    ast.MatchExpr: _match,  # type: ignore[dict-item]
    ast.ForLoop: _scan,  # type: ignore[dict-item]
}
