"""Blocks from dotted parameter names: the member tree of the generated model.

Stage: before translation (so every stored tensor's path expression is known
when code first reads it) and at assembly (`linnet.sourcegen.module`). In: the
stored tensors (name, shape, dtype) and any Linnet paths recorded for them.
Out: a tree of blocks whose `param` members reproduce those names as
parameter paths (12.7): `blocks.0.attn.qkv.weight` becomes
`sub blocks: [Block; N]` holding `sub attn: Attn` holding `sub qkv: Qkv`
holding `param weight`. Numbered children with one structure (the same
member names, shapes and dtypes) become a sub array; blocks with one
structure share one block type.

A name that is not a valid path (`onnx::MatMul_12`, a keyword segment, a
number that is not an array position) is renamed; `renamed` maps the new
path to the stored name, which is what `bindings.json` records.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator, Mapping
from typing import Literal

from linnet.sourcegen import build
from linnet.sourcegen.graph import Graph, Node
from linnet.sourcegen.names import FORBIDDEN, Namer, pascal, sanitize
from linnet.syntax import ast

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_DIGITS = re.compile(r"[0-9]+\Z")

LeafType = tuple[tuple[int, ...], str]  # stored shape, dtype
LeafKind = Literal["param", "state"]


class Leaf:
    """A `param` member (the stored tensor it binds) or a `state` member (the graph
    value holding it before the call), and its declared type."""

    __slots__ = ("dtype", "kind", "name", "shape", "used")

    def __init__(
        self, name: str, shape: tuple[int, ...], dtype: str, kind: LeafKind = "param"
    ) -> None:
        self.name = name
        self.shape = shape
        self.dtype = dtype
        self.kind: LeafKind = kind
        self.used = False

    def signature(self) -> object:
        return ("leaf", self.kind, self.shape, self.dtype)


class Tree:
    """A block in the member tree: children by member name, in first-seen order."""

    __slots__ = ("array", "children", "type_name")

    def __init__(self) -> None:
        self.children: dict[str, Tree | Leaf] = {}
        self.array = False  # every child is a numbered element of one block type
        self.type_name = ""

    def signature(self) -> object:
        if self.array:
            first = next(iter(self.children.values()))
            return ("array", len(self.children), first.signature())
        return ("block", tuple((k, v.signature()) for k, v in self.children.items()))

    def leaves(self) -> Iterator[Leaf]:
        for child in self.children.values():
            if isinstance(child, Leaf):
                yield child
            else:
                yield from child.leaves()


class Layout:
    """Where every stored tensor lives: its path, the expression reading it, its block."""

    def __init__(self, root_name: str) -> None:
        self.root = Tree()
        self.root.type_name = root_name
        self.paths: dict[str, str] = {}  # stored name -> Linnet path
        self.renamed: dict[str, str] = {}  # Linnet path -> stored name, where they differ
        self._exprs: dict[str, ast.Expr] = {}

    @classmethod
    def plan(
        cls,
        stored: list[tuple[str, tuple[int, ...], str]],
        paths: dict[str, str],
        root_name: str = "Model",
        state: Collection[str] = (),
        type_names: Mapping[str, str] | None = None,
    ) -> Layout:
        """Lay out `stored` tensors (name, shape, dtype) by their dotted names;
        those named in `state` become `state` members. `type_names` maps a block's
        dotted path (`model.layers.0`) to the name its type takes (a torch module
        class); other types are named after their member."""
        layout = cls(root_name)
        for name, shape, dtype in stored:
            segments = _segments(paths.get(name, name))
            kind: LeafKind = "state" if name in state else "param"
            layout._insert(layout.root, segments, Leaf(name, shape, dtype, kind))
        _settle(layout.root, "")
        _name_types(layout.root, type_names or {})
        layout._record(layout.root, [])
        return layout

    def add(self, name: str, shape: tuple[int, ...], dtype: str, member: str) -> None:
        """A stored tensor the plan did not include (a constant materialised late),
        as the root member `member` (which the caller made unique)."""
        assert member not in self.root.children and member not in FORBIDDEN
        leaf = Leaf(name, shape, dtype)
        self.root.children[member] = leaf
        self.paths[name] = member
        if member != name:
            self.renamed[member] = name

    def expr(self, name: str) -> ast.Expr:
        """`blocks[0].attn.qkv.weight`: how code in the root block reads a stored tensor.

        A rank-0 stored tensor is declared `Tensor[1; T]` (a stored 0-d tensor
        binds a declared `Tensor[1]`) and read as its only element.
        """
        expr = self._exprs.get(name)
        if expr is None:
            path = self.paths[name]
            node: Tree | Leaf = self.root
            out: ast.Expr | None = None
            for seg in path.split("."):
                assert isinstance(node, Tree)
                if node.array:
                    assert out is not None
                    out = build.index(out, [build.int_lit(int(seg))])
                else:
                    out = build.name(seg) if out is None else build.member(out, seg)
                node = node.children[seg]
            assert out is not None and isinstance(node, Leaf)
            if not node.shape:
                out = build.index(out, [build.int_lit(0)])
            expr = out
            self._exprs[name] = expr
        return expr

    def leaf(self, name: str) -> Leaf:
        return self.owner(name)[1]

    def owner(self, name: str) -> tuple[Tree, Leaf]:
        """The block holding a stored tensor's member (an array's element type), and the leaf."""
        node: Tree | Leaf = self.root
        parent = self.root
        for seg in self.paths[name].split("."):
            assert isinstance(node, Tree)
            parent = node
            node = node.children[seg]
        assert isinstance(node, Leaf)
        return parent, node

    def _insert(self, tree: Tree, segments: list[str], leaf: Leaf) -> None:
        node = tree
        for i, seg in enumerate(segments[:-1]):
            child = node.children.get(seg)
            if isinstance(child, Leaf):
                # `a.b` stored and `a.b.c` stored: the leaf moves aside.
                node.children[seg + "_"] = node.children.pop(seg)
                child = None
            if child is None:
                child = Tree()
                node.children[seg] = child
            assert isinstance(child, Tree)
            node = child
            del i
        last = segments[-1]
        while last in node.children:
            last += "_"
        node.children[last] = leaf

    def _record(self, tree: Tree, prefix: list[str]) -> None:
        for key, child in tree.children.items():
            if isinstance(child, Leaf):
                path = ".".join([*prefix, key])
                self.paths[child.name] = path
                if path != child.name:
                    self.renamed[path] = child.name
            else:
                self._record(child, [*prefix, key])


def _segments(path: str) -> list[str]:
    """The path's segments, or one sanitised root segment for a name that is no path."""
    parts = path.split(".")
    ok = all(_IDENT.match(p) or _DIGITS.match(p) for p in parts) and not _DIGITS.match(parts[-1])
    if not ok:
        return [sanitize(path, "w")]
    return [p + "_" if p in FORBIDDEN else p for p in parts]


