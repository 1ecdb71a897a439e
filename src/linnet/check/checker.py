"""The checker's entry point: `check_graph` (language.md section 15).

Stage: module graph -> checked program. In: a `ModuleGraph` from
`check.modules` (parsed and loaded; semantic checking runs only if loading
reported no errors, 1.3). Out: a `CheckedProgram` with sorted diagnostics
(16.5) and the side tables the lowering to Core IR builds on.

The steps, in order (each in its own module):
1. collect items, members and imports of every module (`check.collect`);
2. check every item: signatures resolve lazily (`check.signatures`),
   function bodies are checked (`check.stmts` and the expression modules);
3. whole-program checks: no recursion (E2119), no block containing itself;
4. lints, only when there are no errors (`check.lints`).
Manifests (12.7) are computed on demand by `CheckedProgram.manifest`.

Example:

>>> from linnet.check.modules import load_source
>>> program = check_graph(load_source("module m\\npub fn one() -> f32 {\\n    return 1.0\\n}\\n"))
>>> [d.code for d in program.diagnostics]
[]
"""

from __future__ import annotations

import gc
import sys

from linnet.check import signatures
from linnet.check.collect import collect_module, resolve_imports
from linnet.check.context import Context
from linnet.check.decls import (
    AliasInfo,
    BlockInfo,
    ConstInfo,
    EnumInfo,
    FnInfo,
    ItemInfo,
    LocalInfo,
    StructInfo,
)
from linnet.check.dims import DimOverflow
from linnet.check.kernel_info import KernelInfo
from linnet.check.lints import lint_locals, lint_module
from linnet.check.modules import ModuleGraph
from linnet.check.program import (
    BlockManifest,
    CallInfo,
    CheckedProgram,
    ManifestEntry,
    StateFootprint,
)
from linnet.check.stmts import check_function
from linnet.check.types import ArrayType, BlockType, OptionalType
from linnet.diagnostics import Label, sort_key

__all__ = [
    "BlockManifest",
    "CallInfo",
    "CheckedProgram",
    "ManifestEntry",
    "StateFootprint",
    "check_graph",
]

# Deeply nested expressions recurse through a few frames per level; the parser
# caps nesting at 256 levels (3.4), which fits comfortably in this limit.
RECURSION_LIMIT = 20_000


def check_graph(graph: ModuleGraph) -> CheckedProgram:
    """Check every module of `graph` (section 15) and return the checked program."""
    program = CheckedProgram(graph)
    if any(d.is_error for d in graph.diagnostics):
        program.diagnostics = sorted(graph.diagnostics, key=sort_key)
        return program
    limit = sys.getrecursionlimit()
    if limit < RECURSION_LIMIT:
        sys.setrecursionlimit(RECURSION_LIMIT)
    # NOTE: checking allocates many small objects next to a large AST; cyclic
    # garbage collection would rescan that AST again and again (about 3x the
    # checking time on the benchmark). Nothing here needs collecting early.
    collecting = gc.isenabled()
    gc.disable()
    try:
        ctx = Context(program)
        locals_ = _check_all(ctx, graph)
    finally:
        sys.setrecursionlimit(limit)
        if collecting:
            gc.enable()
    diagnostics = list(graph.diagnostics) + ctx.diags
    if not any(d.is_error for d in diagnostics):
        lint_ctx = Context(program)
        lintable = set(graph.roots) | {k for k, m in graph.modules.items() if not m.is_std}
        for key in sorted(lintable):
            module = program.modules.get(key)
            if module is not None:
                lint_module(lint_ctx, module)
        lint_locals(lint_ctx, (loc for key, loc in locals_ if key in lintable))
        diagnostics += lint_ctx.diags
    program.diagnostics = sorted(diagnostics, key=sort_key)
    return program


def _check_all(ctx: Context, graph: ModuleGraph) -> list[tuple[str, LocalInfo]]:
    keys = sorted(graph.modules)
    for key in keys:
        ctx.modules[key] = collect_module(ctx, graph.modules[key])
    for key in keys:
        resolve_imports(ctx, ctx.modules[key], graph.modules[key])
    locals_: list[tuple[str, LocalInfo]] = []
    functions: list[FnInfo] = []
    blocks: list[BlockInfo] = []
    for key in keys:
        for item in ctx.modules[key].items.values():
            _check_item(ctx, item, functions, blocks, locals_)
    _check_recursion(ctx, functions)
    _check_block_cycles(ctx, blocks)
    return locals_


