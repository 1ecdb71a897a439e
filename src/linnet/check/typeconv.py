"""Syntax types to semantic types (language.md 5.2, 5.3, 5.5, 5.6 step 1, 12.2).

Stage: part of the body checker, used for signatures, member types,
annotations and generic arguments. In: `ast.Type` / `ast.GenArg` nodes and
the checker's scope and facts. Out: `types.Type` values and diagnostics:
E1201/E1203 (unknown or private names), E1208 (not a type, not a dtype),
E2111/E2112 (generic arguments), E2123/E2205/E2208 (dimensions), E2206
(block instantiations prove the block's `where`), E2101 (block or array
types outside `sub`), E2122 (self-referential aliases and structs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from linnet.check import signatures
from linnet.check.decls import (
    AliasInfo,
    BlockInfo,
    Decl,
    EnumInfo,
    GenericInfo,
    ModuleInfo,
    StructInfo,
    UnresolvedImport,
)
from linnet.check.dims import Dim, Symbol
from linnet.check.types import (
    ERROR,
    SCALAR_DTYPES,
    ArrayType,
    BlockType,
    CtIntType,
    DType,
    DTypeVar,
    EnumType,
    ErrorType,
    GenericValue,
    OptionalType,
    ScalarDType,
    ShapeItem,
    ShapeType,
    StructType,
    Subst,
    TensorType,
    TupleType,
    Type,
    in_class,
    scalar,
)
from linnet.check.unknown import generics_help, unknown_name
from linnet.diagnostics import Label
from linnet.syntax import ast
from linnet.syntax.tokens import KIND_NAMES, PRELUDE_FUNCTIONS, PRELUDE_NAMES

if TYPE_CHECKING:
    from linnet.check.exprs import BodyChecker


def resolve_type(chk: BodyChecker, node: ast.Type, *, in_sub: bool = False) -> Type:
    """A syntax type in the checker's scope. `in_sub`: block and array types allowed."""
    if isinstance(node, ast.NamedType):
        t = named_type(chk, node)
        inner = t.inner if isinstance(t, OptionalType) else t
        if isinstance(inner, (BlockType, ArrayType)) and not in_sub:
            return block_outside_sub(chk, node)
        return t
    if isinstance(node, ast.TensorType):
        return tensor_type(chk, node)
    if isinstance(node, ast.OptionalType):
        inner = resolve_type(chk, node.inner, in_sub=in_sub)
        if isinstance(inner, ErrorType):
            return ERROR
        if isinstance(inner, ArrayType):
            chk.ctx.error("E4101", "a `sub` array cannot be optional", node.span, "optional array")
            return ERROR
        return OptionalType(inner)
    if isinstance(node, ast.TupleType):
        elems = tuple(resolve_type(chk, e) for e in node.elems)
        if any(isinstance(e, ErrorType) for e in elems):
            return ERROR
        return TupleType(elems)
    assert isinstance(node, ast.ArrayType)
    elem = resolve_type(chk, node.elem, in_sub=True)
    length = chk.dim_of(node.length)
    if length is not None:
        chk.check_nonnegative(length, node.length)
    if not in_sub:
        chk.ctx.error(
            "E2101",
            "a structural array type is only allowed as the type of a `sub`",
            node.span,
            "array type here",
            notes=("blocks are not values (12.1)",),
        )
        return ERROR
    if isinstance(elem, ErrorType) or length is None:
        return ERROR
    if not isinstance(elem, BlockType):
        chk.ctx.error(
            "E4101",
            "the elements of a `sub` array must be blocks",
            node.elem.span,
            "not a block type",
        )
        return ERROR
    return ArrayType(elem, length)


def block_outside_sub(chk: BodyChecker, node: ast.NamedType) -> Type:
    chk.ctx.error(
        "E2101",
        "a block type is only allowed as the type of a `sub` member",
        node.span,
        "block type here",
        notes=("blocks are not values (12.1)",),
    )
    return ERROR


def lookup_type_name(chk: BodyChecker, node: ast.NamedType) -> Decl | str | None:
    """The declaration a (possibly `module.Item`) type name denotes; a str for scalars."""
    path = node.path
    first = path[0].name
    if len(path) == 1:
        decl = chk.scope.lookup(first)
        if decl is None and first in SCALAR_DTYPES:
            return first
        return decl
    if len(path) > 2:
        chk.ctx.error(
            "E1201",
            "only a two-segment name `module.Item` is accepted in type positions",
            node.span,
            "unknown type path",
        )
        return None
    decl = chk.scope.lookup(first)
    if not isinstance(decl, ModuleInfo):
        chk.ctx.error(
            "E1201",
            f"cannot find module `{first}` in this scope",
            path[0].span,
            "not an imported module",
            help=(f"import it with `use ...{first}`",),
        )
        return None
    chk.resolutions[path[0]] = decl
    item = decl.items.get(path[1].name)
    if item is None:
        chk.ctx.error(
            "E1201",
            f"module `{decl.name}` has no item `{path[1].name}`",
            path[1].span,
            "not found in that module",
        )
        return None
    if not item.pub and decl is not chk.module:
        chk.ctx.error(
            "E1203",
            f"`{item.name}` is private to `{decl.name}`",
            path[1].span,
            "private",
            related=(Label(item.ident.span, "declared here without `pub`"),),
        )
        return None
    return item