def _settle(tree: Tree, name: str) -> None:
    """Bottom-up: decide arrays, rename numbered children that cannot form one."""
    for key, child in list(tree.children.items()):
        if isinstance(child, Tree):
            _settle(child, key)
    keys = list(tree.children)
    numbered = [k for k in keys if _DIGITS.match(k)]
    if not numbered:
        return
    children = tree.children
    if len(numbered) == len(keys) and _is_array(tree):
        tree.array = True
        tree.children = dict(sorted(children.items(), key=lambda kv: int(kv[0])))
        return
    # Not an array: numbered children get names (`layer_0`).
    # A numbered parent (`features.1.0`, nested `Sequential`s) names no element.
    element = _singular(name) if name and not _DIGITS.match(name) else "item"
    renamed: dict[str, Tree | Leaf] = {}
    for key, child in children.items():
        new = f"{element}_{key}" if _DIGITS.match(key) else key
        while new in renamed:
            new += "_"
        renamed[new] = child
    tree.children = renamed


def _is_array(tree: Tree) -> bool:
    keys = sorted(int(k) for k in tree.children)
    if keys != list(range(len(keys))) or any(
        str(k) not in tree.children for k in keys
    ):  # `01` is not a position
        return False
    values = list(tree.children.values())
    if not all(isinstance(v, Tree) for v in values):
        return False
    first = values[0].signature()
    return all(v.signature() == first for v in values[1:])


def _singular(name: str) -> str:
    if name.endswith("ies") and len(name) > 4:
        return name[:-3] + "y"
    if name.endswith("s") and not name.endswith("ss") and len(name) > 3:
        return name[:-1]
    return name


def _name_types(root: Tree, type_names: Mapping[str, str]) -> None:
    """Give every block type a name; one structure, one type."""
    by_signature: dict[object, str] = {}
    members: set[str] = set()

    def collect(tree: Tree) -> None:
        for key, child in tree.children.items():
            members.add(key)
            if isinstance(child, Tree):
                collect(child)

    collect(root)
    # A type named like a member would be shadowed by it inside its parent (E1208).
    namer = Namer({root.type_name, *members})

    def visit(tree: Tree, member: str, path: str) -> None:
        for key, child in tree.children.items():
            if isinstance(child, Tree):
                inner = f"{path}.{key}" if path else key
                visit(child, _singular(member) if tree.array else key, inner)
        if tree is root:
            return
        if tree.array:
            tree.type_name = ""
            return
        sig = tree.signature()
        existing = by_signature.get(sig)
        if existing is None:
            hinted = type_names.get(path)
            base = pascal(hinted or member)
            existing = namer.fresh(base + "Block" if base in members else base)
            by_signature[sig] = existing
        tree.type_name = existing

    visit(root, "", "")


