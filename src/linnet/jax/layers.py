"""Which layers of an entry compute alike: one traced function for all of them.

Stage: an option of the JAX code generator (`linnet.jax.codegen.generate(...,
share_layers=True)`, what `StableHLORunner` asks for). Lowering unrolls a
`static for` over a `sub` array, so a 22-layer Llama entry is 22 copies of one
layer's ops, and tracing the generated source would trace (and lower to MLIR)
each copy again. Here the entry's top-level ops are cut into one run per layer
(`linnet.jax.remat.layer_segments`, by the weight paths they compute with), and
runs whose ops are the same up to which values they read from outside are
grouped. The code generator emits each group's first run as one nested function
of those outside values under `jax.jit` and calls it for every run of the
group: JAX traces it once and lowers it once (a private `func.func` called per
layer), and XLA inlines the calls again, so what XLA compiles and what it
computes are unchanged.

Two runs are alike when, op for op, the kinds, attributes (a `const`'s value
included), result types and regions agree and each operand is the same value
*of the run* (by position), or a constant of the same value, or an outside value
of the same type at the same position in the order of first read. A run that
computes something later runs reuse (a table common subexpression elimination
left in the first layer) differs from the others and is emitted inline.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from linnet.errors import LinnetError
from linnet.ir.core import Function, Op, Value
from linnet.ir.regions import free_values, walk
from linnet.jax.remat import LayerRemat, layer_segments
from linnet.records import record


@record(eq=False)
class Run:
    """Top-level ops `[start, stop)` of one layer, and what they read and give."""

    start: int
    stop: int
    key: tuple[Any, ...]
    outside: list[Value]
    """Values read from before the run (constants aside), in order of first read."""
    local: list[Value]
    """Values the run defines, by position."""


@record(eq=False)
class Group:
    """Runs computed alike: one function, called once per run."""

    runs: list[Run]
    outputs: list[int]
    """Positions (in `Run.local`) of the values some run of the group gives to later ops."""


def _attr_key(value: object) -> object:
    if isinstance(value, np.ndarray):
        return (value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, tuple):
        return tuple(_attr_key(v) for v in value)
    return repr(value)


def _run(ops: Sequence[Op], start: int, stop: int, constants: dict[Value, object]) -> Run:
    local: dict[Value, int] = {}
    outside: dict[Value, int] = {}
    order: list[Value] = []
    defined: list[Value] = []

    def ref(value: Value) -> object:
        if value in local:
            return ("local", local[value])
        if value in constants:
            return ("const", constants[value])
        if value not in outside:
            outside[value] = len(order)
            order.append(value)
        return ("outside", outside[value], value.type)

    def define(value: Value) -> None:
        local[value] = len(defined)
        defined.append(value)

    def visit(op: Op) -> object:
        operands = tuple(ref(v) for v in op.operands)
        attrs = tuple(sorted((k, _attr_key(v)) for k, v in op.attrs.items()))
        regions = []
        for region in op.regions:
            for arg in region.args:
                define(arg)
            inner = tuple(visit(o) for o in region.ops)
            regions.append(
                (tuple(a.type for a in region.args), inner, tuple(ref(v) for v in region.results))
            )
        for result in op.results:
            define(result)
        return (op.kind, attrs, operands, tuple(r.type for r in op.results), tuple(regions))

    key = tuple(visit(op) for op in ops[start:stop])
    return Run(start, stop, key, order, defined)


def shared_layers(fn: Function, ops: Sequence[Op]) -> list[Group]:
    """Groups of at least two alike layer runs among the top-level `ops` of `fn`, in order
    of their first run; none when the entry has no layer array."""
    try:
        segments = layer_segments(ops, LayerRemat())
    except LinnetError:
        return []
    constants: dict[Value, object] = {}
    for op in walk(fn.body):
        if op.kind == "const":
            constants[op.results[0]] = _attr_key(op.attrs["value"])
    last_use: dict[Value, int] = {}
    for position, op in enumerate(ops):
        for value in free_values(op):
            last_use[value] = position
    kept = {*fn.results, *fn.state_updates.values()}
    grouped: dict[tuple[Any, ...], list[Run]] = {}
    for number, segment in enumerate(segments):
        run = _run(ops, segment.start, segment.stop, constants)
        if number == len(segments) - 1 and run.key not in grouped:
            # The last layer's run ends at its last weight, where the others end where the
            # next layer starts: its closing ops (a residual add) may follow.
            for other in {len(k) for k in grouped}:
                if segment.start + other <= len(ops):
                    longer = _run(ops, segment.start, segment.start + other, constants)
                    if longer.key in grouped:
                        run = longer
                        break
        grouped.setdefault(run.key, []).append(run)
    groups = []
    for runs in grouped.values():
        if len(runs) < 2:
            continue
        outputs: set[int] = set()
        for run in runs:
            for position, value in enumerate(run.local):
                if value in kept or last_use.get(value, -1) >= run.stop:
                    outputs.add(position)
        groups.append(Group(runs, sorted(outputs)))
    return sorted(groups, key=lambda g: g.runs[0].start)
