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
        live = self.live
        same = True  # every op kept as it was
        for op in reversed(region.ops):
            for v in op.results:
                if v in live:
                    break
            else:
                self.changed = True
                same = False
                continue
            if op.regions:
                regions = tuple([self.region(r) for r in op.regions])
                for new, old in zip(regions, op.regions, strict=True):
                    if new is not old:
                        op = Op(op.kind, op.operands, op.results, dict(op.attrs), regions)
                        same = False
                        break
            live.update(op.operands)
            kept.append(op)
        if same:
            return region
        kept.reverse()
        return Region(region.args, kept, region.results)


def eliminate_dead_code(fn: Function) -> tuple[Function, bool]:
    """DCE over `fn`; also say whether anything changed."""
    pass_ = _DeadCode()
    pass_.live.update(fn.state_updates.values())
    body = pass_.region(fn.body)
    if body is fn.body:
        return fn, False
    return Function(fn.name, fn.inputs, body, fn.results, dict(fn.state_updates)), True
