"""Regions of the plan: checked function bodies as structured ops (language.md 11-13, 19).

Stage: a helper of `linnet.plan`. In: a checked `FnInfo` (or a constant's
initialiser) and the checker's side tables. Out: a region
`{"args": [value], "ops": [op]}` ending in `return` (a function) or `yield`
(a constant, a nested region); expressions are encoded by
`linnet.plan.exprs`, whose docstring lists every op kind and its attrs.

Locals are SSA: a `var` assignment rebinds the name to a new value, and
loops carry exactly the outer `var`s their bodies assign (13.3), as
operands, region arguments, a final `yield` and results. `static for` stays
a loop (`static_for` over a `sub` array, `static_range` over `a..b`): its
bounds may be generics, which the plan keeps symbolic. State writes are
`state.write` ops in program order (12.6).
"""

from __future__ import annotations

from collections.abc import Callable

from linnet.check.decls import FnInfo, LocalInfo, MemberInfo
from linnet.check.types import I64, ArrayType, TupleType, Type, scalar
from linnet.errors import InternalError
from linnet.plan.ct import strip_parens
from linnet.plan.exprs import ExprEncoder, Json, PlanState
from linnet.plan.kernels import write_stmt
from linnet.syntax import ast


class BodyEncoder(ExprEncoder):
    """Encodes one function body or constant initialiser into a region."""

    def __init__(self, state: PlanState, fn: FnInfo | None) -> None:
        super().__init__(state, fn)
        self.returned = False

    # -- entry points ----------------------------------------------------------------

    def function(self, fn: FnInfo) -> Json:
        """The body of `fn`: its parameters as region arguments, ending in `return`."""
        args = [self._bind(p, self._value(p.type, p.name)) for p in fn.params]
        self.stmts(fn.decl.body.stmts)
        if not self.returned:
            self._emit("return", [], [])
        return {"args": args, "ops": self.ops}

    def initialiser(self, value: ast.Expr) -> Json:
        """A constant's region: its value, then `yield`."""
        result = self.expr(value)
        self._emit("yield", [result], [])
        return {"args": [], "ops": self.ops}

    def result_type(self) -> Type | None:
        """What a `return` returns: the function's result (a clause's gradients differ)."""
        return self.fn.result if self.fn is not None else None

    # -- statements ------------------------------------------------------------------

    def stmts(self, stmts: tuple[ast.Stmt, ...]) -> None:
        for s in stmts:
            if self.returned:
                return  # nothing after the single exit runs (11.3)
            _STATEMENTS[type(s)](self, s)

    def let(self, s: ast.LetStmt) -> None:
        value = self.expr(s.value)
        self.pattern(s.pattern, value, self.type_of(s.value))

    def var(self, s: ast.VarStmt) -> None:
        local = self.program.bindings.get(s.name)
        value = self.expr(s.value)
        if local is not None:
            self._bind(local, value)

    def assign(self, s: ast.AssignStmt) -> None:
        target = self.program.resolutions.get(s.target)
        value = self.expr(s.value)
        if isinstance(target, LocalInfo):
            self.env[target] = value
            if not value["name"]:
                value["name"] = target.name
        elif isinstance(target, MemberInfo) and target.kind == "state":
            self._emit("state.write", [value], [], {"member": target.name})
        else:
            raise InternalError(f"assignment to `{s.target.name}` was not resolved")

    def return_(self, s: ast.ReturnStmt) -> None:
        self.returned = True
        if s.value is None:
            self._emit("return", [], [])
            return
        result = self.result_type()
        inner = strip_parens(s.value)
        if isinstance(result, TupleType) and isinstance(inner, ast.TupleExpr):
            values = [self.expr(e) for e in inner.elems]
        elif isinstance(result, TupleType):
            whole = self.expr(s.value)
            values = [
                self._emit1("tuple.get", [whole], t, {"index": i})
                for i, t in enumerate(result.elems)
            ]
        else:
            values = [self.expr(s.value)]
        self._emit("return", values, [])

    def comprehension(self, s: ast.ComprehensionStmt) -> None:
        info = self.program.comprehensions.get(s)
        if info is None:
            raise InternalError(f"comprehension `{s.name.name}` was not checked")
        indices = [self._index_decl(v) for v in info.outputs]
        with self._region([]) as region:
            self._emit("yield", [self.expr(s.value)], [])
        value = self._emit1(
            "comprehension", [], info.result, {"name": s.name.name, "indices": indices}, [region]
        )
        self._bind(info.local, value)

    def static_for(self, s: ast.StaticForStmt) -> None:
        info = self.program.static_fors.get(s)
        if info is None:
            raise InternalError("a `static for` was not checked")
        carried = self._carried(s.body.stmts)
        if info.mode == "array":
            array = self.expr(s.iter)
            array_type = self.program.types.get(s.iter)
            if not isinstance(array_type, ArrayType):
                raise InternalError("a `static for` over something that is not an array")
            counter = self._value(array_type.elem)
            kind, operands = "static_for", [array]
            attrs: Json = {"length": self.values.dim(array_type.length)}
        else:
            if info.start is None or info.stop is None:
                raise InternalError("a `static for` range without bounds")
            counter = self._value(scalar(I64))  # the counter is a runtime i64 (13.2)
            kind, operands = "static_range", []
            attrs = {"start": self.values.dim(info.start), "stop": self.values.dim(info.stop)}
        self._loop(kind, operands, attrs, carried, [counter], s.pattern, s.body.stmts)

    def while_(self, s: ast.WhileStmt) -> None:
        carried = self._carried(s.body.stmts)
        init = [self.env[local] for local in carried]
        with self._region(self._carried_args(carried)) as cond:
            self._emit("yield", [self.expr(s.cond)], [])
        with self._region(self._carried_args(carried)) as body:
            self.stmts(s.body.stmts)
            self._emit("yield", [self.env[local] for local in carried], [])
        results = self._emit("while", init, [c.type for c in carried], {}, [cond, body])
        for local, value in zip(carried, results, strict=True):
            self._bind(local, value)

    def for_(self, s: ast.ForLoop) -> None:
        self.scan(s)

    def scan(self, e: ast.ForLoop) -> Json:
        """A runtime `for` (language-extensions 1) as a `for` op; a scan's value is its one
        stacked result, or a `tuple.make` of them for a tuple `yield`."""
        info = self.program.runtime_fors.get(e)
        if info is None:
            raise InternalError("a `for` was not checked")
        carried = self._carried(e.body.stmts)
        init = [self.env[local] for local in carried]
        stmts = e.body.stmts
        final = stmts[-1] if info.yield_type is not None else None
        if final is not None:
            stmts = stmts[:-1]
        counter = self._value(scalar(I64))
        returned, self.returned = self.returned, False  # `return for ...`: the body still runs
        with self._region([counter, *self._carried_args(carried)]) as body:
            if info.variable is not None:
                self._bind(info.variable, counter)
            self.stmts(stmts)
            rows: list[Json] = []
            if isinstance(final, ast.YieldStmt):
                yielded = strip_parens(final.value)
                if isinstance(info.yield_type, TupleType) and isinstance(yielded, ast.TupleExpr):
                    rows = [self.expr(x) for x in yielded.elems]
                elif isinstance(info.yield_type, TupleType):
                    whole = self.expr(final.value)
                    rows = [
                        self._emit1("tuple.get", [whole], t, {"index": i})
                        for i, t in enumerate(info.yield_type.elems)
                    ]
                else:
                    rows = [self.expr(final.value)]
            self._emit("yield", [*(self.env[local] for local in carried), *rows], [])
        self.returned = returned
        stacked = self.program.types.get(e) if final is not None else None
        scans = list(stacked.elems) if isinstance(stacked, TupleType) else []
        if stacked is not None and not isinstance(stacked, TupleType):
            scans = [stacked]
        attrs: Json = {"start": self.values.dim(info.start), "stop": self.values.dim(info.stop)}
        results = self._emit("for", init, [*(c.type for c in carried), *scans], attrs, [body])
        for local, value in zip(carried, results[: len(carried)], strict=True):
            self._bind(local, value)
        out = results[len(carried) :]
        if isinstance(stacked, TupleType):
            return self._emit1("tuple.make", out, stacked)
        return out[0] if out else {}

    def _loop(
        self,
        kind: str,
        operands: list[Json],
        attrs: Json,
        carried: list[LocalInfo],
        counter: list[Json],
        pattern: ast.Pattern,
        body_stmts: tuple[ast.Stmt, ...],
    ) -> None:
        init = [self.env[local] for local in carried]
        with self._region(counter + self._carried_args(carried)) as body:
            self.pattern(pattern, counter[0], None)
            self.stmts(body_stmts)
            self._emit("yield", [self.env[local] for local in carried], [])
        results = self._emit(kind, operands + init, [c.type for c in carried], attrs, [body])
        for local, value in zip(carried, results, strict=True):
            self._bind(local, value)

    def _carried_args(self, carried: list[LocalInfo]) -> list[Json]:
        args = [self._value(local.type, local.name) for local in carried]
        for local, arg in zip(carried, args, strict=True):
            self.env[local] = arg
        return args

    def _carried(self, stmts: tuple[ast.Stmt, ...]) -> list[LocalInfo]:
        """The outer `var`s a loop body assigns, in order of first assignment (13.3)."""
        found: dict[LocalInfo, None] = {}

        def walk(body: tuple[ast.Stmt, ...]) -> None:
            for s in body:
                if isinstance(s, ast.AssignStmt):
                    target = self.program.resolutions.get(s.target)
                    if isinstance(target, LocalInfo) and target in self.env:
                        found.setdefault(target)
                elif isinstance(s, (ast.StaticForStmt, ast.WhileStmt, ast.ForLoop)):
                    walk(s.body.stmts)
                if isinstance(
                    s, (ast.LetStmt, ast.VarStmt, ast.AssignStmt, ast.ReturnStmt)
                ) and isinstance(s.value, ast.ForLoop):  # a scan assigns outer `var`s too
                    walk(s.value.body.stmts)

        walk(stmts)
        return list(found)


_STATEMENTS: dict[type, Callable[[BodyEncoder, ast.Stmt], None]] = {
    ast.LetStmt: BodyEncoder.let,  # type: ignore[dict-item]
    ast.VarStmt: BodyEncoder.var,  # type: ignore[dict-item]
    ast.AssignStmt: BodyEncoder.assign,  # type: ignore[dict-item]
    ast.ReturnStmt: BodyEncoder.return_,  # type: ignore[dict-item]
    ast.ComprehensionStmt: BodyEncoder.comprehension,  # type: ignore[dict-item]
    ast.StaticForStmt: BodyEncoder.static_for,  # type: ignore[dict-item]
    ast.WhileStmt: BodyEncoder.while_,  # type: ignore[dict-item]
    ast.ForLoop: BodyEncoder.for_,  # type: ignore[dict-item]
    ast.WriteStmt: write_stmt,  # type: ignore[dict-item]
}
