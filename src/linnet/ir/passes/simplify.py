"""Simplification of trivial ops: identities vanish, chains of reshapes/permutes merge.

Input/output: a `Function`. Rewrites (each keeps the value computed):
- `reshape`/`broadcast` to the operand's own shape, `cast` to its own dtype,
  a `permute` by the identity, a `slice` covering every axis with step 1, a
  `reduce` over no axes and a `concat` of one operand are their operand;
- `reshape(reshape(x))` is one `reshape(x)`; `permute(permute(x))` is one
  `permute` by the composed permutation.
The ops left without uses are removed by dead code elimination.
"""

from __future__ import annotations

from linnet.ir.core import Function, Op, Value
from linnet.ir.passes.rewrite import Rewriter


def _is_identity(op: Op) -> bool:
    if not op.operands:
        return False
    source = op.operands[0].type
    result = op.results[0].type
    if op.kind in ("reshape", "broadcast", "cast"):
        return source == result
    if op.kind == "permute":
        return op.attrs["perm"] == tuple(range(source.rank))
    if op.kind == "slice":
        start, stop, step = (op.attrs[k] for k in ("start", "stop", "step"))
        assert isinstance(start, tuple) and isinstance(stop, tuple) and isinstance(step, tuple)
        return (
            all(s == 0 for s in start)
            and all(s == 1 for s in step)
            and all(b >= d for b, d in zip(stop, source.shape, strict=True))
        )
    if op.kind == "reduce":
        return op.attrs["axes"] == ()
    if op.kind == "concat":
        return len(op.operands) == 1
    return False


class Simplifier(Rewriter):
    def __init__(self) -> None:
        super().__init__()
        self.producers: dict[Value, Op] = {}

    def visit(self, op: Op) -> list[Op]:
        op = self.merge_chain(op)  # a merged chain may turn out to be an identity
        if _is_identity(op):
            self.replace(op.results[0], op.operands[0])
            return []
        for result in op.results:
            self.producers[result] = op
        return [op]

    def merge_chain(self, op: Op) -> Op:
        if op.kind not in ("reshape", "permute"):
            return op
        inner = self.producers.get(op.operands[0])
        if inner is None or inner.kind != op.kind:
            return op
        self.changed = True
        if op.kind == "reshape":
            return Op("reshape", inner.operands, op.results, dict(op.attrs))
        outer_perm, inner_perm = op.attrs["perm"], inner.attrs["perm"]
        assert isinstance(outer_perm, tuple) and isinstance(inner_perm, tuple)
        # Axis i of the result is axis outer[i] of the middle, i.e. inner[outer[i]] of x.
        composed = tuple(inner_perm[p] for p in outer_perm)
        return Op("permute", inner.operands, op.results, {"perm": composed})


def simplify(fn: Function) -> tuple[Function, bool]:
    """Simplify `fn`; also say whether anything changed."""
    pass_ = Simplifier()
    return pass_.function(fn), pass_.changed
