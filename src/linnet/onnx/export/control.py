"""ONNX lowering rules for `while`, `if`, `call` and the path reads.

Stage: part of the exporter's op table.

- `while` becomes `Loop` without a trip count: the condition region runs
  once in the enclosing graph for the first test, and again at the end of
  the body graph on the new carried values (ONNX's `cond_out`). The body's
  inputs are the iteration number, the incoming condition and the carried
  values; it may read enclosing values by name (ONNX outer-scope references).
- `if` becomes `If` with argument-less `then_branch` / `else_branch` graphs.
- `call` of a named op is inlined (its region's args bound to the operands),
  unless `fused` has a kernel for the callee that the emitter allows
  on this provider.
- `param`, `buffer` and `state` read the graph input or initializer that the
  model assembly assigned to the path (`param<N>`, `state<N>`).
"""

from __future__ import annotations

from collections.abc import Sequence

from linnet.errors import InternalError
from linnet.ir.core import Op, Region, TensorType
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
    "if": lower_if,
}
