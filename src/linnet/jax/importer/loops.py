"""Counted `stablehlo.while` loops (`lax.scan`, `fori_loop`) as `Loop`s a `for` can express.

Stage: the StableHLO importer's second step (`walk` hands every while loop
here first). JAX lowers `lax.scan` and `fori_loop` with static bounds to a
`stablehlo.while` carrying an integer counter that starts at a constant, is
compared `<` a constant bound and is incremented by 1 each step. Such a loop
runs `stop - start` times whatever the data, so it becomes an ONNX-style
`Loop` with that constant trip count and a body that never stops early:
the counter is no longer carried but is the iteration number, counted from
`start` (the `Loop`'s private `_start` attribute, which the `Loop` translator
honours), and its final value is the constant `stop`. The `Loop`
translator (`linnet.onnx.importer.ops.loop_for`) then writes a runtime
`for i in 0..n { ... }`.

`lax.scan` stacks its per-step outputs by writing row `i` of a carried
`[n, ...]` buffer (`dynamic_update_slice`) each step (`Builder.row_writes`).
A buffer that the body only writes that way, row `counter` of exactly `n`
rows from a counter starting at 0, becomes a scan output of the `Loop`
(the row itself, stacked on a new leading axis): in Linnet, `yield row`.
A reverse scan (`reverse=True`) writes row `n - 1 - counter` (and reads its
inputs there): the same scan output, reversed along the stacked axis after
the loop, while the body keeps reading `xs[n - 1 - i]`. Any other loop
(`while_loop`) keeps the general translation in `walk`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from jaxlib.mlir import ir

from linnet.jax.importer.builder import Builder, Ref
from linnet.jax.importer.mlir import elements, tensor_type
from linnet.jax.importer.op_support import onnx_dtype
from linnet.records import record
from linnet.sourcegen.graph import Graph, Node, TensorInfo
from linnet.sourcegen.patterns import _subgraph_reads, drop_dead

__all__ = ["Counter", "counted", "counted_while"]


@record
class Counter:
    """The counter of a counted while loop: its position among the carried values,
    its integer dtype and the range it runs over."""

    index: int
    dtype: str
    start: int
    stop: int


def counted(b: Builder, o: Any) -> Counter | None:
    """The loop's counter when `o` is a counted while loop (module docstring), else None."""
    cond, body = o.regions[0].blocks[0], o.regions[1].blocks[0]
    ops = [op.operation for op in cond.operations]
    if not ops or ops[-1].name != "stablehlo.return" or len(ops[-1].operands) != 1:
        return None
    compare = _owner(ops[-1].operands[0])
    if compare is None or compare.name != "stablehlo.compare":
        return None
    if "LT" not in str(compare.attributes["comparison_direction"]):
        return None
    index = _arg_number(compare.operands[0], cond)
    stop = _constant(b, compare.operands[1])
    if index is None or stop is None:
        return None
    t = tensor_type(o.operands[index].type)
    if t is None or t[0] not in ("i32", "i64") or t[1] != ():
        return None
    start = _constant(b, o.operands[index])
    if start is None or stop < start:
        return None
    returned = [op.operation for op in body.operations][-1]
    if returned.name != "stablehlo.return":
        return None
    add = _owner(returned.operands[index])
    if add is None or add.name != "stablehlo.add":
        return None
    a, c = add.operands[0], add.operands[1]
    if _arg_number(a, body) != index:
        a, c = c, a
    if _arg_number(a, body) != index or _constant(b, c) != 1:
        return None
    return Counter(index, str(t[0]), start, stop)


