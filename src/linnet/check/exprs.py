"""The body checker: expressions (language.md 7) and the state it works in.

Stage: semantic checking of one function body, constant initialiser,
parameter default, or the dimension expressions of a signature.
In: the AST of an expression, the scopes and facts of its context.
Out: its type, recorded in `CheckedProgram.types`, and diagnostics.

`BodyChecker` holds the context (module, block, function, scope chain,
facts, index-notation state); the expression forms live in their own modules
and take the checker as their first argument: operators (`check.operators`),
calls (`check.calls`), member access (`check.members`), the prelude
(`check.prelude`), index
notation and slicing (`check.indexing`), `match` and patterns
(`check.patterns`), statements (`check.stmts`), syntax types
(`check.typeconv`). This module keeps the small forms: literals, names,
unary operators, tuples, `some`, shape literals and `if`.
"""

from __future__ import annotations

from collections.abc import Callable

from linnet.check import (
    assignability,
    calls,
    indexing,
    members,
    operators,
    patterns,
    scans,
    signatures,
)
from linnet.check.context import Context
from linnet.check.decls import (
    AliasInfo,
    BlockInfo,
    ConstInfo,
    Decl,
    EnumInfo,
    FnInfo,
    GenericInfo,
    IndexVar,
    LocalInfo,
    MemberInfo,
    ModuleInfo,
    StructInfo,
    UnresolvedImport,
)
from linnet.check.dims import Dim, DimOverflow, Symbol
from linnet.check.kernel_info import KernelInfo, KernelScope
from linnet.check.prover import Facts
from linnet.check.scope import Scope
from linnet.check.types import (
    BOOL,
    ERROR,
    NONE,
    ArrayType,
    BlockType,
    CtFloatType,
    CtIntType,
    ErrorType,
    OptionalType,
    ScalarType,
    ShapeType,
    TensorType,
    TupleType,
    Type,
    is_numeric,
    scalar,
    show,
)
from linnet.check.unknown import unknown_name
from linnet.diagnostics import Label
from linnet.source import Span
from linnet.syntax import ast
from linnet.syntax.tokens import PRELUDE_FUNCTIONS, PRELUDE_NAMES

I64_MAX = (1 << 63) - 1
BOOL_T = scalar(BOOL)

_NONNEGATIVE: dict[Dim, bool] = {}


def structurally_nonnegative(d: Dim) -> bool:
    """Non-negative by its form alone: positive coefficients over non-negative atoms.

    Symbols and pack counts are non-negative (6.4); `floor`, `mod`, `min` and
    `max` of such polynomials are too (`mod` takes the divisor's sign, and a
    dimension divisor is proven positive where it is built). The answer needs
    no facts, so it is cached across functions.
    """
    found = _NONNEGATIVE.get(d)
    if found is None:
        found = all(c > 0 for _, c in d.terms) and all(
            type(atom) is Symbol
            or (structurally_nonnegative(atom.a) and structurally_nonnegative(atom.b))  # type: ignore[union-attr]
            for mono, _ in d.terms
            for atom in mono
        )
        if len(_NONNEGATIVE) < 100_000:
            _NONNEGATIVE[d] = found
    return found


