"""What an export command compiles: one entry with every generic bound (language.md 18.3).

Stage: between checking and lowering, for `linnet inspect --ir`, `linnet
torch` and later exporters. In: a checked program, the root block's name
(or none: 12.10 picks it), the entry's name (or none), the `--bind` values and
whether optional members (12.8) count as present. Out: a `Resolved`: the
bound model (None for a module-level entry, 11.7), the entry, its concrete
input types, and the param/buffer paths treated as present.

Export commands bind everything up front (18.3: "every generic must be
bound"): the root block's generics go to `bind` (6.7 steps 1-3), the entry's
own (`B`, `S`) fix its input types (step 4), and the entry's `where` clause
is evaluated as at a call. A generic that is neither, or is missing without a
default, is a `LinnetError` naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from linnet.check.decls import BlockInfo, FnInfo
from linnet.check.program import CheckedProgram
from linnet.errors import LinnetError
from linnet.records import field, record

if TYPE_CHECKING:
    from linnet.ir.bind import BoundModel, EntrySignature
    from linnet.ir.core import TensorType

DEFAULT_ENTRY = "forward"  # backends' default entry name (11.1)


@record(frozen=True)
class Target:
    """The choices of an export command line (`--root`, `--entry`, `--bind`, `--optionals`)."""

    root: str | None = None
    entry: str | None = None
    generics: Mapping[str, object] = field(default_factory=dict)
    optionals_present: bool = True
    std: Path | None = None


@record(eq=False)
class Resolved:
    """A target made concrete: model, entry, input types and present weight paths.

    `module` is the root module's key (it holds a module-level entry);
    `entry_generics` are the values given for the entry's own generics.
    """

    model: BoundModel | None
    module: str
    entry: EntrySignature
    input_types: tuple[TensorType, ...]
    present: frozenset[str]
    entry_generics: dict[str, object]


def resolve(program: CheckedProgram, target: Target) -> Resolved:
    """Bind the root and the entry of `target` (6.7), or raise a `LinnetError` naming the problem."""
    from linnet.ir.bind import module_entry

    root = root_block(program, target.root)
    module = program.graph.roots[0]
    if root is None:
        entry = module_entry_info(program, target.entry)
        signature = module_entry(program, module, entry.name)
        own = _split(target.generics, (), entry, None)
        return Resolved(
            None, module, signature, entry_input_types(signature, own), frozenset(), own
        )
    from linnet.ir.bind import bind

    entry = block_entry(root, target.entry)
    root_given = {k: v for k, v in target.generics.items() if k in _names(root)}
    own = _split(target.generics, _names(root), entry, root)
    model = bind(program, root=root.name, generics=root_given)
    signature = model.entries[entry.name]
    present = _present(model, target.optionals_present)
    return Resolved(model, module, signature, entry_input_types(signature, own), present, own)


def entry_info(program: CheckedProgram, target: Target) -> FnInfo:
    """The entry `target` names (a block's or a module-level one), before any binding."""
    root = root_block(program, target.root)
    if root is None:
        return module_entry_info(program, target.entry)
    return block_entry(root, target.entry)


def root_block(program: CheckedProgram, name: str | None) -> BlockInfo | None:
    """12.10: the named block, else the only block with entries, else None (module entries)."""
    from linnet.ir.bind import find_root

    module = program.modules.get(program.graph.roots[0]) if program.graph.roots else None
    if module is None:
        raise LinnetError("the program has no root module")
    has_entries = any(
        isinstance(item, BlockInfo) and any(m.kind == "entry" for m in item.methods.values())
        for item in module.items.values()
    )
    if name is None and not has_entries:
        return None
    return find_root(program, name)


def _names(block: BlockInfo) -> tuple[str, ...]:
    return tuple(g.name for g in block.generics)


def _choose(entries: Mapping[str, FnInfo], name: str | None, owner: str) -> FnInfo:
    listed = ", ".join(f"`{n}`" for n in entries) or "none"
    if name is not None:
        found = entries.get(name)
        if found is None:
            raise LinnetError(f"{owner} has no entry `{name}` (its entries: {listed})")
        return found
    if len(entries) == 1:
        return next(iter(entries.values()))
    if DEFAULT_ENTRY in entries:
        return entries[DEFAULT_ENTRY]
    if not entries:
        raise LinnetError(f"{owner} has no entry to compile")
    raise LinnetError(f"{owner} has several entries ({listed}); choose one with --entry")


def block_entry(root: BlockInfo, name: str | None) -> FnInfo:
    entries = {n: m for n, m in root.methods.items() if m.kind == "entry"}
    return _choose(entries, name, f"block `{root.name}`")


def module_entry_info(program: CheckedProgram, name: str | None) -> FnInfo:
    module = program.modules[program.graph.roots[0]]
    entries = {
        n: item
        for n, item in module.items.items()
        if isinstance(item, FnInfo) and item.kind == "entry"
    }
    return _choose(entries, name, f"module `{module.name}`")


def _split(
    given: Mapping[str, object],
    root_names: tuple[str, ...],
    entry: FnInfo,
    root: BlockInfo | None,
) -> dict[str, object]:
    """The entry's own generics from `given`; a name nobody declares is an error."""
    own_names = [g.name for g in entry.generics]
    for name in given:
        if name not in root_names and name not in own_names:
            holders = []
            if root is not None:
                holders.append(f"block `{root.name}` has {', '.join(root_names) or 'none'}")
            holders.append(f"entry `{entry.name}` has {', '.join(own_names) or 'none'}")
            raise LinnetError(f"unknown generic `{name}` ({'; '.join(holders)})")
    return {k: v for k, v in given.items() if k in own_names}


def entry_input_types(entry: EntrySignature, given: Mapping[str, object]) -> tuple[TensorType, ...]:
    """The inputs' types with the entry's generics bound (lowering then checks them, 6.7 step 4)."""
    from linnet.check.types import StructType, TupleType
    from linnet.ir.bind import parse_generic
    from linnet.ir.env import Env, evaluate_generic

    owner = f"entry `{entry.fn.name}`"
    own = Env()
    for g in entry.fn.generics:
        if g.name in given:
            own.bind(g.key, parse_generic(g, given[g.name], owner))
        elif g.has_default and g.default is not None:
            own.bind(g.key, evaluate_generic(entry.base.extended(own), g.kind, g.default))
        else:
            raise LinnetError(
                f"missing generic `{g.name}` for {owner}: an export binds every generic "
                f"(add --bind {g.name}=...)"
            )
    full = entry.base.extended(own)
    for spec in entry.inputs:
        if isinstance(spec.type, (StructType, TupleType)):
            # language-extensions 2.3: struct (and tuple) entry parameters are not specified
            raise LinnetError(
                f"{owner}: input `{spec.name}` has type `{spec.type!r}`, which cannot cross "
                "the entry boundary (not supported yet)"
            )
    return tuple(full.tensor_type(spec.type) for spec in entry.inputs)


def _present(model: BoundModel, optionals_present: bool) -> frozenset[str]:
    """Weight paths a checkpoint would bind: all of them, or only the mandatory ones (12.8)."""
    if optionals_present:
        available = [p for p, t in model.tensors.items() if t.kind != "state"]
    else:
        available = [
            p
            for p, t in model.tensors.items()
            if t.kind != "state" and not t.optional and t.group is None
        ]
    return model.present_paths(available)
