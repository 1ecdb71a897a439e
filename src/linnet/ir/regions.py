"""Walking Core IR regions: every op in program order, and the values a region reads.

Stage: shared by every backend (the PyTorch runner and code generator, the ONNX
runtime's contract, the JAX code generator). Input: a `Region` or an `Op`.
Output: ops in program order (nested regions included) or sets of values.
Values are SSA and nested regions may read values of the regions around
them (architecture.md "Core IR"), so "what does this op read" is its operands
plus whatever its regions read from outside.
"""

from __future__ import annotations

from collections.abc import Iterator

from linnet.ir.core import Function, Op, Region, Value


def walk(region: Region) -> Iterator[Op]:
    """Every op of `region` and of its nested regions, in program order."""
    for op in region.ops:
        yield op
        for inner in op.regions:
            yield from walk(inner)


def free_values(op: Op) -> set[Value]:
    """Values an op reads that it does not define: operands plus enclosing reads of its regions."""
    used: set[Value] = set(op.operands)
    for region in op.regions:
        used |= region_free_values(region)
    return used


def region_free_values(region: Region) -> set[Value]:
    """Values a region reads from its enclosing regions."""
    defined: set[Value] = set(region.args)
    used: set[Value] = set()
    for op in region.ops:
        used |= free_values(op) - defined
        defined.update(op.results)
    used |= set(region.results) - defined
    return used


def paths_read(fn: Function, kind: str) -> list[str]:
    """Distinct paths of `kind` (`param`, `buffer`, `state`) the function reads, in walk order."""
    seen: dict[str, None] = {}
    for op in walk(fn.body):
        if op.kind == kind:
            seen.setdefault(str(op.attrs["path"]), None)
    return list(seen)


def clause_region(op: Op) -> Region | None:
    """The gradient clause of a `call` (language-extensions 3.4), or None.

    A call of an op with a clause lists the operand positions it differentiates in
    attr `wrt`; its clause is the region after the body.
    """
    if op.kind != "call" or "wrt" not in op.attrs or len(op.regions) < 2:
        return None
    return op.regions[1]
