"""Kernel items, kernel bodies and kernel references (language-extensions 4.2 to 4.4).

Stage: checking. In: `KernelDecl` items, the `load`/`program_id` calls and
write statements of kernel bodies, and `op`s carrying a `KernelRef`. Out: a
`KernelInfo` per kernel (generics, parameters, results, grid sizes, hints,
facts) with the codes of the rule tables: E2127 for the kernel rules, E2126 for
references and calls, E2123 for grid sizes, E2111 for reference generics,
E2204/E2101/E2102 for memory accesses, masks and built-in arities.

Inside a kernel body, tensor parameters and results are *memory*: locals of
kind "memory" / "result" that only `load` (parameters) and the writes
(results) may name; the body checker reports any other use (B1). Everything
else in a body is checked by the ordinary statement and expression checker,
which sees tiles as tensors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from linnet.check import assignability, signatures
from linnet.check.context import Context
from linnet.check.decls import (
    FnInfo,
    GenericInfo,
    ItemInfo,
    LocalInfo,
)
from linnet.check.dims import Dim
from linnet.check.kernel_info import KernelBinding, KernelInfo, KernelScope
from linnet.check.prover import Facts
from linnet.check.scope import Scope, item_scope
from linnet.check.types import (
    ERROR,
    SCALAR_DTYPES,
    CtIntType,
    ErrorType,
    ScalarDType,
    ScalarType,
    Shape,
    Subst,
    TensorType,
    Type,
    scalar,
    show,
)
from linnet.diagnostics import Label
from linnet.syntax import ast

if TYPE_CHECKING:
    from linnet.check.exprs import BodyChecker

BUILTINS = frozenset({"load", "program_id"})
MEMORY_KINDS = frozenset({"memory", "result"})
# B12: what each atomic may write.
_ATOMIC_DTYPES = {
    "atomic_add": ("f16", "f32", "i32", "u32", "i64", "u64"),
    "atomic_max": ("f32", "i32", "u32", "i64", "u64"),
    "atomic_min": ("f32", "i32", "u32", "i64", "u64"),
}
_LOAD_FORMS = "expected `load(x[...])`, `load(x[...], mask)` or `load(x[...], mask, other)`"


# ---------------------------------------------------------------- declarations


def kernel_in_block(ctx: Context, decl: ast.KernelDecl) -> None:
    """K1: kernels are module-level items."""
    ctx.error(
        "E2127",
        "kernels live at module level, not in blocks",
        decl.name.span,
        "kernel inside a block",
        help=("move the kernel out of the block; an `op` of the block can refer to it",),
    )


def ensure_kernel(ctx: Context, k: KernelInfo) -> None:
    """Generics, `where` facts, parameters, results, grid and hints of a kernel (4.2)."""
    if k.state != "todo":
        return
    k.state = "busy"
    decl = k.decl
    chk = signatures.checker(
        ctx, k.module, None, None, Scope(k.scope, item_scope(k.module, None)), Facts.EMPTY
    )
    taken: dict[str, ast.Ident] = {}
    k.generics = signatures.declare_generics(chk, decl.generics, k.scope, taken)
    for g in k.generics:
        if g.is_pack:  # K2
            ctx.error(
                "E2127",
                "kernel tensors have fixed ranks; shape packs are not allowed",
                g.node.span,
                "shape pack on a kernel",
                help=("give each axis its own `Dim` generic",),
            )
    chk.runtime_names = frozenset(p.name.name for p in decl.params.params)
    k.where = signatures.where_constraints(chk, decl.where)
    chk.runtime_names = frozenset()
    k.facts = chk.facts
    signatures.resolve_defaults(chk, k.generics)
    from linnet.check.typeconv import resolve_type

    for p in decl.params.params:
        t = resolve_type(chk, p.type)
        if p.default is not None:
            _param_error(ctx, p.span, "kernel parameters have no defaults", t)
        elif not _is_scalar(t) and not _is_plain_tensor(t) and not isinstance(t, ErrorType):
            _param_error(ctx, p.span, "kernel parameters are scalars or tensors without packs", t)
        if isinstance(t, TensorType):
            local = LocalInfo(p.name.name, p.name, t, "memory", used=True)
        else:
            local = LocalInfo(p.name.name, p.name, t, "param", used=True)
        ctx.program.bindings[p.name] = local
        k.params.append(local)
        _declare(ctx, k, p.name, local, taken, "parameter")
    for out in decl.results:
        t = resolve_type(chk, out.type)
        if not _is_plain_tensor(t) and not isinstance(t, ErrorType):
            ctx.error(
                "E2127",
                "kernel results are tensors without packs",
                out.span,
                "not a tensor result",
                notes=(f"its type is {show(t)}",),
            )
        local = LocalInfo(out.name.name, out.name, t, "result", used=True)
        ctx.program.bindings[out.name] = local
        k.results.append(local)
        _declare(ctx, k, out.name, local, taken, "result")
    _check_grid(chk, k)
    _check_hints(chk, k)
    k.state = "done"


def _declare(
    ctx: Context,
    k: KernelInfo,
    ident: ast.Ident,
    local: LocalInfo,
    taken: dict[str, ast.Ident],
    what: str,
) -> None:
    from linnet.check.collect import check_declared_name, duplicate

    check_declared_name(ctx, ident, what)
    if ident.name in taken:
        duplicate(ctx, "E1205", ident, taken[ident.name], "name")
        return
    taken[ident.name] = ident
    k.scope[ident.name] = local


def _param_error(ctx: Context, span: object, message: str, t: Type) -> None:
    from linnet.source import Span

    assert isinstance(span, Span)
    ctx.error("E2127", message, span, "not allowed on a kernel", notes=(f"its type is {show(t)}",))


def _is_scalar(t: Type) -> bool:
    return isinstance(t, ScalarType)


def _is_plain_tensor(t: Type) -> bool:
    return isinstance(t, TensorType) and not t.has_pack


def _check_grid(chk: BodyChecker, k: KernelInfo) -> None:
    """K5, K6: one to three compile-time grid sizes."""
    decl = k.decl
    if not 1 <= len(decl.grid) <= 3:
        chk.ctx.error(
            "E2127",
            "`grid` takes 1, 2 or 3 sizes",
            decl.name.span,
            f"{len(decl.grid)} grid sizes",
            related=(Label(decl.grid_span, "the grid"),),
        )
    for size in decl.grid:
        t = chk.expr(size)
        if isinstance(t, CtIntType):
            k.grid.append(t.value)
            continue
        if not isinstance(t, ErrorType):
            chk.ctx.error(
                "E2123",
                "grid sizes must be known at compile time",
                size.span,
                f"found {show(t)}",
                notes=("grid sizes use literals, `Dim` generics and integer constants",),
            )
        k.grid.append(None)


def _check_hints(chk: BodyChecker, k: KernelInfo) -> None:
    """K7: `warps(n)` a power of two, `stages(n)` positive, each at most once."""
    seen: set[str] = set()
    for hint in k.decl.hints:
        if hint.word in seen:
            chk.ctx.error(
                "E2127",
                f"`{hint.word}` is given twice",
                hint.value.span,
                "repeated hint",
                help=("keep one",),
            )
            continue
        seen.add(hint.word)
        t = chk.expr(hint.value)
        value = t.value.as_int() if isinstance(t, CtIntType) else None
        if hint.word == "warps":
            good = value is not None and value > 0 and value & (value - 1) == 0
            message = "`warps` needs a power of two"
        else:
            good = value is not None and value > 0
            message = "`stages` needs a positive integer"
        if isinstance(t, ErrorType):
            continue
        if not good:
            chk.ctx.error("E2127", message, hint.value.span, f"found {show(t)}")
            continue
        if hint.word == "warps":
            k.warps = value
        else:
            k.stages = value


def check_kernel(ctx: Context, k: KernelInfo) -> list[LocalInfo]:
    """A kernel's header and body (4.2, 4.3); returns the locals the body declared."""
    ensure_kernel(ctx, k)
    if k.body_checked or k.facts is None:
        return []
    k.body_checked = True
    if k.decl.grad is not None:  # K11: a kernel takes no gradient clause (G1)
        from linnet.check.gradclause import reject_clause

        reject_clause(ctx, "kernel", k.decl.name.name, k.decl.grad)
    from linnet.check.exprs import BodyChecker
    from linnet.check.stmts import check_stmts

    scope = Scope(k.scope, item_scope(k.module, None))
    chk = BodyChecker(ctx, k.module, None, None, scope, k.facts)
    chk.kernel = KernelScope(k)
    chk.push_scope()
    check_stmts(chk, k.decl.body.stmts)
    return chk.new_locals


