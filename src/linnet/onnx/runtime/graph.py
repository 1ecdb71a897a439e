"""Small whole-graph queries and edits on an exported ONNX graph, each in one pass.

Stage: helpers of the runtime's graph steps (`contract`, `inplace`). In: a
`GraphProto` of the main graph. Out: who makes and who reads each name,
what a node depends on, and batch edits (renames, dead-node removal).

Why one pass: an exported Llama graph has thousands of nodes and a state
member per layer; asking "who reads this state" by scanning the graph once
per state made the runtime's preparation quadratic (seconds at 22 layers).

Subgraphs (`Loop`, `If`, `Scan` bodies) may read the names of enclosing
graphs, so a node holding one reads every name its subgraphs read. Names are
unique across an exported model (the exporter's contract), so a subgraph's
own names never shadow outer ones.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import onnx
from onnx import numpy_helper


def subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            yield attr.g
        elif attr.type == onnx.AttributeProto.GRAPHS:
            yield from attr.graphs


def inner_reads(graph: onnx.GraphProto) -> set[str]:
    """Every name the nodes of `graph` and its subgraphs read, and its outputs."""
    names = {o.name for o in graph.output}
    for node in graph.node:
        names.update(node.input)
        for sub in subgraphs(node):
            names |= inner_reads(sub)
    return names


class GraphIndex:
    """Producers and readers of every name of a main graph (see the module docstring).

    `readers[name]` lists `(node index, as_data)`, `as_data` meaning the node reads
    the name only as its first input (not again, not inside a subgraph).
    """

    def __init__(self, graph: onnx.GraphProto) -> None:
        self.graph = graph
        self.nodes = list(graph.node)
        self.outputs = {o.name for o in graph.output}
        self.inputs = {v.name for v in graph.input} | {t.name for t in graph.initializer}
        self.producer: dict[str, int] = {}
        self.reads: list[set[str]] = []
        self.readers: dict[str, list[tuple[int, bool]]] = {}
        for index, node in enumerate(self.nodes):
            for out in node.output:
                if out:
                    self.producer[out] = index
            inner: set[str] = set()
            for sub in subgraphs(node):
                inner |= inner_reads(sub)
            direct = list(node.input)
            read = {n for n in direct if n} | inner
            self.reads.append(read)
            for name in read:
                as_data = direct[:1] == [name] and direct.count(name) == 1 and name not in inner
                self.readers.setdefault(name, []).append((index, as_data))

    def ancestors(self, index: int) -> set[int]:
        """Nodes whose outputs node `index` depends on, directly or not: they finish
        before it starts, so they may read a buffer it then overwrites."""
        found: set[int] = set()
        stack = list(self.reads[index])
        while stack:
            made_by = self.producer.get(stack.pop())
            if made_by is None or made_by in found:
                continue
            found.add(made_by)
            stack.extend(self.reads[made_by])
        return found


def rename_uses(graph: onnx.GraphProto, mapping: Mapping[str, str]) -> None:
    """Replace every read of a name in `mapping` (subgraphs included) by its new name."""
    if not mapping:
        return
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name in mapping:
                node.input[i] = mapping[name]
        for sub in subgraphs(node):
            rename_uses(sub, mapping)
            for out in sub.output:
                if out.name in mapping:
                    out.name = mapping[out.name]


def replace_nodes(graph: onnx.GraphProto, nodes: list[onnx.NodeProto]) -> None:
    """Make `nodes` (copied) the graph's node list: repeated fields take no slice assignment."""
    kept = []
    for node in nodes:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        kept.append(copy)
    del graph.node[:]
    graph.node.extend(kept)


def remove_dead_nodes(graph: onnx.GraphProto) -> None:
    """Drop every node none of whose outputs is read or a graph output, transitively."""
    index = GraphIndex(graph)
    uses = {name: len(readers) for name, readers in index.readers.items()}
    for name in index.outputs:
        uses[name] = uses.get(name, 0) + 1
    dead: set[int] = set()

    def unused(i: int) -> bool:
        return all(uses.get(out, 0) == 0 for out in index.nodes[i].output if out)

    stack = [i for i in range(len(index.nodes)) if unused(i)]
    while stack:
        i = stack.pop()
        if i in dead:
            continue
        dead.add(i)
        for name in index.reads[i]:
            uses[name] -= 1
            made_by = index.producer.get(name)
            if uses[name] == 0 and made_by is not None and made_by not in dead and unused(made_by):
                stack.append(made_by)
    if dead:
        replace_nodes(graph, [n for i, n in enumerate(index.nodes) if i not in dead])


def collapse_reshapes(graph: onnx.GraphProto) -> bool:
    """Make every `Reshape` whose data is another `Reshape`'s output read that one's data
    instead, when its target shape means the same on either (`allowzero=1`, or a constant
    shape without zeros: a 0 would copy a size of its input), then drop the Reshapes left
    unread. `reshape(reshape(x, a), b)` is `reshape(x, b)`: the same elements in the same
    order, so the graph computes the same values with fewer nodes (a decode step's head
    splits and merges, `[1, 1, N * D]` -> `[1, 1, N, D]` -> `[1, N, 1, D]`, become one). True
    when a node changed."""
    constants: dict[str, onnx.TensorProto] = {t.name: t for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            constants[node.output[0]] = node.attribute[0].t
    reshapes: dict[str, onnx.NodeProto] = {}
    changed = False
    for node in graph.node:
        if node.op_type != "Reshape" or node.domain not in ("", "ai.onnx"):
            continue
        source = reshapes.get(node.input[0])
        if source is not None and _shape_is_absolute(node, constants):
            node.input[0] = source.input[0]
            changed = True
        reshapes[node.output[0]] = node
    if changed:
        remove_dead_nodes(graph)
    return changed


def _shape_is_absolute(node: onnx.NodeProto, constants: Mapping[str, onnx.TensorProto]) -> bool:
    """Whether a `Reshape`'s target shape does not depend on its data's shape."""
    if any(a.name == "allowzero" and a.i == 1 for a in node.attribute):
        return True
    shape = constants.get(node.input[1]) if len(node.input) > 1 else None
    if shape is None:
        return False
    return 0 not in numpy_helper.to_array(shape).tolist()
