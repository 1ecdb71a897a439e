"""A small structural matcher for operator chains in the importer graph.

Stage: used by the recovery passes (`linnet.sourcegen.patterns`). A pattern
is a tree of `Op`, `Var`, `Const` and `Either` nodes; `match(graph, value,
pattern)` walks backwards from `value` through the nodes producing each
operand and returns the bindings (`Var` names to value names, `Const`
captures to floats) and the matched nodes, or None.

Rules that keep recovery conservative:
- `Op` matches a node of that operator in the default domain (or the one
  given: `linnet` for a chain an earlier pass recovered) whose inputs
  match the sub-patterns in order (or, for `commutative` operators, in
  either order); attributes given in `attrs` must be equal;
- every intermediate value (a value made by a matched node other than the
  root) must be read only by matched nodes, so removing the chain changes
  nothing else;
- a `Var` bound twice must name the same value both times;
- `Const` matches a value whose every element equals the expected number
  within `rel` relative tolerance (constants are stored rounded to their
  dtype); `Const(None, capture="eps")` captures any scalar-like constant.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from linnet.sourcegen.graph import Graph, Node


class Pattern:
    """Base class of pattern nodes."""


class Var(Pattern):
    """Any value, bound to `name`; `check(graph, value_name)` may restrict it."""

    def __init__(self, name: str, check: Callable[[Graph, str], bool] | None = None) -> None:
        self.name = name
        self.check = check


class Const(Pattern):
    """A constant whose elements all equal `value` (within `rel`), or any constant
    when `value` is None; `capture` records the number under that name."""

    def __init__(
        self, value: float | None, *, rel: float = 1e-6, capture: str | None = None
    ) -> None:
        self.value = value
        self.rel = rel
        self.capture = capture


class Op(Pattern):
    """A node of operator `op` whose inputs match `inputs` (trailing inputs may be absent)."""

    def __init__(
        self,
        op: str,
        *inputs: Pattern,
        attrs: dict[str, Any] | None = None,
        commutative: bool = False,
        capture: str | None = None,
        check: Callable[[Node], bool] | None = None,
        domain: str = "",
    ) -> None:
        self.op = op
        self.domain = domain  # `linnet` for a node an earlier pass recovered
        self.inputs = inputs
        self.attrs = attrs or {}
        self.commutative = commutative
        self.capture = capture
        self.check = check


class Either(Pattern):
    """The first alternative that matches."""

    def __init__(self, *options: Pattern) -> None:
        self.options = options


class Bind(Pattern):
    """`inner`, with the matched value also bound to the variable `name`
    (a later `Var(name)` then matches the same value: shared subexpressions)."""

    def __init__(self, name: str, inner: Pattern) -> None:
        self.name = name
        self.inner = inner


class Product(Pattern):
    """A tree of `Mul` nodes, in any shape and order, whose leaves match `factors`.

    A leaf is an operand that is not a `Mul`, or a `Mul` whose value is also
    read elsewhere. The leaves must match the factors one to one.
    """

    def __init__(self, *factors: Pattern) -> None:
        self.factors = factors


class Peek(Pattern):
    """`inner` must match, but its nodes stay in the graph (a value shared with
    other chains, such as one attention mask read by every layer)."""

    def __init__(self, inner: Pattern) -> None:
        self.inner = inner


def mul(a: Pattern, b: Pattern, **kw: Any) -> Op:
    return Op("Mul", a, b, commutative=True, **kw)


def add(a: Pattern, b: Pattern, **kw: Any) -> Op:
    return Op("Add", a, b, commutative=True, **kw)


def maybe_cast(inner: Pattern) -> Pattern:
    """`inner`, possibly wrapped in a `Cast` (dtype round trips in mixed-precision exports)."""
    return Either(Op("Cast", inner), inner)


class Match:
    """The result of a successful match."""

    def __init__(self) -> None:
        self.vars: dict[str, str] = {}
        self.consts: dict[str, float] = {}
        self.nodes: list[Node] = []
        self.captured: dict[str, Node] = {}

    def copy(self) -> Match:
        m = Match()
        m.vars = dict(self.vars)
        m.consts = dict(self.consts)
        m.nodes = list(self.nodes)
        m.captured = dict(self.captured)
        return m


class Matcher:
    """Matching against one graph; caches its producer and consumer maps."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.refresh()

    def refresh(self) -> None:
        self.producers = self.graph.producers()
        self.consumers = self.graph.consumers()
        self.outputs = {o.name for o in self.graph.outputs}

    def constant(self, name: str) -> np.ndarray | None:
        if name in self.graph.constants:
            return self.graph.constants[name]
        if name in self.graph.initializers and name not in self.graph.paths:
            arr = self.graph.initializers[name]
            if arr.size <= 1:
                return arr
        node = self.producers.get(name)
        if node is not None and node.op in ("Cast", "Identity") and node.inputs:
            inner = self.constant(node.inputs[0])
            if inner is not None:
                return inner
        return None

    def match(self, value: str, pattern: Pattern) -> Match | None:
        m = self._match(value, pattern, Match(), root=True)
        if m is None:
            return None
        matched = {id(n) for n in m.nodes}
        for node in m.nodes:
            for out in node.outputs:
                if not out or out == value:
                    continue
                if out in self.outputs:
                    return None
                if any(id(user) not in matched for user in self.consumers.get(out, [])):
                    return None
        return m

    def _match(self, value: str, p: Pattern, m: Match, *, root: bool = False) -> Match | None:
        if isinstance(p, Var):
            bound = m.vars.get(p.name)
            if bound is not None:
                return m if bound == value else None
            if p.check is not None and not p.check(self.graph, value):
                return None
            out = m.copy()
            out.vars[p.name] = value
            return out
        if isinstance(p, Const):
            arr = self.constant(value)
            if arr is None or arr.size == 0 or arr.dtype.kind not in "fiub":
                return None
            flat = arr.reshape(-1).astype(np.float64)
            if not np.all(flat == flat[0]):
                return None
            v = float(flat[0])
            if p.value is not None and not _close(v, p.value, p.rel):
                return None
            out = m.copy()
            if p.capture is not None:
                out.consts[p.capture] = v
            return out
        if isinstance(p, Bind):
            bound = m.vars.get(p.name)
            if bound is not None:
                return m if bound == value else None
            r = self._match(value, p.inner, m, root=root)
            if r is None:
                return None
            r.vars[p.name] = value
            return r
        if isinstance(p, Peek):
            r = self._match(value, p.inner, m.copy())
            if r is None:
                return None
            r.nodes = list(m.nodes)
            return r
        if isinstance(p, Product):
            return self._product(value, p, m)
        if isinstance(p, Either):
            for option in p.options:
                r = self._match(value, option, m, root=root)
                if r is not None:
                    return r
            return None
        assert isinstance(p, Op)
        node = self.producers.get(value)
        if node is None or node.op != p.op or node.domain != p.domain:
            return None
        if any(node.attrs.get(k) != v for k, v in p.attrs.items()):
            return None
        if p.check is not None and not p.check(node):
            return None
        if any(n is node for n in m.nodes):
            return None
        inputs = [i for i in node.inputs]
        orders: list[Sequence[int]] = [range(len(p.inputs))]
        if p.commutative and len(p.inputs) == 2:
            orders.append((1, 0))
        for order in orders:
            if len(inputs) < len(p.inputs):
                break
            cur: Match | None = m.copy()
            assert cur is not None
            cur.nodes.append(node)
            if p.capture is not None:
                cur.captured[p.capture] = node
            for pi, ni in zip(range(len(p.inputs)), order, strict=True):
                if not inputs[ni]:
                    cur = None
                    break
                cur = self._match(inputs[ni], p.inputs[pi], cur)
                if cur is None:
                    break
            if cur is not None:
                return cur
        return None

    def _product(self, value: str, p: Product, m: Match) -> Match | None:
        tree: list[Node] = []
        in_tree: set[int] = set()
        leaves: list[str] = []

        def walk(v: str, top: bool) -> None:
            node = self.producers.get(v)
            single = top or len(self.consumers.get(v, [])) == 1
            if (
                node is not None
                and node.op == "Mul"
                and node.domain == ""
                and single
                and len(node.inputs) == 2
                and id(node) not in in_tree
            ):
                tree.append(node)
                in_tree.add(id(node))
                walk(node.inputs[0], False)
                walk(node.inputs[1], False)
            else:
                leaves.append(v)

        walk(value, True)
        if not tree or len(leaves) != len(p.factors):
            return None
        for order in itertools.permutations(range(len(leaves))):
            cur: Match | None = m.copy()
            assert cur is not None
            cur.nodes.extend(tree)
            for factor, li in zip(p.factors, order, strict=True):
                cur = self._match(leaves[li], factor, cur)
                if cur is None:
                    break
            if cur is not None:
                return cur
        return None

    def replace(self, m: Match, root: str, node: Node) -> None:
        """Remove the matched nodes and put `node` (making `root`) where the root node was."""
        nodes = self.graph.nodes
        root_node = self.producers[root]
        position = next(i for i, n in enumerate(nodes) if n is root_node)
        drop = {id(n) for n in m.nodes}
        # The chain as written stays attached: if the recovered node cannot be
        # translated (a shape the standard op does not take), translation falls
        # back to these nodes, so a recovery never makes an import fail.
        node.attrs["_fallback"] = [n for n in nodes if id(n) in drop]
        before = sum(1 for n in nodes[:position] if id(n) in drop)
        kept = [n for n in nodes if id(n) not in drop]
        kept.insert(position - before, node)
        self.graph.nodes[:] = kept
        # Update the producer and consumer maps in place (a full refresh per
        # replacement made recovery quadratic in the graph size).
        for gone in m.nodes:
            for out in gone.outputs:
                if self.producers.get(out) is gone:
                    del self.producers[out]
            for name in set(gone.inputs):
                users = self.consumers.get(name)
                if users is not None:
                    users[:] = [u for u in users if u is not gone]
        for out in node.outputs:
            self.producers[out] = node
        for name in node.inputs:
            if name:
                self.consumers.setdefault(name, []).append(node)


def _close(a: float, b: float, rel: float) -> bool:
    if a == b:
        return True
    return abs(a - b) <= rel * max(abs(a), abs(b))
