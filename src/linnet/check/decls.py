"""Declaration records: what a name can denote (language.md sections 4.4, 5.5, 12, 14).

Stage: built by `check.collect` (items, imports, members) and filled lazily by
`check.signatures` (generics, where facts, parameter and member types);
referenced from `CheckedProgram.resolutions`, so the lowering to Core IR
knows for every `Name`/`Member`/`Call` which declaration it denotes.

Records are mutable while checking runs and read-only afterwards. They hash by
identity (one record per declaration), like the AST nodes they point to.

Resolution targets (the `Decl` union):
- `ModuleInfo` (a module bound by `use a.b`), `ItemInfo` subclasses (items of
  a module or block: `FnInfo`, `BlockInfo`, `ConstInfo`, `AliasInfo`,
  `StructInfo`, `EnumInfo`), `GenericInfo`, `MemberInfo` (param/buffer/state/
  sub of a block), `LocalInfo` (parameters, let/var/pattern/comprehension
  bindings, loop variables), `EnumVariant`, `PreludeFn`, and
  `UnresolvedImport` (a name whose import failed; it checks silently).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from linnet.records import field, record
from linnet.syntax import ast

if TYPE_CHECKING:
    from linnet.check.dims import Dim, Symbol
    from linnet.check.prover import Facts
    from linnet.check.types import DTypeVar, GenericValue, Type
    from linnet.source import SourceFile

# Lazy resolution states (section 15 step 5: declarations resolve on demand,
# with cycle detection for E2122).
Resolution = Literal["todo", "busy", "done"]


@record(eq=False)
class ModuleInfo:
    """One loaded module: its own items and the names its `use`s bind."""

    key: str
    name: str
    is_std: bool
    file: ast.File
    source: SourceFile
    items: dict[str, ItemInfo] = field(default_factory=dict)
    # Items plus imports by bound name: the module scope of 4.4.
    scope: dict[str, Decl] = field(default_factory=dict)
    imports: dict[str, ImportBinding] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"module {self.name}"


@record(eq=False)
class ImportBinding:
    """A name a `use` binds; `target` is an item of another module or a whole module."""

    name: str
    ident: ast.Ident
    use: ast.UseDecl
    target: ItemInfo | ModuleInfo
    used: bool = False


@record(eq=False, kw_only=True)
class ItemInfo:
    """Common part of items declared in a module or a block."""

    name: str
    ident: ast.Ident
    module: ModuleInfo
    block: BlockInfo | None  # the enclosing block of a block-scoped item (a method)
    pub: bool
    state: Resolution = "todo"

    @property
    def qualified_name(self) -> str:
        if self.block is not None:
            return f"{self.block.qualified_name}.{self.name}"
        return f"{self.module.name}::{self.name}"


@record(eq=False)
class GenericInfo:
    """A generic parameter (5.5). `key` is its `Symbol` (Dim, Shape) or `DTypeVar`."""

    name: str
    ident: ast.Ident
    kind: str  # Dim Shape DType Numeric Integer Float
    is_pack: bool
    key: Symbol | DTypeVar
    node: ast.GenericParam
    default: GenericValue | None = None
    has_default: bool = False

    @property
    def is_shape(self) -> bool:
        return self.kind == "Shape"

    @property
    def is_dtype(self) -> bool:
        return self.kind not in ("Dim", "Shape")


@record(eq=False)
class Constraint:
    """One `where` relation with both sides as dimensions (6.2)."""

    lhs: Dim
    rel: str
    rhs: Dim
    node: ast.Binary

    def text(self) -> str:
        return f"{self.lhs} {self.rel} {self.rhs}"


@record(eq=False)
class LocalInfo:
    """A local name: parameter, `let`/`var`/pattern binding, comprehension, loop variable.

    `block_path` is set for block-typed locals (a `static for` element, a `match`
    arm's child) and names the child's member path relative to the function's
    block, `*` standing for an array element; the state footprint uses it.
    """

    name: str
    ident: ast.Ident
    type: Type
    kind: Literal[
        "param", "let", "var", "pattern", "comprehension", "for", "arm", "memory", "result"
    ]
    mutable: bool = False
    used: bool = False
    block_path: tuple[str, ...] | None = None
    default: ast.Expr | None = None  # parameters only


@record(eq=False)
class MemberInfo:
    """A `param`, `buffer`, `state` or `sub` of a block (12.2)."""

    name: str
    ident: ast.Ident
    kind: Literal["param", "buffer", "state", "sub"]
    block: BlockInfo
    node: ast.MemberDecl
    type: Type | None = None  # resolved with the block's signature
    optional: bool = False
    used: bool = False


@record(eq=False, kw_only=True)
class FnInfo(ItemInfo):
    """A `fn`, `op` or `entry` (11.1), at module level or as a block method."""

    decl: ast.FnDecl
    kind: Literal["fn", "op", "entry"] = "fn"
    generics: list[GenericInfo] = field(default_factory=list)
    params: list[LocalInfo] = field(default_factory=list)
    result: Type | None = None
    where: list[Constraint] = field(default_factory=list)
    facts: Facts | None = None
    # Names visible in the function's outermost scope: generics and parameters.
    scope: dict[str, Decl] = field(default_factory=dict)
    # Direct state accesses of the function's own block, and calls (for E2119
    # and the transitive state footprint).
    state_reads: set[MemberInfo] = field(default_factory=set)
    state_writes: set[MemberInfo] = field(default_factory=set)
    # State of children read by path (`memory.slots`), relative to this block.
    child_state_reads: set[tuple[str, ...]] = field(default_factory=set)
    calls: list[CallEdge] = field(default_factory=list)
    body_checked: bool = False

    def __repr__(self) -> str:
        return f"{self.kind} {self.qualified_name}"


@record(eq=False)
class CallEdge:
    """A call from one function to another, with the child path of its receiver."""

    callee: FnInfo
    node: ast.Call
    receiver_path: tuple[str, ...]  # () for calls of the same block or module


@record(eq=False, kw_only=True)
class BlockInfo(ItemInfo):
    """A block (12.1): generics, facts, members, methods and nested items."""

    decl: ast.BlockDecl
    generics: list[GenericInfo] = field(default_factory=list)
    where: list[Constraint] = field(default_factory=list)
    facts: Facts | None = None
    members: dict[str, MemberInfo] = field(default_factory=dict)
    methods: dict[str, FnInfo] = field(default_factory=dict)
    items: dict[str, ItemInfo] = field(default_factory=dict)
    # Generics, members, methods and nested items by name: the block scope of 4.4.
    scope: dict[str, Decl] = field(default_factory=dict)
    members_state: Resolution = "todo"

    def __repr__(self) -> str:
        return f"block {self.qualified_name}"


@record(eq=False, kw_only=True)
class ConstInfo(ItemInfo):
    """`const NAME[: T] = expr` (14.1). `value` is the folded Python value."""

    decl: ast.ConstDecl
    type: Type | None = None
    value: ConstValue | None = None


@record(eq=False, kw_only=True)
class AliasInfo(ItemInfo):
    """`type Name<G> = T`: transparent (5.3)."""

    decl: ast.AliasDecl
    generics: list[GenericInfo] = field(default_factory=list)
    target: Type | None = None


@record(eq=False, kw_only=True)
class StructInfo(ItemInfo):
    """`struct Name<G> { field: T ... }`: nominal (5.3)."""

    decl: ast.StructDecl
    generics: list[GenericInfo] = field(default_factory=list)
    fields: dict[str, Type] = field(default_factory=dict)
    fields_state: Resolution = "todo"


@record(eq=False, kw_only=True)
class EnumInfo(ItemInfo):
    """`enum Name { A, B }` (14.2)."""

    decl: ast.EnumDecl
    generics: list[GenericInfo] = field(default_factory=list)
    variants: list[str] = field(default_factory=list)


@record(eq=False, frozen=True)
class EnumVariant:
    """The value `Name.A` (the resolution of such a `Member`)."""

    enum: EnumInfo
    name: str


@record(eq=False, frozen=True)
class PreludeFn:
    """A prelude function named in call position (section 10)."""

    name: str


@record(eq=False, frozen=True)
class UnresolvedImport:
    """A name a `use` meant to bind but could not (E1201/E1203 already reported).

    Uses of it check as the error type without further diagnostics.
    """

    name: str


# A compile-time constant's value: int, float, bool, or an enum variant.
ConstValue = int | float | bool | EnumVariant

Decl = (
    ModuleInfo
    | ItemInfo
    | GenericInfo
    | MemberInfo
    | LocalInfo
    | EnumVariant
    | PreludeFn
    | UnresolvedImport
)


@record(eq=False)
class IndexVar:
    """An index variable of index notation (8.2): an output or reduction index.

    `domain` is the extent (a `Dim`) for plain indices, the run of shape items
    for pack indices; None until the first access fixes it.
    """

    name: str
    ident: ast.Ident
    is_pack: bool
    domain: object = None  # Dim | Shape
    bound_at: ast.Expr | None = None  # the access that fixed the domain
    bound_desc: str = ""
