"""The plan JSON of `linnet plan` (language.md section 19).

Stage: after checking, beside the Core IR (architecture.md pipeline: "plan
JSON"). In: a `CheckedProgram` without errors, the root block (12.10) and
the options of `linnet plan`. Out: one JSON document describing the checked
root block for a materializer; dimensions stay symbolic (6.7 says in which
order a materializer gives them values) and no tensor data is included.

Top-level keys (version 1): `version`, `module`, `numerics`, `optimized`,
`root` (`{name, block, generics, constraints, entries}`, or null when the file
declares no block with entries: then the document lists its functions),
`manifest` (every tensor of the instantiated tree, `[*]` for sub-array
elements and their lengths in `repeat`), `blocks` (keyed `module::Block`),
`functions` and `constants` (an `op`'s record also has `gradient`: its
gradient clause as a region, or null; language-extensions 0.5). Values,
types and regions are encoded by `linnet.plan.values` and `linnet.plan.body`;
ids are unique in the document and symbols are numbered in order of first
use, so one input always gives the same bytes.

Which functions: those of the root's module (module level and methods, in
declaration order), the methods of every block in the document, and
everything they call, transitively (so every `callee` names a listed
function). `--numerics exact` keeps `op` calls as plain `call`s (the
canonical body is the implementation); `equivalent` (the default) keeps them
as `semantic.call`s a backend may replace with an equivalent kernel (11.1).
Optimisation (`optimize=False` is `--no-optimize`) removes unused pure
values and merges identical ones (`linnet.plan.optimize`).

>>> from linnet.pipeline import check_source
>>> program = check_source("module m\\npub fn twice(x: f32) -> f32 {\\n    return x * 2.0\\n}\\n")
>>> plan = build_plan(program)
>>> [op["kind"] for op in plan["functions"][0]["body"]["ops"]]
['const.float', 'mul', 'return']
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from linnet.check.decls import BlockInfo, ConstInfo, FnInfo, ItemInfo, ModuleInfo
from linnet.check.kernel_info import KernelInfo
from linnet.check.program import CheckedProgram
from linnet.check.types import ArrayType, BlockType, OptionalType, Subst, TensorType, Type
from linnet.errors import LinnetError
from linnet.plan.body import BodyEncoder
from linnet.plan.exprs import PlanState
from linnet.plan.kernels import kernel_ref
from linnet.plan.values import JSON, Numbering, ValueEncoder

PLAN_VERSION = 1
NUMERICS = ("exact", "equivalent")

Json = dict[str, JSON]


def plan_file(
    path: Path,
    std_root: Path | None = None,
    root: str | None = None,
    *,
    numerics: str = "equivalent",
    optimize: bool = True,
) -> Json:
    """Check `path` and build its plan; a program with errors raises `LinnetError`."""
    from linnet.pipeline import check_paths

    program = check_paths([path], std_root)
    if program.has_errors:
        raise LinnetError(f"`{path}` has errors", program.diagnostics)
    return build_plan(program, root, numerics=numerics, optimize=optimize)


def build_plan(
    program: CheckedProgram,
    root: str | None = None,
    *,
    numerics: str = "equivalent",
    optimize: bool = True,
) -> Json:
    """The plan document of the first root module of `program` (19)."""
    if program.has_errors:
        raise LinnetError("cannot plan a program with errors", program.diagnostics)
    if numerics not in NUMERICS:
        raise LinnetError(f"unknown numerics policy `{numerics}` (expected exact or equivalent)")
    module = program.modules.get(program.graph.roots[0]) if program.graph.roots else None
    if module is None:
        raise LinnetError("the program has no root module to plan")
    return _Planner(program, module, numerics, optimize).document(select_root(module, root))


def plan_json(plan: Json) -> str:
    """The document as text: indented, keys in a fixed order, ending with a newline."""
    return json.dumps(plan, indent=2, ensure_ascii=False) + "\n"


def select_root(module: ModuleInfo, name: str | None) -> BlockInfo | None:
    """The root block (12.10): the one named, else the only block with entries, else None."""
    blocks = [item for item in module.items.values() if isinstance(item, BlockInfo)]
    if name is not None:
        for block in blocks:
            if block.name == name:
                return block
        known = ", ".join(f"`{b.name}`" for b in blocks) or "none"
        raise LinnetError(f"module `{module.name}` has no block `{name}` (its blocks: {known})")
    with_entries = [b for b in blocks if any(m.kind == "entry" for m in b.methods.values())]
    if len(with_entries) > 1:
        names = ", ".join(f"`{b.name}`" for b in with_entries)
        raise LinnetError(
            f"module `{module.name}` has several blocks with entries ({names}); "
            "choose the root with --root"
        )
    return with_entries[0] if with_entries else None


class _Planner:
    """Builds one document; owns the numbering, the id counter and the work lists."""

    def __init__(
        self, program: CheckedProgram, module: ModuleInfo, numerics: str, optimize: bool
    ) -> None:
        self.program = program
        self.module = module
        self.numerics = numerics
        self.optimize = optimize
        self.values = ValueEncoder(Numbering())
        self.state = PlanState(program, self.values, numerics)
        self.blocks: dict[BlockInfo, None] = {}

    def document(self, root: BlockInfo | None) -> Json:
        root_json: JSON = None
        manifest: list[JSON] = []
        if root is not None:
            root_json = {
                "name": root.name,
                "block": root.qualified_name,
                "generics": [self.values.generic(g) for g in root.generics],
                "constraints": [self.values.constraint(c) for c in root.where],
                "entries": [
                    m.qualified_name for m in root.methods.values() if m.kind == "entry" and m.pub
                ],
            }
            manifest = self.manifest(root)
            self._add_block(root)
        for item in self.module.items.values():
            self._add_item(item)
        functions = self._functions()
        constants = self._constants()
        return {
            "version": PLAN_VERSION,
            "module": self.module.name,
            "numerics": self.numerics,
            "optimized": self.optimize,
            "root": root_json,
            "manifest": manifest,
            "blocks": {b.qualified_name: self._block(b) for b in self.blocks},
            "functions": functions,
            "constants": constants,
        }

    # -- what the document lists ------------------------------------------------------

    def _add_item(self, item: ItemInfo) -> None:
        if isinstance(item, FnInfo):
            self.state.functions.setdefault(item)
        elif isinstance(item, BlockInfo):
            self._add_block(item)
        elif isinstance(item, ConstInfo):
            self.state.constants.setdefault(item)

    def _add_block(self, block: BlockInfo) -> None:
        """A block, its methods and nested items, and the blocks of its `sub`s."""
        if block in self.blocks:
            return
        self.blocks[block] = None
        for method in block.methods.values():
            self.state.functions.setdefault(method)
        for item in block.items.values():
            self._add_item(item)
        for member in block.members.values():
            child = _block_of(member.type)
            if child is not None:
                self._add_block(child)

    def _functions(self) -> list[JSON]:
        """Every listed function; encoding a body may list its callees, so loop until done."""
        from linnet.plan.optimize import optimize_region

        out: list[JSON] = []
        done: set[FnInfo] = set()
        while len(done) < len(self.state.functions):
            for fn in list(self.state.functions):
                if fn in done:
                    continue
                done.add(fn)
                if fn.block is not None:
                    self._add_block(fn.block)
                body = BodyEncoder(self.state, fn).function(fn)
                if self.optimize:
                    optimize_region(body)
                out.append(self._function(fn, body))
        from linnet.plan.kernels import kernel_record, kernels_referenced

        own = [k for k in self.module.items.values() if isinstance(k, KernelInfo)]
        referenced = kernels_referenced(self.program, list(self.state.functions))
        for kernel in dict.fromkeys([*own, *referenced]):
            record = kernel_record(BodyEncoder(self.state, None), self.values, kernel)
            if self.optimize:
                optimize_region(record["body"])  # type: ignore[arg-type]
            out.append(record)
        return out

    def _function(self, fn: FnInfo, body: Json) -> Json:
        v = self.values
        footprint = self.program.state_footprint(fn)
        return {
            "name": fn.qualified_name,
            "kind": fn.kind,
            "block": fn.block.qualified_name if fn.block is not None else None,
            "pub": fn.pub,
            "generics": [v.generic(g) for g in fn.generics],
            "constraints": [v.constraint(c) for c in fn.where],
            "params": [{"name": p.name, "type": v.type_(p.type)} for p in fn.params],
            "results": v.results(fn.result),
            "states": _paths(footprint.reads | footprint.writes),
            "state_writes": _paths(footprint.writes),
            "kernel": kernel_ref(self.program, v, fn),
            "body": body,
            **({"gradient": self._gradient(fn)} if fn.kind == "op" else {}),
        }

    def _gradient(self, fn: FnInfo) -> JSON:
        """An op's gradient clause as a region (language-extensions 0.5), or null."""
        clause = self.program.grad_clauses.get(fn)
        if clause is None:
            return None
        from linnet.plan.gradient import ClauseEncoder
        from linnet.plan.optimize import optimize_region

        region = ClauseEncoder(self.state, fn, clause).region()
        if self.optimize:
            optimize_region(region)
        return region

    def _constants(self) -> list[JSON]:
        from linnet.plan.optimize import optimize_region

        out: list[JSON] = []
        done: set[ConstInfo] = set()
        while len(done) < len(self.state.constants):
            for const in list(self.state.constants):
                if const in done:
                    continue
                done.add(const)
                body = BodyEncoder(self.state, None).initialiser(const.decl.value)
                if self.optimize:
                    optimize_region(body)
                t = const.type
                out.append(
                    {
                        "name": const.qualified_name,
                        "pub": const.pub,
                        "type": self.values.type_(t) if t is not None else None,
                        "contextual": const.decl.type is None,
                        "body": body,
                    }
                )
        return out

    def _block(self, block: BlockInfo) -> Json:
        v = self.values
        return {
            "name": block.name,
            "module": block.module.name,
            "pub": block.pub,
            "generics": [v.generic(g) for g in block.generics],
            "constraints": [v.constraint(c) for c in block.where],
            "members": [
                {
                    "name": m.name,
                    "kind": m.kind,
                    "type": v.type_(m.type) if m.type is not None else None,
                    "optional": m.optional or isinstance(m.type, OptionalType),
                }
                for m in block.members.values()
            ],
        }

    # -- the manifest (12.7) ------------------------------------------------------------

    def manifest(self, root: BlockInfo) -> list[JSON]:
        out: list[JSON] = []
        self._walk(root, Subst(), "", [], False, out, (root,))
        return out

    def _walk(
        self,
        block: BlockInfo,
        subst: Subst,
        prefix: str,
        repeat: list[JSON],
        optional: bool,
        out: list[JSON],
        ancestors: tuple[BlockInfo, ...],
    ) -> None:
        """Members in declaration order; children's arguments substituted (as `check.manifest`)."""
        v = self.values
        for member in block.members.values():
            t = member.type
            if t is None:
                continue
            path = prefix + member.name
            if member.kind == "sub":
                child_optional, child_repeat = optional, repeat
                if isinstance(t, OptionalType):
                    child_optional, t = True, t.inner
                if isinstance(t, ArrayType):
                    child_repeat = [*repeat, v.dim(subst.dim(t.length))]
                    path += "[*]"
                    t = t.elem
                if isinstance(t, BlockType) and t.info not in ancestors:
                    self._walk(
                        t.info,
                        subst.compose(t.subst),
                        path + ".",
                        child_repeat,
                        child_optional,
                        out,
                        (*ancestors, t.info),
                    )
                continue
            tensor = t.inner if isinstance(t, OptionalType) else t
            if not isinstance(tensor, TensorType):
                continue
            out.append(
                {
                    "path": path,
                    "kind": member.kind,
                    "dtype": v.dtype(subst.dtype(tensor.dtype)),
                    "shape": v.shape(subst.shape(tensor.shape)),
                    "repeat": list(repeat),
                    "optional": optional or isinstance(t, OptionalType),
                }
            )


def _block_of(t: Type | None) -> BlockInfo | None:
    if isinstance(t, OptionalType):
        t = t.inner
    if isinstance(t, ArrayType):
        t = t.elem
    return t.info if isinstance(t, BlockType) else None


def _paths(paths: Iterable[tuple[str, ...]]) -> list[str]:
    """Footprint paths as text: `memory.slots`, `layers[*].cache` (12.7 notation)."""
    out = []
    for path in paths:
        text = ""
        for part in path:
            text += "[*]" if part == "*" else ("." if text else "") + part
        out.append(text)
    return sorted(out)
