"""Kernel bodies to tile code, shared by the Triton and Pallas generators (4.6, 4.7).

Stage: backend code generation. In: a `KernelInstance`. Out: Python lines of
a kernel function body; subclasses (`linnet.torch.triton_codegen`,
`linnet.jax.pallas`) spell each operation for their kernel language and add
the module around it. The generics are bound, so every tile shape, stride and
grid size is a literal of the generated text.

How the body maps (4.6's table):

- tiles are blocks, scalars scalars; compile-time integers are written as
  their values;
- a memory access `x[c1, ..., cr]` becomes flat row-major offsets: the sum of
  each component times its stride, each index tile placed on its own axes of
  the access (`rows[:, None]`); `load` and the writes use them with their mask;
- index notation runs over an axis per index variable, in declaration order
  (outputs, then each reduction's indices): an element access `t[i, j]` is
  `t` permuted to that order with `None` on the other axes, elementwise code
  broadcasts, a reduction broadcasts its body to the full domain and reduces
  the new axes. `sum[k] a[i, k] * b[k, j]` over 2-D `f32` tiles of at least
  16 is a matrix product (`tl.dot` / `jnp.dot`);
- `let`, `var`, assignment, comprehensions, writes, `while`, statement `for`
  (a loop at run time) and `static for` over a range (unrolled), `if` as a select, calls of module `fn`s and `op`s
  inlined (their generics bound from the call); tuples, module constants,
  methods and calls inside index notation have no tile form here:
  `Unsupported`, and the op's body runs (4.5).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from linnet.check.decls import ConstInfo, FnInfo, GenericInfo, IndexVar, LocalInfo
from linnet.check.dims import Symbol
from linnet.check.types import DTypeVar
from linnet.ir.env import Env
from linnet.ir.kernel_instance import KernelInstance
from linnet.ir.tile_source import TileTypes, Unsupported, strides
from linnet.syntax import ast


class TileWriter(ABC):
    """Translates one kernel body; `domain` is the index-notation axes in scope.

    Subclasses spell the operations for one kernel language (Triton, Pallas):
    the abstract methods below, plus `module`, memory accesses and loops.
    """

    def __init__(self, instance: KernelInstance) -> None:
        self.inst = instance
        self.tt = TileTypes(instance)
        self.lines: list[str] = []
        self.depth = 1
        self.domain: list[IndexVar] = []
        self.pointers: dict[str, str] = {}
        self.temp = 0

    # ------------------------------------------------------------ module

    @abstractmethod
    def module(self) -> str:
        """The whole generated module text."""

    def memory_names(self, suffix: str) -> list[str]:
        """The kernel function's parameters: scalars by name, memory as `name{suffix}`."""
        kernel = self.inst.kernel
        names: list[str] = []
        for p in kernel.params:
            if p.kind == "memory":
                self.pointers[p.name] = f"{p.name}{suffix}"
                names.append(f"{p.name}{suffix}")
            else:
                names.append(self.tt.local_name(p))
        for r in kernel.results:
            self.pointers[r.name] = f"{r.name}{suffix}"
            names.append(f"{r.name}{suffix}")
        return names

    def body(self) -> str:
        """The translated body lines (at least `pass`)."""
        self.stmts(self.inst.kernel.decl.body.stmts)
        if not self.lines:
            self.emit("pass")
        return "\n".join(self.lines) + "\n"

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.depth + line)

    def fresh(self, base: str) -> str:
        self.temp += 1
        return f"_{base}{self.temp}"

    # ------------------------------------------------------------ statements

    def stmts(self, stmts: Sequence[ast.Stmt]) -> None:
        for s in stmts:
            self.stmt(s)

    def stmt(self, s: ast.Stmt) -> None:
        if isinstance(s, ast.LetStmt):
            if not isinstance(s.pattern, ast.NamePattern):
                raise Unsupported("tuple patterns in kernels")
            local = self.binding(s.pattern.name)
            self.emit(f"{self.tt.local_name(local)} = {self.bound_value(s.value)}")
        elif isinstance(s, ast.VarStmt):
            local = self.binding(s.name)
            self.emit(f"{self.tt.local_name(local)} = {self.bound_value(s.value)}")
        elif isinstance(s, ast.AssignStmt):
            target = self.tt.resolved(s.target)
            if not isinstance(target, LocalInfo):
                target = self.binding(s.target)
            self.emit(f"{self.tt.local_name(target)} = {self.bound_value(s.value)}")
        elif isinstance(s, ast.ComprehensionStmt):
            self.comprehension(s)
        elif isinstance(s, ast.WhileStmt):
            self.while_stmt(s)
        elif isinstance(s, ast.WriteStmt):
            self.write(s)
        elif isinstance(s, ast.StaticForStmt):
            self.static_for(s)
        elif isinstance(s, ast.ForLoop):  # statement form only (a scan is E2127, B16)
            self.for_stmt(s)
        else:
            raise Unsupported(f"`{type(s).__name__}` in a kernel")

    def binding(self, ident: ast.Ident) -> LocalInfo:
        local = self.tt.program.bindings.get(ident)
        if local is None:
            raise Unsupported(f"`{ident.name}` has no binding")
        return local

    def bound_value(self, e: ast.Expr) -> str:
        """A `let`/`var` value: constants become typed scalars (loop-carried types)."""
        src = self.expr(e)
        if not self.tt.shape(e) and _is_literal(e):
            return self.full("[]", src, self.dt(self.tt.dtype(e)))
        return src

    def comprehension(self, s: ast.ComprehensionStmt) -> None:
        info = self.tt.program.comprehensions.get(s)
        if info is None:
            raise Unsupported("an unchecked comprehension")
        outer = self.domain
        self.domain = list(info.outputs)
        try:
            value = self.index_expr(s.value)
            shape = [self.tt.extent(v) for v in info.outputs]
            dtype = self.dt(self.tt.env.tensor_type(info.result).dtype)
        finally:
            self.domain = outer
        name = self.tt.local_name(info.local)
        self.emit(f"{name} = {self.broadcast(value, shape, dtype)}")

    def block(self, stmts: Sequence[ast.Stmt]) -> None:
        """Statements one level deeper (a loop body), `pass` when empty."""
        self.depth += 1
        before = len(self.lines)
        self.stmts(stmts)
        if len(self.lines) == before:
            self.emit("pass")
        self.depth -= 1

    def static_for(self, s: ast.StaticForStmt) -> None:
        """`static for i in a..b`: a loop unrolled when the kernel is compiled."""
        info = self.tt.program.static_fors.get(s)
        if info is None or info.mode != "range" or info.start is None or info.stop is None:
            raise Unsupported("`static for` over a `sub` array in a kernel")
        var = self.tt.local_name(info.variable) if info.variable is not None else "_"
        start, stop = self.tt.dim(info.start), self.tt.dim(info.stop)
        self.emit(f"for {var} in {self.static_range()}({start}, {stop}):")
        self.block(s.body.stmts)

    def runtime_for(self, s: ast.ForLoop) -> tuple[str, int, int]:
        """A statement `for i in a..b`: the loop variable's name and the bounds (compile-time
        integers of the instantiation)."""
        info = self.tt.program.runtime_fors.get(s)
        if info is None:
            raise Unsupported("an unchecked `for`")
        var = self.tt.local_name(info.variable) if info.variable is not None else "_"
        return var, self.tt.dim(info.start), self.tt.dim(info.stop)

    @abstractmethod
    def for_stmt(self, s: ast.ForLoop) -> None:
        """A statement `for` (B16): a loop at run time, its variable an `i64` scalar."""

    @abstractmethod
    def static_range(self) -> str:
        """The loop iterator that unrolls at compile time."""

    @abstractmethod
    def while_stmt(self, s: ast.WhileStmt) -> None: ...

    @abstractmethod
    def write(self, s: ast.WriteStmt) -> None: ...

    @abstractmethod
    def load(self, call: ast.Call) -> str: ...

    # ------------------------------------------------------------ memory

    def access(self, node: ast.Expr) -> tuple[str, str, tuple[int, ...]]:
        """The memory's name, the flat row-major offsets of `m[c1, ..., cr]`, the access shape (B7)."""
        assert isinstance(node, ast.Index) and isinstance(node.target, ast.Name)
        name = node.target.ident.name
        local = self.tt.resolved(node.target)
        if not isinstance(local, LocalInfo) or local.kind not in ("memory", "result"):
            raise Unsupported(f"`{name}` is not memory")
        mem_shape = self.tt.instance.env.tensor_type(local.type).shape
        comp_shapes = [self.tt.shape(c) for c in node.components if isinstance(c, ast.Expr)]
        rank = sum(len(s) for s in comp_shapes)
        terms: list[str] = []
        at = 0
        for comp, shape, stride in zip(
            node.components, comp_shapes, strides(mem_shape), strict=True
        ):
            assert isinstance(comp, ast.Expr)
            src = self.expr(comp)
            if shape and len(shape) != rank:
                idx = ["None"] * at + [":"] * len(shape) + ["None"] * (rank - at - len(shape))
                src = f"({src})[{', '.join(idx)}]"
            at += len(shape)
            terms.append(src if stride == 1 else f"({src}) * {stride}")
        offsets = " + ".join(terms) if terms else "0"
        return self.pointers[name], offsets, tuple(s for cs in comp_shapes for s in cs)

    # ------------------------------------------------------------ expressions

    def expr(self, e: ast.Expr) -> str:
        """A tile or scalar expression outside index notation."""
        constant = self.tt.constant(e)
        if constant is not None:
            return str(constant)
        return self.node(e, index=False)

    def index_expr(self, e: ast.Expr) -> str:
        """An expression over `self.domain`: a scalar, or a block of rank len(domain)."""
        constant = self.tt.constant(e)
        if constant is not None:
            return str(constant)
        return self.node(e, index=True)

    def sub(self, e: ast.Expr, index: bool) -> str:
        return self.index_expr(e) if index else self.expr(e)

    def node(self, e: ast.Expr, index: bool) -> str:
        if isinstance(e, ast.IntLit):
            return str(e.value)
        if isinstance(e, ast.FloatLit):
            return repr(e.value)
        if isinstance(e, ast.BoolLit):
            return "True" if e.value else "False"
        if isinstance(e, ast.Paren):
            return self.sub(e.inner, index)
        if isinstance(e, ast.Name):
            return self.name(e)
        if isinstance(e, ast.Unary):
            inner = self.sub(e.operand, index)
            if e.op == "!":
                return f"(~({inner}))"
            return f"({e.op}({inner}))"
        if isinstance(e, ast.Binary):
            return self.binary(e, index)
        if isinstance(e, ast.Call):
            return self.call(e, index)
        if isinstance(e, ast.Index):
            if not index:
                raise Unsupported("an index expression on a tile outside index notation")
            return self.element(e)
        if isinstance(e, ast.Reduction):
            return self.reduction(e, index)
        if isinstance(e, ast.IfExpr):  # both branches are pure: a select
            parts = ", ".join(self.sub(x, index) for x in (e.cond, e.then, e.otherwise))
            return f"{self.float_fn('where')}({parts})"
        raise Unsupported(f"`{type(e).__name__}` in a kernel")

    def name(self, e: ast.Name) -> str:
        decl = self.tt.resolved(e)
        if isinstance(decl, LocalInfo):
            if decl.kind in ("memory", "result"):
                raise Unsupported("memory used as a value")
            return self.tt.local_name(decl)
        if isinstance(decl, GenericInfo):
            raise Unsupported(f"the generic `{decl.name}` as a value")
        if isinstance(decl, ConstInfo):
            raise Unsupported("module constants in kernels")
        raise Unsupported(f"the name `{e.ident.name}`")

    def binary(self, e: ast.Binary, index: bool) -> str:
        left = self.sub(e.left, index)
        right = self.sub(e.right, index)
        op = e.op
        if op in _COMPARE or op in _ARITH:
            return f"({left} {op} {right})"
        if op in _BITS:
            return f"({left} {_BITS[op]} {right})"
        if op in ("/", "%"):
            integer = self.tt.dtype(e) not in ("f16", "bf16", "f32", "f64")
            if integer:
                return self.int_div(left, right) if op == "/" else self.int_rem(left, right)
            return f"({left} {op} {right})"
        raise Unsupported(f"the operator `{op}`")

    def call(self, e: ast.Call, index: bool) -> str:
        callee = e.callee
        if not isinstance(callee, ast.Name):
            raise Unsupported("calls of functions from other modules in kernels")
        name = callee.ident.name
        decl = self.tt.resolved(callee)
        if isinstance(decl, FnInfo):
            return self.inline(e, decl, index)
        args = [a.value for a in e.args]
        if name == "program_id":
            return self.program_id(self.expr(args[0]))
        if name == "load":
            if index:
                raise Unsupported("`load` inside index notation")
            return self.load(e)
        if name == "iota":
            (n,) = self.tt.shape(e)
            return self.arange(n, self.dt(self.tt.dtype(e)))
        if name == "fill":
            shape = list(self.tt.shape(e))
            return self.full(str(shape), self.sub(args[1], index), self.dt(self.tt.dtype(e)))
        if name == "cast":
            inner = self.sub(args[0], index)
            dtype = self.dt(self.tt.dtype(e))
            if not self.tt.shape(args[0]) and (
                _is_literal(args[0]) or self.tt.constant(args[0]) is not None
            ):
                return self.full("[]", inner, dtype)
            return self.to(inner, dtype)
        if name in FLOAT_FNS:
            return f"{self.float_fn(name)}({self.sub(args[0], index)})"
        if name == "tanh":
            inner = self.sub(args[0], index)
            return f"(2.0 * {self.float_fn('sigmoid')}(2.0 * ({inner})) - 1.0)"
        if name in ("min", "max"):
            fn = self.float_fn("minimum" if name == "min" else "maximum")
            return f"{fn}({self.sub(args[0], index)}, {self.sub(args[1], index)})"
        if name == "select":
            parts = ", ".join(self.sub(a, index) for a in args)
            return f"{self.float_fn('where')}({parts})"
        if name in ("shl", "shr"):
            op = "<<" if name == "shl" else ">>"
            return f"({self.sub(args[0], index)} {op} {self.sub(args[1], index)})"
        if name in ("reshape", "broadcast_to") and not index:
            fn = self.float_fn(name)
            return f"{fn}({self.expr(args[0])}, {list(self.tt.shape(e))})"
        if name == "cumsum" and not index:
            axis_arg = next((a.value for a in e.args if a.name is not None), None)
            axis = self.tt.constant(axis_arg) if axis_arg is not None else None
            if axis is None:
                raise Unsupported("`cumsum` without a constant axis")
            rank = len(self.tt.shape(e))
            return f"{self.float_fn('cumsum')}({self.expr(args[0])}, axis={axis % rank if rank else 0})"
        raise Unsupported(f"`{name}` has no tile form in the Triton generator")

    def inline(self, e: ast.Call, fn: FnInfo, index: bool) -> str:
        """A call of a `fn` or `op` in a kernel: its body inlined (4.3), its value a temporary."""
        info = self.tt.program.calls.get(e)
        if index or info is None or info.receiver is not None or fn.block is not None:
            raise Unsupported(
                f"the call of `{fn.name}` (only module functions, outside index notation)"
            )
        body = fn.decl.body.stmts
        if not body or not isinstance(body[-1], ast.ReturnStmt) or body[-1].value is None:
            raise Unsupported(f"`{fn.name}` does not end with `return value`")
        outer = self.tt.env
        env = Env(outer.dims, outer.packs, outer.dtypes)
        for g in fn.generics:
            key = g.key
            if isinstance(key, DTypeVar) and key in info.subst.dtypes:
                env.bind(key, outer.dtype(info.subst.dtypes[key]))
            elif isinstance(key, Symbol) and not key.is_pack and key in info.subst.dims:
                env.bind(key, self.tt.dim(info.subst.dims[key]))
            else:
                raise Unsupported(f"the generic `{g.name}` of `{fn.name}`")
        for param, arg in zip(fn.params, info.args, strict=True):
            if arg is None:
                raise Unsupported(f"the default of `{param.name}` in a kernel")
            self.emit(f"{self.tt.local_name(param)} = {self.expr(arg)}")
        self.tt.env = env
        try:
            self.stmts(body[:-1])
            final = body[-1].value
            assert final is not None
            value = self.expr(final)
        finally:
            self.tt.env = outer
        temp = self.fresh("inlined")
        self.emit(f"{temp} = {value}")
        return temp

    # ------------------------------------------------------------ index notation

    def element(self, e: ast.Index) -> str:
        """`t[i, j]`: `t` permuted to the domain order, `None` on the other axes."""
        if not isinstance(e.target, ast.Name):
            raise Unsupported("element access on an expression")
        positions: list[int] = []
        for comp in e.components:
            var = self.tt.resolved(comp)
            if not isinstance(var, IndexVar) or var not in self.domain:
                raise Unsupported("tiles are indexed by index variables only (B15)")
            positions.append(self.domain.index(var))
        if len(set(positions)) != len(positions):
            raise Unsupported("diagonal access on a tile")
        src = self.expr(e.target)
        order = sorted(range(len(positions)), key=lambda a: positions[a])
        if order != list(range(len(positions))):
            src = self.permute(src, tuple(order))
        present = sorted(positions)
        if len(present) == len(self.domain):
            return src
        idx = [":" if d in present else "None" for d in range(len(self.domain))]
        return f"({src})[{', '.join(idx)}]"

    def reduction(self, e: ast.Reduction, index: bool) -> str:
        info = self.tt.program.reductions.get(e)
        if info is None:
            raise Unsupported("an unchecked reduction")
        outer = self.domain if index else []
        dot = self.contraction(e, outer, info.indices)
        if dot is not None:
            return dot
        saved = self.domain
        self.domain = [*outer, *info.indices]
        try:
            body = self.index_expr(e.body)
            shape = [self.tt.extent(v) for v in self.domain]
            dtype = self.dt(self.tt.dtype(e))
        finally:
            self.domain = saved
        value = self.broadcast(body, shape, self.dt(self.tt.dtype(e.body)))
        if self.tt.dtype(e.body) != self.tt.dtype(e) and e.kind not in ("any", "all"):
            value = self.to(value, dtype)
        for axis in reversed(range(len(outer), len(shape))):
            value = self.reduce(e.kind, value, axis)
        return value

    def contraction(
        self, e: ast.Reduction, outer: list[IndexVar], indices: tuple[IndexVar, ...]
    ) -> str | None:
        """`sum[k] a[i, k] * b[k, j]` over the domain `[i, j]`: `tl.dot` (4.6)."""
        body = e.body
        while isinstance(body, ast.Paren):
            body = body.inner
        if (
            e.kind != "sum"
            or len(outer) != 2
            or len(indices) != 1
            or not isinstance(body, ast.Binary)
        ):
            return None
        if body.op != "*" or not all(isinstance(s, ast.Index) for s in (body.left, body.right)):
            return None
        a, b = body.left, body.right
        assert isinstance(a, ast.Index) and isinstance(b, ast.Index)
        i, j = outer
        (k,) = indices
        vars_a = [self.tt.resolved(c) for c in a.components]
        vars_b = [self.tt.resolved(c) for c in b.components]
        if sorted(map(id, vars_a)) == sorted(map(id, [k, j])) and set(map(id, vars_b)) == {
            id(i),
            id(k),
        }:
            a, b, vars_a, vars_b = b, a, vars_b, vars_a
        if {id(v) for v in vars_a} != {id(i), id(k)} or {id(v) for v in vars_b} != {id(k), id(j)}:
            return None
        if len(vars_a) != 2 or len(vars_b) != 2:
            return None
        if any(self.tt.dtype(x) != "f32" for x in (a, b)) or self.tt.dtype(e) != "f32":
            return None
        if min(self.tt.extent(v) for v in (i, j, k)) < 16:
            return None
        lhs = self.expr(a.target)
        rhs = self.expr(b.target)
        if vars_a[0] is not i:
            lhs = self.permute(lhs, (1, 0))
        if vars_b[0] is not k:
            rhs = self.permute(rhs, (1, 0))
        return self.dot(lhs, rhs)

    # ------------------------------------------------------------ spellings

    @abstractmethod
    def dt(self, dtype: str) -> str:
        """The kernel language's name of a Linnet dtype."""

    @abstractmethod
    def float_fn(self, name: str) -> str:
        """The function for `exp` ... `abs`, `sigmoid`, `minimum`, `maximum`, `where`,
        `reshape`, `broadcast_to`, `cumsum`."""

    @abstractmethod
    def program_id(self, axis: str) -> str: ...

    @abstractmethod
    def arange(self, n: int, dtype: str) -> str: ...

    @abstractmethod
    def full(self, shape: str, value: str, dtype: str) -> str: ...

    @abstractmethod
    def to(self, value: str, dtype: str) -> str: ...

    @abstractmethod
    def permute(self, value: str, order: tuple[int, ...]) -> str: ...

    @abstractmethod
    def dot(self, lhs: str, rhs: str) -> str:
        """The f32 matrix product of two 2-D tiles."""

    @abstractmethod
    def int_div(self, left: str, right: str) -> str:
        """Truncating integer division (L7.5)."""

    @abstractmethod
    def int_rem(self, left: str, right: str) -> str:
        """Truncating integer remainder (L7.5)."""

    @abstractmethod
    def broadcast(self, value: str, shape: list[int], dtype: str) -> str:
        """`value` (a scalar or a block with size-1 axes) spread over `shape`."""

    @abstractmethod
    def reduce(self, kind: str, value: str, axis: int) -> str: ...


_COMPARE = frozenset({"==", "!=", "<", "<=", ">", ">="})
_ARITH = frozenset({"+", "-", "*"})
_BITS = {"&": "&", "|": "|", "^": "^", "&&": "&", "||": "|"}
FLOAT_FNS = frozenset({"exp", "log", "sqrt", "rsqrt", "sin", "cos", "abs"})


def _is_literal(e: ast.Expr) -> bool:
    while isinstance(e, ast.Paren):
        e = e.inner
    if isinstance(e, ast.Unary) and e.op == "-":
        return _is_literal(e.operand)
    return isinstance(e, (ast.IntLit, ast.FloatLit, ast.BoolLit))
