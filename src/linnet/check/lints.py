"""Lints W1001-W1003 (language.md 15 step 22, 16.2, 16.5).

Stage: the last step of checking, run only when the program has no errors.
In: the usage flags the body checker set on imports, locals and members.
Out: warnings. Names starting with `_` are exempt (2.4).
"""

from __future__ import annotations

from collections.abc import Iterable

from linnet.check.context import Context
from linnet.check.decls import BlockInfo, ItemInfo, LocalInfo, ModuleInfo

LINTED_LOCALS = frozenset({"let", "var", "pattern", "comprehension", "for", "arm"})


def lint_module(ctx: Context, module: ModuleInfo) -> None:
    for binding in module.imports.values():
        if not binding.used and not binding.name.startswith("_"):
            ctx.warn(
                "W1001",
                f"unused import `{binding.name}`",
                binding.ident.span,
                "never used",
                help=("remove it",),
            )
    for block in _blocks(module.items.values()):
        for member in block.members.values():
            if not member.used and not member.name.startswith("_"):
                ctx.warn(
                    "W1003",
                    f"the {member.kind} `{member.name}` is never used by `{block.name}`",
                    member.ident.span,
                    "never used",
                    help=("remove it or prefix its name with `_`",),
                )


def _blocks(items: Iterable[ItemInfo]) -> Iterable[BlockInfo]:
    for item in items:
        if isinstance(item, BlockInfo):
            yield item
            yield from _blocks(item.items.values())


def lint_locals(ctx: Context, locals_: Iterable[LocalInfo]) -> None:
    for local in locals_:
        if local.used or local.kind not in LINTED_LOCALS or local.name.startswith("_"):
            continue
        ctx.warn(
            "W1002",
            f"unused local `{local.name}`",
            local.ident.span,
            "never read",
            help=(f"start the name with `_` (`_{local.name}`) if it is unused on purpose",),
        )
