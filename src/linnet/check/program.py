"""The checker's output: `CheckedProgram` and its side tables (architecture.md "Checker").

Stage: filled by `check.checker.check_graph`; read by the lowering to Core IR,
by `inspect --parameters` (manifests) and by tests.

Everything the lowering needs without re-checking is keyed by AST node (nodes
hash by identity; the AST is never mutated):

- `types[e]`: the type the checker gave expression `e` on its own; for a
  compile-time value (literal, dimension arithmetic, `none`) this is its
  compile-time type, and `adopted[e]` is the runtime type its context gave it
  (7.3: `x * 0.5` records `adopted[0.5] = f32`).
- `resolutions[n]`: what a `Name`, `Member`, `NamedType`, pattern `Ident` or
  index component denotes (a `decls.Decl`, or an `IndexVar`).
- `calls[c]`: callee, generic bindings, argument per parameter, result type.
- `indexings[i]`: how an `Index` expression reads its target (element access,
  slicing plan per axis, structural array element).
- `comprehensions[s]`, `reductions[r]`: index variables and their domains.
- `bindings[n]`: the `LocalInfo` a `let`/`var`/pattern/loop introduces,
  keyed by the binding `Ident`.
- `static_fors[s]`: what a `static for` iterates.
- `runtime_fors[f]`: the bounds, loop variable and yield type of a runtime `for`.
- `modules`: per module key, its `ModuleInfo` (items, imports, blocks with
  member tables, functions with generics, facts, state accesses and calls).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from linnet.check.decls import (
    BlockInfo,
    Decl,
    FnInfo,
    IndexVar,
    LocalInfo,
    ModuleInfo,
    PreludeFn,
)
from linnet.check.dims import Dim
from linnet.check.types import BlockType, DType, Subst, Type
from linnet.diagnostics import Diagnostic
from linnet.records import field, record
from linnet.syntax import ast

if TYPE_CHECKING:
    from linnet.check.gradclause import GradClauseInfo
    from linnet.check.kernel_info import KernelBinding
    from linnet.check.modules import ModuleGraph


@record(eq=False)
class CallInfo:
    """A checked call (7.7, 5.6).

    `subst` binds the callee's own generics (and, for `child.method(...)`, the
    child block's generics through `receiver_type.subst`). `args[i]` is the
    argument expression for parameter `i`, or None when its default is used.
    Prelude calls keep their arguments in source order (`concat`'s `axis` last).
    """

    callee: FnInfo | PreludeFn
    subst: Subst
    args: tuple[ast.Expr | None, ...]
    result: Type
    receiver: ast.Expr | None = None
    receiver_type: BlockType | None = None
    receiver_path: tuple[str, ...] = ()
    dtype_arg: DType | None = None  # `cast<T>`, `iota<T>`, `fill<T>`
    axis: int | None = None  # `concat`'s normalised axis (a position in the shape items)


@record(frozen=True)
class AxisSelection:
    """One explicit slicing component (9.2): which source axis, and what it does."""

    axis: int  # position in the target's shape items
    kind: Literal["index", "slice"]
    component: ast.Expr | ast.Slice
    start: Dim | None = None
    stop: Dim | None = None
    step: int = 1
    extent: Dim | None = None


@record(frozen=True)
class IndexingInfo:
    """How an `Index` expression reads its target.

    mode "element": index notation access (8.3), components are index variables
    (see `resolutions`) or integer positions; "slice": `selections` per explicit
    component, other axes kept; "array": element `position` of a `sub` array.
    """

    mode: Literal["element", "slice", "array"]
    selections: tuple[AxisSelection, ...] = ()
    position: int | None = None


@record(frozen=True)
class ComprehensionInfo:
    """`let name[i, *s] = body` (8.1): the output indices in order and the result."""

    outputs: tuple[IndexVar, ...]
    local: LocalInfo
    result: Type


@record(frozen=True)
class ReductionInfo:
    """`kind<D>[i, j] body` (8.6); `dtype` is the accumulation and result dtype."""

    indices: tuple[IndexVar, ...]
    dtype: DType | None


@record(frozen=True)
class StaticForInfo:
    """A `static for` (13.1, 13.2): over a sub array, or over `start..stop`."""

    mode: Literal["array", "range"]
    variable: LocalInfo | None
    length: Dim | None = None  # array length, or stop - start
    start: Dim | None = None
    stop: Dim | None = None
    array_path: tuple[str, ...] = ()


@record(frozen=True)
class ForInfo:
    """A runtime `for` (language-extensions 1): its bounds, its loop variable, and for a
    scan (a `for` with a value) the type of one `yield` value (`yield_type`)."""

    start: Dim
    stop: Dim
    variable: LocalInfo | None
    yield_type: Type | None = None


@record(frozen=True)
class ManifestEntry:
    """One tensor of an instantiated block tree (12.7, 18.2 `inspect --parameters`)."""

    path: str  # `layers[*].attn.q.weight`
    kind: Literal["param", "buffer", "state"]
    dtype: str
    shape: list[str]
    repeat: list[str]
    optional: bool


@record(frozen=True)
class BlockManifest:
    name: str
    module: str
    generics: list[str]  # `*S` for packs
    entries: list[ManifestEntry]


@record(frozen=True)
class StateFootprint:
    """State a function reads or writes, directly or through calls (11.5, 12.6).

    Paths are relative to the function's block: `("slots",)` for its own
    member, `("memory", "slots")` through a child, `*` for any array element.
    """

    reads: frozenset[tuple[str, ...]]
    writes: frozenset[tuple[str, ...]]


@record(eq=False)
class CheckedProgram:
    """What checking produced: diagnostics plus the side tables listed above."""

    graph: ModuleGraph
    diagnostics: list[Diagnostic] = field(default_factory=list)
    modules: dict[str, ModuleInfo] = field(default_factory=dict)
    types: dict[ast.Expr, Type] = field(default_factory=dict)
    adopted: dict[ast.Expr, Type] = field(default_factory=dict)
    resolutions: dict[object, Decl | IndexVar] = field(default_factory=dict)
    calls: dict[ast.Call, CallInfo] = field(default_factory=dict)
    # struct constructions (language-extensions 2): the field values in declaration order
    constructions: dict[ast.Call, tuple[ast.Expr, ...]] = field(default_factory=dict)
    indexings: dict[ast.Index, IndexingInfo] = field(default_factory=dict)
    comprehensions: dict[ast.ComprehensionStmt, ComprehensionInfo] = field(default_factory=dict)
    reductions: dict[ast.Reduction, ReductionInfo] = field(default_factory=dict)
    bindings: dict[ast.Ident, LocalInfo] = field(default_factory=dict)
    static_fors: dict[ast.StaticForStmt, StaticForInfo] = field(default_factory=dict)
    runtime_fors: dict[ast.ForLoop, ForInfo] = field(default_factory=dict)  # language-ext. 1
    functions: dict[ast.FnDecl, FnInfo] = field(default_factory=dict)
    blocks: dict[ast.BlockDecl, BlockInfo] = field(default_factory=dict)
    # gradient clauses of ops (language-extensions 3), checked and applicable
    grad_clauses: dict[FnInfo, GradClauseInfo] = field(default_factory=dict)
    # ops referring to a kernel (language-extensions 4.4): the kernel and its generics
    # in the op's terms, for references that passed KB1-KB5
    kernel_refs: dict[ast.FnDecl, KernelBinding] = field(default_factory=dict)
    _manifests: dict[str, list[BlockManifest]] = field(default_factory=dict)
    _footprints: dict[FnInfo, StateFootprint] = field(default_factory=dict)

    @property
    def has_errors(self) -> bool:
        return any(d.is_error for d in self.diagnostics)

    def type_of(self, expr: ast.Expr) -> Type | None:
        """The runtime type of `expr` in its context (adopted if it was a literal)."""
        adopted = self.adopted.get(expr)
        return adopted if adopted is not None else self.types.get(expr)

    def manifest(self, module_key: str) -> list[BlockManifest]:
        """Manifests of the top-level blocks of one module (12.7); [] with errors."""
        found = self._manifests.get(module_key)
        if found is None:
            from linnet.check.manifest import module_manifests

            info = self.modules.get(module_key)
            found = [] if info is None or self.has_errors else module_manifests(info)
            self._manifests[module_key] = found
        return found

    def state_footprint(self, fn: FnInfo) -> StateFootprint:
        """The transitive state footprint of a function (11.5)."""
        found = self._footprints.get(fn)
        if found is None:
            from linnet.check.footprint import footprint

            found = footprint(fn, self._footprints)
        return found
