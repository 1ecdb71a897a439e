"""The rewriting walker every forward pass builds on (fold, CSE, simplify).

Input: a `Function`; output: a new `Function` that shares every op and value the
pass did not touch (ops and values are treated as immutable once built, so the
original function stays valid and can still be run or printed). A pass
subclasses `Rewriter` and implements `visit(op) -> list[Op]`: return `[op]` to
keep it, other ops to replace it, or `[]` after `replace(...)`-ing its results
by values that dominate them. Nested regions are rewritten before the op that
holds them is visited, and `enter`/`leave` bracket each region so a pass can
keep scoped tables (a nested region may read enclosing values, never a
sibling's). A `settled` region (closed, already optimised) is left as it is.
"""

from __future__ import annotations

from linnet.ir.core import Function, Op, Region, Value


class Rewriter:
    """Rebuilds regions op by op, applying value substitutions to operands and results."""

    def __init__(self) -> None:
        self.subst: dict[Value, Value] = {}
        self.changed = False

    def replace(self, old: Value, new: Value) -> None:
        """Uses of `old` read `new` from now on (`new` must dominate every use of `old`)."""
        if old.type != new.type:
            raise AssertionError(f"replacing {old!r} by {new!r} changes its type")
        self.subst[old] = new
        self.changed = True

    def get(self, value: Value) -> Value:
        while value in self.subst:
            value = self.subst[value]
        return value

    def visit(self, op: Op) -> list[Op]:
        return [op]

    def enter(self, region: Region, owner: Op | None) -> None:
        """Called before the ops of `region` (held by `owner`, None for the body) are visited."""

    def leave(self, region: Region, owner: Op | None) -> None:
        """Called after the ops of `region` are visited."""

    def region(self, region: Region, owner: Op | None = None) -> Region:
        if region.settled:  # closed and already at the passes' fixed point
            return region
        self.enter(region, owner)
        ops: list[Op] = []
        subst = self.subst
        visit = self.visit
        same = True  # every op kept as it was (no new list of ops, no new region)
        for original in region.ops:
            op = original
            rebuilt = False
            regions = op.regions
            if regions:
                regions = tuple([self.region(r, op) for r in regions])
                for new, old in zip(regions, op.regions, strict=True):
                    if new is not old:
                        rebuilt = True
                        break
            operands = op.operands
            if subst:
                for v in operands:
                    if v in subst:
                        operands = tuple([self.get(v) for v in operands])
                        rebuilt = True
                        break
            if rebuilt:
                op = Op(op.kind, operands, op.results, dict(op.attrs), regions)
            kept = visit(op)
            if same and (len(kept) != 1 or kept[0] is not original):
                same = False
            ops.extend(kept)
        self.leave(region, owner)
        results = region.results
        if subst:
            results = tuple([self.get(v) for v in results])
        if same and results == region.results:
            return region
        return Region(region.args, ops, results)

    def function(self, fn: Function) -> Function:
        body = self.region(fn.body)
        updates = {path: self.get(v) for path, v in fn.state_updates.items()}
        if body is fn.body and all(updates[p] is v for p, v in fn.state_updates.items()):
            return fn
        return Function(fn.name, fn.inputs, body, body.results, updates)
