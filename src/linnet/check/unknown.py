"""Failed lookups: one report per mistake, with the fix (language.md 16.2, E1201).

Stage: part of the body checker. Every place a name is looked up and not
found calls `unknown_name`, which
- reports E1201 once per unknown spelling per module: later uses of the same
  spelling add a note to the first report instead of a diagnostic of their
  own (a missing import is one mistake however often the name is used);
- gives the fix, first found of: the `use` that imports an item of exactly
  that name (from the user's own package, then the std library, then any
  loaded module: the import is what is missing); the Linnet spelling of a
  PyTorch name (`cat` -> `concat`) and/or the closest visible name of the
  kind wanted (`linnet.spelling`); the std item of a close spelling
  (`LayerNorm` -> `layer_norm` of `std.nn.norm`); else `fallback`.

The caller gives the expression the error type, which silences everything
derived from it (`types.ERROR` fits everywhere).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from linnet.check.decls import (
    AliasInfo,
    BlockInfo,
    ConstInfo,
    EnumInfo,
    FnInfo,
    GenericInfo,
    LocalInfo,
    MemberInfo,
    ModuleInfo,
    StructInfo,
)
from linnet.check.suggest import std_import_help, torch_help
from linnet.diagnostics import Diagnostic
from linnet.source import Span
from linnet.spelling import closest, did_you_mean
from linnet.syntax.tokens import PRELUDE_FUNCTIONS, SCALAR_TYPES

if TYPE_CHECKING:
    from linnet.check.exprs import BodyChecker
    from linnet.check.scope import Scope

# What a lookup wants, and which declarations can be meant.
_WANTS: dict[str, tuple[type, ...]] = {
    "value": (LocalInfo, MemberInfo, ConstInfo, GenericInfo),
    "function": (FnInfo,),
    "type": (BlockInfo, StructInfo, EnumInfo, AliasInfo, GenericInfo),
    "dimension": (GenericInfo, ConstInfo),
    "module": (ModuleInfo,),
}


def visible(scope: Scope | None, want: str) -> Iterator[str]:
    """Names visible from `scope`, innermost first, of the kinds `want` can mean."""
    kinds = _WANTS[want]
    while scope is not None:
        for name, decl in scope.table.items():
            if isinstance(decl, kinds):
                yield name
        scope = scope.parent


def suggestion_help(chk: BodyChecker, name: str, want: str, fallback: str = "") -> tuple[str, ...]:
    """The help lines for an unknown `name` (see the module docstring)."""
    names = list(visible(chk.scope, want))
    if want == "function":
        names += sorted(PRELUDE_FUNCTIONS)
    elif want == "type":
        names += ["Tensor", *sorted(SCALAR_TYPES)]
    std_root = chk.program.graph.std_root
    if want in ("function", "type", "value"):
        # Declared under exactly this name elsewhere: the import is what is missing.
        # The user's own package first, then the std library, then any loaded module.
        package = _package_sources(chk)
        for root, head in ((package, "crate"), (std_root, "std")):
            exact = std_import_help(name, root, want, head)
            if exact and exact[0].startswith(f"`{name}` is declared"):
                return exact
        for module in chk.ctx.modules.values():
            item = module.items.get(name)
            if module is not chk.module and not module.is_std and item is not None and item.pub:
                return (f"`{name}` is declared in module `{module.name}`: import it with `use`",)
    # A PyTorch name is written on purpose: its Linnet spelling comes before a near miss.
    hint = torch_help(name)
    found = closest(name, names)
    if found is not None:
        return (*hint, f"{'or ' if hint else ''}did you mean `{found}`?")
    if hint:
        return hint
    if want in ("function", "type", "value"):
        found_std = std_import_help(name, std_root, want)
        if found_std:
            return found_std
    return (fallback,) if fallback else ()


def _package_sources(chk: BodyChecker) -> Path | None:
    """The `src/` of the package the module being checked is in, if any."""
    from linnet.check.package import MANIFEST_NAME

    path = Path(chk.module.key)
    if not path.is_absolute() or chk.module.is_std:
        return None
    for folder in path.parents:
        if (folder / MANIFEST_NAME).is_file():
            source = folder / "src"
            return source if path.is_relative_to(source) else None
    return None


def unknown_name(
    chk: BodyChecker,
    name: str,
    span: Span,
    message: str,
    label: str,
    want: str,
    fallback: str = "",
    notes: tuple[str, ...] = (),
) -> None:
    """Report E1201 for `name` (once per module and spelling; see the module docstring)."""
    ctx = chk.ctx
    key = (chk.module.key, name)
    first = ctx.unknown_names.get(key)
    if first is not None:
        earlier = ctx.diags[first]
        line = span.file.line_col(span.start)[0]
        if earlier.span is None or earlier.span.file.line_col(earlier.span.start)[0] != line:
            ctx.diags[first] = _also_used(earlier, name, line)
        return
    ctx.unknown_names[key] = len(ctx.diags)
    ctx.error(
        "E1201",
        message,
        span,
        label,
        notes=notes,
        help=suggestion_help(chk, name, want, fallback),
    )


def item_help(module: ModuleInfo, name: str) -> tuple[str, ...]:
    """Did-you-mean among a module's public items, else the list of them."""
    public = [n for n, item in module.items.items() if item.pub]
    found = did_you_mean(name, public)
    if found:
        return found
    if not public:
        return (f"`{module.name}` has no public items",)
    shown = ", ".join(f"`{n}`" for n in public[:12]) + (", ..." if len(public) > 12 else "")
    return (f"`{module.name}` declares {shown}",)


def generics_help(name: str, generics: list[GenericInfo]) -> tuple[str, ...]:
    """`Linear` is declared `Linear<In: Dim, Out: Dim, T: Float = f32>`."""
    declared = ", ".join(g.node.span.text for g in generics)
    return (f"`{name}` is declared `{name}<{declared}>`",)


def _also_used(d: Diagnostic, name: str, line: int) -> Diagnostic:
    prefix = f"`{name}` is also used on line"
    notes = list(d.notes)
    for i, note in enumerate(notes):
        if note.startswith(prefix):
            lines = note.split(" line", 1)[1].lstrip("s ").split(", ")
            if str(line) not in lines:
                lines.append(str(line))
            notes[i] = f"{prefix}s {', '.join(lines)}"
            break
    else:
        notes.append(f"{prefix} {line}")
    return Diagnostic(d.code, d.message, d.span, d.label, d.related, tuple(notes), d.help)
