"""The Core IR verifier: structural and type invariants, checked between passes in tests.

Stage: runs on any `Function` or `Program` (tinygrad's `uop/spec.py` plays this
role). It raises `InternalError` naming the function and op at fault, because a
malformed program is always a compiler bug (style.md: lowering never reports
user errors). Checked:
- every value is defined exactly once (SSA) and before its use; a nested
  region may read values of its enclosing regions, never values defined inside
  a sibling region or after the op that holds it;
- every op passes its `linnet.ir.ops` rule with its actual result types;
- the function's inputs are its body's args and its results its body's results;
- with a `Program`: `param`/`buffer`/`state` reads and `state_updates` name
  declared paths with the declared types.
"""

from __future__ import annotations

from collections.abc import Mapping

from linnet.errors import InternalError
from linnet.ir import ops as op_rules
from linnet.ir.core import Function, Op, Program, Region, TensorType, Value


class _Verifier:
    def __init__(self, fn: Function, program: Program | None) -> None:
        self.fn = fn
        self.program = program
        self.defined: set[Value] = set()

    def fail(self, message: str) -> InternalError:
        return InternalError(f"IR verification failed in {self.fn.name}: {message}")

    def define(self, value: Value, scope: set[Value]) -> None:
        if value in self.defined:
            raise self.fail(f"{value!r} is defined twice")
        if not isinstance(value.type, TensorType):
            raise self.fail(f"{value!r} has no TensorType")
        self.defined.add(value)
        scope.add(value)

    def use(self, value: Value, scopes: list[set[Value]], where: str) -> None:
        if not any(value in scope for scope in scopes):
            raise self.fail(f"{where} reads {value!r}, which is not defined in scope")

    def region(self, region: Region, scopes: list[set[Value]], where: str) -> set[Value]:
        """Check `region`; return the values it defines (its args and op results)."""
        scope: set[Value] = set()
        inner = [*scopes, scope]
        for arg in region.args:
            self.define(arg, scope)
        for op in region.ops:
            self.op(op, inner)
        for value in region.results:
            self.use(value, inner, f"the results of {where}")
        return scope

    def op(self, op: Op, scopes: list[set[Value]]) -> None:
        for value in op.operands:
            self.use(value, scopes, f"op {op.kind}")
        for index, region in enumerate(op.regions):
            self.region(region, scopes, f"region {index} of op {op.kind}")
        try:
            op_rules.infer(
                op.kind,
                [v.type for v in op.operands],
                op.attrs,
                op.regions,
                tuple(v.type for v in op.results),
            )
        except InternalError as exc:
            raise self.fail(str(exc)) from None
        self.declared(op)
        for value in op.results:
            self.define(value, scopes[-1])

    def declared(self, op: Op) -> None:
        if self.program is None or op.kind not in ("param", "buffer", "state"):
            return
        tables: Mapping[str, Mapping[str, TensorType]] = {
            "param": self.program.params,
            "buffer": self.program.buffers,
            "state": self.program.state,
        }
        path = op.attrs["path"]
        assert isinstance(path, str)
        declared = tables[op.kind].get(path)
        if declared is None:
            raise self.fail(f"op {op.kind} reads undeclared path {path}")
        if declared != op.results[0].type:
            raise self.fail(
                f"op {op.kind} reads {path} as {op.results[0].type}, declared {declared}"
            )

    def function(self) -> None:
        fn = self.fn
        if tuple(v for _, v in fn.inputs) != fn.body.args:
            raise self.fail("inputs are not the body's args")
        if fn.results != fn.body.results:
            raise self.fail("results are not the body's results")
        top = self.region(fn.body, [], "the function body")
        for path, value in fn.state_updates.items():
            self.use(value, [top], f"state update {path}")
            if self.program is not None:
                declared = self.program.state.get(path)
                if declared is None:
                    raise self.fail(f"state update names undeclared path {path}")
                if declared != value.type:
                    raise self.fail(f"state update {path} is {value.type}, declared {declared}")


def verify(target: Function | Program, program: Program | None = None) -> None:
    """Check `target` (a function, optionally against `program`, or every entry of a program)."""
    if isinstance(target, Program):
        for fn in target.entries.values():
            _Verifier(fn, target).function()
    else:
        _Verifier(target, program).function()
