"""Expressions of the plan: checked expressions as structured ops (language.md 7-10, 19).

Stage: a helper of `linnet.plan.body` (which adds statements and loops). In:
an expression of a checked body and the checker's side tables. Out: ops
appended to the current region, `{"kind", "operands": [id], "results":
[value], "attrs", "regions"}` with `value = {"id", "name", "type"}`; the
result value of the expression is returned.

Nothing is evaluated and no dimension is given a value: shapes stay
symbolic and optional members stay `option.match`es that a materializer
settles once the weights are known (14.4). Compile-time values (5.4) become
constants of the type their context gave them (7.3).

Op kinds (the 19 list), with their attrs:
- constants `const.int {value}`, `const.float {value}`, `const.bool {value}`,
  `const.dim {value: dim}` (a symbolic compile-time integer), `enum.const
  {enum, variant}`; a named constant adds `constant: "module::NAME"`.
- elementwise `add sub mul div rem min max and or bitand bitor bitxor shl shr
  not neg exp log sqrt rsqrt sin cos tanh abs`, `compare {predicate:
  eq|ne|lt|le|gt|ge}`, `cast {dtype}`, `select`.
- shape `reshape {shape}`, `permute {perm}`, `broadcast {shape}`, `concat
  {axis, axis_from_end}`, `cumsum {axis, axis_from_end}` (inclusive running sums in the
  operand's dtype), `fill {shape}`, `iota {length, dtype}`, `slice {axes}`
  with one entry per shape unit of the operand: `{start, stop, step, extent}`,
  `{squeeze: true, index: dim}` / `{squeeze: true, operand: k}` (a runtime
  position, operand k) or `{whole: true, unit}` (kept as it is; a pack unit
  keeps all its axes).
- index notation `comprehension {name, indices}` and `reduce {kind, dtype,
  indices}` (one region each, yielding the scalar body), `tensor.element
  {components}` with `{index: n, name}`, `{pack: n, name}`, `{position: dim}`
  or `{operand: k}` per component; `indices` declare `{index: n, name, pack,
  domain}`, numbered per document.
- aggregates `tuple.make`, `tuple.get {index}`, `struct.make {struct, module}` (the
  field values in declaration order), `struct.get {field}`,
  `option.some`, `option.none`, `option.match` (regions `some` with the
  payload as argument, then `none`), `enum.match {arms}` (one region per arm).
- control `if` (regions then, else), `for {start, stop}` (a runtime `for`,
  language-extensions 1: operands the initial carried values, one region with
  the `i64` counter and the carried values as arguments, yielding the next
  carried values then the scan values; results: the final carried values,
  then the scan values stacked on a new leading axis), `static_for {length}` over a `sub` array
  and `static_range {start, stop}` (region arguments: the element or the `i64`
  counter, then the carried values), `while` (regions cond, body; arguments:
  the carried values), `yield`, `return`.
- calls `call` (fn, entry; an op under `exact` numerics) and `semantic.call`
  (an op kept by identity under `equivalent` numerics), with `callee`,
  `kind`, `generics` (the callee's order), `substitution`, `params`,
  `receiver` (operand 0 is the child block) and `stateful`.
- blocks `block.param {member, kind: param|buffer}`, `block.sub {member}`,
  `array.get {position}`, `state.read {member}`, `state.write {member}`; with
  no operand they address the function's own block, else the child block
  given as operand 0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from linnet.check.decls import (
    ConstInfo,
    EnumVariant,
    FnInfo,
    IndexVar,
    LocalInfo,
    MemberInfo,
    PreludeFn,
)
from linnet.check.dims import Dim, Symbol
from linnet.check.program import CallInfo, CheckedProgram
from linnet.check.types import (
    NONE,
    UNIT,
    CtFloatType,
    CtIntType,
    EnumType,
    OptionalType,
    ScalarType,
    ShapeType,
    StructType,
    TensorType,
    TupleType,
    Type,
)
from linnet.errors import InternalError
from linnet.plan.ct import CtValue, ct_value, strip_parens
from linnet.plan.values import JSON, ValueEncoder
from linnet.syntax import ast

Json = dict[str, JSON]

ARITHMETIC = {"+": "add", "-": "sub", "*": "mul", "/": "div", "%": "rem"}
BITWISE = {"&": "bitand", "|": "bitor", "^": "bitxor"}
LOGICAL = {"&&": "and", "||": "or"}
PREDICATES = {"==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}
UNARY_PRELUDE = frozenset({"exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "abs"})
BINARY_PRELUDE = frozenset({"min", "max", "shl", "shr"})


class PlanState:
    """What the encoders of one document share: ids, numbers, and the work list."""

    def __init__(self, program: CheckedProgram, values: ValueEncoder, numerics: str) -> None:
        self.program = program
        self.values = values
        self.numerics = numerics
        self.next_id = 0
        self.index_numbers: dict[IndexVar, int] = {}
        self.functions: dict[FnInfo, None] = {}  # ordered set of functions to emit
        self.constants: dict[ConstInfo, None] = {}

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def index_number(self, var: IndexVar) -> int:
        n = self.index_numbers.get(var)
        if n is None:
            n = self.index_numbers[var] = len(self.index_numbers)
        return n


class ExprEncoder:
    """Encodes expressions into the current region; `BodyEncoder` adds statements."""

    def __init__(self, state: PlanState, fn: FnInfo | None) -> None:
        self.state = state
        self.program = state.program
        self.values = state.values
        self.fn = fn
        self.env: dict[LocalInfo, Json] = {}
        self.ops: list[Json] = []

    # -- values and ops ----------------------------------------------------------------

    def _value(self, t: Type | JSON, name: str = "") -> Json:
        encoded = self.values.type_(t) if isinstance(t, Type) else t
        return {"id": self.state.new_id(), "name": name, "type": encoded}

    def _emit(
        self,
        kind: str,
        operands: list[Json],
        results: list[Type],
        attrs: Json | None = None,
        regions: list[Json] | None = None,
    ) -> list[Json]:
        values = [self._value(t) for t in results]
        self.ops.append(
            {
                "kind": kind,
                "operands": [v["id"] for v in operands],
                "results": values,
                "attrs": attrs or {},
                "regions": regions or [],
            }
        )
        return values

    def _emit1(
        self,
        kind: str,
        operands: list[Json],
        result: Type,
        attrs: Json | None = None,
        regions: list[Json] | None = None,
    ) -> Json:
        return self._emit(kind, operands, [result], attrs, regions)[0]

    def _bind(self, local: LocalInfo, value: Json) -> Json:
        if not value["name"]:
            value["name"] = local.name
        self.env[local] = value
        return value

    @contextmanager
    def _region(self, args: list[Json]) -> Iterator[Json]:
        """Collect the ops emitted inside into a fresh region; locals bound inside stay local."""
        saved_ops, saved_env = self.ops, dict(self.env)
        region: Json = {"args": args, "ops": []}
        self.ops = region["ops"]  # type: ignore[assignment]
        try:
            yield region
        finally:
            self.ops, self.env = saved_ops, saved_env

    def type_of(self, e: ast.Expr) -> Type:
        """The runtime type the context gave `e` (adopted, else as checked)."""
        node: ast.Expr = e
        while True:
            adopted = self.program.adopted.get(node)
            if adopted is not None:
                return adopted
            if not isinstance(node, ast.Paren):
                break
            node = node.inner
        t = self.program.types.get(e)
        if t is None:
            raise InternalError(f"the checker recorded no type for `{e.span.text}`")
        return t

    def scan(self, e: ast.ForLoop) -> Json:
        """A `for` with a value (language-extensions 1): `BodyEncoder` encodes loops."""
        raise InternalError("a scan outside a function body")

    def pattern(self, p: ast.Pattern, value: Json, t: Type | None) -> None:
        """Bind an irrefutable pattern (11.4): a name, `_`, or a tuple taken apart."""
        if isinstance(p, ast.NamePattern):
            local = self.program.bindings.get(p.name)
            if local is not None:
                self._bind(local, value)
        elif isinstance(p, ast.TuplePattern):
            if not isinstance(t, TupleType):
                raise InternalError("a tuple pattern over a value that is not a tuple")
            for i, (sub, et) in enumerate(zip(p.elems, t.elems, strict=True)):
                self.pattern(sub, self._emit1("tuple.get", [value], et, {"index": i}), et)
        elif isinstance(p, ast.SomePattern):
            inner = t.inner if isinstance(t, OptionalType) else None
            self.pattern(p.inner, value, inner)

    # -- expressions ------------------------------------------------------------------

    def expr(self, e: ast.Expr) -> Json:
        rt = self.type_of(e)
        if isinstance(rt, (CtIntType, CtFloatType, ScalarType)) and not isinstance(
            strip_parens(e), ast.BoolLit
        ):
            folded = self._compile_time(e, rt)
            if folded is not None:
                return folded
        if rt is NONE or (
            isinstance(strip_parens(e), ast.NoneLit) and isinstance(rt, OptionalType)
        ):
            return self._emit1("option.none", [], rt)
        handler = _EXPRESSIONS.get(type(e))
        if handler is None:
            raise InternalError(f"the plan cannot encode `{e.span.text}`")
        return handler(self, e)

    def _compile_time(self, e: ast.Expr, rt: Type) -> Json | None:
        """A compile-time value (5.4) as a constant of the type its context gave it.

        Only compile-time values adopt a scalar type (7.3, 5.4 defaulting), so an
        adopted scalar, like a `CtIntType`/`CtFloatType`, marks one.
        """
        t = self.program.types.get(strip_parens(e))
        adopted = isinstance(rt, ScalarType) and self._adopted(e)
        if not (adopted or isinstance(t, (CtIntType, CtFloatType))):
            return None
        value: CtValue | None = ct_value(self.program, e)
        if value is None:
            return None
        attrs: Json = {}
        constant = self._constant_of(e)
        if isinstance(value, Dim):
            number = value.as_int()
            dtype = rt.dtype if isinstance(rt, ScalarType) else None
            if number is None:
                kind, attrs["value"] = "const.dim", self.values.dim(value)
            elif dtype is not None and getattr(dtype, "is_float", False):
                kind, attrs["value"] = "const.float", float(number)
            elif dtype is not None or not isinstance(rt, CtIntType):
                kind, attrs["value"] = "const.int", number
            else:
                kind, attrs["value"] = "const.dim", number
        else:
            kind, attrs["value"] = "const.float", value
        if constant is not None:
            attrs["constant"] = constant
        return self._emit1(kind, [], rt, attrs)

    def _adopted(self, e: ast.Expr) -> bool:
        node: ast.Expr = e
        while True:
            if node in self.program.adopted:
                return True
            if not isinstance(node, ast.Paren):
                return False
            node = node.inner

    def literal(self, e: ast.IntLit | ast.FloatLit) -> Json:
        """A literal whose value `_compile_time` could not use (it always can; kept total)."""
        rt = self.type_of(e)
        if isinstance(e, ast.IntLit):
            return self._emit1("const.int", [], rt, {"value": e.value})
        return self._emit1("const.float", [], rt, {"value": e.value})

    def _constant_of(self, e: ast.Expr) -> str | None:
        decl = self.program.resolutions.get(strip_parens(e))
        if isinstance(decl, ConstInfo):
            self.state.constants.setdefault(decl)
            return decl.qualified_name
        return None

    def bool_lit(self, e: ast.BoolLit) -> Json:
        return self._emit1("const.bool", [], self.type_of(e), {"value": e.value})

    def paren(self, e: ast.Paren) -> Json:
        return self.expr(e.inner)

    def name(self, e: ast.Name) -> Json:
        decl = self.program.resolutions.get(e)
        if isinstance(decl, LocalInfo):
            found = self.env.get(decl)
            if found is None:
                raise InternalError(f"the local `{decl.name}` has no value here")
            return found
        if isinstance(decl, MemberInfo):
            return self._member(decl, None, self.type_of(e))
        if isinstance(decl, ConstInfo):
            return self._named_constant(decl, e)
        raise InternalError(f"the name `{e.ident.name}` does not denote a value")

    def _named_constant(self, decl: ConstInfo, e: ast.Expr) -> Json:
        name = decl.qualified_name
        self.state.constants.setdefault(decl)
        value = decl.value
        rt = self.type_of(e)
        if isinstance(value, EnumVariant):
            return self._variant(value, rt, name)
        if isinstance(value, bool):
            return self._emit1("const.bool", [], rt, {"value": value, "constant": name})
        if isinstance(value, int):
            return self._emit1("const.int", [], rt, {"value": value, "constant": name})
        if isinstance(value, float):
            return self._emit1("const.float", [], rt, {"value": value, "constant": name})
        raise InternalError(f"the constant `{name}` has no folded value")

    def _variant(self, v: EnumVariant, rt: Type, constant: str | None = None) -> Json:
        attrs: Json = {"enum": f"{v.enum.module.name}::{v.enum.name}", "variant": v.name}
        if constant is not None:
            attrs["constant"] = constant
        return self._emit1("enum.const", [], rt, attrs)

    def _member(self, member: MemberInfo, block: Json | None, rt: Type) -> Json:
        """A `param`/`buffer`/`state`/`sub` of this block (no operand) or of a child."""
        operands = [] if block is None else [block]
        if member.kind == "state":
            return self._emit1("state.read", operands, rt, {"member": member.name})
        if member.kind == "sub":
            return self._emit1("block.sub", operands, rt, {"member": member.name})
        return self._emit1(
            "block.param", operands, rt, {"member": member.name, "kind": member.kind}
        )

    def member(self, e: ast.Member) -> Json:
        decl = self.program.resolutions.get(e)
        rt = self.type_of(e)
        if isinstance(decl, EnumVariant):
            return self._variant(decl, rt)
        if isinstance(decl, ConstInfo):
            return self._named_constant(decl, e)
        if isinstance(decl, MemberInfo):
            return self._member(decl, self.expr(e.target), rt)
        if isinstance(self.program.types.get(e.target), StructType):
            return self._emit1("struct.get", [self.expr(e.target)], rt, {"field": e.name.name})
        raise InternalError(f"the member `{e.name.name}` does not denote a value")

    def unary(self, e: ast.Unary) -> Json:
        operand = self.expr(e.operand)
        if e.op == "+":
            return operand
        return self._emit1("not" if e.op == "!" else "neg", [operand], self.type_of(e))

    def binary(self, e: ast.Binary) -> Json:
        left, right = self.expr(e.left), self.expr(e.right)
        rt = self.type_of(e)
        if e.op in PREDICATES:
            return self._emit1("compare", [left, right], rt, {"predicate": PREDICATES[e.op]})
        kind = ARITHMETIC.get(e.op) or BITWISE.get(e.op) or LOGICAL.get(e.op)
        if kind is None:
            raise InternalError(f"unknown operator `{e.op}`")
        return self._emit1(kind, [left, right], rt)

    def tuple_(self, e: ast.TupleExpr) -> Json:
        return self._emit1("tuple.make", [self.expr(x) for x in e.elems], self.type_of(e))

    def some(self, e: ast.SomeExpr) -> Json:
        return self._emit1("option.some", [self.expr(e.value)], self.type_of(e))

    def if_(self, e: ast.IfExpr) -> Json:
        cond = self.expr(e.cond)
        regions = []
        for branch in (e.then, e.otherwise):
            with self._region([]) as region:
                self._emit("yield", [self.expr(branch)], [])
            regions.append(region)
        return self._emit1("if", [cond], self.type_of(e), {}, regions)

    def match(self, e: ast.MatchExpr) -> Json:
        scrutinee = self.expr(e.scrutinee)
        st = self.program.types.get(e.scrutinee)
        rt = self.type_of(e)
        if isinstance(st, OptionalType):
            return self._match_optional(e, scrutinee, st, rt)
        if not isinstance(st, EnumType):
            raise InternalError("`match` over a value that is neither optional nor an enum")
        arms: list[JSON] = []
        regions: list[Json] = []
        for arm in e.arms:
            with self._region([]) as region:
                arms.append(self._enum_arm(arm.pattern, scrutinee))
                self._emit("yield", [self.expr(arm.value)], [])
            regions.append(region)
        enum = f"{st.info.module.name}::{st.info.name}"
        return self._emit1("enum.match", [scrutinee], rt, {"enum": enum, "arms": arms}, regions)

    def _enum_arm(self, p: ast.Pattern, scrutinee: Json) -> JSON:
        if not isinstance(p, ast.NamePattern):
            raise InternalError("an enum arm that is not a name")
        resolved = self.program.resolutions.get(p.name)
        if isinstance(resolved, EnumVariant):
            return {"variant": resolved.name}
        local = self.program.bindings.get(p.name)
        if local is not None:
            self.env[local] = scrutinee
        return {"catch_all": True}

    def _match_optional(
        self, e: ast.MatchExpr, scrutinee: Json, st: OptionalType, rt: Type
    ) -> Json:
        """`option.match`: the `some` region takes the payload, then the `none` region."""
        some_arm = next((a for a in e.arms if isinstance(a.pattern, ast.SomePattern)), None)
        none_arm = next((a for a in e.arms if isinstance(a.pattern, ast.NonePattern)), None)
        catch_all = next((a for a in e.arms if isinstance(a.pattern, ast.NamePattern)), None)
        regions: list[Json] = []
        for arm, payload in ((some_arm, True), (none_arm, False)):
            chosen = arm if arm is not None else catch_all
            if chosen is None:
                raise InternalError("a `match` over an optional misses an arm")
            args = [self._value(st.inner)] if payload else []
            with self._region(args) as region:
                pattern = chosen.pattern
                if isinstance(pattern, ast.SomePattern):
                    self.pattern(pattern.inner, args[0], st.inner)
                elif isinstance(pattern, ast.NamePattern):
                    local = self.program.bindings.get(pattern.name)
                    if local is not None:
                        self.env[local] = scrutinee
                self._emit("yield", [self.expr(chosen.value)], [])
            regions.append(region)
        return self._emit1("option.match", [scrutinee], rt, {}, regions)

    # -- indexing ------------------------------------------------------------------

    def index(self, e: ast.Index) -> Json:
        info = self.program.indexings.get(e)
        if info is None:
            raise InternalError(f"the index expression `{e.span.text}` was not checked")
        target = self.expr(e.target)
        rt = self.type_of(e)
        if info.mode == "array":
            return self._emit1("array.get", [target], rt, {"position": info.position})
        if info.mode == "element":
            return self._element(e, target, rt)
        tt = self.program.types.get(e.target)
        if not isinstance(tt, TensorType):
            raise InternalError("slicing something that is not a tensor")
        operands = [target]
        by_axis = {sel.axis: sel for sel in info.selections}
        axes: list[JSON] = []
        for position, item in enumerate(tt.shape):
            sel = by_axis.get(position)
            if sel is None:
                axes.append({"whole": True, "unit": self.values.unit(item)})
            elif sel.kind == "index" and sel.start is not None:
                axes.append({"squeeze": True, "index": self.values.dim(sel.start)})
            elif sel.kind == "index":
                assert not isinstance(sel.component, ast.Slice)
                operands.append(self.expr(sel.component))
                axes.append({"squeeze": True, "operand": len(operands) - 1})
            else:
                stop = sel.stop if sel.stop is not None else item
                assert isinstance(stop, Dim) and not isinstance(item, Symbol)
                start = sel.start if sel.start is not None else Dim.const(0)
                extent = sel.extent if sel.extent is not None else stop
                axes.append(
                    {
                        "start": self.values.dim(start),
                        "stop": self.values.dim(stop),
                        "step": sel.step,
                        "extent": self.values.dim(extent),
                    }
                )
        return self._emit1("slice", operands, rt, {"axes": axes})

    def _element(self, e: ast.Index, target: Json, rt: Type) -> Json:
        """`t[i, *s, labels[b], 0]` in index notation (8.3)."""
        operands = [target]
        components: list[JSON] = []
        for c in e.components:
            var = self.program.resolutions.get(c)
            if isinstance(var, IndexVar):
                key = "pack" if var.is_pack else "index"
                components.append({key: self.state.index_number(var), "name": var.name})
                continue
            assert not isinstance(c, (ast.Slice, ast.EllipsisComponent, ast.PackIndex))
            value = ct_value(self.program, c)
            if isinstance(value, Dim):
                components.append({"position": self.values.dim(value)})
            else:
                operands.append(self.expr(c))
                components.append({"operand": len(operands) - 1})
        return self._emit1("tensor.element", operands, rt, {"components": components})

    def _index_decl(self, var: IndexVar) -> JSON:
        domain = var.domain
        if var.is_pack:
            assert isinstance(domain, tuple)
            encoded: JSON = self.values.shape(domain)
        else:
            assert isinstance(domain, Dim)
            encoded = self.values.dim(domain)
        return {
            "index": self.state.index_number(var),
            "name": var.name,
            "pack": var.is_pack,
            "domain": encoded,
        }

    def reduction(self, e: ast.Reduction) -> Json:
        info = self.program.reductions.get(e)
        if info is None or info.dtype is None:
            raise InternalError(f"the reduction `{e.span.text}` was not checked")
        indices = [self._index_decl(v) for v in info.indices]
        with self._region([]) as region:
            self._emit("yield", [self.expr(e.body)], [])
        attrs: Json = {"kind": e.kind, "dtype": self.values.dtype(info.dtype), "indices": indices}
        return self._emit1("reduce", [], self.type_of(e), attrs, [region])

    # -- calls ------------------------------------------------------------------

    def call(self, e: ast.Call) -> Json:
        from linnet.plan.kernels import builtin_call

        builtin = builtin_call(self, e)  # `load`, `program_id` in a kernel body
        if builtin is not None:
            return builtin
        fields = self.program.constructions.get(e)
        if fields is not None:
            return self._construction(e, fields)
        info = self.program.calls.get(e)
        if info is None:
            raise InternalError(f"the call `{e.span.text}` was not checked")
        if isinstance(info.callee, PreludeFn):
            return self._prelude(e, info, info.callee.name)
        assert isinstance(info.callee, FnInfo)
        return self._user_call(e, info, info.callee)

    def _construction(self, e: ast.Call, fields: tuple[ast.Expr, ...]) -> Json:
        """`Name(field = value, ...)` as `struct.make`: the values in field declaration order
        (language-extensions 0.5); the struct and its bound generics are in the result type."""
        rt = self.type_of(e)
        operands = [self.expr(value) for value in fields]
        t = self.program.types.get(e)
        assert isinstance(t, StructType)
        attrs: Json = {"struct": t.info.name, "module": t.info.module.name}
        return self._emit1("struct.make", operands, rt, attrs)

    def _user_call(self, e: ast.Call, info: CallInfo, fn: FnInfo) -> Json:
        self.state.functions.setdefault(fn)
        operands: list[Json] = []
        if info.receiver is not None:
            operands.append(self.expr(info.receiver))
        for param, arg in zip(fn.params, info.args, strict=True):
            operands.append(self._default(param, info) if arg is None else self.expr(arg))
        kind = "call"
        if fn.kind == "op" and self.state.numerics == "equivalent":
            kind = "semantic.call"
        footprint = self.program.state_footprint(fn)
        attrs: Json = {
            "callee": fn.qualified_name,
            "kind": fn.kind,
            "generics": self.values.generics_of(fn.generics, info.subst),
            "substitution": self.values.substitution(info.subst),
            "params": [p.name for p in fn.params],
            "receiver": info.receiver is not None,
            "stateful": bool(footprint.reads or footprint.writes),
        }
        if info.result is UNIT:
            # 7.7: a call is never a statement, so a call without a result is never encoded.
            raise InternalError(f"`{e.span.text}` returns no value")
        return self._emit1(kind, operands, info.result, attrs)

    def _default(self, param: LocalInfo, info: CallInfo) -> Json:
        """A parameter's default, encoded in the caller with the call's bindings (11.2)."""
        if param.default is None:
            raise InternalError(f"no argument and no default for `{param.name}`")
        saved = self.values
        self.values = saved.with_subst(info.subst)
        try:
            return self.expr(param.default)
        finally:
            self.values = saved

    def _prelude(self, e: ast.Call, info: CallInfo, name: str) -> Json:
        rt = self.type_of(e)
        args = [a for a in info.args if a is not None]
        shape_of: Callable[[ast.Expr], JSON] = lambda node: self.values.shape(  # noqa: E731
            _shape_dims(self.program.types.get(node))
        )
        if name == "cast":
            dtype = info.dtype_arg
            assert dtype is not None
            return self._emit1(
                "cast", [self.expr(args[0])], rt, {"dtype": self.values.dtype(dtype)}
            )
        if name in UNARY_PRELUDE:
            return self._emit1(name, [self.expr(args[0])], rt)
        if name in BINARY_PRELUDE:
            return self._emit1(name, [self.expr(args[0]), self.expr(args[1])], rt)
        if name == "select":
            return self._emit1("select", [self.expr(a) for a in args], rt)
        if name == "reshape":
            return self._emit1("reshape", [self.expr(args[0])], rt, {"shape": shape_of(args[1])})
        if name == "broadcast_to":
            return self._emit1("broadcast", [self.expr(args[0])], rt, {"shape": shape_of(args[1])})
        if name == "permute":
            perm = [d.as_int() for d in _shape_dims(self.program.types.get(args[1]))]
            return self._emit1("permute", [self.expr(args[0])], rt, {"perm": perm})
        if name == "cumsum":
            x = self.program.types.get(args[0])
            rank = len(x.shape) if isinstance(x, TensorType) else 0
            axis = info.axis if info.axis is not None else 0
            running: Json = {"axis": axis, "axis_from_end": axis - rank}
            return self._emit1("cumsum", [self.expr(args[0])], rt, running)
        if name == "concat":
            tensors = [self.expr(a) for a in args[:-1]]
            first = self.program.types.get(args[0])
            rank = len(first.shape) if isinstance(first, TensorType) else 0
            axis = info.axis if info.axis is not None else 0
            attrs: Json = {"axis": axis, "axis_from_end": axis - rank}
            return self._emit1("concat", tensors, rt, attrs)
        if name == "iota":
            if not isinstance(rt, TensorType):
                raise InternalError("`iota` without a tensor type")
            attrs = {"length": self.values.unit(rt.shape[0]), "dtype": self.values.dtype(rt.dtype)}
            return self._emit1("iota", [], rt, attrs)
        if name == "fill":
            return self._emit1("fill", [self.expr(args[1])], rt, {"shape": shape_of(args[0])})
        raise InternalError(f"the prelude function `{name}` has no plan encoding")


def _shape_dims(t: Type | None) -> tuple[Dim, ...]:
    if not isinstance(t, ShapeType):
        raise InternalError("a shape argument that is not a shape literal")
    return tuple(d for d in t.dims if isinstance(d, Dim))


_EXPRESSIONS: dict[type, Callable[[ExprEncoder, ast.Expr], Json]] = {
    ast.IntLit: ExprEncoder.literal,  # type: ignore[dict-item]
    ast.FloatLit: ExprEncoder.literal,  # type: ignore[dict-item]
    ast.BoolLit: ExprEncoder.bool_lit,  # type: ignore[dict-item]
    ast.Paren: ExprEncoder.paren,  # type: ignore[dict-item]
    ast.Name: ExprEncoder.name,  # type: ignore[dict-item]
    ast.Member: ExprEncoder.member,  # type: ignore[dict-item]
    ast.Unary: ExprEncoder.unary,  # type: ignore[dict-item]
    ast.Binary: ExprEncoder.binary,  # type: ignore[dict-item]
    ast.Call: ExprEncoder.call,  # type: ignore[dict-item]
    ast.Index: ExprEncoder.index,  # type: ignore[dict-item]
    ast.TupleExpr: ExprEncoder.tuple_,  # type: ignore[dict-item]
    ast.SomeExpr: ExprEncoder.some,  # type: ignore[dict-item]
    ast.Reduction: ExprEncoder.reduction,  # type: ignore[dict-item]
    ast.IfExpr: ExprEncoder.if_,  # type: ignore[dict-item]
    ast.MatchExpr: ExprEncoder.match,  # type: ignore[dict-item]
    ast.ForLoop: lambda encoder, e: encoder.scan(e),  # type: ignore[arg-type]
}
