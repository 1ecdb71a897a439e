"""Lazy resolution of declarations (language.md 4.6, 5.5, 6.2, 11.2, 12.2, 14.1, 15 steps 5-9).

Stage: between collection and body checking; invoked on demand, so items can
be used before they are declared. In: `ItemInfo` records with their AST.
Out: generics (with `Symbol`s and defaults), `where` constraints and facts,
parameter/result/member/field types, constant types and values, alias
targets. Cycles through constants, aliases and structs are E2122.

Each `ensure_*` runs at most once per declaration (`state`: todo -> busy ->
done); re-entering a busy declaration is exactly a cyclic definition.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from linnet.check.collect import check_declared_name, duplicate
from linnet.check.context import Context
from linnet.check.decls import (
    AliasInfo,
    BlockInfo,
    ConstInfo,
    Constraint,
    Decl,
    EnumInfo,
    FnInfo,
    GenericInfo,
    LocalInfo,
    ModuleInfo,
    StructInfo,
)
from linnet.check.dims import Symbol
from linnet.check.prover import Facts
from linnet.check.scope import Scope, block_scope, item_scope
from linnet.check.types import (
    ERROR,
    ArrayType,
    BlockType,
    CtFloatType,
    CtIntType,
    DTypeVar,
    EnumType,
    ErrorType,
    OptionalType,
    ScalarType,
    TensorType,
    Type,
    in_class,
)
from linnet.diagnostics import Label
from linnet.syntax import ast

if TYPE_CHECKING:
    from linnet.check.exprs import BodyChecker

COMPARISONS = frozenset({"==", "!=", "<", "<=", ">", ">="})


def checker(
    ctx: Context,
    module: ModuleInfo,
    block: BlockInfo | None,
    fn: FnInfo | None,
    scope: Scope,
    facts: Facts,
) -> BodyChecker:
    from linnet.check.exprs import BodyChecker

    return BodyChecker(ctx, module, block, fn, scope, facts)


def block_facts(block: BlockInfo | None) -> Facts:
    if block is None or block.facts is None:
        return Facts.EMPTY
    return block.facts


# ---------------------------------------------------------------- generics and where


def declare_generics(
    chk: BodyChecker,
    generics: ast.Generics | None,
    table: dict[str, Decl],
    taken: dict[str, ast.Ident],
) -> list[GenericInfo]:
    """Generic parameters (5.5): E1205 duplicates, E1207, E2111 `*` on `Shape` only.

    Defaults are resolved separately (`resolve_defaults`), after the `where`
    clause, so a default such as `H / G` may rely on `where G > 0`.
    """
    out: list[GenericInfo] = []
    if generics is None:
        return out
    for gp in generics.params:
        ident = gp.name
        check_declared_name(chk.ctx, ident, "generic parameter")
        if gp.is_pack and gp.kind != "Shape":
            chk.ctx.error(
                "E2111",
                f"only `Shape` parameters are written with `*`, and `{ident.name}` is a `{gp.kind}`",
                gp.span,
                "unexpected `*`",
            )
        elif gp.kind == "Shape" and not gp.is_pack:
            chk.ctx.error(
                "E2111",
                f"the `Shape` parameter `{ident.name}` must be written with `*`",
                gp.span,
                "missing `*`",
                help=(f"declare it as `*{ident.name}: Shape`",),
            )
        key: Symbol | DTypeVar
        if gp.kind in ("Dim", "Shape"):
            key = Symbol(ident.name, gp.kind == "Shape")
        else:
            key = DTypeVar(ident.name, gp.kind)
        info = GenericInfo(ident.name, ident, gp.kind, gp.kind == "Shape", key, gp)
        out.append(info)
        chk.program.resolutions[ident] = info
        if ident.name in taken:
            duplicate(chk.ctx, "E1205", ident, taken[ident.name], "name")
            continue
        taken[ident.name] = ident
        table[ident.name] = info
    return out


def resolve_defaults(chk: BodyChecker, infos: list[GenericInfo]) -> None:
    """Defaults of generic parameters (5.5): each sees only the earlier parameters.

    `chk.scope` is the scope whose table holds the generics; a default is
    resolved in a scope with just the generics declared before it.
    """
    from linnet.check.typeconv import dtype_of, generic_argument

    saved = chk.scope
    try:
        for i, info in enumerate(infos):
            default = info.node.default
            if default is None:
                continue
            chk.scope = Scope({g.name: g for g in infos[:i]}, saved.parent)
            if info.kind in ("Dim", "Shape"):
                info.default = generic_argument(chk, info, default)
            else:
                dtype = dtype_of(chk, default)
                if dtype is not None and not in_class(dtype, info.kind):
                    chk.ctx.error(
                        "E2112",
                        f"the default `{dtype}` does not satisfy `{info.kind}`",
                        default.span,
                        f"`{info.name}` must be {info.kind}",
                    )
                    dtype = None
                info.default = dtype
            info.has_default = info.default is not None
    finally:
        chk.scope = saved


def where_constraints(chk: BodyChecker, where: ast.Where | None) -> list[Constraint]:
    """`where` relations as constraints; both sides must be dimensions (6.2, E2123)."""
    out: list[Constraint] = []
    if where is None:
        return out
    chk.where_mode = True
    try:
        for rel in where.relations:
            if rel.op not in COMPARISONS:
                continue  # the parser reported E1101
            lhs = chk.dim_of(rel.left)
            rhs = chk.dim_of(rel.right)
            if lhs is None or rhs is None:
                chk.facts = chk.facts.without_some()
                continue
            c = Constraint(lhs, rel.op, rhs, rel)
            out.append(c)
            chk.facts = chk.facts.assume(lhs, rel.op, rhs)
    finally:
        chk.where_mode = False
    return out


# ---------------------------------------------------------------- functions


def ensure_fn(ctx: Context, fn: FnInfo) -> None:
    """Generics, `where` facts, parameter and result types of a function (11.1, 11.2)."""
    if fn.state != "todo":
        return
    fn.state = "busy"
    block = fn.block
    if block is not None:
        ensure_block(ctx, block)
    decl = fn.decl
    parent = item_scope(fn.module, block)
    scope = Scope(fn.scope, parent)
    chk = checker(ctx, fn.module, block, fn, scope, block_facts(block))
    taken: dict[str, ast.Ident] = {}
    fn.generics = declare_generics(chk, decl.generics, fn.scope, taken)
    chk.runtime_names = frozenset(p.name.name for p in decl.params.params)
    fn.where = where_constraints(chk, decl.where)
    chk.runtime_names = frozenset()
    fn.facts = chk.facts
    resolve_defaults(chk, fn.generics)
    for p in decl.params.params:
        ident = p.name
        check_declared_name(ctx, ident, "parameter")
        from linnet.check.typeconv import resolve_type

        t = resolve_type(chk, p.type)
        local = LocalInfo(ident.name, ident, t, "param", default=p.default)
        fn.params.append(local)
        ctx.program.bindings[ident] = local
        if ident.name in taken:
            duplicate(ctx, "E1205", ident, taken[ident.name], "parameter")
            continue
        taken[ident.name] = ident
        fn.scope[ident.name] = local
    if decl.result is not None:
        from linnet.check.typeconv import resolve_type

        fn.result = resolve_type(chk, decl.result)
    fn.state = "done"


# ---------------------------------------------------------------- blocks


def ensure_block(ctx: Context, block: BlockInfo) -> None:
    """A block's generics and `where` facts (12.1, 12.5); members come separately."""
    if block.state != "todo":
        return
    block.state = "busy"
    if block.block is not None:
        ensure_block(ctx, block.block)
    parent = item_scope(block.module, block.block)
    # Generics are declared in a scope of their own first, so a default sees the
    # earlier generics (5.5) and a member named like a generic is E1205 (4.4).
    generic_table: dict[str, Decl] = {}
    own = Scope(block.scope, parent, block=block)
    chk = checker(
        ctx, block.module, block, None, Scope(generic_table, own), block_facts(block.block)
    )
    taken = {name: _ident_of(decl) for name, decl in block.scope.items()}
    block.generics = declare_generics(chk, block.decl.generics, generic_table, {})
    block.where = where_constraints(chk, block.decl.where)
    block.facts = chk.facts
    chk.scope = Scope(generic_table, parent)
    resolve_defaults(chk, block.generics)
    for g in block.generics:
        other = taken.get(g.name)
        if other is not None and block.scope.get(g.name) is not g:
            duplicate(ctx, "E1205", other, g.ident, "name")
        block.scope[g.name] = g
    block.state = "done"


