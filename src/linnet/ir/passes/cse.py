"""Common subexpression elimination: structurally equal ops compute the same value once.

Input/output: a `Function`. Every Core IR op is pure (`param`, `buffer` and
`state` read values fixed for the whole call, architecture.md "Core IR"), so
two region-free ops with the same kind, operands, attrs and result types are
interchangeable and the later one is replaced by the earlier. Tables are scoped
by region: an op inside a nested region may reuse an op of an enclosing region
(which dominates it), never one from a sibling region. The body of a `call` is
a barrier: it only reuses its own ops, so a body that reads nothing but its
arguments stays that way (a backend may compile it as a separate function).
Ops with regions (`while`, `if`, `call`) are kept as they are.
"""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from linnet.ir.core import Function, Op, Region, Value
from linnet.ir.passes.rewrite import Rewriter


def attr_key(value: object) -> Hashable:
    """A hashable, structural key for an attr value (arrays by dtype, shape and bytes).

    Scalars are keyed with their type, so a dynamic export's traced size
    (`linnet.ir.traced.Traced`) is never the plain int of the same value; a
    sequence of plain ints (the common shape, axes and bounds) is its own key."""
    kind = type(value)
    if kind is int or kind is str or kind is bool or kind is float or value is None:
        return (kind, value)
    if kind is tuple or kind is list:
        assert isinstance(value, tuple | list)
        for item in value:
            if type(item) is not int:
                return ("seq", tuple([attr_key(v) for v in value]))
        return ("ints", tuple(value))
    if kind is dict:
        assert isinstance(value, dict)
        return ("dict", tuple([(k, attr_key(value[k])) for k in sorted(value)]))
    if isinstance(value, np.ndarray):
        return ("array", str(value.dtype), value.shape, value.tobytes())
    if isinstance(value, dict):
        return ("dict", tuple(sorted((k, attr_key(v)) for k, v in value.items())))
    if isinstance(value, tuple | list):
        return ("seq", tuple(attr_key(v) for v in value))
    assert isinstance(value, Hashable)
    return (kind, value)


class CommonSubexpressions(Rewriter):
    def __init__(self) -> None:
        super().__init__()
        self.tables: list[dict[Hashable, tuple[Value, ...]]] = []
        self.hidden: list[list[dict[Hashable, tuple[Value, ...]]]] = []

    def enter(self, region: Region, owner: Op | None) -> None:
        if owner is not None and owner.kind == "call":
            self.hidden.append(self.tables)
            self.tables = []
        self.tables.append({})

    def leave(self, region: Region, owner: Op | None) -> None:
        self.tables.pop()
        if owner is not None and owner.kind == "call":
            self.tables = self.hidden.pop()

    def visit(self, op: Op) -> list[Op]:
        if op.regions:
            return [op]
        results = op.results
        key = (
            op.kind,
            op.operands,
            attr_key(op.attrs),
            (results[0].type,) if len(results) == 1 else tuple([v.type for v in results]),
        )
        for table in reversed(self.tables):
            earlier = table.get(key)
            if earlier is not None:
                for result, value in zip(op.results, earlier, strict=True):
                    self.replace(result, value)
                return []
        self.tables[-1][key] = op.results
        return [op]


def eliminate_common_subexpressions(fn: Function) -> tuple[Function, bool]:
    """CSE over `fn`; also say whether anything changed."""
    pass_ = CommonSubexpressions()
    return pass_.function(fn), pass_.changed
