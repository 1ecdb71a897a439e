"""What the checker records about a kernel item (language-extensions 4.2).

Kept apart from `check.decls` so the kernel rules (`check.kernels`) stay in
their own modules; `KernelInfo` is an `ItemInfo`, so scopes resolve kernel names
like any other item. `KernelScope` is the per-body state of the tile rules
(which write word each result uses, B13).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from linnet.check.decls import Constraint, Decl, GenericInfo, ItemInfo, LocalInfo
from linnet.records import field, record
from linnet.syntax import ast

if TYPE_CHECKING:
    from linnet.check.dims import Dim
    from linnet.check.prover import Facts
    from linnet.check.types import Subst


@record(eq=False, kw_only=True)
class KernelInfo(ItemInfo):
    """A `kernel` item: generics, memory parameters, named results, grid and hints."""

    decl: ast.KernelDecl
    generics: list[GenericInfo] = field(default_factory=list)
    params: list[LocalInfo] = field(default_factory=list)
    results: list[LocalInfo] = field(default_factory=list)
    where: list[Constraint] = field(default_factory=list)
    facts: Facts | None = None
    grid: list[Dim | None] = field(default_factory=list)
    warps: int | None = None
    stages: int | None = None
    scope: dict[str, Decl] = field(default_factory=dict)
    body_checked: bool = False

    def __repr__(self) -> str:
        return f"kernel {self.qualified_name}"


@record(eq=False)
class KernelBinding:
    """An op's checked kernel reference: the kernel and its generics in the op's terms."""

    kernel: KernelInfo
    subst: Subst


@record(eq=False)
class KernelScope:
    """The kernel whose body is being checked, and the first write of each result."""

    kernel: KernelInfo
    writes: dict[str, ast.WriteStmt] = field(default_factory=dict)