def _ident_of(decl: Decl) -> ast.Ident:
    ident = getattr(decl, "ident", None)
    assert isinstance(ident, ast.Ident)
    return ident


def ensure_members(ctx: Context, block: BlockInfo) -> None:
    """Member types and their rules (12.2): E4101, E4102, E2206 for `sub` instantiations."""
    if block.members_state != "todo":
        return
    block.members_state = "busy"
    ensure_block(ctx, block)
    chk = checker(ctx, block.module, block, None, block_scope(block), block_facts(block))
    from linnet.check.typeconv import resolve_type

    for member in block.members.values():
        node = member.node
        t = resolve_type(chk, node.type, in_sub=member.kind == "sub")
        member.optional = isinstance(t, OptionalType)
        if not isinstance(t, ErrorType) and not _member_type_ok(ctx, member.kind, t, node):
            t = ERROR
        member.type = t
        default = node.default
        if default is None:
            continue
        if not isinstance(default, ast.NoneLit):
            ctx.error(
                "E4102",
                f"a `{member.kind}` cannot have an initialiser",
                default.span,
                "initialiser not allowed",
                notes=(
                    "weights come from the checkpoint; `none` is the only permitted default "
                    "(it marks an optional member as possibly absent)",
                ),
            )
        elif not member.optional and not isinstance(t, ErrorType):
            ctx.error(
                "E4101",
                f"`= none` needs an optional type, but `{member.name}` is not optional",
                default.span,
                "`none` default",
                help=(f"declare the type as `{node.type.span.text}?`",),
            )
    block.members_state = "done"