def named_type(chk: BodyChecker, node: ast.NamedType) -> Type:
    found = lookup_type_name(chk, node)
    if isinstance(found, str):
        if node.args is not None:
            chk.ctx.error(
                "E2111",
                f"the scalar type `{found}` takes no generic arguments",
                node.span,
                "unexpected generic arguments",
            )
            return ERROR
        return scalar(SCALAR_DTYPES[found])
    if found is None:
        if len(node.path) == 1:
            unknown_type(chk, node)
        return ERROR
    if isinstance(found, UnresolvedImport):
        return ERROR
    chk.resolutions[node] = found
    name = node.path[-1].name
    if isinstance(found, GenericInfo):
        if found.is_dtype:
            if node.args is not None:
                chk.ctx.error(
                    "E2111", f"`{name}` takes no generic arguments", node.span, "unexpected"
                )
                return ERROR
            key = found.key
            assert isinstance(key, DTypeVar)
            return scalar(key)
        what = "a shape pack" if found.is_pack else "a dimension"
        return not_a_type(chk, node, f"`{name}` is {what}, not a type", found.ident)
    if isinstance(found, AliasInfo):
        signatures.ensure_alias(chk.ctx, found, node)
        if found.target is None:
            return ERROR
        subst = instantiate(chk, found.generics, node, name)
        if subst is None:
            return ERROR
        t = subst.apply(found.target)
        block = t.inner if isinstance(t, OptionalType) else t
        block = block.elem if isinstance(block, ArrayType) else block
        if isinstance(block, BlockType) and not chk.in_alias:
            prove_block_where(chk, block.info, block.subst, node)
        return t
    if isinstance(found, StructInfo):
        signatures.ensure_item_generics(chk.ctx, found)
        signatures.ensure_struct_fields(chk.ctx, found, node)
        subst = instantiate(chk, found.generics, node, name)
        return ERROR if subst is None else StructType(found, subst)
    if isinstance(found, EnumInfo):
        signatures.ensure_item_generics(chk.ctx, found)
        subst = instantiate(chk, found.generics, node, name)
        return ERROR if subst is None else EnumType(found)
    if isinstance(found, BlockInfo):
        signatures.ensure_block(chk.ctx, found)
        subst = instantiate(chk, found.generics, node, name)
        if subst is None:
            return ERROR
        if not chk.in_alias:
            prove_block_where(chk, found, subst, node)
        return BlockType(found, subst)
    ident = getattr(found, "ident", None)
    return not_a_type(
        chk, node, f"`{name}` is not a type", ident if isinstance(ident, ast.Ident) else None
    )


def unknown_type(chk: BodyChecker, node: ast.NamedType) -> None:
    name = node.path[0].name
    if name == "Tensor":
        message = "`Tensor` needs its dimensions and dtype: `Tensor[N; f32]`"
        chk.ctx.error("E1208", message, node.span, "incomplete tensor type")
    elif name in KIND_NAMES:
        chk.ctx.error(
            "E1208",
            f"`{name}` is a generic kind, not a type",
            node.span,
            "not a type",
            help=(f"declare a generic parameter: `<X: {name}>`",),
        )
    elif name in PRELUDE_FUNCTIONS:
        chk.ctx.error("E1208", f"`{name}` is a prelude function, not a type", node.span)
    else:
        unknown_name(
            chk,
            name,
            node.path[0].span,
            f"cannot find type `{name}` in this scope",
            "unknown type",
            "type",
            "import it with `use`, or declare it",
        )


def not_a_type(
    chk: BodyChecker, node: ast.NamedType, message: str, declared: ast.Ident | None
) -> Type:
    related = (Label(declared.span, "declared here"),) if declared is not None else ()
    chk.ctx.error("E1208", message, node.span, "not a type", related=related)
    return ERROR


def tensor_type(chk: BodyChecker, node: ast.TensorType) -> Type:
    items: list[ShapeItem] = []
    ok = True
    for item in node.dims:
        if isinstance(item, ast.PackRef):
            sym = pack_symbol(chk, item)
            if sym is None:
                ok = False
            else:
                items.append(sym)
            continue
        d = chk.dim_of(item)
        if d is None:
            ok = False
            continue
        chk.check_nonnegative(d, item)
        items.append(d)
    dtype = element_dtype(chk, node.elem)
    if dtype is None or not ok:
        return ERROR
    return TensorType(tuple(items), dtype)


