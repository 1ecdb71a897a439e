"""Collecting declarations and resolving imports (language.md 4.2, 4.4, 15 steps 3-4).

Stage: first pass of the checker over the loaded module graph.
In: the `LoadedModule`s of `check.modules`. Out: one `ModuleInfo` per module
with its items (blocks with their members, methods and nested items) and the
names its `use` declarations bind. Reports E1201, E1203 (imports), E1204,
E1205 (block level), E1207 (item, member and alias names).

Nothing here looks at types; signatures are resolved lazily afterwards
(`check.signatures`), so items may be used before their declaration.
"""

from __future__ import annotations

from linnet.check.context import Context
from linnet.check.decls import (
    AliasInfo,
    BlockInfo,
    ConstInfo,
    Decl,
    EnumInfo,
    FnInfo,
    ImportBinding,
    ItemInfo,
    MemberInfo,
    ModuleInfo,
    StructInfo,
    UnresolvedImport,
)
from linnet.check.modules import LoadedModule
from linnet.check.unknown import item_help
from linnet.diagnostics import Label
from linnet.spelling import closest
from linnet.syntax import ast
from linnet.syntax.tokens import PRELUDE_NAMES


def check_declared_name(ctx: Context, ident: ast.Ident, what: str) -> bool:
    """E1207: no declaration may reuse a prelude name (10.1). True if the name is fine."""
    if ident.name in PRELUDE_NAMES:
        article = "an" if what[:1] in "aeiou" else "a"
        ctx.error(
            "E1207",
            f"`{ident.name}` is a prelude name and cannot name {article} {what}",
            ident.span,
            "prelude name",
            notes=("built-in prelude names are off limits for declarations",),
            help=(f"rename the {what}, e.g. `{ident.name}_`",),
        )
        return False
    return True


def duplicate(ctx: Context, code: str, ident: ast.Ident, first: ast.Ident, what: str) -> None:
    """E1204 / E1205 with the two labels of 16.2."""
    ctx.error(
        code,
        f"the {what} `{ident.name}` is defined more than once",
        ident.span,
        "redefined here",
        related=(Label(first.span, "first defined here"),),
    )


def collect_module(ctx: Context, loaded: LoadedModule) -> ModuleInfo:
    """Make the `ModuleInfo` of one module and collect its items (no imports yet)."""
    module = ModuleInfo(loaded.key, loaded.name, loaded.is_std, loaded.file, loaded.source)
    for item in loaded.file.items:
        info = make_item(ctx, item, module, None)
        check_declared_name(ctx, item.name, item_kind_word(item))
        first = module.items.get(info.name)
        if first is not None:
            duplicate(ctx, "E1204", info.ident, first.ident, "item")
            continue
        module.items[info.name] = info
        module.scope[info.name] = info
    return module


def item_kind_word(item: ast.Item) -> str:
    if isinstance(item, ast.FnDecl):
        return {"fn": "function", "op": "op", "entry": "entry"}[item.kind]
    if isinstance(item, ast.KernelDecl):
        return "kernel"
    return {
        ast.ConstDecl: "constant",
        ast.AliasDecl: "type alias",
        ast.StructDecl: "struct",
        ast.EnumDecl: "enum",
        ast.BlockDecl: "block",
    }[type(item)]


def make_item(
    ctx: Context, item: ast.Item, module: ModuleInfo, block: BlockInfo | None
) -> ItemInfo:
    name, ident, pub = item.name.name, item.name, item.pub
    program = ctx.program
    if isinstance(item, ast.FnDecl):
        fn = FnInfo(
            name=name, ident=ident, module=module, block=block, pub=pub, decl=item, kind=item.kind
        )
        program.functions[item] = fn
        return fn
    if isinstance(item, ast.KernelDecl):
        from linnet.check.kernel_info import KernelInfo

        return KernelInfo(name=name, ident=ident, module=module, block=block, pub=pub, decl=item)
    if isinstance(item, ast.BlockDecl):
        info = BlockInfo(name=name, ident=ident, module=module, block=block, pub=pub, decl=item)
        program.blocks[item] = info
        collect_block(ctx, info)
        return info
    if isinstance(item, ast.ConstDecl):
        return ConstInfo(name=name, ident=ident, module=module, block=block, pub=pub, decl=item)
    if isinstance(item, ast.AliasDecl):
        return AliasInfo(name=name, ident=ident, module=module, block=block, pub=pub, decl=item)
    if isinstance(item, ast.StructDecl):
        return StructInfo(name=name, ident=ident, module=module, block=block, pub=pub, decl=item)
    enum = EnumInfo(name=name, ident=ident, module=module, block=block, pub=pub, decl=item)
    seen: dict[str, ast.Ident] = {}
    for variant in item.variants:
        if variant.name in seen:
            duplicate(ctx, "E1205", variant, seen[variant.name], "enum variant")
            continue
        check_declared_name(ctx, variant, "enum variant")
        seen[variant.name] = variant
        enum.variants.append(variant.name)
    return enum