def _member_type_ok(ctx: Context, kind: str, t: Type, node: ast.MemberDecl) -> bool:
    """E4101: what each member kind may hold (12.2)."""
    if kind == "sub":
        inner = t.inner if isinstance(t, OptionalType) else t
        if isinstance(inner, BlockType) or (isinstance(t, ArrayType)):
            return True
        message = "a `sub` must have a block type, an optional block type or an array of blocks"
    elif kind == "state":
        if isinstance(t, TensorType):
            return True
        if isinstance(t, OptionalType):
            message = "a `state` member cannot be optional"
            ctx.error(
                "E4101",
                message,
                node.type.span,
                "optional state",
                notes=("the runtime always holds a value for state",),
                help=("remove the `?`",),
            )
            return False
        message = "a `state` member must have a tensor type"
    else:
        inner = t.inner if isinstance(t, OptionalType) else t
        if isinstance(inner, TensorType):
            return True
        message = f"a `{kind}` must have a tensor type"
    ctx.error("E4101", message, node.type.span, "invalid member type")
    return False


# ---------------------------------------------------------------- constants, aliases, structs


def ensure_const(ctx: Context, const: ConstInfo, use: ast.Expr | ast.Type | None = None) -> None:
    """A constant's type and value (14.1); E2122 at the reference that closes a cycle."""
    if const.state == "done":
        return
    if const.state == "busy":
        ctx.error(
            "E2122",
            f"the constant `{const.name}` is defined in terms of itself",
            const.ident.span,
            "cyclic definition",
            related=(Label(use.span, "used here"),) if use is not None else (),
        )
        const.type = ERROR
        const.state = "done"
        return
    const.state = "busy"
    from linnet.check import assignability, consts
    from linnet.check.typeconv import resolve_type

    block = const.block
    if block is not None:
        ensure_block(ctx, block)
    chk = checker(ctx, const.module, block, None, item_scope(const.module, block), Facts.EMPTY)
    decl = const.decl
    t: Type
    if decl.type is not None:
        declared = resolve_type(chk, decl.type)
        if not isinstance(declared, (ScalarType, EnumType, ErrorType)):
            ctx.error(
                "E2101",
                "a constant's type must be a scalar type or an enum",
                decl.type.span,
                "not allowed for a constant",
            )
            declared = ERROR
        value_type = chk.expr(decl.value, declared)
        assignability.coerce(chk, decl.value, value_type, declared, "the constant's value")
        t = declared
    else:
        value_type = chk.expr(decl.value)
        if isinstance(value_type, (CtIntType, CtFloatType)):
            t = value_type
        else:
            t = assignability.materialize(chk, decl.value, value_type, False)
    if const.state == "busy":
        const.value = consts.evaluate(chk, decl.value)
        if isinstance(t, CtIntType) and t.value.as_int() is None:
            ctx.error(
                "E2123",
                "a constant must not depend on generic parameters",
                decl.value.span,
                "symbolic value",
                notes=("constant initialisers are evaluated without generics (14.1)",),
            )
            t = ERROR
        const.type = t
    const.state = "done"


