"""ONNX lowering rules for `while`, `if`, `call` and the path reads.

Stage: part of the exporter's op table.

- `while` becomes `Loop` without a trip count: the condition region runs
  once in the enclosing graph for the first test, and again at the end of
  the body graph on the new carried values (ONNX's `cond_out`). The body's
  inputs are the iteration number, the incoming condition and the carried
  values; it may read enclosing values by name (ONNX outer-scope references).
- a runtime `for` becomes `Loop` with a trip count and scan outputs
  (language-extensions 1.5); a loop of no iterations is no `Loop` at all.
- `if` becomes `If` with argument-less `then_branch` / `else_branch` graphs.
- `call` of a named op is inlined (its region's args bound to the operands),
  unless `fused` has a kernel for the callee that the emitter allows
  on this provider.
- `param`, `buffer` and `state` read the graph input or initializer that the
  model assembly assigned to the path (`param<N>`, `state<N>`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np

from linnet.errors import InternalError
from linnet.ir.core import Op, Region, TensorType, numpy_dtype
from linnet.ir.symbolic import Dim
from linnet.onnx.export.fused import fused_call
from linnet.onnx.export.graph import Emitter, Rule

_BOOL = TensorType((), "bool")
_ITERATION = TensorType((), "i64")


def lower_source(em: Emitter, op: Op) -> Sequence[str]:
    kind = "param" if op.kind == "buffer" else op.kind
    path = str(op.attrs["path"])
    name = em.sources.get((kind, path))
    if name is None:
        raise InternalError(f"{op.kind} {path} has no graph input")
    return [name]


def _propagate_known(em: Emitter, region: Region, op: Op) -> None:
    for arg, operand in zip(region.args, op.operands, strict=True):
        known = em.known.get(operand)
        if known is not None:
            em.known[arg] = known


def lower_call(em: Emitter, op: Op) -> Sequence[str]:
    names = fused_call(em, op)
    if names is not None:
        return names
    region = op.regions[0]  # a gradient clause (second region) is not forward code
    _propagate_known(em, region, op)
    return em.inline(region, [em.name(v) for v in op.operands])


def lower_while(em: Emitter, op: Op) -> Sequence[str]:
    cond, body = op.regions
    init = [em.name(v) for v in op.operands]
    carried = list(op.operands)
    (first_test,) = em.inline(cond, init)
    with em.subgraph() as scope:
        iteration, incoming = em.fresh("i"), em.fresh("c")
        args = [em.fresh("v") for _ in carried]
        updated = em.inline(body, args)
        (again,) = em.inline(cond, updated)
        graph = em.make_subgraph(
            scope,
            em.fresh("loop"),
            [(iteration, _ITERATION), (incoming, _BOOL), *zip(args, carried, strict=True)],
            [(again, _BOOL), *zip(updated, carried, strict=True)],
        )
    return em.node("Loop", ["", first_test, *init], {"body": graph}, outputs=len(carried))


def lower_for(em: Emitter, op: Op) -> Sequence[str]:
    """A runtime `for` (language-extensions 1.5): `Loop` with the trip count `stop - start`,
    condition `true`, the carried values as loop-carried dependencies and each scan
    value as a scan output (ONNX stacks those on a new axis 0). The loop variable is
    `iteration_num + start`. With no iterations there is no `Loop`: the carried values
    pass through and each scan value is a constant empty tensor of its static shape."""
    (body,) = op.regions
    # With dynamic generics the bounds may be polynomials, computed at run time.
    start, stop = cast(Dim, em.attr(op, "start")), cast(Dim, em.attr(op, "stop"))
    init = [em.name(v) for v in op.operands]
    carried = list(op.operands)
    scans = op.results[len(carried) :]
    if isinstance(start, int) and isinstance(stop, int) and stop == start:
        empty = [
            em.const(np.zeros(v.type.shape, numpy_dtype(v.type.dtype)), v.type.dtype) for v in scans
        ]
        return [*init, *empty]
    with em.subgraph() as scope:
        iteration, incoming = em.fresh("i"), em.fresh("c")
        args = [em.fresh("v") for _ in carried]
        index = iteration
        if not isinstance(start, int) or start:
            index = em.node("Add", [iteration, em.dim_scalar(start)])[0]
        results = em.inline(body, [index, *args])
        graph = em.make_subgraph(
            scope,
            em.fresh("loop"),
            [(iteration, _ITERATION), (incoming, _BOOL), *zip(args, carried, strict=True)],
            [(incoming, _BOOL), *zip(results, body.results, strict=True)],
        )
    trip = em.dim_scalar(stop - start)
    condition = em.const(np.array(True), "bool")
    return em.node("Loop", [trip, condition, *init], {"body": graph}, outputs=len(op.results))


def lower_if(em: Emitter, op: Op) -> Sequence[str]:
    branches = []
    types = list(op.results)
    for role, region in zip(("then", "else"), op.regions, strict=True):
        with em.subgraph() as scope:
            results = em.inline(region, [])
            branches.append(
                em.make_subgraph(scope, em.fresh(role), [], list(zip(results, types, strict=True)))
            )
    then_branch, else_branch = branches
    cond = em.name(op.operands[0])
    attrs = {"then_branch": then_branch, "else_branch": else_branch}
    return em.node("If", [cond], attrs, outputs=len(types))


RULES: dict[str, Rule] = {
    "param": lower_source,
    "buffer": lower_source,
    "state": lower_source,
    "call": lower_call,
    "while": lower_while,
    "for": lower_for,
    "if": lower_if,
}