class BodyChecker:
    """Checks expressions and statements in one context (see the module docstring)."""

    __slots__ = (
        "adopted",
        "block",
        "ctx",
        "facts",
        "fn",
        "in_alias",
        "index_vars",
        "kernel",
        "loop_depth",
        "module",
        "new_locals",
        "program",
        "resolutions",
        "runtime_names",
        "scope",
        "statement_unbound",
        "types",
        "where_mode",
    )

    def __init__(
        self,
        ctx: Context,
        module: ModuleInfo,
        block: BlockInfo | None,
        fn: FnInfo | None,
        scope: Scope,
        facts: Facts,
    ) -> None:
        self.ctx = ctx
        self.program = ctx.program
        self.types = ctx.program.types
        self.adopted = ctx.program.adopted
        self.resolutions = ctx.program.resolutions
        self.module = module
        self.block = block
        self.fn = fn
        self.scope = scope
        self.facts = facts
        # In `where` clauses divisions state facts and need no positive divisor (6.1).
        self.where_mode = False
        # Index-notation mode (8.3): the index variables in scope, else None.
        self.index_vars: dict[str, IndexVar] | None = None
        # E3101 is reported once per unknown name per statement (8.3).
        self.statement_unbound: set[str] = set()
        self.loop_depth = 0
        self.new_locals: list[LocalInfo] = []
        # Parameter names while a `where` clause is resolved (they are not in scope yet).
        self.runtime_names: frozenset[str] = frozenset()
        # While an alias's target is resolved, block `where` clauses are proven at
        # each use of the alias instead, where the arguments and facts are known.
        self.in_alias = False
        # The kernel whose body is checked (language-extensions 4.3), else None.
        self.kernel: KernelScope | None = None

    # ------------------------------------------------------------ dispatch

    def expr(self, e: ast.Expr, expected: Type | None = None) -> Type:
        """Check `e`; `expected` is a hint for literals, `none`, tuples and branches."""
        t = _DISPATCH[type(e)](self, e, expected)
        self.types[e] = t
        return t

    def proof_error(
        self,
        code: str,
        message: str,
        span: Span | None,
        label: str = "",
        *,
        related: tuple[Label, ...] = (),
        notes: tuple[str, ...] = (),
        help: tuple[str, ...] = (),
    ) -> None:
        """Report a failed proof, unless a `where` fact of this scope failed to resolve.

        That failure was reported; what the constraint would have stated is
        unknown, so an unproven relation here is most likely its consequence.
        """
        if not self.facts.incomplete:
            self.ctx.error(code, message, span, label, related=related, notes=notes, help=help)

    def prefer(self, node: ast.Expr, t: Type, expected: Type | None) -> Type:
        """Give a compile-time value the expected type when it fits (7.3, 7.8)."""
        if expected is None or not t.is_compile_time or expected.is_compile_time:
            return t
        if isinstance(t, CtIntType | CtFloatType) and isinstance(expected, ScalarType):
            if assignability._fits(self, t, expected):
                assignability.coerce(self, node, t, expected, "the value")
                return expected
        elif t is NONE and isinstance(expected, OptionalType):
            self.adopted[node] = expected
            return expected
        return t

    # ------------------------------------------------------------ names and scopes

    def lookup(self, name: str) -> Decl | None:
        return self.scope.lookup(name)

    def push_scope(self) -> None:
        self.scope = self.scope.child()

    def pop_scope(self) -> None:
        parent = self.scope.parent
        assert parent is not None
        self.scope = parent

    def declare_local(
        self,
        ident: ast.Ident,
        t: Type,
        kind: str,
        *,
        mutable: bool = False,
        block_path: tuple[str, ...] | None = None,
    ) -> LocalInfo | None:
        """Bind a local name in the innermost scope (a later one shadows, 4.4)."""
        if ident.name == "_":
            return None
        if ident.name in PRELUDE_NAMES:
            from linnet.check.collect import check_declared_name

            check_declared_name(self.ctx, ident, "local")
        local = LocalInfo(ident.name, ident, t, kind, mutable=mutable, block_path=block_path)  # type: ignore[arg-type]
        self.scope.table[ident.name] = local
        self.program.bindings[ident] = local
        self.new_locals.append(local)
        return local

    # ------------------------------------------------------------ dimensions

    def dim_of(self, e: ast.Expr) -> Dim | None:
        """A compile-time dimension (6.1), or None after reporting E2123."""
        t = self.expr(e)
        if isinstance(t, CtIntType):
            return t.value
        if isinstance(t, ErrorType):
            return None
        notes = ["dimensions use integer literals, `Dim` generics and integer constants only"]
        if isinstance(t, ScalarType) and isinstance(e, ast.Name):
            decl = self.resolutions.get(e)
            if isinstance(decl, ConstInfo):
                notes.append("an annotated constant is a typed scalar, not a dimension (14.1)")
        self.ctx.error(
            "E2123",
            "this expression is not a compile-time dimension",
            e.span,
            f"found {show(t)}",
            notes=tuple(notes),
        )
        return None

    def check_nonnegative(self, d: Dim, node: ast.Expr) -> None:
        """E2208: a dimension whose upper bound is provably negative (6.5)."""
        value = d.as_int()
        if value is None:
            if structurally_nonnegative(d):
                return
            high = self.facts.bounds(d)[1]
            if high is None or high >= 0:
                return
        elif value >= 0:
            return
        self.ctx.error(
            "E2208",
            f"the dimension `{self.facts.simplify(d)}` is negative",
            node.span,
            "negative dimension",
            notes=("dimensions are non-negative integers",),
        )

    def fold(self, op: Callable[[], Dim], node: ast.Expr) -> Type:
        """Fold compile-time integer arithmetic; overflow is E2123 (6.1)."""
        try:
            return CtIntType(op())
        except DimOverflow:
            self.ctx.error(
                "E2123",
                "integer arithmetic overflows",
                node.span,
                "overflows i64",
                notes=("compile-time integers are exact i64 values",),
            )
            return ERROR

    # ------------------------------------------------------------ small forms

    def check_int(self, e: ast.IntLit, expected: Type | None) -> Type:
        if e.value > I64_MAX:
            self.ctx.error(
                "E2105",
                "integer literal out of range",
                e.span,
                "larger than the i64 maximum",
                notes=("no integer literal may exceed the `i64` maximum 9223372036854775807",),
            )
            return ERROR
        return self.prefer(e, CtIntType(Dim.const(e.value)), expected)

    def check_float(self, e: ast.FloatLit, expected: Type | None) -> Type:
        if e.value == float("inf"):
            self.ctx.error(
                "E2105",
                "float literal out of range",
                e.span,
                "overflows f64",
                notes=("the literal's value is beyond the largest finite f64",),
            )
            return ERROR
        return self.prefer(e, CtFloatType(e.value), expected)

    def check_string(self, e: ast.StringLit, expected: Type | None) -> Type:
        self.ctx.error(
            "E2104",
            "string literals are not values",
            e.span,
            "string used as a value",
            notes=("strings exist only lexically in this version (2.8)",),
        )
        return ERROR

    def check_bool(self, e: ast.BoolLit, expected: Type | None) -> Type:
        return BOOL_T

    def check_none(self, e: ast.NoneLit, expected: Type | None) -> Type:
        return self.prefer(e, NONE, expected)

    def check_paren(self, e: ast.Paren, expected: Type | None) -> Type:
        return self.expr(e.inner, expected)

    def check_name(self, e: ast.Name, expected: Type | None) -> Type:
        name = e.ident.name
        if self.index_vars is not None and name in self.index_vars:
            var = self.index_vars[name]
            self.resolutions[e] = var
            self.ctx.error(
                "E3104",
                f"the index `{name}` is not a value",
                e.span,
                "index used as a value",
                notes=("an index variable can appear only as a component of a tensor access",),
                help=(f"read the position from a tensor: `iota<i32>(N)[{name}]`",),
            )
            return ERROR
        decl = self.scope.lookup(name)
        if decl is None:
            return self.unknown_value(e)
        self.resolutions[e] = decl
        if isinstance(decl, LocalInfo) and decl.kind in ("memory", "result"):
            from linnet.check.kernels import memory_misused

            return memory_misused(self, e, decl)
        return self.prefer(e, self.value_of(decl, e), expected)

    def unknown_value(self, e: ast.Name) -> Type:
        name = e.ident.name
        if name in self.runtime_names:
            self.ctx.error(
                "E2123",
                f"the parameter `{name}` is a runtime value, not a compile-time dimension",
                e.span,
                "runtime value",
                notes=(
                    "`where` relates dimensions: literals, `Dim` generics and integer constants",
                ),
            )
        elif name in PRELUDE_FUNCTIONS:
            self.ctx.error(
                "E1201",
                f"`{name}` cannot be used as a value",
                e.span,
                "prelude function",
                notes=(f"`{name}` is a prelude function; call it: `{name}(...)`",),
            )
        elif name in PRELUDE_NAMES:
            self.ctx.error("E1208", f"`{name}` is a type, not a value", e.span, "not a value")
        else:
            unknown_name(
                self,
                name,
                e.span,
                f"cannot find `{name}` in this scope",
                "not found",
                "value",
                "import it with `use`, or declare it; block members are bare names "
                "(there is no `self`)",
            )
        return ERROR

    def value_of(self, decl: Decl, e: ast.Expr | ast.Type) -> Type:
        """The value type of a resolved name (7.2); E1208 for names that are not values."""
        if isinstance(decl, LocalInfo):
            decl.used = True
            return decl.type
        if isinstance(decl, UnresolvedImport):
            return ERROR
        if isinstance(decl, MemberInfo):
            return self.member_value(decl, e)
        if isinstance(decl, GenericInfo):
            if decl.kind == "Dim":
                key = decl.key
                assert isinstance(key, Symbol)
                return CtIntType(Dim.symbol(key))
            what = "a shape pack" if decl.is_pack else "a dtype generic"
            return self.not_value(e, f"`{decl.name}` is {what}, not a value", decl.ident)
        if isinstance(decl, ConstInfo):
            signatures.ensure_const(self.ctx, decl, e)
            return decl.type if decl.type is not None else ERROR
        if isinstance(decl, FnInfo):
            return self.not_value(e, f"`{decl.name}` is a function and must be called", decl.ident)
        if isinstance(decl, KernelInfo):
            return self.not_value(e, f"`{decl.name}` is a kernel, not a value", decl.ident)
        if isinstance(decl, ModuleInfo):
            return self.not_value(e, f"`{decl.name}` is a module, not a value", None)
        if isinstance(decl, (BlockInfo, StructInfo, AliasInfo, EnumInfo)):
            return self.not_value(e, f"`{decl.name}` is a type, not a value", decl.ident)
        return ERROR

    def not_value(self, e: ast.Expr | ast.Type, message: str, declared: ast.Ident | None) -> Type:
        from linnet.diagnostics import Label

        related = (Label(declared.span, "declared here"),) if declared is not None else ()
        self.ctx.error("E1208", message, e.span, "not a value", related=related)
        return ERROR

    def member_value(self, member: MemberInfo, e: ast.Expr | ast.Type) -> Type:
        """A block member read by bare name inside its block (12.3)."""
        member.used = True
        signatures.ensure_members(self.ctx, member.block)
        if member.kind == "state" and self.fn is not None:
            self.fn.state_reads.add(member)
        return member.type if member.type is not None else ERROR

    def check_unary(self, e: ast.Unary, expected: Type | None) -> Type:
        t = self.expr(e.operand)
        if isinstance(t, ErrorType):
            return ERROR
        if e.op == "!":
            if t is BOOL_T:
                return t
            self.ctx.error(
                "E2116",
                "`!` needs a scalar `bool`",
                e.span,
                f"operand is {show(t)}",
                notes=(f"the operand is {show(t)}",),
                help=("for boolean tensors use `mask ^ true` or `select`",),
            )
            return ERROR
        if isinstance(t, CtIntType):
            if e.op == "+":
                return self.prefer(e, t, expected)
            return self.prefer(e, self.fold(lambda: -t.value, e), expected)
        if isinstance(t, CtFloatType):
            if e.op == "-" and t.value is not None:
                return self.prefer(e, CtFloatType(-t.value), expected)
            return self.prefer(e, t, expected)
        if isinstance(t, (ScalarType, TensorType)):
            if is_numeric(t.dtype):
                return t
            operators.report_class(self, e, e.op, t.dtype, "Numeric")
            return ERROR
        self.ctx.error(
            "E2104", f"`{e.op}` cannot be applied to {show(t)}", e.span, "invalid operand"
        )
        return ERROR

    def check_tuple(self, e: ast.TupleExpr, expected: Type | None) -> Type:
        hints: tuple[Type | None, ...] = (None,) * len(e.elems)
        if isinstance(expected, TupleType) and len(expected.elems) == len(e.elems):
            hints = expected.elems
        return TupleType(tuple(self.expr(x, h) for x, h in zip(e.elems, hints, strict=True)))

    def check_some(self, e: ast.SomeExpr, expected: Type | None) -> Type:
        hint = expected.inner if isinstance(expected, OptionalType) else None
        inner = self.expr(e.value, hint)
        if isinstance(inner, ErrorType):
            return ERROR
        if isinstance(inner, (BlockType, ArrayType)) or inner is NONE:
            assignability.materialize(self, e.value, inner, False)
            return ERROR
        return OptionalType(inner)

    def check_shape_lit(self, e: ast.ShapeLit, expected: Type | None) -> Type:
        dims: list[Dim] = []
        ok = True
        for elem in e.elems:
            d = self.dim_of(elem)
            if d is None:
                ok = False
                continue
            self.check_nonnegative(d, elem)
            dims.append(d)
        return ShapeType(tuple(dims)) if ok else ERROR

    def check_if(self, e: ast.IfExpr, expected: Type | None) -> Type:
        self.condition(e.cond, "`if`")
        t1 = self.prefer(e.then, self.expr(e.then, expected), expected)
        t2 = self.prefer(e.otherwise, self.expr(e.otherwise, expected), expected)
        return assignability.join(self, [(e.then, t1), (e.otherwise, t2)], "`if` branches", e)

    def condition(self, cond: ast.Expr, what: str) -> None:
        """E2114: `if`/`while` conditions are scalar `bool` (7.8, 13.3)."""
        t = self.expr(cond)
        if t is BOOL_T or isinstance(t, ErrorType):
            return
        helps: tuple[str, ...] = (
            ("reduce a boolean tensor first with `all[...]` or `any[...]`",)
            if what == "`while`"
            else ("choose elementwise with `select(condition, a, b)`",)
        )
        if not isinstance(t, TensorType):
            helps = ()
        self.ctx.error(
            "E2114",
            f"the condition of {what} must be a scalar `bool`",
            cond.span,
            f"found {show(t)}",
            notes=(f"the condition has type {show(t)}",),
            help=helps,
        )