def counted_while(
    b: Builder, funcs: dict[str, Any], o: Any, depth: int, counter: Counter
) -> list[Ref | None]:
    """The loop as a `Loop` of `stop - start` iterations (module docstring)."""
    n = counter.stop - counter.start
    carried = [b.full(b.env[v]) for v in o.operands]
    counters = {counter.index: (counter.start, counter.dtype)}
    walked = _walk_body(b, funcs, o, depth, carried, counters, counter.start)
    if walked is not None:
        more = _other_counters(b, o, walked, counters)
        if more:
            # `fori_loop(2, 9, ...)` carries its own `i` beside the loop's counter: both
            # are the loop variable shifted; the loop counts like `i` when only `i` is read.
            counters.update(more)
            body = o.regions[1].blocks[0]
            own = body.arguments[counter.index]
            reads = sum(1 for op in body.operations for v in op.operation.operands if v == own)
            low = next(iter(more.values()))[0] if reads == 1 else counter.start
            walked = _walk_body(b, funcs, o, depth, carried, counters, low)
    if walked is None:
        return [None] * len(o.results)
    sub, names, refs, outs, low = walked
    rows: dict[int, str] = {}
    backward: set[int] = set()  # rows written at `n - 1 - i`: a reverse scan's stack
    zero_based = {refs[k] for k, (init, _) in counters.items() if init == 0 and low == 0}
    for k, out in enumerate(outs):
        order = None if k in counters else _stacks_rows(sub, b, names[k], out, zero_based, n)
        if order is not None:
            write = sub.row_writes[out]
            shape = b.shape(carried[k])[1:]
            dtype = b.dtype(carried[k])
            rows[k] = sub.emit("Reshape", [write.update, sub.ints(shape)], dtype, shape)
            if order == "backward":
                backward.add(k)
    b._count = sub._count
    loop_carried = [k for k in range(len(carried)) if k not in counters and k not in rows]
    going = sub.const(np.array(True))
    body_outputs = [going, *(outs[k] for k in loop_carried), *(rows[k] for k in sorted(rows))]
    body = Graph(
        name="body",
        inputs=[i for i in sub.graph.inputs if i.name not in {names[k] for k in rows}],
        outputs=[TensorInfo(r, sub.dtype(r), sub.shape(r)) for r in body_outputs],
        nodes=sub.graph.nodes,
        constants=sub.graph.constants,
        value_info=sub.graph.value_info,
    )
    drop_dead(body)  # the masked writes the scan outputs replace
    b.graph.constants.update(sub.graph.constants)
    results: list[Ref | None] = [None] * len(o.results)
    outputs: list[str] = []
    for k in [*loop_carried, *sorted(rows)]:
        name = b.fresh("loop_output")  # a generated name: locals are `carry` and `rows`
        b.graph.value_info[name] = TensorInfo(name, b.dtype(carried[k]), b.shape(carried[k]))
        results[k] = name
        outputs.append(name)
    for k, (init, dtype) in counters.items():
        np_type = np.int32 if dtype == "i32" else np.int64
        results[k] = b.const(np.array(init + n, dtype=np_type))
    trips = b.const(np.array(n, dtype=np.int64))
    node = Node(
        "Loop",
        "",
        outputs[0] if outputs else b.fresh("loop"),
        (trips, b.const(np.array(True)), *(carried[k] for k in loop_carried)),
        tuple(outputs),
        {
            "body": body,
            **({"_start": low} if low else {}),
            **({"_where": b.where} if b.where else {}),
        },
        18,
    )
    b.graph.nodes.append(node)
    for name in outputs:
        b.producers[name] = node
    for k in sorted(backward):
        # Stacked in the order the steps ran (row `n - 1 - i` at step `i`): reversed.
        stacked = results[k]
        assert isinstance(stacked, str)
        shape = b.shape(stacked)
        results[k] = b.emit(
            "Slice",
            [stacked, b.ints([n - 1]), b.ints([-(n + 1)]), b.ints([0]), b.ints([-1])],
            b.dtype(stacked),
            shape,
        )
    b.notes.append(
        f"a `stablehlo.while` loop{f' at {b.where}' if b.where else ''} counts "
        f"{low}..{low + n}"
        + (f", stacking {len(rows)} output(s) row by row" if rows else "")
        + (f" ({len(backward)} from the last row back: a reverse scan)" if backward else "")
    )
    return results


Walked = tuple[Builder, list[str], dict[int, Ref], list[str], int]
"""A walked loop body: its builder, the carried values' names, the counters' values,
what the body returns for each carried value, and where the loop variable starts."""


def _walk_body(
    b: Builder,
    funcs: dict[str, Any],
    o: Any,
    depth: int,
    carried: list[str],
    counters: dict[int, tuple[int, str]],
    low: int,
) -> Walked | None:
    """Walk the loop's body with the loop variable (counting from `low`) as its input
    and each counter (start, dtype) computed from it; None when an op is refused."""
    from linnet.jax.importer.walk import walk_block

    sub = Builder()
    sub._count = b._count
    sub.env = dict(b.env)
    sub.graph.value_info = b.graph.value_info  # one namespace: outer values read inside
    step, flag = sub.fresh("step"), sub.fresh("going")
    sub.graph.inputs = [TensorInfo(step, "i64", ()), TensorInfo(flag, "bool", ())]
    for info in sub.graph.inputs:
        sub.graph.value_info[info.name] = info
    names: list[str] = []
    for k, value in enumerate(carried):
        name = sub.fresh("carried")
        names.append(name)
        if k not in counters:
            info = TensorInfo(name, b.dtype(value), b.shape(value))
            sub.graph.inputs.append(info)
            sub.graph.value_info[name] = info
    refs: dict[int, Ref] = {}
    for k, (init, dtype) in counters.items():
        ref = step
        if init != low:
            shift = sub.const(np.array(init - low, dtype=np.int64))
            ref = sub.emit("Add", [step, shift], "i64", ())
        if dtype != "i64":
            ref = sub.emit("Cast", [ref], dtype, (), {"to": onnx_dtype(dtype)})
        refs[k] = ref
    args: list[Ref | None] = [refs.get(k, names[k]) for k in range(len(carried))]
    new = walk_block(sub, funcs, o.regions[1].blocks[0], args, depth + 1)
    b._count = sub._count
    if sub.untranslated or any(r is None for r in new):
        b.untranslated.extend(sub.untranslated)
        return None
    outs = [sub.full(r) for r in new if r is not None]
    b._count = sub._count
    return sub, names, refs, outs, low


