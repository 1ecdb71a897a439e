"""Name lookup scopes (language.md 4.4).

Stage: used by the body checker and type resolution.

A `Scope` is one table of names plus a parent: local scopes (innermost
first) -> the function scope (generics and parameters) -> the enclosing
block's scope (generics, members, methods, nested items), then enclosing
blocks outward -> the module scope (items and imports). Prelude names are not
in any table; callers consult them last, and only in call or type position.
"""

from __future__ import annotations

from linnet.check.decls import BlockInfo, Decl, ModuleInfo


class Scope:
    """A table of names and the scope around it."""

    __slots__ = ("block", "module", "parent", "table")

    def __init__(
        self,
        table: dict[str, Decl],
        parent: Scope | None,
        *,
        module: ModuleInfo | None = None,
        block: BlockInfo | None = None,
    ) -> None:
        self.table = table
        self.parent = parent
        self.module = module  # set on the module scope: imports get marked used
        self.block = block  # set on a block scope

    def lookup(self, name: str) -> Decl | None:
        scope: Scope | None = self
        while scope is not None:
            found = scope.table.get(name)
            if found is not None:
                module = scope.module
                if module is not None:
                    binding = module.imports.get(name)
                    if binding is not None:
                        binding.used = True
                return found
            scope = scope.parent
        return None

    def child(self) -> Scope:
        return Scope({}, self)


def module_scope(module: ModuleInfo) -> Scope:
    return Scope(module.scope, None, module=module)


def block_scope(block: BlockInfo) -> Scope:
    """The scope of a block's body: its own names, then enclosing blocks, then the module."""
    parent = block_scope(block.block) if block.block is not None else module_scope(block.module)
    return Scope(block.scope, parent, block=block)


def item_scope(module: ModuleInfo, block: BlockInfo | None) -> Scope:
    """The scope an item declared in `block` (or at module level) is resolved in."""
    return block_scope(block) if block is not None else module_scope(module)