def pack_symbol(chk: BodyChecker, ref: ast.PackRef) -> Symbol | None:
    """`*P` must name a `Shape` generic in scope (5.2)."""
    ident = ref.name
    decl = chk.scope.lookup(ident.name)
    if isinstance(decl, UnresolvedImport):
        return None
    if isinstance(decl, GenericInfo) and decl.is_shape:
        chk.resolutions[ident] = decl
        key = decl.key
        assert isinstance(key, Symbol)
        return key
    if decl is None:
        unknown_name(
            chk,
            ident.name,
            ident.span,
            f"cannot find the shape pack `{ident.name}` in this scope",
            "unknown pack",
            "dimension",
            f"declare it as `*{ident.name}: Shape`",
        )
    else:
        chk.ctx.error(
            "E1208",
            f"`{ident.name}` is not a shape pack",
            ident.span,
            "not a `Shape` generic",
            help=(f"declare it as `*{ident.name}: Shape`",),
        )
    return None


def element_dtype(chk: BodyChecker, node: ast.NamedType) -> DType | None:
    """After `;`: a scalar type name or a dtype generic (5.2); else E1208."""
    found = lookup_type_name(chk, node) if node.args is None else None
    if isinstance(found, str):
        return SCALAR_DTYPES[found]
    if isinstance(found, UnresolvedImport):
        return None
    if isinstance(found, GenericInfo) and found.is_dtype:
        chk.resolutions[node] = found
        key = found.key
        assert isinstance(key, DTypeVar)
        return key
    name = node.path[0].name
    if (
        found is None
        and len(node.path) == 1
        and chk.scope.lookup(name) is None
        and name not in KIND_NAMES
        and name != "Tensor"
    ):
        unknown_type(chk, node)
        return None
    chk.ctx.error(
        "E1208",
        f"`{node.span.text}` is not an element type",
        node.span,
        "expected an element type such as f32",
        help=("use a scalar type name or a dtype generic",),
    )
    return None


def dtype_of(chk: BodyChecker, node: ast.GenArg) -> DType | None:
    """A generic argument that must denote a dtype (`cast<f32>`, `T: Float = bf16`)."""
    if isinstance(node, ast.NamedType):
        return element_dtype(chk, node)
    chk.ctx.error(
        "E2111",
        "expected a dtype here",
        node.span,
        "not a dtype",
        help=("write a scalar type name such as `f32`, or a dtype generic",),
    )
    return None


# ---------------------------------------------------------------- generic arguments


def generic_argument(chk: BodyChecker, g: GenericInfo, arg: ast.GenArg) -> GenericValue | None:
    """One explicit generic argument checked against its parameter's kind (5.6 step 1)."""
    if g.kind == "Dim":
        return dim_argument(chk, g, arg)
    if g.kind == "Shape":
        return shape_argument(chk, g, arg)
    if isinstance(arg, ast.NamedType):
        return element_dtype(chk, arg)
    chk.ctx.error(
        "E2111",
        f"`{g.name}` expects a dtype, found an expression",
        arg.span,
        "not a dtype",
        help=("write a scalar type name such as `f32`, or a dtype generic",),
    )
    return None


_DIMENSION_HELP = "write a dimension: an integer, a `Dim` generic, or arithmetic on them"


def dim_argument(chk: BodyChecker, g: GenericInfo, arg: ast.GenArg) -> Dim | None:
    if isinstance(arg, ast.NamedType):
        if len(arg.path) == 1 and arg.args is None:
            name = arg.path[0].name
            decl = chk.scope.lookup(name)
            if decl is None and name not in SCALAR_DTYPES and name not in PRELUDE_NAMES:
                unknown_name(
                    chk,
                    name,
                    arg.span,
                    f"cannot find `{name}` in this scope",
                    "not found",
                    "dimension",
                    f"declare it as a generic parameter: `<{name}: Dim>`",
                )
                return None
            if decl is not None and not _is_type_decl(decl):
                chk.resolutions[arg] = decl
                t = chk.value_of(decl, arg)
                if isinstance(t, CtIntType):
                    return t.value
                if isinstance(t, ErrorType):
                    return None
                chk.ctx.error(
                    "E2123",
                    f"`{name}` is not a compile-time dimension",
                    arg.span,
                    "not a dimension",
                    notes=(
                        "dimensions use integer literals, `Dim` generics and integer constants",
                    ),
                )
                return None
        chk.ctx.error(
            "E2111",
            f"`{g.name}` expects a dimension, found a type",
            arg.span,
            "not a dimension",
            help=(_DIMENSION_HELP,),
        )
        return None
    if not _is_expr(arg):
        chk.ctx.error(
            "E2111",
            f"`{g.name}` expects a dimension, found a type",
            arg.span,
            "not a dimension",
            help=(_DIMENSION_HELP,),
        )
        return None
    d = chk.dim_of(arg)  # type: ignore[arg-type]
    if d is not None:
        chk.check_nonnegative(d, arg)  # type: ignore[arg-type]
    return d