def ensure_item_generics(ctx: Context, item: StructInfo | EnumInfo | AliasInfo) -> None:
    """Generic parameters of a struct, enum or alias."""
    if item.state != "todo":
        return
    item.state = "busy"
    decl = item.decl
    chk = checker(
        ctx,
        item.module,
        item.block,
        None,
        Scope({}, item_scope(item.module, item.block)),
        block_facts(item.block),
    )
    item.generics = declare_generics(chk, decl.generics, chk.scope.table, {})
    resolve_defaults(chk, item.generics)
    if isinstance(item, AliasInfo):
        _resolve_alias_target(ctx, item, chk)
    item.state = "done"


def _resolve_alias_target(ctx: Context, alias: AliasInfo, chk: BodyChecker) -> None:
    from linnet.check.typeconv import resolve_type

    chk.in_alias = True
    try:
        alias.target = resolve_type(chk, alias.decl.type, in_sub=True)
    finally:
        chk.in_alias = False


def ensure_alias(ctx: Context, alias: AliasInfo, use: ast.NamedType | None = None) -> None:
    """An alias's target type; E2122 when the alias refers to itself."""
    if alias.state == "busy":
        ctx.error(
            "E2122",
            f"the type alias `{alias.name}` is defined in terms of itself",
            (use or alias.decl).span,
            "cyclic definition",
            related=(Label(alias.ident.span, "declared here"),),
        )
        alias.target = ERROR
        return
    ensure_item_generics(ctx, alias)


def ensure_struct_fields(
    ctx: Context, struct: StructInfo, use: ast.NamedType | None = None
) -> None:
    """Field types of a struct (5.3); E2122 when a struct contains itself."""
    if struct.fields_state == "done":
        return
    if struct.fields_state == "busy":
        ctx.error(
            "E2122",
            f"the struct `{struct.name}` contains itself",
            (use or struct.decl).span,
            "cyclic definition",
            related=(Label(struct.ident.span, "declared here"),),
        )
        return
    struct.fields_state = "busy"
    ensure_item_generics(ctx, struct)
    from linnet.check.typeconv import resolve_type

    table: dict[str, Decl] = {g.name: g for g in struct.generics}
    chk = checker(
        ctx,
        struct.module,
        struct.block,
        None,
        Scope(table, item_scope(struct.module, struct.block)),
        block_facts(struct.block),
    )
    seen: dict[str, ast.Ident] = {}
    for field in struct.decl.fields:
        check_declared_name(ctx, field.name, "field")
        if field.name.name in seen:
            duplicate(ctx, "E1205", field.name, seen[field.name.name], "field")
            continue
        seen[field.name.name] = field.name
        struct.fields[field.name.name] = resolve_type(chk, field.type)
    struct.fields_state = "done"