def _check_item(
    ctx: Context,
    item: ItemInfo,
    functions: list[FnInfo],
    blocks: list[BlockInfo],
    locals_: list[tuple[str, LocalInfo]],
) -> None:
    try:
        if isinstance(item, FnInfo):
            functions.append(item)
            key = item.module.key
            locals_.extend((key, loc) for loc in check_function(ctx, item))
            if item.decl.kernel is not None:
                from linnet.check.kernels import check_kernel_ref

                check_kernel_ref(ctx, item)
        elif isinstance(item, KernelInfo):
            from linnet.check.kernels import check_kernel

            locals_.extend((item.module.key, loc) for loc in check_kernel(ctx, item))
        elif isinstance(item, BlockInfo):
            blocks.append(item)
            signatures.ensure_block(ctx, item)
            signatures.ensure_members(ctx, item)
            for part in list(item.methods.values()) + list(item.items.values()):
                _check_item(ctx, part, functions, blocks, locals_)
        elif isinstance(item, ConstInfo):
            signatures.ensure_const(ctx, item)
        elif isinstance(item, AliasInfo):
            signatures.ensure_alias(ctx, item)
        elif isinstance(item, StructInfo):
            signatures.ensure_struct_fields(ctx, item)
        elif isinstance(item, EnumInfo):
            signatures.ensure_item_generics(ctx, item)
    except DimOverflow:
        ctx.error(
            "E2123",
            f"integer arithmetic overflows while checking `{item.name}`",
            item.ident.span,
            "overflows i64",
            notes=("compile-time integers are exact i64 values",),
        )


def _check_recursion(ctx: Context, functions: list[FnInfo]) -> None:
    """E2119: the call graph must be acyclic (11.6); one report per closing call."""
    state: dict[FnInfo, int] = {}  # 1 on the stack, 2 finished
    for root in functions:
        if root in state:
            continue
        state[root] = 1
        stack = [(root, iter(root.calls))]
        while stack:
            fn, edges = stack[-1]
            edge = next(edges, None)
            if edge is None:
                state[fn] = 2
                stack.pop()
                continue
            callee = edge.callee
            seen = state.get(callee)
            if seen == 1:
                if callee is fn:
                    message = f"`{fn.name}` calls itself"
                else:
                    message = f"this call makes `{callee.name}` indirectly recursive"
                ctx.error(
                    "E2119",
                    message,
                    edge.node.callee.span,
                    "recursive call",
                    related=(Label(callee.ident.span, "declared here"),),
                    notes=("calls may not form a cycle: every call graph must be acyclic",),
                )
            elif seen is None:
                state[callee] = 1
                stack.append((callee, iter(callee.calls)))


def _check_block_cycles(ctx: Context, blocks: list[BlockInfo]) -> None:
    """A block may not contain itself through its `sub` members (that tree is infinite)."""
    state: dict[BlockInfo, int] = {}

    def children(block: BlockInfo) -> list[tuple[BlockInfo, object]]:
        out: list[tuple[BlockInfo, object]] = []
        for member in block.members.values():
            t = member.type
            if isinstance(t, OptionalType):
                t = t.inner
            if isinstance(t, ArrayType):
                t = t.elem
            if member.kind == "sub" and isinstance(t, BlockType):
                out.append((t.info, member.node.type))
        return out

    for root in blocks:
        if root in state:
            continue
        state[root] = 1
        stack = [(root, iter(children(root)))]
        while stack:
            block, edges = stack[-1]
            edge = next(edges, None)
            if edge is None:
                state[block] = 2
                stack.pop()
                continue
            child, node = edge
            seen = state.get(child)
            if seen == 1:
                ctx.error(
                    "E2122",
                    f"block `{child.name}` contains itself",
                    node.span,  # type: ignore[attr-defined]
                    "cyclic definition",
                    notes=("a block tree must be finite",),
                )
            elif seen is None:
                state[child] = 1
                stack.append((child, iter(children(child))))
