"""KV-cache writes as scatters that ONNX Runtime can run in place on the state buffer.

Stage: the runtime's step between lowering and `ModelProto` (`model.OnnxModel.export`).
In: the lowered entry and the graph the exporter made of it. Out: the same
graph, with each cache write that sets a state member computed by a scatter
into the old state instead of the canonical body of `std.nn.cache`.

Why: the canonical bodies (stdlib/nn/cache.linnet) select over every cache
position, so their ONNX form (`Where`) reads and writes the whole cache on
every decode step. `contract` binds one buffer as a state input and its
next-state output when the only writer is a scatter, which then writes just
the new rows (see `contract` for the measurement). The rewrite is keyed on
the Core IR, never on the exporter's node patterns: a `call` of
`std.nn.cache::write_at` / `write_span` / `write_rows` / `write_slots` whose cache
operand is the `state` read of a member and whose result is that member's new
value. Its `value`, `at` (and `slots`) operands are made extra results of the
function before export (so the exporter names them as graph outputs, per its
contract), and those outputs are taken off again here.

The scatter computes the canonical function exactly, for every `at`: row `n`
of the value goes to position `(at + n) mod S`; rows outside `[0, S)` write
back the old value of that position instead (a `GatherElements` of the old
state, which the scatter depends on, so it runs first). For `N <= S` the
positions `(at + n) mod S` are distinct and none of the out-of-range ones
is a position inside the span, so no position is written twice. `write_rows`
writes row `b`'s one position `at[b] mod S` the same way (one position per row,
so none twice). `write_slots` (continuous batching: `prefill_slots` and
`decode_slots` of the decoder examples) keeps the members whose slot is a row
(`NonZero` of `0 <= slot < B`: a slot outside writes nowhere, as the canonical
body) and scatters member `m`'s span into row `slots[m]` with `ScatterND`, the
positions as for `write_span`; the slots must be distinct, as the canonical body
requires (duplicates give garbage there, another garbage here). Spans longer
than the cache, bf16 caches (`Where` lacks bf16 kernels in some ONNX Runtime
versions) and writes inside loops keep the canonical form.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from linnet.errors import InternalError
from linnet.ir.core import Function, Value
from linnet.onnx.runtime.graph import GraphIndex, remove_dead_nodes, rename_uses, replace_nodes
from linnet.records import record

WRITES = frozenset(
    {
        "std.nn.cache::write_at",
        "std.nn.cache::write_span",
        "std.nn.cache::write_rows",
        "std.nn.cache::write_slots",
    }
)
SLOTS = "std.nn.cache::write_slots"
_DTYPES = frozenset({"f16", "f32", "f64"})


@record(eq=False)
class CacheWrite:
    """One cache write found in the IR: the state path, the operands to probe, and the
    cache length `S` (axis 2 of the state); for `write_slots`, `slots` and the cache's
    row count `B` (axis 0)."""

    path: str
    value: Value
    at: Value
    size: int
    slots: Value | None = None
    rows: int = 0

    @property
    def probes(self) -> tuple[Value, ...]:
        """The operands made extra results of the function, in order."""
        return (self.value, self.at) if self.slots is None else (self.value, self.at, self.slots)


def find_writes(fn: Function) -> list[CacheWrite]:
    """The top-level cache writes of `fn` that set a state member from its own old value."""
    reads = {op.results[0]: str(op.attrs["path"]) for op in fn.body.ops if op.kind == "state"}
    found: list[CacheWrite] = []
    for op in fn.body.ops:
        callee = op.attrs.get("callee")
        if op.kind != "call" or callee not in WRITES:
            continue
        if callee == SLOTS and len(op.operands) == 4:
            cache, value, slots, at = op.operands
            path = reads.get(cache)
            if path is None or fn.state_updates.get(path) is not op.results[0]:
                continue
            span, size = value.type.shape[2], cache.type.shape[2]
            if cache.type.dtype in _DTYPES and at.type.shape == () and span <= size:
                found.append(CacheWrite(path, value, at, size, slots, cache.type.shape[0]))
            continue
        if len(op.operands) != 3:
            continue
        cache, value, at = op.operands
        path = reads.get(cache)
        if path is None or fn.state_updates.get(path) is not op.results[0]:
            continue
        span, size = value.type.shape[2], cache.type.shape[2]
        # write_at / write_span: one position for every row; write_rows: one per row
        rows = op.attrs["callee"] == "std.nn.cache::write_rows"
        at_shape = (cache.type.shape[0],) if rows else ()
        if cache.type.dtype in _DTYPES and at.type.shape == at_shape and span <= size:
            found.append(CacheWrite(path, value, at, size))
    return found


def with_probes(fn: Function, writes: Sequence[CacheWrite]) -> Function:
    """`fn` with the probed operands of every write (`CacheWrite.probes`) appended to its
    results."""
    extra = tuple(v for w in writes for v in w.probes)
    return Function(fn.name, fn.inputs, fn.body, fn.results + extra, dict(fn.state_updates))


def rewrite(
    proto: onnx.ModelProto,
    results: int,
    writes: Sequence[CacheWrite],
    names: Mapping[str, tuple[str, str]],
) -> None:
    """Replace each write of `writes` in `proto` (in place) by a scatter.

    `proto` was exported from `with_probes(fn, writes)`, whose first `results`
    outputs are `fn`'s; `names` maps each state path to its (`state<N>`,
    `next_state<N>`) graph names.
    """
    graph = proto.graph
    probes = {f"output{results + i}" for i in range(sum(len(w.probes) for w in writes))}
    state_outputs = {names[w.path][1] for w in writes}
    index = GraphIndex(graph)
    # every probe and state output is an `Identity` of the value it names
    copied: dict[str, str] = {}
    dropped: set[int] = set()
    for name in probes | state_outputs:
        made_by = index.producer.get(name)
        if made_by is None or index.nodes[made_by].op_type != "Identity":
            raise InternalError(f"graph output `{name}` is not an Identity of a value")
        copied[name] = index.nodes[made_by].input[0]
        dropped.add(made_by)
    before: dict[int, list[onnx.NodeProto]] = {}
    renames: dict[str, str] = {}
    offset = results
    for number, write in enumerate(writes):
        state, next_state = names[write.path]
        probed = [copied[f"output{offset + i}"] for i in range(len(write.probes))]
        offset += len(write.probes)
        written = copied[next_state]
        position = index.producer.get(written)
        if position is None:
            raise InternalError(f"nothing in the exported graph makes `{written}`")
        prefix = f"inplace{number}_"
        if write.slots is None:
            nodes = _scatter(prefix, state, probed[0], probed[1], next_state, write)
        else:
            nodes = _scatter_slots(prefix, state, probed, next_state, write)
        before.setdefault(position, []).extend(nodes)
        renames[written] = next_state
    kept: list[onnx.NodeProto] = []
    for i, node in enumerate(index.nodes):
        kept.extend(before.get(i, []))
        if i not in dropped:
            kept.append(node)
    replace_nodes(graph, kept)
    rename_uses(graph, renames)
    for out in list(graph.output):
        if out.name in probes:
            graph.output.remove(out)
    remove_dead_nodes(graph)


def _scatter(
    prefix: str, state: str, value: str, at: str, out: str, write: CacheWrite
) -> list[onnx.NodeProto]:
    """Nodes writing `value` into `state` at rows `(at + n) mod S` (module docstring)."""
    batch, heads, span, width = write.value.type.shape
    size = write.size

    def name(s: str) -> str:
        return prefix + s

    def const(s: str, array: np.ndarray[Any, Any]) -> onnx.NodeProto:
        return helper.make_node(
            "Constant", [], [name(s)], value=numpy_helper.from_array(array, name(s))
        )

    at_type = write.at.type.dtype
    cast = (
        helper.make_node("Cast", [at], [name("at")], to=TensorProto.INT64)
        if at_type != "i64"
        else helper.make_node("Identity", [at], [name("at")])
    )
    if write.at.type.shape:  # write_rows: row b's one position is at[b]
        positions, rows = name("at"), 1
        offsets: list[onnx.NodeProto] = []
    else:  # write_span: the span's rows at at + n
        positions, rows = name("positions"), span
        offsets = [
            const("rows", np.arange(span, dtype=np.int64)),
            helper.make_node("Add", [name("at"), name("rows")], [positions]),
        ]
    block = [batch, 1, 1, 1] if write.at.type.shape else [1, 1, span, 1]
    return [
        const("size", np.array(size, np.int64)),
        const("zero", np.array(0, np.int64)),
        const("shape", np.array(block, np.int64)),
        const("full", np.array([batch, heads, rows, width], np.int64)),
        cast,
        *offsets,
        helper.make_node("Mod", [positions, name("size")], [name("wrapped")]),
        helper.make_node("GreaterOrEqual", [positions, name("zero")], [name("low")]),
        helper.make_node("Less", [positions, name("size")], [name("high")]),
        helper.make_node("And", [name("low"), name("high")], [name("inside")]),
        helper.make_node("Reshape", [name("wrapped"), name("shape")], [name("index1")]),
        helper.make_node("Expand", [name("index1"), name("full")], [name("index")]),
        helper.make_node("Reshape", [name("inside"), name("shape")], [name("mask")]),
        helper.make_node("GatherElements", [state, name("index")], [name("old")], axis=2),
        helper.make_node("Where", [name("mask"), value, name("old")], [name("rows_new")]),
        helper.make_node(
            "ScatterElements", [state, name("index"), name("rows_new")], [out], axis=2
        ),
    ]


def _scatter_slots(
    prefix: str, state: str, probed: Sequence[str], out: str, write: CacheWrite
) -> list[onnx.NodeProto]:
    """Nodes writing member `m`'s span of `value` into row `slots[m]` of `state` at
    positions `(at + n) mod S`, for the members whose slot is a row (module docstring)."""
    value, at, slots = probed
    assert write.slots is not None
    _, heads, span, _ = write.value.type.shape
    slots_type = write.slots.type.dtype

    def name(s: str) -> str:
        return prefix + s

    def const(s: str, array: np.ndarray[Any, Any]) -> onnx.NodeProto:
        return helper.make_node(
            "Constant", [], [name(s)], value=numpy_helper.from_array(array, name(s))
        )

    def as_i64(source: str, dtype: str, target: str) -> onnx.NodeProto:
        if dtype == "i64":
            return helper.make_node("Identity", [source], [name(target)])
        return helper.make_node("Cast", [source], [name(target)], to=TensorProto.INT64)

    return [
        const("zero", np.array(0, np.int64)),
        const("batch", np.array(write.rows, np.int64)),
        const("size", np.array(write.size, np.int64)),
        const("steps", np.arange(span, dtype=np.int64)),
        const("heads", np.arange(heads, dtype=np.int64).reshape(1, heads, 1, 1)),
        const("flat", np.array([-1], np.int64)),
        const("row_shape", np.array([-1, 1, 1, 1], np.int64)),
        const("step_shape", np.array([1, 1, span, 1], np.int64)),
        const("tail", np.array([heads, span, 1], np.int64)),
        as_i64(slots, slots_type, "slots"),
        as_i64(at, write.at.type.dtype, "at"),
        # the members whose slot is a row: k -> member keep[k]
        helper.make_node("GreaterOrEqual", [name("slots"), name("zero")], [name("low")]),
        helper.make_node("Less", [name("slots"), name("batch")], [name("high")]),
        helper.make_node("And", [name("low"), name("high")], [name("valid")]),
        helper.make_node("NonZero", [name("valid")], [name("nonzero")]),
        helper.make_node("Reshape", [name("nonzero"), name("flat")], [name("keep")]),
        helper.make_node("Gather", [name("slots"), name("keep")], [name("kept")], axis=0),
        helper.make_node("Gather", [value, name("keep")], [name("spans")], axis=0),
        # positions at + n, wrapped into the cache; those outside keep their old value
        helper.make_node("Add", [name("at"), name("steps")], [name("positions")]),
        helper.make_node("Mod", [name("positions"), name("size")], [name("wrapped")]),
        helper.make_node("GreaterOrEqual", [name("positions"), name("zero")], [name("p_low")]),
        helper.make_node("Less", [name("positions"), name("size")], [name("p_high")]),
        helper.make_node("And", [name("p_low"), name("p_high")], [name("inside")]),
        helper.make_node("Reshape", [name("inside"), name("step_shape")], [name("mask")]),
        # index [K, H, N, 3] = (slot, head, position)
        helper.make_node("Shape", [name("kept")], [name("count")]),
        helper.make_node("Concat", [name("count"), name("tail")], [name("full")], axis=0),
        helper.make_node("Reshape", [name("kept"), name("row_shape")], [name("row1")]),
        helper.make_node("Expand", [name("row1"), name("full")], [name("row_index")]),
        helper.make_node("Expand", [name("heads"), name("full")], [name("head_index")]),
        helper.make_node("Reshape", [name("wrapped"), name("step_shape")], [name("step1")]),
        helper.make_node("Expand", [name("step1"), name("full")], [name("step_index")]),
        helper.make_node(
            "Concat",
            [name("row_index"), name("head_index"), name("step_index")],
            [name("index")],
            axis=3,
        ),
        helper.make_node("GatherND", [state, name("index")], [name("old")]),
        helper.make_node("Where", [name("mask"), name("spans"), name("old")], [name("new")]),
        helper.make_node("ScatterND", [state, name("index"), name("new")], [out]),
    ]