def check_kernel_return(chk: BodyChecker, s: ast.ReturnStmt) -> None:
    """K9: a kernel has no value."""
    chk.ctx.error(
        "E2127",
        "kernels have no `return`: their results are written with `store`",
        s.span,
        "`return` in a kernel",
        help=("write each result with `store(result[indices], value)`",),
    )


def kernel_called(chk: BodyChecker, call: ast.Call, callee: ast.Expr, k: KernelInfo) -> Type:
    """K10: a kernel is launched by an op, never called."""
    chk.ctx.error(
        "E2126",
        "a kernel cannot be called; an op launches it",
        callee.span,
        "kernel called",
        related=(Label(k.ident.span, "declared here"),),
        help=(f"declare `op ... -> R kernel {k.name}<...> {{ ... }}` and call the op",),
    )
    for arg in call.args:
        chk.expr(arg.value)
    return ERROR


def memory_misused(chk: BodyChecker, e: ast.Name, local: LocalInfo) -> Type:
    """B1: memory is reached only by `load` (parameters) and writes (results)."""
    if local.kind == "result":
        message = f"only a write may target `{local.name}`"
    else:
        message = f"`{local.name}` lives in memory; only `load` reads it"
    chk.ctx.error(
        "E2127",
        message,
        e.span,
        "memory used as a value",
        notes=("memory is reached only through `load` and writes",),
        help=(f"read it with `load({local.name}[indices])`",)
        if local.kind == "memory"
        else (f"write it with `store({local.name}[indices], value)`",),
    )
    return ERROR


