"""The refusal policy: a model the importer cannot map stops the import, typed.

Stage: before pattern recovery (the operator check) and after translation
(the translators' refusals). In: an importer `Graph` and the `Registry`. Out:
nothing, or an exception whose type says what went wrong, so callers (the
node suite, a CLI) tell "Linnet cannot express this model" from a bug by type
rather than by message text:

- `ImportRefusedError`: the model uses something Linnet has no counterpart
  for (a graph input of a dtype Linnet lacks, ...); nothing is written.
- `UnmappedOperatorsError` (an `ImportRefusedError`): nodes without a
  translation, each listed with its name, domain, operator and reason in
  `.refusals` and in the one message.

Why check before recovery: recovery drops nodes whose results nothing reads,
so an unmapped node whose result is unused would vanish and the import would
succeed silently (the issue: out-of-table cases never import silently). Every
node, including those inside `If`/`Loop`/`Scan` bodies, is checked against the
registry first; dead *mapped* nodes may still be dropped later with a note.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from linnet.errors import LinnetError
from linnet.sourcegen.graph import Graph, Node
from linnet.sourcegen.translate import Refusal, Registry

__all__ = [
    "ImportRefusedError",
    "UnmappedOperatorsError",
    "check_mapped",
    "refusal_error",
    "unmapped_nodes",
]

NO_TRANSLATION = "no translation for this operator"


class ImportRefusedError(LinnetError):
    """The model uses something Linnet cannot express; nothing was written."""


class UnmappedOperatorsError(ImportRefusedError):
    """Nodes the importer cannot translate; `.refusals` lists each one.

    Each `Refusal` carries the node (`.name`, `.domain`, `.op`) and `.reason`.
    """

    def __init__(self, message: str, refusals: Sequence[Refusal]) -> None:
        super().__init__(message)
        self.refusals: tuple[Refusal, ...] = tuple(refusals)


def all_nodes(graph: Graph) -> Iterator[Node]:
    """Every node of `graph` and, depth first, of the subgraphs its nodes hold."""
    for node in graph.nodes:
        yield node
        for value in node.attrs.values():
            bodies = value if isinstance(value, list | tuple) else (value,)
            for body in bodies:
                if isinstance(body, Graph):
                    yield from all_nodes(body)


def unmapped_nodes(graph: Graph, registry: Registry) -> list[Refusal]:
    """A refusal for each node (at any depth) whose `(domain, op)` has no translator."""
    return [
        Refusal(node, NO_TRANSLATION)
        for node in all_nodes(graph)
        if registry.lookup(node.domain, node.op) is None
    ]


def check_mapped(graph: Graph, registry: Registry, label: str) -> None:
    """Raise `UnmappedOperatorsError` when any node, used or not, has no translator."""
    refusals = unmapped_nodes(graph, registry)
    if refusals:
        raise refusal_error(label, refusals)


def refusal_error(label: str, refusals: Sequence[Refusal]) -> UnmappedOperatorsError:
    """One error naming every refused node and its operator (`label` names the model)."""
    by_op: dict[str, int] = {}
    for r in refusals:
        by_op[r.node.qualified_op] = by_op.get(r.node.qualified_op, 0) + 1
    summary = ", ".join(f"{op} ({n})" for op, n in sorted(by_op.items()))
    lines = [
        f"cannot import {label}: {len(refusals)} node(s) have no Linnet translation: {summary}"
    ]
    lines += [f"  - {r}" for r in refusals]
    return UnmappedOperatorsError("\n".join(lines), refusals)