def method_scope_members(layout: Layout) -> frozenset[str]:
    """Member names of the blocks generated bodies live in: the root (the entry) and
    every element of a sub array (outlined `forward` methods). A local or an
    imported function named like one would be shadowed there (4.4 lookup order)."""
    names = set(layout.root.children)
    stack = [layout.root]
    while stack:
        tree = stack.pop()
        for child in tree.children.values():
            if isinstance(child, Tree):
                if tree.array:
                    names |= set(child.children)
                stack.append(child)
    return frozenset(names)


def type_names(layout: Layout) -> frozenset[str]:
    """Every block type name of the layout (module items an import must not collide with)."""
    names = {layout.root.type_name}
    stack = [layout.root]
    while stack:
        tree = stack.pop()
        names.add(tree.type_name)
        stack.extend(c for c in tree.children.values() if isinstance(c, Tree))
    return frozenset(n for n in names if n)


def element_type(tree: Tree) -> Tree:
    """The element block of an array node."""
    first = next(iter(tree.children.values()))
    assert isinstance(first, Tree)
    return first


_ROLE_OF: dict[tuple[str, int], str] = {
    ("MatMul", 1): "weight_t",
    ("Gemm", 2): "bias",
    ("Gather", 0): "weight",
    ("Conv", 1): "weight",
    ("Conv", 2): "bias",
}
"""The role of a stored operand, by operator and input position.

A `MatMul` reads its matrix as `[in, out]`, the transpose of the `[out, in]`
that `nn.Linear` stores: a folded `weight.t()` is named `weight_t`, so binding
the original checkpoint by name fails loudly instead of binding a square
matrix transposed. `Gemm` says its orientation (`_role`).
"""


def operand_role(node: Node, index: int) -> str | None:
    """The role (`weight`, `bias`, `weight_t`) of a stored operand, or None."""
    return _role(node, index)


def _role(node: Node, index: int) -> str | None:
    if node.op == "Gemm" and index == 1:
        return "weight" if int(node.attrs.get("transB", 0)) else "weight_t"
    return _ROLE_OF.get((node.op, index))


def name_anonymous(graph: Graph) -> tuple[dict[str, str], list[str]]:
    """Paths for stored tensors whose names are not paths (`val_130`, `onnx::MatMul_12`).

    Exporters that fold a weight (a transposed `nn.Linear` weight) give the
    result a generated name, but record the module path of every node
    (`Node.scope`). A tensor read by nodes of one module, in one role, is
    named after them: `model.layers.0.self_attn.q_proj.weight_t` for the
    matrix operand of a `MatMul` in `q_proj` (`[in, out]`: see `_ROLE_OF`). Tensors with proper dotted names, and
    ones read from several modules, keep their names. Returns the new paths
    (stored name -> path) and one note per renamed tensor.
    """
    taken = {graph.paths.get(n, n) for n in graph.initializers}
    uses: dict[str, list[tuple[Node, int]]] = {}
    for node in graph.nodes:
        for i, name in enumerate(node.inputs):
            if name in graph.initializers and name not in graph.paths:
                uses.setdefault(name, []).append((node, i))
    out: dict[str, str] = {}
    notes: list[str] = []
    for name, readers in uses.items():
        if _is_path(name):
            continue
        scopes = {node.scope for node, _ in readers}
        roles = {_role(node, i) for node, i in readers}
        if len(scopes) != 1 or len(roles) != 1:
            continue
        scope, role = scopes.pop(), roles.pop()
        if not scope and len(readers) == 1:
            scope = _scope_of_name(readers[0][0].name)
        if not scope or role is None or not _is_path(scope + ".x"):
            continue
        path = f"{scope}.{role}"
        n = 2
        while path in taken:
            path = f"{scope}.{role}_{n}"
            n += 1
        taken.add(path)
        out[name] = path
        notes.append(f"named the stored tensor `{name}` `{path}` after the module that reads it")
    return out, notes


def _scope_of_name(name: str) -> str:
    """A module path from a node name that has no recorded scope: `conv1` stays,
    TensorFlow-style `model/conv1/Conv2D` drops the operator and reads `model.conv1`."""
    from linnet.sourcegen.names import clean_exporter_name

    parts = [p for p in re.split(r"[/:]", clean_exporter_name(name)) if p]
    if len(parts) > 1:
        parts = parts[:-1]
    cleaned = [re.sub(r"\W", "_", p).strip("_") for p in parts]
    if not cleaned or not all(_IDENT.match(p) for p in cleaned):
        return ""
    return ".".join(cleaned)


def _is_path(name: str) -> bool:
    parts = name.split(".")
    return len(parts) > 1 and all(_IDENT.match(p) or _DIGITS.match(p) for p in parts)