def tile_access_ok(chk: BodyChecker, e: ast.Index) -> bool:
    """B15: a tile is indexed only by index variables, in index notation; else E2127."""
    index_vars = chk.index_vars
    if index_vars is not None and all(
        isinstance(c, ast.Name) and c.ident.name in index_vars for c in e.components
    ):
        return True
    for c in e.components:
        if not isinstance(c, (ast.Slice, ast.EllipsisComponent, ast.PackIndex)):
            chk.expr(c) if not (
                isinstance(c, ast.Name) and index_vars and c.ident.name in index_vars
            ) else None
    chk.ctx.error(
        "E2127",
        "no slicing or gathering on tiles",
        e.span,
        "tile indexed by position",
        notes=("inside a kernel a tile is indexed only by index variables (`t[i, j]`)",),
        help=("load those positions from memory",),
    )
    return False


def concat_in_kernel(chk: BodyChecker, call: ast.Call) -> Type:
    """B15: `concat` has no tile form."""
    chk.ctx.error(
        "E2127",
        "no slicing or gathering on tiles",
        call.span,
        "`concat` in a kernel",
        help=("load the parts into one tile from memory",),
    )
    for arg in call.args:
        chk.expr(arg.value)
    return ERROR


# ---------------------------------------------------------------- built-ins


def builtin_call(chk: BodyChecker, call: ast.Call, name: str, expected: Type | None) -> Type:
    """`load(...)` and `program_id(...)`: built-ins in a kernel body, else B17."""
    scope = chk.kernel
    if scope is None:
        chk.ctx.error(
            "E2127",
            f"`{name}` outside a kernel body",
            call.callee.span,
            "kernel built-in",
            notes=(f"`{name}` is a built-in of kernel bodies only",),
            help=("declare a `kernel` and refer to it from an `op`",),
        )
        for arg in call.args:
            chk.expr(arg.value)
        return ERROR
    if name == "program_id":
        return _program_id(chk, call, scope)
    return _load(chk, call, expected)


def _program_id(chk: BodyChecker, call: ast.Call, scope: KernelScope) -> Type:
    """B14: one compile-time axis below the grid's rank; an `i32` scalar."""
    if len(call.args) != 1 or call.args[0].name is not None or call.generic_args is not None:
        chk.ctx.error(
            "E2102",
            "`program_id` takes one grid axis",
            call.span,
            "expected `program_id(axis)`",
        )
        for each in call.args:
            chk.expr(each.value)
        return ERROR
    arg = call.args[0].value
    t = chk.expr(arg)
    value = t.value.as_int() if isinstance(t, CtIntType) else None
    rank = len(scope.kernel.decl.grid)
    if isinstance(t, ErrorType):
        return scalar(SCALAR_DTYPES["i32"])
    if value is None or not 0 <= value < rank:
        chk.ctx.error(
            "E2127",
            "`program_id` needs a grid axis below the grid's rank",
            arg.span,
            f"found {show(t)}",
            notes=(f"the grid has {rank} axes",),
        )
    return scalar(SCALAR_DTYPES["i32"])