def _is_type_decl(decl: Decl) -> bool:
    if isinstance(decl, GenericInfo):
        return decl.kind != "Dim"
    return isinstance(decl, (AliasInfo, StructInfo, EnumInfo, BlockInfo))


def _is_expr(arg: ast.GenArg) -> bool:
    return not isinstance(
        arg, (ast.NamedType, ast.TensorType, ast.TupleType, ast.ArrayType, ast.OptionalType)
    )


def shape_argument(
    chk: BodyChecker, g: GenericInfo, arg: ast.GenArg
) -> tuple[ShapeItem, ...] | None:
    """A shape literal or a pack name (5.6 step 1)."""
    if isinstance(arg, ast.ShapeLit):
        t = chk.expr(arg)
        return t.dims if isinstance(t, ShapeType) else None
    if isinstance(arg, ast.NamedType) and len(arg.path) == 1 and arg.args is None:
        decl = chk.scope.lookup(arg.path[0].name)
        if isinstance(decl, GenericInfo) and decl.is_shape:
            chk.resolutions[arg] = decl
            key = decl.key
            assert isinstance(key, Symbol)
            return (key,)
    chk.ctx.error(
        "E2111",
        f"`{g.name}` expects a shape: a shape literal `[A, B]` or a shape pack",
        arg.span,
        "not a shape",
        help=("write the axes in brackets, `[A, B]`, or a pack such as `*S`",),
    )
    return None


def instantiate(
    chk: BodyChecker, generics: list[GenericInfo], node: ast.NamedType, name: str
) -> Subst | None:
    """Positional generic arguments of a named type (5.3): count, kinds, defaults, classes."""
    args = node.args or ()
    if len(args) > len(generics):
        chk.ctx.error(
            "E2111",
            f"`{name}` takes {len(generics)} generic arguments but {len(args)} were given",
            args[len(generics)].span,
            "unexpected generic argument",
            help=generics_help(name, generics),
        )
        return None
    subst = Subst()
    ok = True
    for i, g in enumerate(generics):
        if i < len(args):
            value = generic_argument(chk, g, args[i])
            if value is None:
                ok = False
                continue
        elif g.has_default and g.default is not None:
            value = _default(subst, g)
        else:
            chk.ctx.error(
                "E2111",
                f"missing generic argument for `{g.name}` of `{name}`",
                node.span,
                f"`{g.name}` has no default",
                help=generics_help(name, generics),
            )
            ok = False
            continue
        if g.kind == "Dim":
            subst.bind_dim(g.key, value)  # type: ignore[arg-type]
        elif g.kind == "Shape":
            subst.bind_pack(g.key, value)  # type: ignore[arg-type]
        else:
            assert isinstance(value, (DTypeVar, ScalarDType))
            if not in_class(value, g.kind):
                chk.ctx.error(
                    "E2112",
                    f"`{value}` does not satisfy `{g.kind}` for `{g.name}` of `{name}`",
                    args[i].span if i < len(args) else node.span,
                    f"`{g.name}` must be {g.kind}",
                    related=(Label(g.ident.span, "constrained here"),),
                )
                ok = False
                continue
            subst.bind_dtype(g.key, value)  # type: ignore[arg-type]
    return subst if ok else None


def _default(subst: Subst, g: GenericInfo) -> GenericValue:
    value = g.default
    if g.kind == "Dim":
        assert isinstance(value, Dim)
        return subst.dim(value)
    if g.kind == "Shape":
        assert isinstance(value, tuple)
        return subst.shape(value)
    assert value is not None and not isinstance(value, (Dim, tuple))
    return subst.dtype(value)


def prove_block_where(chk: BodyChecker, block: BlockInfo, subst: Subst, node: ast.Type) -> bool:
    """Instantiating a block proves its `where` clause with the bindings (6.2, E2206)."""
    ok = True
    for c in block.where:
        lhs, rhs = subst.dim(c.lhs), subst.dim(c.rhs)
        if chk.facts.prove(lhs, c.rel, rhs):
            continue
        chk.proof_error(
            "E2206",
            f"cannot prove `{c.text()}` required by block `{block.name}`",
            node.span,
            "constraint not proven",
            related=(Label(c.node.span, "required here"),),
            notes=(
                f"after substitution: `{chk.facts.simplify(lhs)} {c.rel} {chk.facts.simplify(rhs)}`",
            ),
            help=("state the same constraint in the enclosing block's `where`",),
        )
        ok = False
    return ok
