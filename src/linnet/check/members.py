"""Member access (language.md 7.2, 12.3, 14.2).

Stage: part of the body checker. In: `Member` nodes (`m.item`, `Enum.Variant`,
`child.member`, `s.field`). Out: their types and resolutions, with E1201 and
E1203 (module items), E1208 (three-part variants, methods without a call),
E2107 (unknown members and variants). Also the member path of a block-valued
expression, which calls and the state footprint use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from linnet.check import signatures
from linnet.check.decls import (
    EnumInfo,
    EnumVariant,
    ItemInfo,
    LocalInfo,
    MemberInfo,
    ModuleInfo,
)
from linnet.check.types import (
    ERROR,
    BlockType,
    EnumType,
    ErrorType,
    OptionalType,
    ScalarType,
    StructType,
    TensorType,
    Type,
    show,
)
from linnet.check.unknown import item_help
from linnet.diagnostics import Label
from linnet.source import Span
from linnet.spelling import did_you_mean
from linnet.syntax import ast
from linnet.syntax.tokens import PRELUDE_FUNCTIONS

if TYPE_CHECKING:
    from linnet.check.exprs import BodyChecker


def check_member(chk: BodyChecker, e: ast.Member, expected: Type | None) -> Type:
    """`m.item`, `Enum.Variant`, `child.member`, `s.field` (7.2)."""
    name = e.name.name
    target = e.target
    if isinstance(target, ast.Name):
        decl = chk.scope.lookup(target.ident.name)
        if isinstance(decl, ModuleInfo):
            chk.resolutions[target] = decl
            item = module_item(chk, decl, e.name)
            if item is None:
                return ERROR
            chk.resolutions[e] = item
            return chk.prefer(e, chk.value_of(item, e), expected)
        if isinstance(decl, EnumInfo):
            chk.resolutions[target] = decl
            return enum_variant(chk, decl, e)
    elif isinstance(target, ast.Member) and isinstance(target.target, ast.Name):
        decl = chk.scope.lookup(target.target.ident.name)
        if isinstance(decl, ModuleInfo):
            inner = decl.items.get(target.name.name)
            if isinstance(inner, EnumInfo):
                chk.ctx.error(
                    "E1208",
                    "a variant is written `Enum.Variant`, not `module.Enum.Variant`",
                    e.span,
                    "three-part name",
                    help=(f"import the enum: `use {decl.name}::{{{inner.name}}}`",),
                )
                return ERROR
    t = chk.expr(target)
    if isinstance(t, ErrorType):
        return ERROR
    if isinstance(t, BlockType):
        return child_member(chk, e, t)
    if isinstance(t, StructType):
        signatures.ensure_struct_fields(chk.ctx, t.info)
        field = t.info.fields.get(name)
        if field is not None:
            return t.subst.apply(field)
    notes: tuple[str, ...] = ()
    if isinstance(t, OptionalType) and isinstance(t.inner, BlockType):
        notes = ("an optional child is read with `match`: `some(c) => c.member`",)
    fields = t.info.fields if isinstance(t, StructType) else {}
    chk.ctx.error(
        "E2107",
        f"{show(t)} has no member `{name}`",
        e.name.span,
        "unknown member",
        notes=notes,
        help=did_you_mean(name, fields)
        or tensor_member_help(name, t)
        or (("read the fields of a struct, or the members of a block",) if not notes else ()),
    )
    return ERROR


# PyTorch tensor attributes and methods with a Linnet spelling of their own.
_TENSOR_ATTRIBUTES = {
    "T": "transpose with `permute(x, [1, 0])` (or `std.linalg::transpose`)",
    "mT": "swap the last two axes with `permute`",
    "t": "transpose with `permute(x, [1, 0])` (or `std.linalg::transpose`)",
    "shape": "the shape is part of the type: name the dimensions with generics",
    "dtype": "the dtype is part of the type: a dtype generic or a scalar type",
    "view": "write `reshape(x, [...])`",
    "float": "write `cast<f32>(x)`",
    "half": "write `cast<f16>(x)`",
    "long": "write `cast<i64>(x)`",
    "int": "write `cast<i32>(x)`",
    "to": "write `cast<T>(x)`",
    "sum": "reduce in index notation: `let s[i] = sum[j] x[i, j]`",
    "mean": "reduce in index notation: `let m[i] = sum[j] x[i, j] / N`",
    "matmul": "call `matmul(a, b)` after `use std.linalg::{matmul}`",
    "softmax": "call `softmax(x)` after `use std.nn.softmax::{softmax}`",
}


def tensor_member_help(name: str, t: Type) -> tuple[str, ...]:
    """For `x.T`, `x.reshape(...)`: tensors have no members; the Linnet spelling instead."""
    if not isinstance(t, (TensorType, ScalarType)):
        return ()
    if name in PRELUDE_FUNCTIONS:
        return (f"values have no methods: call the prelude function `{name}(x, ...)`",)
    hint = _TENSOR_ATTRIBUTES.get(name)
    if hint is not None:
        return (f"values have no members: {hint}",)
    return ("values have no members or methods: pass the value to a function",)


def module_item(chk: BodyChecker, module: ModuleInfo, ident: ast.Ident) -> ItemInfo | None:
    """A public item of an imported module (E1201 absent, E1203 private)."""
    item = module.items.get(ident.name)
    if item is None:
        chk.ctx.error(
            "E1201",
            f"module `{module.name}` has no item `{ident.name}`",
            ident.span,
            "not found in that module",
            help=item_help(module, ident.name),
        )
        return None
    if not item.pub and module is not chk.module:
        private(chk, item, ident.span, module.name)
        return None
    return item


def private(chk: BodyChecker, item: ItemInfo, span: Span, owner: str) -> None:
    chk.ctx.error(
        "E1203",
        f"`{item.name}` is private to `{owner}`",
        span,
        "private",
        related=(Label(item.ident.span, "declared here without `pub`"),),
        help=(f"mark `{item.name}` as `pub`",),
    )


def enum_variant(chk: BodyChecker, enum: EnumInfo, e: ast.Member) -> Type:
    name = e.name.name
    if name not in enum.variants:
        chk.ctx.error(
            "E2107",
            f"enum `{enum.name}` has no variant `{name}`",
            e.name.span,
            "unknown variant",
            notes=(f"the variants are {', '.join(enum.variants) or 'none'}",),
            help=did_you_mean(name, enum.variants, "the variant"),
        )
        return ERROR
    chk.resolutions[e] = EnumVariant(enum, name)
    return EnumType(enum)


def child_member(chk: BodyChecker, e: ast.Member, t: BlockType) -> Type:
    """`child.member` on a block value (7.2, 12.3): members read; methods need a call."""
    name = e.name.name
    block = t.info
    signatures.ensure_members(chk.ctx, block)
    member = block.members.get(name)
    if member is not None:
        member.used = True
        chk.resolutions[e] = member
        if member.kind == "state" and chk.fn is not None:
            path = block_path(chk, e.target)
            if path is not None:
                chk.fn.child_state_reads.add((*path, name))
        if member.type is None:
            return ERROR
        return t.subst.apply(member.type)
    if name in block.methods:
        chk.ctx.error(
            "E1208",
            f"`{name}` is a method of `{block.name}` and must be called",
            e.span,
            "method used as a value",
            related=(Label(block.methods[name].ident.span, "declared here"),),
        )
        return ERROR
    names = [m for m, member in block.members.items() if not member.name.startswith("_")]
    chk.ctx.error(
        "E2107",
        f"block `{block.name}` has no member `{name}`",
        e.name.span,
        "unknown member",
        help=did_you_mean(name, [*block.members, *block.methods])
        or (
            f"the members of `{block.name}` are {', '.join(f'`{m}`' for m in names)}"
            if names
            else f"`{block.name}` has no members",
        ),
    )
    return ERROR


def block_path(chk: BodyChecker, node: ast.Expr) -> tuple[str, ...] | None:
    """The member path of a block-valued expression, relative to the function's block."""
    if isinstance(node, ast.Paren):
        return block_path(chk, node.inner)
    if isinstance(node, ast.Name):
        decl = chk.resolutions.get(node)
        if isinstance(decl, MemberInfo):
            return (decl.name,)
        if isinstance(decl, LocalInfo):
            return decl.block_path
        return None
    if isinstance(node, ast.Member):
        inner = block_path(chk, node.target)
        return None if inner is None else (*inner, node.name.name)
    if isinstance(node, ast.Index):
        inner = block_path(chk, node.target)
        info = chk.program.indexings.get(node)
        position = "*" if info is None or info.position is None else str(info.position)
        return None if inner is None else (*inner, position)
    return None
