"""Pattern recovery: decomposed operator chains back to standard-library calls.

Stage: between building the importer graph and translating it. In: a `Graph`
whose vocabulary is ONNX's operator set (domain `""`; the torch.export and
JAX importers map their operators onto the same names). Out: the same graph
with each recognised chain replaced by one node of the `linnet` domain
(`linnet::rms_norm`, `linnet::silu`, `linnet::softmax`, ...), whose
translator emits the standard-library call; and one note per recovery.

Every pass matches exact structure and exact constants: a chain whose
constant differs (a softmax without the max subtraction is still a softmax,
but an RMS norm with `x * x` replaced by `x * y` is not) stays as written.
A chain is replaced only when its intermediate values are used nowhere else.
Recovery is speculative: the replaced nodes stay attached to the new node,
and when its translator finds a shape the standard op does not take (checked
on the exact symbolic shapes translation knows), the chain is translated as
written instead.
"""

from __future__ import annotations

from linnet.sourcegen.graph import Graph


def recover(graph: Graph) -> list[str]:
    """Run every recovery pass on `graph` in place.

    Returns notes about the graph as a whole; each recovered node carries its
    own note (`attrs["_note"]`), which translation reports once the standard
    call is emitted (or replaces with why the chain was kept as written).
    """
    from linnet.sourcegen.patterns.passes import PASSES

    notes: list[str] = []
    for run in PASSES:
        notes.extend(run(graph))
    removed = drop_dead(graph)
    if removed:
        notes.append(f"dropped {removed} nodes whose results nothing uses")
    return notes


def drop_dead(graph: Graph) -> int:
    """Remove nodes none of whose outputs is read (by a node, a kept chain or the graph)."""
    removed = 0
    while True:
        used = {o.name for o in graph.outputs}
        for node in graph.nodes:
            used.update(node.inputs)
            for inner in node.attrs.get("_fallback") or ():
                used.update(inner.inputs)
            used.update(_subgraph_reads(node.attrs))
        kept = [n for n in graph.nodes if any(o and o in used for o in n.outputs)]
        if len(kept) == len(graph.nodes):
            return removed
        removed += len(graph.nodes) - len(kept)
        graph.nodes[:] = kept


def _subgraph_reads(attrs: dict[str, object]) -> set[str]:
    """Names that subgraph attributes (If/Loop/Scan bodies) read, at any depth.

    A body may read values of the enclosing graph by name, so the nodes making
    them are live even when no node of this graph lists them as inputs.
    """
    reads: set[str] = set()
    for value in attrs.values():
        bodies = value if isinstance(value, list | tuple) else (value,)
        for body in bodies:
            if isinstance(body, Graph):
                for node in body.nodes:
                    reads.update(node.inputs)
                    reads.update(_subgraph_reads(node.attrs))
                reads.update(o.name for o in body.outputs)
    return reads
