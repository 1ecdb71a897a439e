"""Generated blocks that are standard-library blocks: `sub q_proj: Linear<32, 32, f32>`.

Stage: assembly (`linnet.sourcegen.module`), after pruning, before the block
declarations are written. A generated block holding exactly the params of
`std.nn.linear::Linear` (`weight [Out, In]`, optionally `bias [Out]`) or
`std.nn.norm::RmsNorm` (`weight [H]`), all of one float dtype, whose params
are read only as that block's `forward` computes them (a `linear(x, w)` /
`linear(x, w, some(b))` call; an `rms_norm(x, w)` call with the std default
eps), is declared as the std block and each such call becomes
`q_proj.forward(x)`, which is what a person writes (the parameter paths,
`q_proj.weight`, do not change, so weights bind as before).

A member declaration is shared by every block of its parent's type (the
layers of a sub array, one method body), so the decision is made per
(parent type, member): every block there must qualify. Anything the
analysis cannot follow (a param read elsewhere, a block used as a value, an
eps that differs by one ulp) keeps the generated block.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from linnet.sourcegen import build
from linnet.sourcegen.layout import Layout, Leaf, Tree
from linnet.sourcegen.outline import transform, walk
from linnet.syntax import ast

__all__ = ["StdBlocks", "fold_std_blocks"]

RMS_NORM_EPS = 1e-5
"""`rms_norm`'s default `eps` in stdlib/nn/norm.linnet, which `RmsNorm.forward` uses."""

_FLOATS = frozenset({"f16", "bf16", "f32", "f64"})


@dataclass(frozen=True)
class _Kind:
    block: str  # the std block type
    module: str  # its std module, `nn.linear`
    function: str  # the std op its `forward` calls
    noun: str  # for the note: "3 projections as std `Linear` blocks"


_LINEAR = _Kind("Linear", "nn.linear", "linear", "projections")
_RMS_NORM = _Kind("RmsNorm", "nn.norm", "rms_norm", "norms")
_KINDS = (_LINEAR, _RMS_NORM)

Node = Tree | Leaf
Unit = tuple[str, str]  # (parent block type, member name): one member declaration


