"""Dead code elimination: drop ops none of whose results is used.

Input/output: a `Function`. Every op is pure, so an op is kept exactly when one
of its results feeds, directly or through other kept ops, a function result, a
state update, or the results of the region holding it. The walk goes backwards
through each region, and the uses made inside a kept op's nested regions
(including reads of enclosing values) count as uses. Region arguments and the
carried values of a `while` are never removed: that would change the op's
signature.
"""

from __future__ import annotations

from linnet.ir.core import Function, Op, Region, Value


class _DeadCode:
    def __init__(self) -> None:
        self.live: set[Value] = set()
        self.changed = False

    def region(self, region: Region) -> Region:
        if region.settled:  # closed (reads nothing outside) and already optimised
            return region
        self.live.update(region.results)
        kept: list[Op] = []
        for op in reversed(region.ops):
            if not any(v in self.live for v in op.results):
                self.changed = True
                continue
            regions = tuple(self.region(r) for r in op.regions)
            if any(new is not old for new, old in zip(regions, op.regions, strict=True)):
                op = Op(op.kind, op.operands, op.results, dict(op.attrs), regions)
            self.live.update(op.operands)
            kept.append(op)
        kept.reverse()
        if len(kept) == len(region.ops) and all(
            a is b for a, b in zip(kept, region.ops, strict=True)
        ):
            return region
        return Region(region.args, kept, region.results)


def eliminate_dead_code(fn: Function) -> tuple[Function, bool]:
    """DCE over `fn`; also say whether anything changed."""
    pass_ = _DeadCode()
    pass_.live.update(fn.state_updates.values())
    body = pass_.region(fn.body)
    if body is fn.body:
        return fn, False
    return Function(fn.name, fn.inputs, body, fn.results, dict(fn.state_updates)), True
