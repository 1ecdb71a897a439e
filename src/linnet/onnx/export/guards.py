"""Size guards in the graph: a dynamic export fails in ONNX Runtime outside its guards.

Why: a dynamic export (`linnet.ir.dynamic`) folded each compile-time decision
on sizes (`if N > 4`, `min(N, 8)`) at its sample sizes, and is right only
where those decisions come out the same (`linnet.ir.size_decisions` turns
them into guards). `ExportedSession` and `load_model` check the guards before
running, but a bare `onnxruntime.InferenceSession` knows nothing of them: so
the graph checks them itself. ONNX has no assertion operator; each guard is
a `Reshape` of an empty tensor to `[0]` when the guard holds and to `[1]`
when it does not, which ONNX Runtime refuses, naming the node: `linnet guard
0: N > 4 (...)`. The sum of those empty tensors (a zero) is added to the shape
each output is reshaped to, so no output can be computed without the guards
(and the graph stays valid for every size the guards allow: the reshape keeps
the output's own shape, no copy).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from linnet.ir.size_decisions import SizeGuard
from linnet.onnx.export.graph import Emitter

RELATION_OPS = {
    "<": "Less",
    "<=": "LessOrEqual",
    ">": "Greater",
    ">=": "GreaterOrEqual",
    "==": "Equal",
}


def guard_zero(em: Emitter, guards: Sequence[SizeGuard]) -> str | None:
    """An i64 scalar zero computed through every guard (None without guards)."""
    if not guards:
        return None
    empty = em.const(np.zeros((0,), np.int64), "i64")
    checks = []
    for i, guard in enumerate(guards):
        holds = _holds(em, guard)
        size = em.one("Where", [holds, em.ints([0]), em.ints([1])])
        node = em.one("Reshape", [empty, size])
        em.scope.nodes[-1].name = f"linnet guard {i}: {guard.text}"
        checks.append(node)
    joined = checks[0] if len(checks) == 1 else em.one("Concat", checks, {"axis": 0})
    return em.one("ReduceSum", [joined], {"keepdims": 0})


def _holds(em: Emitter, guard: SizeGuard) -> str:
    lhs = em.dim_scalar(guard.lhs)
    if guard.modulus is not None:
        lhs = em.one("Mod", [lhs, em.dim_scalar(guard.modulus)])
    zero = em.const(0, "i64")
    if guard.rel == "!=":
        return em.one("Not", [em.one("Equal", [lhs, zero])])
    return em.one(RELATION_OPS[guard.rel], [lhs, zero])


def through_guards(em: Emitter, source: str, zero: str | None) -> str:
    """`source` reshaped to its own shape plus `zero`: it now depends on every guard."""
    if zero is None:
        return source
    shape = em.one("Add", [em.one("Shape", [source]), zero])
    return em.one("Reshape", [source, shape])
