"""A dynamic Linnet export's size guards and run-time clauses, read back as a `where` clause.

Why: a dynamic export (`linnet.onnx.export.guards`) makes the graph fail
outside the sizes its folded decisions hold for: each guard is a `Reshape`
named `linnet guard <i>: ...` of an empty tensor to a size computed from the
input shapes, the guards' sum (a zero) is added to each output's shape, and
every output is reshaped to that. No importer translation exists for a
reshape to a computed size, and the guard is no computation anyway: it is a
constraint on the generics, and the model's metadata holds it as data
(`linnet.where.<N>`: the guards and the entry's own `where` clauses on
dynamic generics, in `dim_to_json` form). So the importer drops the guard
nodes (each output's guarded `Reshape` becomes an `Identity`; the nodes only
the guards read go too) and states the clauses in the imported entry's
`where` clause, where the checker and every backend enforce them.

A guard that does not have this exact shape is left alone, and the import
then refuses it as before, naming the guard node.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import onnx

from linnet.errors import LinnetError
from linnet.sourcegen.graph import Graph, Node

GUARD_PREFIX = "linnet guard "
RELATIONS = ("==", "!=", "<", "<=", ">", ">=")

WhereData = tuple[object, str, object, str]
"""One clause as data: lhs and rhs in `dim_to_json` form, the relation, its text."""


def where_data(proto: onnx.ModelProto) -> list[WhereData]:
    """The `linnet.where.<N>` clauses of a Linnet export, in order (LinnetError if malformed)."""
    found: list[tuple[int, WhereData]] = []
    for p in proto.metadata_props:
        if not p.key.startswith("linnet.where."):
            continue
        index = p.key.removeprefix("linnet.where.")
        try:
            data = json.loads(p.value)
            clause = (data["lhs"], str(data["rel"]), data["rhs"], str(data["text"]))
        except (ValueError, KeyError, TypeError):
            raise LinnetError(f"metadata `{p.key}` is not a size clause: {p.value!r}") from None
        if not index.isdigit() or clause[1] not in RELATIONS:
            raise LinnetError(f"metadata `{p.key}` is not a size clause: {p.value!r}")
        found.append((int(index), clause))
    return [clause for _, clause in sorted(found, key=lambda f: f[0])]


def strip_guards(graph: Graph) -> int:
    """Drop the guard checks of a dynamic Linnet export from `graph`; how many guards.

    Changes nothing (and returns 0) unless every guard node and every use of
    their sum has the shape `linnet.onnx.export.guards` writes.
    """
    guards = [n for n in graph.nodes if n.op == "Reshape" and n.name.startswith(GUARD_PREFIX)]
    if not guards:
        return 0
    producers, consumers = graph.producers(), graph.consumers()
    zero = _zero(guards, consumers)
    if zero is None:
        return 0
    machinery: set[int] = {id(n) for n in guards}
    unguarded: dict[int, Node] = {}
    for add in consumers.get(zero.outputs[0], []):
        if add.op != "Add" or len(add.inputs) != 2 or zero.outputs[0] not in add.inputs:
            return 0
        shape = producers.get(add.inputs[0] if add.inputs[1] == zero.outputs[0] else add.inputs[1])
        if shape is None or shape.op != "Shape" or len(shape.inputs) != 1 or shape.attrs:
            return 0
        for reshape in consumers.get(add.outputs[0], []):
            if reshape.op != "Reshape" or reshape.inputs != (shape.inputs[0], add.outputs[0]):
                return 0
            unguarded[id(reshape)] = Node(
                "Identity",
                reshape.domain,
                reshape.name,
                (shape.inputs[0],),
                reshape.outputs,
                {},
                reshape.opset,
                reshape.scope,
            )
        machinery |= {id(add), id(shape)}
    for node in _between(guards, zero, consumers):
        machinery.add(id(node))
    graph.nodes = [unguarded.get(id(n), n) for n in graph.nodes]
    _drop_unused(graph, machinery, producers)
    return len(guards)


def _zero(guards: list[Node], consumers: dict[str, list[Node]]) -> Node | None:
    """The `ReduceSum` that adds the guards' empty tensors up (directly or via `Concat`)."""
    sums: set[int] = set()
    found: Node | None = None
    for guard in guards:
        user = _only_user(guard, consumers)
        if user is not None and user.op == "Concat":
            user = _only_user(user, consumers)
        if user is None or user.op != "ReduceSum":
            return None
        sums.add(id(user))
        found = user
    return found if len(sums) == 1 else None


def _only_user(node: Node, consumers: dict[str, list[Node]]) -> Node | None:
    users = consumers.get(node.outputs[0], []) if len(node.outputs) == 1 else []
    return users[0] if len(users) == 1 else None


def _between(guards: list[Node], zero: Node, consumers: dict[str, list[Node]]) -> Iterator[Node]:
    """The nodes from the guards to their sum (a `Concat` when there are several)."""
    yield zero
    for guard in guards:
        for user in consumers.get(guard.outputs[0], []):
            if user.op == "Concat":
                yield user


def _drop_unused(graph: Graph, machinery: set[int], producers: dict[str, Node]) -> None:
    """Remove the guard machinery, then every node it alone read (its size computations)."""
    doomed = set(machinery)
    cone = _ancestors([n for n in graph.nodes if id(n) in machinery], producers)
    kept_outputs = {o.name for o in graph.outputs}
    while True:
        used = set(kept_outputs)
        for node in graph.nodes:
            if id(node) not in doomed:
                used.update(node.inputs)
                used.update(_subgraph_reads(node))
        more = {
            id(n)
            for n in cone
            if id(n) not in doomed and not any(out in used for out in n.outputs if out)
        }
        if not more:
            break
        doomed |= more
    graph.nodes = [n for n in graph.nodes if id(n) not in doomed]


def _ancestors(nodes: list[Node], producers: dict[str, Node]) -> list[Node]:
    seen: dict[int, Node] = {}
    stack = list(nodes)
    while stack:
        node = stack.pop()
        for name in node.inputs:
            producer = producers.get(name)
            if producer is not None and id(producer) not in seen:
                seen[id(producer)] = producer
                stack.append(producer)
    return list(seen.values())


def _subgraph_reads(node: Node) -> Iterator[str]:
    """Every value a subgraph attribute (`If`, `Loop`, `Scan`) reads, outer ones included."""
    for value in node.attrs.values():
        if isinstance(value, Graph):
            for inner in value.nodes:
                yield from inner.inputs
                yield from _subgraph_reads(inner)
