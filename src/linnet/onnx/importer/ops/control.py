"""ONNX `If` and `Scan` -> their subgraphs inlined (branches, unrolled steps).

Stage: ONNX import, translation. A subgraph's nodes are translated in the
enclosing translation by the same driver, after its inputs are bound to the
values the operator gives it:

- `If` with a condition known at import time inlines the chosen branch; with
  a runtime scalar condition both branches are inlined and the results chosen
  with an `if` expression (7.8), which needs both branches' results to have
  one type;
- `Scan` (opset 9+) with scan extents known at import time is unrolled: each
  step slices the scan inputs, runs the body on the carried states, and the
  per-step outputs are stacked along their axes;
- `Loop` with a constant trip count whose body never stops early becomes a
  runtime `for` (`loop_for`), a scan when it has scan outputs; other loops
  whose every step's condition is known at import time are unrolled.
A node inside a subgraph that cannot be translated is reported like any other.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from linnet.check.dims import Dim
from linnet.onnx.importer.graph import REGISTRY, translator
from linnet.onnx.importer.ops._common import norm_axis
from linnet.onnx.importer.ops.loop_for import try_for_loop
from linnet.onnx.importer.ops.shapes import reshaped
from linnet.sourcegen import build
from linnet.sourcegen.graph import Graph
from linnet.sourcegen.translate import Context, Unsupported, numpy_dtype_name
from linnet.sourcegen.values import Value


def run_subgraph(ctx: Context, graph: Graph, inputs: list[Value]) -> list[Value]:
    """Translate `graph` inline with its formal inputs bound to `inputs`; its outputs."""
    from linnet.sourcegen import driver

    t = ctx.t
    if len(inputs) != len(graph.inputs):
        raise Unsupported(f"the subgraph takes {len(graph.inputs)} inputs, got {len(inputs)}")
    for info, value in zip(graph.inputs, inputs, strict=True):
        t.values[info.name] = value
    for name, arr in {**graph.initializers, **graph.constants}.items():
        arr = np.asarray(arr)
        t.values[name] = Value(
            tuple(Dim.const(int(s)) for s in arr.shape), numpy_dtype_name(arr.dtype), const=arr
        )
    if driver.translate_nodes(t, REGISTRY, graph.nodes):
        raise Unsupported("a node of its subgraph cannot be translated (listed separately)")
    out: list[Value] = []
    for info in graph.outputs:
        if info.name not in t.values:
            raise Unsupported(f"the subgraph output `{info.name}` is not produced")
        out.append(t.values[info.name])
    return out


@translator("If")
def if_(ctx: Context) -> None:
    cond = ctx.need(0)
    then_g, else_g = ctx.attr("then_branch"), ctx.attr("else_branch")
    if not isinstance(then_g, Graph) or not isinstance(else_g, Graph):
        raise Unsupported("branches must be graphs")
    if cond.const is not None:
        chosen = then_g if bool(np.asarray(cond.const).reshape(-1)[0]) else else_g
        ctx.note(f"If `{ctx.node.label}`: the condition is known, only its branch is kept")
        for i, v in enumerate(run_subgraph(ctx, chosen, [])):
            ctx.output(i, v)
        return
    if cond.dtype != "bool" or not all(d.as_int() == 1 for d in cond.shape):
        raise Unsupported("the condition must be one bool")
    picks = run_subgraph(ctx, then_g, []), run_subgraph(ctx, else_g, [])
    test = (
        ctx.ref(cond)
        if cond.is_scalar
        else build.index(ctx.ref(cond), [build.int_lit(0)] * cond.rank)
    )
    for i, (a, b) in enumerate(zip(*picks, strict=True)):
        same = a.dtype == b.dtype and a.rank == b.rank
        if not same or not all(ctx.equal(x, y) for x, y in zip(a.shape, b.shape, strict=True)):
            raise Unsupported("the branches' results differ in shape or dtype")
        expr = build.if_expr(test, ctx.ref(a), ctx.ref(b))
        ctx.output(i, ctx.let(expr, a.shape, a.dtype, "chosen"))


@translator("Scan")
def scan(ctx: Context) -> None:
    if ctx.node.opset < 9:
        raise Unsupported("Scan before opset 9 (batched, with sequence_lens)")
    body = ctx.attr("body")
    if not isinstance(body, Graph):
        raise Unsupported("the body must be a graph")
    m = int(ctx.attr("num_scan_inputs"))
    values = [ctx.need(i) for i in range(ctx.n_inputs)]
    n = len(values) - m
    states, scans = values[:n], values[n:]
    in_axes = [int(a) for a in ctx.attr("scan_input_axes", [0] * m)]
    in_dirs = [int(d) for d in ctx.attr("scan_input_directions", [0] * m)]
    k = ctx.n_outputs - n
    out_axes = [int(a) for a in ctx.attr("scan_output_axes", [0] * k)]
    out_dirs = [int(d) for d in ctx.attr("scan_output_directions", [0] * k)]
    axes = [norm_axis(a, v.rank) for a, v in zip(in_axes, scans, strict=True)]
    lengths = {v.shape[a].as_int() for v, a in zip(scans, axes, strict=True)}
    if len(lengths) != 1 or None in lengths:
        raise Unsupported("the scan extents must be known at import time and agree")
    steps = int(next(iter(lengths)) or 0)
    collected: list[list[Value]] = [[] for _ in range(k)]
    for step in range(steps):
        slices: list[Value] = []
        for v, a, direction in zip(scans, axes, in_dirs, strict=True):
            at = steps - 1 - step if direction else step
            comps: list[Any] = [build.slice_() for _ in range(a)] + [build.int_lit(at)]
            dims = [d for i, d in enumerate(v.shape) if i != a]
            slices.append(ctx.let(build.index(ctx.ref(v), comps), dims, v.dtype, "element"))
        outs = run_subgraph(ctx, body, [*states, *slices])
        states = outs[:n]
        for j, v in enumerate(outs[n:]):
            collected[j].append(v)
    for i, v in enumerate(states):
        ctx.output(i, v)
    for j, parts in enumerate(collected):
        if not parts:
            raise Unsupported("a scan of length 0")
        if out_dirs[j]:
            parts = parts[::-1]
        first = parts[0]
        axis = norm_axis(out_axes[j], first.rank + 1)
        lifted_dims = [*first.shape[:axis], Dim.const(1), *first.shape[axis:]]
        lifted = [reshaped(ctx, p, lifted_dims, "step") for p in parts]
        if len(lifted) == 1:
            ctx.output(n + j, lifted[0])
            continue
        dims = list(lifted_dims)
        dims[axis] = Dim.const(len(lifted))
        expr = build.call(
            "concat", *(ctx.ref(p) for p in lifted), named=[("axis", build.int_lit(axis))]
        )
        ctx.output(n + j, ctx.let(expr, dims, first.dtype, "stacked"))


_LOOP_LIMIT = 4096
"""The most iterations a `Loop` is unrolled to."""


@translator("Loop")
def loop(ctx: Context) -> None:
    """A `Loop` with a constant trip count whose body never stops early, as a runtime
    `for` (`loop_for`); otherwise, when every step's condition is known at import
    time, unrolled; scan outputs stack along a new first axis (ONNX Loop)."""
    body = ctx.attr("body")
    if not isinstance(body, Graph):
        raise Unsupported("the body must be a graph")
    trip, cond = ctx.input(0), ctx.input(1)
    if trip is None or trip.const is None:
        raise Unsupported("the trip count must be known at import time")
    count = int(np.asarray(trip.const).reshape(-1)[0])
    going = True
    if cond is not None:
        if cond.const is None:
            raise Unsupported("the loop condition must be known at import time")
        going = bool(np.asarray(cond.const).reshape(-1)[0])
    carried = [ctx.need(i) for i in range(2, ctx.n_inputs)]
    start = int(ctx.attr("_start", 0))  # an importer's loop counting from `start`
    if going and try_for_loop(ctx, body, count, carried, start):
        return
    if count > _LOOP_LIMIT:
        raise Unsupported(f"{count} iterations (at most {_LOOP_LIMIT} are unrolled)")
    n = len(carried)
    scans: list[list[Value]] = [[] for _ in range(ctx.n_outputs - n)]
    for step in range(count):
        if not going:
            break
        index = ctx.constant(np.array(start + step, dtype=np.int64))
        flag = ctx.constant(np.array(True))
        outs = run_subgraph(ctx, body, [index, flag, *carried])
        test = outs[0]
        if test.const is None:
            raise Unsupported("the loop condition must be known at import time")
        going = bool(np.asarray(test.const).reshape(-1)[0])
        carried = outs[1 : 1 + n]
        for j, v in enumerate(outs[1 + n :]):
            scans[j].append(v)
    for i, v in enumerate(carried):
        ctx.output(i, v)
    for j, parts in enumerate(scans):
        if not parts:
            raise Unsupported("a loop that runs no iteration has untyped scan outputs")
        first = parts[0]
        lifted_dims = [Dim.const(1), *first.shape]
        known = [p.const for p in parts]
        if all(k is not None and p.source is None for k, p in zip(known, parts, strict=True)):
            stacked = np.stack([np.asarray(k) for k in known])
            from linnet.onnx.importer.ops._common import fold

            ctx.output(n + j, fold(ctx, stacked, first.dtype))
            continue
        lifted = [reshaped(ctx, p, lifted_dims, "step") for p in parts]
        dims = [Dim.const(len(parts)), *first.shape]
        if len(lifted) == 1:
            ctx.output(n + j, lifted[0])
            continue
        expr = build.call(
            "concat", *(ctx.ref(p) for p in lifted), named=[("axis", build.int_lit(0))]
        )
        ctx.output(n + j, ctx.let(expr, dims, first.dtype, "stacked"))