@dataclass
class StdBlocks:
    """The outcome: the member types to declare, the rewritten bodies, the imports."""

    members: dict[Unit, ast.Type] = field(default_factory=dict)
    uses: dict[str, dict[str, str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def fold_std_blocks(
    layout: Layout,
    entry: ast.FnDecl,
    methods: dict[str, list[ast.FnDecl]],
    uses: dict[str, dict[str, str]],
    extra_names: Iterable[str] = (),
) -> tuple[StdBlocks, ast.FnDecl, dict[str, list[ast.FnDecl]]]:
    """Decide which generated blocks become std blocks (module docstring) and rewrite
    `entry` and `methods` accordingly. Returns the decisions, the new entry and methods;
    `StdBlocks.uses` is `uses` with the std block types added and the std functions
    no call is left to dropped."""
    # The local names the std functions are called by (`linear`, or an alias).
    locals_of = {kind: uses.get(kind.module, {}).get(kind.function) for kind in _KINDS}
    scan = _Scan(layout, {local: kind for kind, local in locals_of.items() if local})
    scan.body(entry, _root_scope(layout))
    for type_name, fns in methods.items():
        scope = _type_scope(layout, type_name)
        for fn in fns:
            scan.body(fn, scope)
    folded = scan.decide()
    result = StdBlocks(uses={m: dict(items) for m, items in uses.items()})
    if not folded:
        return result, entry, methods
    taken = _all_names(layout, entry, methods, uses, extra_names)
    block_locals: dict[_Kind, str] = {}
    counts: dict[_Kind, int] = {}
    for unit, (kind, type_args, trees) in folded.items():
        local = block_locals.get(kind)
        if local is None:
            local = kind.block
            n = 1
            while local in taken:
                n += 1
                local = f"Std{kind.block}" if n == 2 else f"Std{kind.block}{n}"
            taken.add(local)
            block_locals[kind] = local
            result.uses.setdefault(kind.module, {})[kind.block] = local
        result.members[unit] = build.named_type(local, type_args)
        counts[kind] = counts.get(kind, 0) + trees

    def rewrite(node: Any) -> Any:
        if isinstance(node, ast.Call):
            match = scan.match(node)
            if match is not None and match.unit in folded:
                x = transform(node.args[0].value, rewrite)
                return build.call(build.member(match.block_expr, "forward"), x)
        return None

    entry = transform(entry, rewrite)
    methods = {k: [transform(fn, rewrite) for fn in fns] for k, fns in methods.items()}
    read = {
        n.ident.name
        for n in walk((entry, *(fn for fns in methods.values() for fn in fns)))
        if isinstance(n, ast.Name)
    }
    for kind, local in locals_of.items():
        if kind in counts and local is not None and local not in read:
            items = result.uses[kind.module]
            del items[kind.function]
    for kind in _KINDS:
        if kind in counts:
            n = counts[kind]
            noun = kind.noun if n != 1 else kind.noun[:-1]
            blocks = "blocks" if n != 1 else "block"
            result.notes.append(f"{n} {noun} as std `{kind.block}` {blocks}")
    return result, entry, methods


@dataclass(frozen=True)
class _Match:
    """A call computing exactly a candidate block's `forward`."""

    kind: _Kind
    unit: Unit
    trees: tuple[Tree, ...]
    block_expr: ast.Expr  # how the call reaches the block: `self_attn.q_proj`


Scope = dict[str, list[Node]]


class _Scan:
    """One walk over every body: which params each matching call reads, and which
    blocks are read in any other way (those keep their generated type)."""

    def __init__(self, layout: Layout, functions: dict[str, _Kind]) -> None:
        self.functions = functions
        self.parent: dict[int, tuple[Tree, str]] = {}
        self.owner: dict[int, Tree] = {}  # leaf id -> the block declaring it
        self.units: dict[Unit, list[Tree]] = {}
        stack = [layout.root]
        while stack:
            tree = stack.pop()
            for key, child in tree.children.items():
                if isinstance(child, Leaf):
                    self.owner[id(child)] = tree
                else:
                    self.parent[id(child)] = (tree, key)
                    if not tree.array:
                        self.units.setdefault((tree.type_name, key), []).append(child)
                    stack.append(child)
        self.covered: set[int] = set()  # trees with at least one matching call
        self.spoiled: set[int] = set()  # trees (or trees above leaves) read otherwise
        self.scopes: dict[int, Scope] = {}  # call id -> scope it was seen in

    # -- reading bodies

    def body(self, fn: ast.FnDecl, scope: Scope) -> None:
        self._visit(fn, scope)

    def _visit(self, node: Any, scope: Scope) -> None:
        if isinstance(node, tuple):
            for item in node:
                self._visit(item, scope)
            return
        if not ast.is_node(node):
            return
        if isinstance(node, ast.StaticForStmt):
            if self.resolve(node.iter, scope) is None:  # iterating a sub array reads nothing
                self._visit(node.iter, scope)
            if node.stop is not None:
                self._visit(node.stop, scope)
            inner = dict(scope)
            elements = [
                e
                for t in self.resolve(node.iter, scope) or []
                if isinstance(t, Tree) and t.array
                for e in t.children.values()
            ]
            if isinstance(node.pattern, ast.NamePattern):
                name = node.pattern.name.name
                if elements:
                    inner[name] = elements
                else:
                    inner.pop(name, None)
            self._visit(node.body, inner)
            return
        if isinstance(node, ast.Call):
            self.scopes[id(node)] = scope
            match = self.match(node)
            if match is not None:
                self.covered.update(id(t) for t in match.trees)
                self._visit(node.args[0], scope)
                return
            if isinstance(node.callee, ast.Member):
                targets = self.resolve(node.callee.target, scope)
                if targets and all(
                    isinstance(t, Tree) and node.callee.name.name not in t.children for t in targets
                ):
                    self._visit(node.args, scope)  # a method call: `layer.forward(...)`
                    return
        if isinstance(node, ast.Name | ast.Member | ast.Index):
            nodes = self.resolve(node, scope)
            if nodes:
                for n in nodes:
                    self._spoil(n)
                if isinstance(node, ast.Index):
                    self._visit(node.components, scope)
                return
        for f in ast.node_fields(node):
            self._visit(getattr(node, f), scope)

    def _spoil(self, node: Node) -> None:
        """A read no std block's `forward` makes: the block(s) holding it keep their type."""
        if isinstance(node, Leaf):
            return self._spoil_leaf(node)
        self.spoiled.add(id(node))
        for child in node.children.values():
            self._spoil(child)
        return None

    def _spoil_leaf(self, leaf: Leaf) -> None:
        owner = self.owner.get(id(leaf))
        if owner is not None:
            self.spoiled.add(id(owner))

    def resolve(self, expr: ast.Expr, scope: Scope) -> list[Node] | None:
        """The layout nodes a path expression reads (one per block the body runs in),
        or None if it is no member path."""
        if isinstance(expr, ast.Paren):
            return self.resolve(expr.inner, scope)
        if isinstance(expr, ast.Name):
            return scope.get(expr.ident.name)
        if isinstance(expr, ast.Member):
            targets = self.resolve(expr.target, scope)
            if not targets:
                return None
            out: list[Node] = []
            for t in targets:
                if not isinstance(t, Tree) or t.array or expr.name.name not in t.children:
                    return None
                out.append(t.children[expr.name.name])
            return out
        if isinstance(expr, ast.Index):
            targets = self.resolve(expr.target, scope)
            if not targets:
                return None
            comps = expr.components
            if len(comps) != 1 or not isinstance(comps[0], ast.IntLit):
                return targets if all(isinstance(t, Tree) and t.array for t in targets) else None
            out = []
            for t in targets:
                if isinstance(t, Tree) and t.array:
                    child = t.children.get(str(comps[0].value))
                    if child is None:
                        return None
                    out.append(child)
                else:
                    return None  # an element of a stored tensor: `p[0]`, a read of `p`
            return out
        return None

    # -- matching calls

    def match(self, call: ast.Call) -> _Match | None:
        """`call` if it is exactly a candidate block's `forward` computation."""
        if not isinstance(call.callee, ast.Name) or call.generic_args is not None:
            return None
        kind = self.functions.get(call.callee.ident.name)
        if kind is None or any(a.name is not None for a in call.args):
            return None
        scope = self.scopes.get(id(call))
        if scope is None:
            return None
        args = [a.value for a in call.args]
        if len(args) < 2:
            return None
        weight = args[1]
        if not isinstance(weight, ast.Member) or weight.name.name != "weight":
            return None
        trees = self.resolve(weight.target, scope)
        if not trees or not all(isinstance(t, Tree) and not t.array for t in trees):
            return None
        wanted = {"weight"}
        if kind is _LINEAR:
            if len(args) == 3:
                bias = args[2]
                if isinstance(bias, ast.SomeExpr):
                    b = bias.value
                    if not (
                        isinstance(b, ast.Member)
                        and b.name.name == "bias"
                        and self.resolve(b.target, scope) == trees
                    ):
                        return None
                    wanted.add("bias")
                elif not isinstance(bias, ast.NoneLit):
                    return None
            elif len(args) != 2:
                return None
        elif len(args) == 3:
            eps = args[2]
            if not isinstance(eps, ast.FloatLit) or np.float32(eps.value) != np.float32(
                RMS_NORM_EPS
            ):
                return None
        elif len(args) != 2:
            return None
        blocks = [t for t in trees if isinstance(t, Tree)]
        if any(set(t.children) != wanted for t in blocks):
            return None  # pruned already: every member left is read somewhere
        units = {self._unit(t) for t in blocks}
        if len(units) != 1 or None in units or _type_args(kind, blocks[0]) is None:
            return None
        unit = units.pop()
        assert unit is not None
        return _Match(kind, unit, tuple(blocks), weight.target)

    def _unit(self, tree: Tree) -> Unit | None:
        parent = self.parent.get(id(tree))
        if parent is None or parent[0].array:
            return None
        return parent[0].type_name, parent[1]

    # -- deciding

    def decide(self) -> dict[Unit, tuple[_Kind, list[ast.Expr | ast.NamedType], int]]:
        """The member declarations every block of which qualifies, with their kind and
        std type arguments (and how many blocks they stand for)."""
        kinds: dict[int, _Kind] = {}
        for trees in self.units.values():
            for tree in trees:
                kind = _kind_of(tree)
                if kind is not None:
                    kinds[id(tree)] = kind
        out: dict[Unit, tuple[_Kind, list[ast.Expr | ast.NamedType], int]] = {}
        for unit, trees in self.units.items():
            found = {kinds.get(id(t)) for t in trees}
            if len(found) != 1 or None in found:
                continue
            kind = found.pop()
            assert kind is not None
            if any(id(t) in self.spoiled or id(t) not in self.covered for t in trees):
                continue
            args = {repr(_type_args(kind, t)) for t in trees}
            type_args = _type_args(kind, trees[0])
            if len(args) != 1 or type_args is None:
                continue
            out[unit] = (kind, type_args, len(trees))
        return out


def _kind_of(tree: Tree) -> _Kind | None:
    """The std block `tree` holds exactly the params of, if any (which calls read them is
    checked separately: a `[H, H]` weight could be either)."""
    if tree.array:
        return None
    leaves = tree.children
    if not all(isinstance(v, Leaf) and v.kind == "param" for v in leaves.values()):
        return None
    weight = leaves.get("weight")
    if not isinstance(weight, Leaf) or weight.dtype not in _FLOATS:
        return None
    if set(leaves) == {"weight"} and len(weight.shape) == 1:
        return _RMS_NORM
    if len(weight.shape) == 2 and set(leaves) <= {"weight", "bias"}:
        bias = leaves.get("bias")
        if bias is None or (
            isinstance(bias, Leaf) and bias.shape == weight.shape[:1] and bias.dtype == weight.dtype
        ):
            return _LINEAR
    return None


def _type_args(kind: _Kind, tree: Tree) -> list[ast.Expr | ast.NamedType] | None:
    """`Linear<In, Out, T>` / `RmsNorm<H, T>` for `tree`'s weight."""
    weight = tree.children.get("weight")
    if not isinstance(weight, Leaf) or _kind_of(tree) is not kind:
        return None
    dtype = build.named_type(weight.dtype)
    if kind is _LINEAR:
        out, inner = weight.shape
        return [build.int_lit(inner), build.int_lit(out), dtype]
    return [build.int_lit(weight.shape[0]), dtype]


def _root_scope(layout: Layout) -> Scope:
    return {k: [v] for k, v in layout.root.children.items()}


def _type_scope(layout: Layout, type_name: str) -> Scope:
    """Member names of the blocks of type `type_name` (a method body's scope)."""
    scope: Scope = {}
    stack = [layout.root]
    while stack:
        tree = stack.pop()
        if tree.type_name == type_name and not tree.array:
            for k, v in tree.children.items():
                scope.setdefault(k, []).append(v)
        stack.extend(c for c in tree.children.values() if isinstance(c, Tree))
    return scope


def _all_names(
    layout: Layout,
    entry: ast.FnDecl,
    methods: dict[str, list[ast.FnDecl]],
    uses: dict[str, dict[str, str]],
    extra: Iterable[str],
) -> set[str]:
    """Every identifier the file may declare or read: an imported block type is named
    clear of all of them."""
    names = set(extra)
    for items in uses.values():
        names.update(items.values())
    stack = [layout.root]
    while stack:
        tree = stack.pop()
        names.add(tree.type_name)
        names.update(tree.children)
        stack.extend(c for c in tree.children.values() if isinstance(c, Tree))
    for node in walk((entry, *(fn for fns in methods.values() for fn in fns))):
        if isinstance(node, ast.Ident):
            names.add(node.name)
    return names