def collect_block(ctx: Context, block: BlockInfo) -> None:
    """Members, methods and nested items of a block (12.1-12.3); E1205 for duplicates.

    Generic names are added to the scope by `check.signatures`, which also
    reports a member named like a generic.
    """
    names: dict[str, ast.Ident] = {}
    for part in block.decl.parts:
        if isinstance(part, ast.MemberDecl):
            ident = part.name
            check_declared_name(ctx, ident, "member")
        elif isinstance(part, ast.KernelDecl):
            from linnet.check.kernels import kernel_in_block

            kernel_in_block(ctx, part)  # K1: the kernel is dropped
            continue
        else:
            ident = part.name
            check_declared_name(ctx, ident, item_kind_word(part))
        if ident.name in names:
            duplicate(ctx, "E1205", ident, names[ident.name], "name")
            continue
        names[ident.name] = ident
        decl: Decl
        if isinstance(part, ast.MemberDecl):
            member = MemberInfo(ident.name, ident, part.kind, block, part)
            block.members[ident.name] = member
            decl = member
        else:
            item = make_item(ctx, part, block.module, block)
            if isinstance(item, FnInfo):
                block.methods[item.name] = item
            else:
                block.items[item.name] = item
            decl = item
        block.scope[ident.name] = decl


def resolve_imports(ctx: Context, module: ModuleInfo, loaded: LoadedModule) -> None:
    """Bind the names of every `use` (4.2): E1201 missing item, E1203 private, E1204 clash."""
    for use in loaded.file.uses:
        key = loaded.imports.get(use)
        target = ctx.modules.get(key) if key is not None else None
        if target is None:
            continue  # E1202 was reported by the loader; bind nothing (4.2)
        if use.items is None:
            last = use.path[-1]
            bind(ctx, module, ImportBinding(last.name, last, use, target))
            continue
        for imported in use.items:
            item = target.items.get(imported.name.name)
            if item is None:
                _poison(module, imported)
                meant = closest(imported.name.name, [n for n, i in target.items.items() if i.pub])
                if meant is not None and imported.alias is None:
                    # Uses of the meant name are what the import was for: not a second mistake.
                    _poison(module, imported, meant)
                ctx.error(
                    "E1201",
                    f"module `{target.name}` has no item `{imported.name.name}`",
                    imported.name.span,
                    "not found in that module",
                    help=item_help(target, imported.name.name),
                )
                continue
            if not item.pub and target is not module:
                _poison(module, imported)
                ctx.error(
                    "E1203",
                    f"`{item.name}` is private to module `{target.name}`",
                    imported.name.span,
                    "private item",
                    related=(Label(item.ident.span, "declared here without `pub`"),),
                    help=(f"mark `{item.name}` as `pub` in `{target.name}`",),
                )
                continue
            alias = imported.bound_name
            if imported.alias is not None and not check_declared_name(ctx, alias, "import"):
                continue
            bind(ctx, module, ImportBinding(alias.name, alias, use, item))


def _poison(module: ModuleInfo, imported: ast.Imported, name: str | None = None) -> None:
    """Later uses of a failed import (or of `name`) check silently (one report per cause)."""
    name = name if name is not None else imported.bound_name.name
    if name not in module.scope:
        module.scope[name] = UnresolvedImport(name)


def bind(ctx: Context, module: ModuleInfo, binding: ImportBinding) -> None:
    name = binding.name
    item = module.items.get(name)
    if item is not None:
        # Reported at the later of the two definitions.
        if item.ident.span.start > binding.ident.span.start:
            duplicate(ctx, "E1204", item.ident, binding.ident, "name")
        else:
            duplicate(ctx, "E1204", binding.ident, item.ident, "name")
        return
    earlier = module.imports.get(name)
    if earlier is not None:
        if earlier.target is not binding.target:
            duplicate(ctx, "E1204", binding.ident, earlier.ident, "name")
        return  # the same entity twice under one name is harmless (4.2)
    module.imports[name] = binding
    module.scope[name] = binding.target
