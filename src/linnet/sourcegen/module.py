"""Module assembly: a translated graph -> one Linnet file (syntax tree), formatted.

Stage: after translation. In: a `Translation` (entry body, inputs, results,
facts, std imports) and its `Layout` (the member tree). Out: an `ast.File`:
the `use` lines, one block per block type of the layout (children first),
and the root block holding the members and the entry

    pub entry forward<batch: Dim, seq: Dim>(input_ids: Tensor[batch, seq; i64])
        -> Tensor[batch, seq, 50257; f32]
    where seq <= 1024 { ... }

whose generics are the graph's symbolic extents and whose `where` clause
states exactly the facts translation relied on. `format_module` prints it
with the formatter (section 17).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from linnet.check.dims import Dim
from linnet.sourcegen import build
from linnet.sourcegen.layout import Layout, Leaf, Tree, element_type
from linnet.sourcegen.outline import transform, walk
from linnet.sourcegen.std_blocks import fold_std_blocks
from linnet.sourcegen.translate import Translation, Value
from linnet.syntax import ast
from linnet.syntax.format import format_file

__all__ = ["assemble", "format_module", "unshadowed"]

_T = TypeVar("_T")


def assemble(
    t: Translation,
    layout: Layout,
    *,
    module_name: str,
    entry_name: str = "forward",
    extra_items: Sequence[ast.Item] = (),
    methods: dict[str, list[ast.FnDecl]] | None = None,
    notes: list[str] | None = None,
) -> ast.File:
    """The file for translation `t` (see the module docstring); `methods` are added
    to the block types they are keyed by (outlined array elements). Generated blocks
    that are std blocks are declared as such (`linnet.sourcegen.std_blocks`); what
    that did is appended to `notes`."""
    _prune(layout.root)
    entry = _entry(t, entry_name)
    std, entry, methods = fold_std_blocks(
        layout,
        entry,
        methods or {},
        t.uses,
        extra_names=[entry_name, *(item.name.name for item in extra_items)],
    )
    if notes is not None:
        notes.extend(std.notes)
    uses = tuple(
        ast.UseDecl(
            tuple(build.ident(p) for p in ["std", *module.split(".")]),
            tuple(_imported(item, local) for item, local in sorted(items.items())),
            True,
            False,
            build.SPAN,
        )
        for module, items in sorted(std.uses.items())
        if items
    )
    blocks: list[ast.Item] = []
    seen: set[str] = set()
    _block_decls(layout.root, blocks, seen, root=True, methods=methods, std=std.members)
    root = blocks.pop()
    assert isinstance(root, ast.BlockDecl)
    root = ast.BlockDecl(True, root.name, None, None, (*root.parts, entry), build.SPAN, build.SPAN)
    items = (*extra_items, *blocks, root)
    module = tuple(build.ident(p) for p in module_name.split("."))
    return unshadowed(ast.File(module, build.SPAN, uses, items, (), build.SPAN))


def unshadowed(file: ast.File) -> ast.File:
    """`file` with every imported function renamed where a declaration shadows it.

    A bare call finds locals, parameters, members and methods before imports
    (4.4), and an import named like an item collides with it (E1204).
    Translation already keeps std imports clear of locals, members and block
    types; this catches names that appear later (the entry's name, methods
    added by outlining or state writes) by importing the item under an alias no
    declaration of the file uses, and calling it by that alias. Generated code
    calls methods only through a member (`layer.forward(...)`) and never calls
    a local, parameter or member, so every bare call of the name is a call of
    the import.
    """
    declared = _declared_names(file)
    taken = declared | {_local(i) for use in file.uses for i in use.items or ()}
    renames: dict[str, str] = {}
    uses: list[ast.UseDecl] = []
    for use in file.uses:
        items: list[ast.Imported] = []
        for imported in use.items or ():
            local = _local(imported)
            if local in declared:
                n = 1
                alias = f"{imported.name.name}_fn"
                while alias in taken:
                    n += 1
                    alias = f"{imported.name.name}_fn_{n}"
                taken.add(alias)
                renames[local] = alias
                imported = ast.Imported(imported.name, build.ident(alias), imported.span)
            items.append(imported)
        uses.append(_with(use, items=tuple(items)) if use.items is not None else use)
    if not renames:
        return file
    return _with(file, uses=tuple(uses), items=_renamed_calls(file.items, renames))


def _renamed_calls(node: _T, renames: dict[str, str]) -> _T:
    """`node` with every bare call `old(...)` written `renames[old](...)`."""

    def fn(n: Any) -> Any:
        if isinstance(n, ast.Call) and isinstance(n.callee, ast.Name):
            new = renames.get(n.callee.ident.name)
            if new is not None:
                return _with(n, callee=build.name(new), args=transform(n.args, fn))
        return None

    result: _T = transform(node, fn)
    return result


def _with(node: _T, **changes: Any) -> _T:
    """A copy of syntax node `node` with some fields replaced."""
    fields = {f: getattr(node, f) for f in ast.node_fields(node)}
    return type(node)(**{**fields, **changes})


def _local(imported: ast.Imported) -> str:
    return (imported.alias or imported.name).name


def _declared_names(file: ast.File) -> set[str]:
    """The names that can shadow an import somewhere: the items, and for every body
    the members, methods and generics of its block and its own parameters,
    generics and bindings (members of blocks without bodies shadow nothing)."""
    names = {item.name.name for item in file.items}
    bodies: list[ast.FnDecl] = []
    for item in file.items:
        if isinstance(item, ast.FnDecl):
            bodies.append(item)
        elif isinstance(item, ast.BlockDecl):
            fns = [p for p in item.parts if isinstance(p, ast.FnDecl)]
            if fns:
                names |= {p.name.name for p in item.parts}
                names |= {g.name.name for g in item.generics.params} if item.generics else set()
            bodies.extend(fns)
    for node in walk(tuple(bodies)):
        if isinstance(
            node,
            ast.GenericParam | ast.Param | ast.NamePattern | ast.ComprehensionStmt | ast.VarStmt,
        ):
            names.add(node.name.name)
    return names


def format_module(file: ast.File) -> str:
    return format_file(file, build.SPAN.file)


def _imported(item: str, local: str) -> ast.Imported:
    alias = None if local == item else build.ident(local)
    return ast.Imported(build.ident(item), alias, build.SPAN)


def _prune(tree: Tree) -> bool:
    """Drop members nothing reads; arrays keep every element whole. True if anything is left."""
    if tree.array:
        used = any(leaf.used for leaf in tree.leaves())
        return used
    for key, child in list(tree.children.items()):
        keep = child.used if isinstance(child, Leaf) else _prune(child)
        if not keep:
            del tree.children[key]
    return bool(tree.children)


def _block_decls(
    tree: Tree,
    out: list[ast.Item],
    seen: set[str],
    *,
    root: bool,
    methods: dict[str, list[ast.FnDecl]],
    std: dict[tuple[str, str], ast.Type],
) -> None:
    """Declarations for `tree`'s block type and every type below it, children first;
    members in `std` (by block type and member name) are declared as those std types."""
    for key, child in tree.children.items():
        if isinstance(child, Tree) and (tree.type_name, key) not in std:
            inner = element_type(child) if child.array else child
            _block_decls(inner, out, seen, root=False, methods=methods, std=std)
    if tree.type_name in seen:
        return
    seen.add(tree.type_name)
    parts: list[ast.MemberDecl | ast.Item] = []
    for key, child in tree.children.items():
        if isinstance(child, Leaf):
            dims = [build.int_lit(d) for d in (child.shape or (1,))]
            decl_type = build.tensor_type(dims, child.dtype)
            parts.append(ast.MemberDecl(child.kind, build.ident(key), decl_type, None, build.SPAN))
        elif child.array:
            elem = element_type(child)
            arr = build.array_type(
                build.named_type(elem.type_name), build.int_lit(len(child.children))
            )
            parts.append(ast.MemberDecl("sub", build.ident(key), arr, None, build.SPAN))
        else:
            sub_type = std.get((tree.type_name, key)) or build.named_type(child.type_name)
            parts.append(ast.MemberDecl("sub", build.ident(key), sub_type, None, build.SPAN))
    parts.extend(methods.get(tree.type_name, []))
    out.append(
        ast.BlockDecl(
            True, build.ident(tree.type_name), None, None, tuple(parts), build.SPAN, build.SPAN
        )
    )


def _entry(t: Translation, name: str) -> ast.FnDecl:
    generics = None
    if t.generics:
        generics = ast.Generics(
            tuple(
                ast.GenericParam(build.ident(g), False, "Dim", build.SPAN, None, build.SPAN)
                for g in t.generics
            ),
            False,
            build.SPAN,
        )
    params = ast.Params(
        tuple(
            ast.Param(build.ident(pname), value_type(v), None, build.SPAN) for pname, v in t.inputs
        ),
        False,
        build.SPAN,
    )
    result: ast.Type | None
    value: ast.Expr | None
    if not t.results:
        result, value = None, None  # an entry that only assigns state returns nothing
    elif len(t.results) == 1:
        result = value_type(t.results[0])
        value = _result_expr(t, t.results[0])
    else:
        result = build.tuple_type([value_type(v) for v in t.results])
        value = build.tuple_expr([_result_expr(t, v) for v in t.results])
    where = None
    if t.where:
        where = ast.Where(
            tuple(
                ast.Binary(rel, build.dim(lhs), build.dim(rhs), build.SPAN, build.SPAN)  # type: ignore[arg-type]
                for lhs, rel, rhs in t.where
            ),
            False,
            build.SPAN,
        )
    tail = () if value is None else (ast.ReturnStmt(value, build.SPAN),)
    body = ast.Body((*t.body, *tail), build.SPAN)
    return ast.FnDecl(
        True, "entry", build.ident(name), generics, params, result, where, body, build.SPAN
    )


def _result_expr(t: Translation, v: Value) -> ast.Expr:
    assert v.expr is not None, "results are materialised before assembly"
    return v.expr


def value_type(v: Value) -> ast.Type:
    """`Tensor[batch, seq, 768; f32]`, or the scalar type for a rank-0 value."""
    return build.tensor_type([build.dim(d) for d in v.shape], v.dtype)


def dims_text(dims: Sequence[Dim]) -> str:
    return ", ".join(str(d) for d in dims)
