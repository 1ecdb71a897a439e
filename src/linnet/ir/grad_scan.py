"""The gradient of a runtime `for` (language-extensions 6.3): store, then replay backwards.

Stage: part of `linnet.ir.grad`'s backward pass, called for each `for` op the
loss depends on. In: the op, the incoming gradients of its results (final
carried values, then stacked scan values) and the active values. Out: the
gradients of its operands (the initial carried values) and of the enclosing
values its body reads, added to the backward pass; the op itself is replaced
in the forward ops by one that also stacks the carried values each iteration
starts from.

The backward loop is a second `for` over the same number of iterations,
running the iterations in reverse (iteration `p = stop - 1 - i` of the
forward loop at step `i`). Its carried values are the gradients of the
carried values and one accumulator per enclosing value the body reads. Each
step reads back the carried values iteration `p` started from, replays the
body's ops on them (a fresh copy: the forward values live in the forward
loop's region), seeds their results with the incoming gradients (the
carried values' from the step before, the scan rows' row `p`), and walks the
copy backwards with the same rules as the rest of the function (nested
`for`s included). A loop of no iterations passes the carried gradients
through.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from linnet.ir.core import FLOAT_DTYPES, Builder, Op, Region, TensorType, Value
from linnet.ir.regions import region_free_values

if TYPE_CHECKING:
    from linnet.ir.grad import _Backward

_INDEX = TensorType((), "i64")


def differentiate_for(bw: _Backward, op: Op, gs: list[Value | None], active: set[Value]) -> None:
    """Add the gradients of `op`'s operands and enclosing reads to `bw` (see the module docstring)."""
    from linnet.ir.grad import _active, _Backward

    (body,) = op.regions
    start, stop = int(str(op.attrs["start"])), int(str(op.attrs["stop"]))
    count = len(op.operands)
    carried = list(op.operands)
    floating = [k for k, v in enumerate(carried) if v.type.dtype in FLOAT_DTYPES]
    if stop == start:
        for k in floating:
            g = gs[k]
            if g is not None and carried[k] in active:
                bw.add(carried[k], g)
        return
    starts = _stash_starts(bw.b, op)
    outer = sorted(
        (v for v in region_free_values(body) if v in active and v.type.dtype in FLOAT_DTYPES),
        key=lambda v: v.id,
    )
    b = bw.b
    zeros = {
        v: b.broadcast(b.const(0.0, v.type.dtype), v.type.shape)
        for v in (*(carried[k] for k in floating), *outer)
    }
    init_grads = [_or(gs[k], zeros[carried[k]]) for k in floating]
    init_accs = [zeros[v] for v in outer]
    inner = b.nested([_INDEX, *(carried[k].type for k in floating), *(v.type for v in outer)])
    step, *rest = inner.args
    g_carried = dict(zip(floating, rest[: len(floating)], strict=True))
    accs = rest[len(floating) :]
    position = inner.binary("sub", inner.const(stop - 1, "i64"), step)
    index = inner.binary("add", position, inner.const(start, "i64"))
    begun = [inner.gather(s, position, 0) for s in starts]
    vmap: dict[Value, Value] = {body.args[0]: index}
    vmap.update(zip(body.args[1:], begun, strict=True))
    replay = _clone_ops(body.ops, vmap, inner)
    results = [vmap.get(v, v) for v in body.results]
    nested = _Backward(inner, bw.entry)
    for k in floating:
        nested.add(results[k], g_carried[k])
    for r, g in enumerate(gs[count:]):
        if g is not None:
            nested.add(results[count + r], inner.gather(g, position, 0))
    seeds = {begun[k] for k in floating} | set(outer)
    nested.pull(replay, _active(replay, seeds))
    next_grads = [nested.total([begun[k]], carried[k].type) for k in floating]
    next_accs = [
        inner.binary("add", acc, nested.total([v], v.type))
        for acc, v in zip(accs, outer, strict=True)
    ]
    region = inner.finish([*next_grads, *next_accs])
    attrs = {"start": start, "stop": stop}
    out = b.add("for", [*init_grads, *init_accs], attrs, regions=(region,))
    for k, g in zip(floating, out[: len(floating)], strict=True):
        if carried[k] in active:
            bw.add(carried[k], g)
    for v, g in zip(outer, out[len(floating) :], strict=True):
        bw.add(v, g)


def _or(g: Value | None, zero: Value) -> Value:
    return zero if g is None else g


def _stash_starts(b: Builder, op: Op) -> list[Value]:
    """Replace `op` in the forward ops by a copy that also stacks the carried values each
    iteration starts from; those stacks, one per carried value."""
    (body,) = op.regions
    stashing = Region(body.args, body.ops, (*body.results, *body.args[1:]))
    n = int(str(op.attrs["stop"])) - int(str(op.attrs["start"]))
    starts = tuple(Value(TensorType((n, *v.type.shape), v.type.dtype)) for v in op.operands)
    replaced = Op(op.kind, op.operands, (*op.results, *starts), dict(op.attrs), (stashing,))
    position = next(i for i, existing in enumerate(b.ops) if existing is op)
    b.ops[position] = replaced
    return list(starts)


def _clone_ops(ops: list[Op], vmap: dict[Value, Value], b: Builder) -> list[Op]:
    """Fresh copies of `ops` (every result a new value, nested regions copied too),
    appended to `b`; `vmap` maps the originals to the copies."""
    copies: list[Op] = []
    for op in ops:
        operands = tuple(vmap.get(v, v) for v in op.operands)
        regions = tuple(_clone_region(r, vmap) for r in op.regions)
        results = tuple(Value(r.type, r.name) for r in op.results)
        vmap.update(zip(op.results, results, strict=True))
        copy = Op(op.kind, operands, results, dict(op.attrs), regions)
        b.ops.append(copy)
        copies.append(copy)
    return copies


def _clone_region(region: Region, vmap: dict[Value, Value]) -> Region:
    args = tuple(Value(a.type, a.name) for a in region.args)
    vmap.update(zip(region.args, args, strict=True))
    inner = Builder()
    inner.args = args
    _clone_ops(region.ops, vmap, inner)
    return inner.finish([vmap.get(v, v) for v in region.results])