def _other_counters(
    b: Builder, o: Any, walked: Walked, counters: dict[int, tuple[int, str]]
) -> dict[int, tuple[int, str]]:
    """Carried integer scalars that start at a constant and that the body increments by
    one: counters too (start, dtype)."""
    sub, names, _, outs, _ = walked
    found: dict[int, tuple[int, str]] = {}
    for k, out in enumerate(outs):
        t = tensor_type(o.operands[k].type)
        if k in counters or t is None or t[0] not in ("i32", "i64") or t[1] != ():
            continue
        init = _constant(b, o.operands[k])
        node = sub.producers.get(out)
        if init is None or node is None or node.op != "Add" or names[k] not in node.inputs:
            continue
        other = node.inputs[1 - node.inputs.index(names[k])]
        step = sub.graph.constants.get(other)
        if step is not None and step.size == 1 and int(step.reshape(-1)[0]) == 1:
            found[k] = (init, str(t[0]))
    return found


def _stacks_rows(
    sub: Builder, b: Builder, name: str, out: str, zero_based: set[Ref], n: int
) -> str | None:
    """Whether the carried value `name` is a buffer of `n` rows the body writes one row
    of each step and reads for nothing else: "forward" when the row is `i`, a counter
    from 0 (`zero_based`), "backward" when it is `n - 1 - i` (`lax.scan(...,
    reverse=True)`); None otherwise."""
    write = sub.row_writes.get(out)
    if write is None or write.buffer != name:
        return None
    order = _row_order(sub, b, write.index, zero_based, n)
    shape = b.shape(name)
    if order is None or not shape or shape[0] != n:
        return None
    readers = [node for node in sub.graph.nodes if name in node.inputs]
    nested = any(name in _subgraph_reads(node.attrs) for node in sub.graph.nodes)
    if len(readers) == 1 and readers[0].outputs == (out,) and not nested:
        return order
    return None


def _row_order(sub: Builder, b: Builder, index: Ref, zero_based: set[Ref], n: int) -> str | None:
    """ "forward" when `index` is a zero-based counter `i`, "backward" when it is
    `n - 1 - i` (however spelled with constants, `Add`, `Sub` and casts), else None."""
    form = _affine(sub, b, index, zero_based, 0)
    if form == (1, 0):
        return "forward"
    if form == (-1, n - 1):
        return "backward"
    return None


def _affine(
    sub: Builder, b: Builder, value: Ref, counters: set[Ref], depth: int
) -> tuple[int, int] | None:
    """`(a, c)` when `value` is `a * i + c` for a counter `i` of `counters` (constants
    made in the body or outside it, as `sub` and `b` hold them)."""
    if value in counters:
        return (1, 0)
    if not isinstance(value, str) or depth > 8:
        return None
    arr = sub.graph.constants.get(value)
    if arr is None:
        arr = b.graph.constants.get(value)
    if arr is not None:
        if arr.size != 1 or arr.dtype.kind not in "iu":
            return None
        return (0, int(arr.reshape(-1)[0]))
    node = sub.producers.get(value)
    if node is None or node.domain != "":
        return None
    if node.op in ("Cast", "Identity") and node.inputs:
        return _affine(sub, b, node.inputs[0], counters, depth + 1)
    if node.op in ("Add", "Sub") and len(node.inputs) == 2:
        x = _affine(sub, b, node.inputs[0], counters, depth + 1)
        y = _affine(sub, b, node.inputs[1], counters, depth + 1)
        if x is None or y is None:
            return None
        sign = 1 if node.op == "Add" else -1
        return (x[0] + sign * y[0], x[1] + sign * y[1])
    return None


def _owner(v: Any) -> Any:
    v = v.maybe_downcast()
    return v.owner if isinstance(v, ir.OpResult) else None


def _arg_number(v: Any, block: Any) -> int | None:
    v = v.maybe_downcast()
    if isinstance(v, ir.BlockArgument) and v.owner == block:
        return int(v.arg_number)
    return None


def _constant(b: Builder, v: Any) -> int | None:
    """The integer a scalar value holds when it is a constant (here or outside), else None."""
    owner = _owner(v)
    arr: np.ndarray | None = None
    if owner is not None and owner.name == "stablehlo.constant":
        t = tensor_type(v.type)
        if t is None or t[0] is None:
            return None
        arr, _ = elements(owner.attributes["value"], str(t[0]))
    elif v in b.env:
        arr = b.constant_of(b.env[v])
    if arr is None or arr.size != 1 or arr.dtype.kind not in "iu":
        return None
    return int(arr.reshape(-1)[0])
