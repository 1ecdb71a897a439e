"""State footprints of functions (language.md 11.5, 12.6).

Stage: on demand, after checking (`CheckedProgram.state_footprint`). In: the
direct state reads/writes and call edges the body checker recorded. Out: the
transitive footprint, with paths relative to the function's block, so a
lowering can thread exactly the touched state through each entry.
"""

from __future__ import annotations

from linnet.check.decls import FnInfo
from linnet.check.program import StateFootprint

EMPTY = StateFootprint(frozenset(), frozenset())


def footprint(fn: FnInfo, cache: dict[FnInfo, StateFootprint]) -> StateFootprint:
    """The footprint of `fn`; calls are acyclic (E2119), cycles yield partial sets."""
    found = cache.get(fn)
    if found is not None:
        return found
    cache[fn] = EMPTY  # guards against cycles in a program that had E2119
    reads: set[tuple[str, ...]] = {(m.name,) for m in fn.state_reads}
    reads |= fn.child_state_reads
    writes: set[tuple[str, ...]] = {(m.name,) for m in fn.state_writes}
    for edge in fn.calls:
        inner = footprint(edge.callee, cache)
        prefix = edge.receiver_path
        reads.update((*prefix, *path) for path in inner.reads)
        writes.update((*prefix, *path) for path in inner.writes)
    result = StateFootprint(frozenset(reads), frozenset(writes))
    cache[fn] = result
    return result