def _load(chk: BodyChecker, call: ast.Call, expected: Type | None) -> Type:
    """B2-B9: `load(p[c...], mask?, other?)`."""
    args = call.args
    if not 1 <= len(args) <= 3 or any(a.name is not None for a in args):
        chk.ctx.error("E2102", _LOAD_FORMS, call.span, "wrong arguments to `load`")
        for arg in args:
            if not _names_memory(chk, arg.value):  # one mistake, one error
                chk.expr(arg.value)
        return ERROR
    access = memory_access(chk, args[0].value, "memory")
    for arg in args[1:]:
        chk.types[arg.value] = ERROR
    if access is None:
        for arg in args[1:]:
            chk.expr(arg.value)
        return ERROR
    local, shape = access
    assert isinstance(local.type, TensorType)
    dtype = local.type.dtype
    if len(args) >= 2:
        check_mask(chk, args[1].value, shape)
    if len(args) == 3:
        other = args[2].value
        t = chk.expr(other, scalar(dtype))
        assignability.coerce(chk, other, t, scalar(dtype), "`other`")
    result: Type = TensorType(shape, dtype) if shape else scalar(dtype)
    chk.types[args[0].value] = result
    return result


def _names_memory(chk: BodyChecker, node: ast.Expr) -> bool:
    if not isinstance(node, ast.Index) or not isinstance(node.target, ast.Name):
        return False
    decl = chk.scope.lookup(node.target.ident.name)
    return isinstance(decl, LocalInfo) and decl.kind in MEMORY_KINDS


def memory_access(
    chk: BodyChecker, node: ast.Expr, kind: str
) -> tuple[LocalInfo, tuple[Dim, ...]] | None:
    """B3-B7: `p[c1, ..., cr]` on memory of `kind`; its local and access shape."""
    what = (
        "`load` needs `param[indices]`" if kind == "memory" else "a write needs `result[indices]`"
    )
    if not isinstance(node, ast.Index) or not isinstance(node.target, ast.Name):
        chk.ctx.error("E2127", what, node.span, "not a memory access")
        chk.expr(node) if not isinstance(node, ast.Index) else None
        return None
    name = node.target
    decl = chk.scope.lookup(name.ident.name)
    if not isinstance(decl, LocalInfo) or decl.kind != kind:
        chk.ctx.error(
            "E2127",
            what,
            name.span,
            "a tensor parameter"
            if kind == "memory"
            else "a kernel result"
            if decl is None
            else f"`{name.ident.name}` is not {'a tensor parameter' if kind == 'memory' else 'a result'}",
        )
        return None
    chk.resolutions[name] = decl
    chk.types[name] = decl.type
    t = decl.type
    if not isinstance(t, TensorType):
        return None
    components = node.components
    if len(components) != len(t.shape):
        chk.ctx.error(
            "E2204",
            f"`{decl.name}` has {len(t.shape)} axes but {len(components)} indices",
            node.span,
            "wrong number of indices",
            notes=(f"`{decl.name}` is {show(t)}",),
        )
        return None
    shape: list[Dim] = []
    ok = True
    for comp in components:
        if not isinstance(comp, (ast.Slice, ast.EllipsisComponent, ast.PackIndex)):
            ct = chk.expr(comp)
        else:
            chk.ctx.error(
                "E2127",
                "memory indices are integers or integer tiles; slices are not allowed",
                comp.span,
                "not an integer index",
                help=("build the positions with `iota` and load them",),
            )
            ok = False
            continue
        if isinstance(ct, ErrorType):
            ok = False
        elif isinstance(ct, CtIntType) or (isinstance(ct, ScalarType) and _int_dtype(ct.dtype)):
            continue
        elif isinstance(ct, TensorType) and _int_dtype(ct.dtype) and not ct.has_pack:
            shape.extend(d for d in ct.shape if isinstance(d, Dim))
        else:
            chk.ctx.error(
                "E2101",
                f"memory index of type {show(ct)}: integers only",
                comp.span,
                "not an integer",
            )
            ok = False
    if not ok:
        return None
    return decl, tuple(shape)