_DISPATCH: dict[type, Callable[[BodyChecker, ast.Expr, Type | None], Type]] = {
    ast.IntLit: BodyChecker.check_int,  # type: ignore[dict-item]
    ast.FloatLit: BodyChecker.check_float,  # type: ignore[dict-item]
    ast.StringLit: BodyChecker.check_string,  # type: ignore[dict-item]
    ast.BoolLit: BodyChecker.check_bool,  # type: ignore[dict-item]
    ast.NoneLit: BodyChecker.check_none,  # type: ignore[dict-item]
    ast.Name: BodyChecker.check_name,  # type: ignore[dict-item]
    ast.Paren: BodyChecker.check_paren,  # type: ignore[dict-item]
    ast.Unary: BodyChecker.check_unary,  # type: ignore[dict-item]
    ast.Binary: operators.check_binary,  # type: ignore[dict-item]
    ast.Call: calls.check_call,  # type: ignore[dict-item]
    ast.Member: members.check_member,  # type: ignore[dict-item]
    ast.Index: indexing.check_index,  # type: ignore[dict-item]
    ast.TupleExpr: BodyChecker.check_tuple,  # type: ignore[dict-item]
    ast.SomeExpr: BodyChecker.check_some,  # type: ignore[dict-item]
    ast.ShapeLit: BodyChecker.check_shape_lit,  # type: ignore[dict-item]
    ast.Reduction: indexing.check_reduction,  # type: ignore[dict-item]
    ast.IfExpr: BodyChecker.check_if,  # type: ignore[dict-item]
    ast.MatchExpr: patterns.check_match,  # type: ignore[dict-item]
    ast.ForLoop: scans.check_misplaced,  # type: ignore[dict-item]
}