def _int_dtype(dtype: object) -> bool:
    return isinstance(dtype, ScalarDType) and dtype.is_int


def check_mask(chk: BodyChecker, mask: ast.Expr, shape: tuple[Dim, ...]) -> None:
    """B8: a `bool` scalar or a `bool` tile of exactly the access shape."""
    t = chk.expr(mask)
    if isinstance(t, ErrorType):
        return
    if isinstance(t, ScalarType) and _is_bool(t.dtype):
        return
    if isinstance(t, TensorType) and _is_bool(t.dtype) and same_shape(chk, t.shape, shape):
        return
    chk.ctx.error(
        "E2101",
        f"mask must be `bool`, scalar or of shape [{', '.join(str(d) for d in shape)}]",
        mask.span,
        f"found {show(t)}",
        notes=("masks do not broadcast",),
    )


def _is_bool(dtype: object) -> bool:
    return isinstance(dtype, ScalarDType) and dtype.name == "bool"


def same_shape(chk: BodyChecker, a: Shape | tuple[Dim, ...], b: Shape | tuple[Dim, ...]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if not isinstance(x, Dim) or not isinstance(y, Dim):
            return False
        if x != y and not chk.facts.prove(x, "==", y):
            return False
    return True


# ---------------------------------------------------------------- writes


def check_write(chk: BodyChecker, s: ast.WriteStmt) -> None:
    """B10-B13 in a kernel body; B11 (one E2127, operands unchecked) outside."""
    scope = chk.kernel
    if scope is None:
        chk.ctx.error(
            "E2127",
            f"`{s.word}` is only allowed in a kernel body",
            s.span,
            "write outside a kernel",
            notes=("kernels write their results with `store` and atomics",),
            help=("return a new value instead",),
        )
        return
    access = memory_access(chk, s.target, "result")
    if access is None:
        chk.expr(s.value)
        if s.mask is not None:
            chk.expr(s.mask)
        return
    local, shape = access
    assert isinstance(local.type, TensorType)
    dtype = local.type.dtype
    if s.word != "store":
        allowed = _ATOMIC_DTYPES[s.word]
        name = dtype.name if isinstance(dtype, ScalarDType) else None
        if name not in allowed:
            chk.ctx.error(
                "E2127",
                f"no `{s.word}` on {show(scalar(dtype))}",
                s.span,
                "unsupported atomic dtype",
                notes=(f"`{s.word}` writes {', '.join(allowed)}",),
            )
    first = scope.writes.get(local.name)
    if first is None:
        scope.writes[local.name] = s
    elif first.word != s.word:
        chk.ctx.error(
            "E2127",
            f"`{local.name}` mixes `{first.word}` and `{s.word}`",
            s.span,
            f"`{s.word}` here",
            related=(Label(first.span, "earlier write"),),
            notes=("each result is written by one kind of write only",),
        )
    target: Type = TensorType(shape, dtype) if shape else scalar(dtype)
    t = chk.expr(s.value, target)
    if isinstance(t, TensorType) or not shape:
        assignability.coerce(chk, s.value, t, target, "the written value")
    else:
        assignability.coerce(chk, s.value, t, scalar(dtype), "the written value")
    if s.mask is not None:
        check_mask(chk, s.mask, shape)


# ---------------------------------------------------------------- references


def check_kernel_ref(ctx: Context, fn: FnInfo) -> KernelInfo | None:
    """KB1-KB5: an op's `kernel name<args>` names a kernel with the op's signature."""
    ref = fn.decl.kernel
    if ref is None or fn.facts is None:
        return None
    scope = Scope(fn.scope, item_scope(fn.module, fn.block))
    from linnet.check.exprs import BodyChecker
    from linnet.check.unknown import unknown_name

    chk = BodyChecker(ctx, fn.module, fn.block, fn, scope, fn.facts)
    decl = scope.lookup(ref.name.name)
    if decl is None:
        unknown_name(
            chk,
            ref.name.name,
            ref.name.span,
            f"cannot find kernel `{ref.name.name}` in this scope",
            "not found",
            "kernel",
            "import it with `use`, or declare it",
        )
        return None
    if not isinstance(decl, KernelInfo):
        ctx.error(
            "E2126",
            f"`{ref.name.name}` names no kernel",
            ref.name.span,
            "not a kernel",
            help=("refer to a `kernel` item: `-> R kernel name<...>`",),
        )
        return None
    ensure_kernel(ctx, decl)
    subst = _bind_generics(chk, ref, decl)
    if subst is None:
        return decl
    before = len(ctx.diags)
    if len(decl.params) != len(fn.params):
        ctx.error(
            "E2126",
            f"parameter count differs: {len(decl.params)} for `{decl.name}`, "
            f"{len(fn.params)} for the op",
            ref.span,
            "kernel and op differ",
        )
        return decl
    for i, (kp, op) in enumerate(zip(decl.params, fn.params, strict=True)):
        kt = subst.apply(kp.type)
        if not _same_type(chk, kt, op.type):
            ctx.error(
                "E2126",
                f"parameter {i} differs: {show(kt)} for `{decl.name}`, {show(op.type)} for the op",
                ref.span,
                "kernel and op differ",
                notes=(f"kernel parameter `{kp.name}`, op parameter `{op.name}`",),
            )
    results = [subst.apply(r.type) for r in decl.results]
    if fn.result is not None and not _results_match(chk, results, fn.result):
        written = results[0] if len(results) == 1 else None
        shown = show(written) if written is not None else f"({', '.join(show(r) for r in results)})"
        ctx.error(
            "E2126",
            f"result differs: `{decl.name}` writes {shown}, the op returns {show(fn.result)}",
            ref.span,
            "kernel and op differ",
        )
    if len(ctx.diags) == before:
        ctx.program.kernel_refs[fn.decl] = KernelBinding(decl, subst)
    return decl


def _bind_generics(chk: BodyChecker, ref: ast.KernelRef, k: KernelInfo) -> Subst | None:
    """KB2: reference arguments bind the kernel's generics in order; defaults fill the rest."""
    from linnet.check.calls import bind_default
    from linnet.check.typeconv import generic_argument
    from linnet.check.unknown import generics_help

    args = ref.args or ()
    if len(args) > len(k.generics):
        chk.ctx.error(
            "E2111",
            f"`{k.name}` takes {len(k.generics)} generic arguments but {len(args)} were given",
            ref.span,
            "too many generic arguments",
            help=generics_help(k.name, k.generics),
        )
        return None
    subst = Subst()
    ok = True
    for g, arg in zip(k.generics, args, strict=False):
        value = generic_argument(chk, g, arg)
        if value is None:
            ok = False
            continue
        _bind(subst, g, value)
    for g in k.generics[len(args) :]:
        if g.default is None:
            chk.ctx.error(
                "E2111",
                f"`{g.name}` has no default",
                ref.span,
                f"missing generic argument `{g.name}`",
                help=generics_help(k.name, k.generics),
            )
            ok = False
            continue
        from linnet.check.calls import Unifier

        u = Unifier.__new__(Unifier)
        u.subst = subst
        bind_default(u, g)
    return subst if ok else None


def _bind(subst: Subst, g: GenericInfo, value: object) -> None:
    if g.kind == "Dim":
        subst.bind_dim(g.key, value)  # type: ignore[arg-type]
    elif g.kind == "Shape":
        subst.bind_pack(g.key, value)  # type: ignore[arg-type]
    else:
        subst.bind_dtype(g.key, value)  # type: ignore[arg-type]


def _same_type(chk: BodyChecker, a: Type, b: Type) -> bool:
    if isinstance(a, ErrorType) or isinstance(b, ErrorType):
        return True
    if isinstance(a, ScalarType) and isinstance(b, ScalarType):
        return a.dtype is b.dtype
    if isinstance(a, TensorType) and isinstance(b, TensorType):
        return a.dtype is b.dtype and same_shape(chk, a.shape, b.shape)
    return False


def _results_match(chk: BodyChecker, results: list[Type], op_result: Type) -> bool:
    from linnet.check.types import TupleType

    if len(results) == 1:
        return _same_type(chk, results[0], op_result)
    if not isinstance(op_result, TupleType) or len(op_result.elems) != len(results):
        return False
    return all(_same_type(chk, r, e) for r, e in zip(results, op_result.elems, strict=True))


def kernel_of(item: ItemInfo) -> KernelInfo | None:
    return item if isinstance(item, KernelInfo) else None
