"""Calls and generic inference (language.md 5.6, 7.7, 12.3).

Stage: part of the body checker. In: `Call` nodes. Out: their types, a
`CallInfo` per call, resolutions of callees, and call-graph edges for E2119.
Callees: user functions and ops, module items (`m.f`), methods by bare name
and of children (`child.method`), and the prelude (`check.prelude`).

A call of a user function or method follows 5.6 step by step: explicit
generic arguments, argument matching (E2102), unification of each argument
with its parameter (E2101/E2103/E2202 per argument), defaults of unbound
generics (E2110), deferred dimensions (E2202), dtype classes (E2112),
deferred literals, the callee's `where` clause (E2206), and the result type.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from linnet.check import assignability, signatures
from linnet.check.decls import (
    AliasInfo,
    BlockInfo,
    CallEdge,
    ConstInfo,
    Decl,
    FnInfo,
    GenericInfo,
    LocalInfo,
    MemberInfo,
    ModuleInfo,
    PreludeFn,
    StructInfo,
    UnresolvedImport,
)
from linnet.check.dims import Dim, Symbol
from linnet.check.kernel_info import KernelInfo
from linnet.check.kernels import BUILTINS as KERNEL_BUILTINS
from linnet.check.kernels import builtin_call as kernel_builtin_call
from linnet.check.kernels import concat_in_kernel, kernel_called
from linnet.check.members import block_path, module_item, private, tensor_member_help
from linnet.check.program import CallInfo
from linnet.check.types import (
    ERROR,
    NONE,
    UNIT,
    BlockType,
    CtFloatType,
    CtIntType,
    DType,
    DTypeVar,
    EnumType,
    ErrorType,
    OptionalType,
    ScalarDType,
    ScalarType,
    Shape,
    StructType,
    Subst,
    TensorType,
    TupleType,
    Type,
    in_class,
    shape_str,
    show,
)
from linnet.check.unknown import generics_help, unknown_name
from linnet.diagnostics import Diagnostic, Label
from linnet.spelling import did_you_mean
from linnet.syntax import ast
from linnet.syntax.tokens import PRELUDE_FUNCTIONS

if TYPE_CHECKING:
    from linnet.check.exprs import BodyChecker


# ---------------------------------------------------------------- calls


def check_call(chk: BodyChecker, call: ast.Call, expected: Type | None) -> Type:
    callee = call.callee
    if isinstance(callee, ast.Name):
        name = callee.ident.name
        decl = chk.scope.lookup(name)
        if name in KERNEL_BUILTINS and (chk.kernel is not None or decl is None):
            return kernel_builtin_call(chk, call, name, expected)  # 4.3 B2, B14, B17
        if isinstance(decl, KernelInfo):
            return kernel_called(chk, call, callee, decl)  # 4.2 K10
        if name == "concat" and decl is None and chk.kernel is not None:
            return concat_in_kernel(chk, call)  # 4.3 B15
        if decl is None:
            if name in PRELUDE_FUNCTIONS:
                from linnet.check.prelude import check_prelude_call

                chk.resolutions[callee] = PreludeFn(name)
                return check_prelude_call(chk, call, name, expected)
            unknown_name(
                chk,
                name,
                callee.span,
                f"cannot find function `{name}` in this scope",
                "not found",
                "function",
                "import it with `use`, or declare it",
            )
            _check_args_alone(chk, call)
            return ERROR
        chk.resolutions[callee] = decl
        if isinstance(decl, FnInfo):
            return call_function(chk, call, decl, None, None)
        if isinstance(decl, UnresolvedImport):
            _check_args_alone(chk, call)
            return ERROR
        if isinstance(decl, StructInfo):
            from linnet.check.structs import construct

            return construct(chk, call, decl)
        return not_callable(chk, call, callee, decl)
    if isinstance(callee, ast.Member):
        target = callee.target
        if isinstance(target, ast.Name):
            decl = chk.scope.lookup(target.ident.name)
            if isinstance(decl, ModuleInfo):
                chk.resolutions[target] = decl
                item = module_item(chk, decl, callee.name)
                if item is None:
                    _check_args_alone(chk, call)
                    return ERROR
                chk.resolutions[callee] = item
                if isinstance(item, FnInfo):
                    return call_function(chk, call, item, None, None)
                if isinstance(item, KernelInfo):
                    return kernel_called(chk, call, callee, item)
                if isinstance(item, StructInfo):
                    from linnet.check.structs import construct

                    return construct(chk, call, item)
                return not_callable(chk, call, callee, item)
        t = chk.expr(target)
        if isinstance(t, BlockType):
            return call_method(chk, call, callee, t)
        if not isinstance(t, ErrorType):
            chk.ctx.error(
                "E2107",
                f"{show(t)} has no method `{callee.name.name}`",
                callee.name.span,
                "unknown method",
                help=tensor_member_help(callee.name.name, t)
                or ("only blocks have methods; call a function with the value instead",),
            )
        _check_args_alone(chk, call)
        return ERROR
    chk.ctx.error("E2106", "this expression is not callable", callee.span, "not a function")
    _check_args_alone(chk, call)
    return ERROR


def _check_args_alone(chk: BodyChecker, call: ast.Call) -> None:
    """Check arguments of a failed call for their own errors, without follow-ups."""
    for arg in call.args:
        chk.expr(arg.value)


def not_callable(chk: BodyChecker, call: ast.Call, callee: ast.Expr, decl: Decl) -> Type:
    what = {
        LocalInfo: "a local value",
        ConstInfo: "a constant",
        MemberInfo: "a block member",
        GenericInfo: "a generic parameter",
        ModuleInfo: "a module",
        AliasInfo: "a type alias",
    }.get(type(decl), "not a function")
    related: tuple[Label, ...] = ()
    ident = getattr(decl, "ident", None)
    if isinstance(ident, ast.Ident):
        related = (Label(ident.span, "declared here"),)
    name = getattr(decl, "name", "this")
    chk.ctx.error(
        "E2106",
        f"`{name}` is not callable",
        callee.span,
        f"`{name}` is {what}" if what != "not a function" else "not a function",
        related=related,
        help=_not_callable_help(chk, name, decl),
    )
    _check_args_alone(chk, call)
    return ERROR


def _not_callable_help(chk: BodyChecker, name: str, decl: Decl) -> tuple[str, ...]:
    """How to call what was meant: a child's method, a block's function, a module's item."""
    if isinstance(decl, MemberInfo):
        signatures.ensure_members(chk.ctx, decl.block)
        t = decl.type
        if isinstance(t, BlockType) and t.info.methods:
            method = "forward" if "forward" in t.info.methods else next(iter(t.info.methods))
            return (f"call one of its methods: `{name}.{method}(...)`",)
        return ()
    if isinstance(decl, BlockInfo):
        lower = name.lower()
        functions = [n for n, item in decl.module.items.items() if isinstance(item, FnInfo)]
        same = [n for n in functions if n.replace("_", "") == lower]
        also = f"; or call the function `{same[0]}` of `{decl.module.name}`" if same else ""
        return (
            f"a block is not called: declare a child `sub {lower}: {name}<...>` and call "
            f"`{lower}.forward(...)`{also}",
        )
    if isinstance(decl, ModuleInfo):
        return (f"call one of its items: `{name}.item(...)`",)
    if isinstance(decl, AliasInfo):
        signatures.ensure_alias(chk.ctx, decl)
    if isinstance(decl, AliasInfo) and isinstance(decl.target, StructType):
        # language-extensions 2.1: an alias is transparent as a type, never a constructor.
        target = decl.target
        return (
            f"a type alias is not a constructor: construct `{target}` by the struct's name, "
            f"`{target}(field = value, ...)`",
        )
    return ()


def call_method(chk: BodyChecker, call: ast.Call, callee: ast.Member, t: BlockType) -> Type:
    """`child.method(args)` (12.3): child generics substituted, then 5.6."""
    block: BlockInfo = t.info
    name = callee.name.name
    method = block.methods.get(name)
    if method is None:
        signatures.ensure_members(chk.ctx, block)
        if name in block.members:
            chk.ctx.error(
                "E2106",
                f"`{name}` is a member of `{block.name}`, not a method",
                callee.name.span,
                "not callable",
            )
        else:
            chk.ctx.error(
                "E2107",
                f"block `{block.name}` has no method `{name}`",
                callee.name.span,
                "unknown method",
                help=did_you_mean(name, block.methods) or (_methods_help(block),),
            )
        _check_args_alone(chk, call)
        return ERROR
    chk.resolutions[callee] = method
    if not method.pub and block.module is not chk.module:
        private(chk, method, callee.name.span, block.name)
        _check_args_alone(chk, call)
        return ERROR
    return call_function(chk, call, method, callee.target, t)


def _methods_help(block: BlockInfo) -> str:
    names = ", ".join(f"`{m}`" for m in block.methods)
    if not names:
        return f"`{block.name}` has no methods"
    return f"the methods of `{block.name}` are {names}"


class Unifier:
    """Inference state of one call (5.6): bindings, own generics, deferred work."""

    __slots__ = ("deferred_dims", "deferred_literals", "own", "subst")

    def __init__(self, fn: FnInfo | StructInfo, receiver: BlockType | None) -> None:
        self.subst = receiver.subst.copy() if receiver is not None else Subst()
        self.own: set[Symbol | DTypeVar] = {g.key for g in fn.generics}
        self.deferred_dims: list[tuple[Dim, Dim, ast.Expr]] = []
        self.deferred_literals: list[tuple[ast.Expr, CtIntType | CtFloatType, DTypeVar]] = []

    def unbound(self) -> set[Symbol | DTypeVar]:
        s = self.subst
        return {k for k in self.own if k not in s.dims and k not in s.packs and k not in s.dtypes}


def call_function(
    chk: BodyChecker,
    call: ast.Call,
    fn: FnInfo,
    receiver: ast.Expr | None,
    receiver_type: BlockType | None,
) -> Type:
    signatures.ensure_fn(chk.ctx, fn)
    if fn.state != "done":
        # Only a call inside the callee's own signature finds it unresolved; a
        # signature's expressions are dimensions, which calls never are (6.1).
        chk.ctx.error(
            "E2123",
            "a function call is not a compile-time dimension",
            call.span,
            "call in a signature",
            notes=("dimensions use integer literals, `Dim` generics and integer constants only",),
        )
        return ERROR
    if any(isinstance(p.type, ErrorType) for p in fn.params):
        _check_args_alone(chk, call)  # the callee's signature has a reported error
        return ERROR
    u = Unifier(fn, receiver_type)
    if call.generic_args is not None and not explicit_generics(chk, call, fn, u):
        _check_args_alone(chk, call)
        return ERROR
    slots = match_arguments(chk, call, fn, u.subst)
    if slots is None:
        _check_args_alone(chk, call)
        return ERROR
    ok = True
    failed: tuple[int, int] | None = None  # the mismatched parameter, its diagnostic
    for position, (param, arg) in enumerate(zip(fn.params, slots, strict=True)):
        if arg is None:
            continue
        if not ok:
            chk.expr(arg)  # its own errors only: bindings after a mismatch would cascade
            continue
        hint = _hint(u, param.type)
        t = chk.expr(arg, hint)
        reported = len(chk.ctx.diags)
        if isinstance(t, ErrorType):
            ok = False  # already reported; what it would have bound stays unknown
        elif not unify_argument(chk, u, param, arg, t):
            ok = False
            if len(chk.ctx.diags) > reported:
                failed = (position, reported)
    callee_span = call.callee.span
    if failed is not None:
        _suggest_swap(chk, fn, receiver_type, slots, *failed)
    if not ok:
        return ERROR  # argument errors were reported; unbound generics would only cascade
    # Step 3: defaults of generics still unbound, else E2110.
    for g in fn.generics:
        if g.key in u.subst.dims or g.key in u.subst.packs or g.key in u.subst.dtypes:
            continue
        if g.has_default and g.default is not None:
            bind_default(u, g)
            continue
        chk.ctx.error(
            "E2110",
            f"cannot infer `{g.name}` in call to `{fn.name}`",
            callee_span,
            "not inferable from the arguments",
            help=(f"pass the generic arguments explicitly: `{fn.name}<...>(...)`",),
        )
        ok = False
    if not ok:
        return ERROR
    s = u.subst
    # Step 4: deferred dimensions.
    for param_dim, arg_dim, node in u.deferred_dims:
        want = s.dim(param_dim)
        if not (want == arg_dim or chk.facts.prove(want, "==", arg_dim)):
            chk.proof_error(
                "E2202",
                f"cannot prove the dimensions required by `{fn.name}`",
                node.span,
                "dimension mismatch",
                notes=(
                    f"`{fn.name}` needs `{chk.facts.simplify(want)}`",
                    f"the argument has `{arg_dim}`",
                ),
                help=("state the missing equality in a `where` clause",),
            )
            ok = False
    # Step 5: dtype classes.
    for g in fn.generics:
        if g.kind in ("Dim", "Shape"):
            continue
        key = g.key
        assert isinstance(key, DTypeVar)
        bound = s.dtypes.get(key)
        if bound is not None and not in_class(bound, g.kind):
            chk.ctx.error(
                "E2112",
                f"`{bound}` does not satisfy `{g.kind}` for `{g.name}` of `{fn.name}`",
                callee_span,
                f"`{g.name}` must be {g.kind}",
                related=(Label(g.ident.span, "constrained here"),),
            )
            ok = False
    # Step 6: deferred literal arguments.
    for node, lit, var in u.deferred_literals:
        bound_dtype = s.dtypes.get(var)
        if bound_dtype is not None and not assignability.adopt_literal(chk, node, lit, bound_dtype):
            ok = False
    if not ok:
        return ERROR
    # Step 7: the callee's where clause.
    for c in fn.where:
        lhs, rhs = s.dim(c.lhs), s.dim(c.rhs)
        if chk.facts.prove(lhs, c.rel, rhs):
            continue
        chk.proof_error(
            "E2206",
            f"cannot prove `{c.text()}` required by `{fn.name}`",
            callee_span,
            "constraint not proven",
            related=(Label(c.node.span, "required here"),),
            notes=(
                f"after substitution: `{chk.facts.simplify(lhs)} {c.rel} {chk.facts.simplify(rhs)}`",
            ),
            help=("state the same constraint in the calling function's or block's `where`",),
        )
        ok = False
    # Optional parameters given `none`: record the adopted optional type.
    for param, arg in zip(fn.params, slots, strict=True):
        if arg is not None and chk.types.get(arg) is NONE:
            chk.adopted[arg] = s.apply(param.type)
    result = UNIT if fn.result is None else s.apply(fn.result)
    path = () if receiver is None else block_path(chk, receiver) or ()
    chk.program.calls[call] = CallInfo(fn, s, tuple(slots), result, receiver, receiver_type, path)
    if chk.fn is not None and chk.fn.body_checked:
        # Calls in a signature (always E2123 there) are not call-graph edges.
        chk.fn.calls.append(CallEdge(fn, call, path))
    return result if ok else ERROR


def _suggest_swap(
    chk: BodyChecker,
    fn: FnInfo,
    receiver_type: BlockType | None,
    slots: list[ast.Expr | None],
    position: int,
    reported: int,
) -> None:
    """Add "look swapped" to a mismatched argument's report when exchanging two fits."""
    mine = slots[position]
    mine_type = chk.types.get(mine) if mine is not None else None
    if not isinstance(mine_type, TensorType):
        return
    for other, arg in enumerate(slots):
        other_type = chk.types.get(arg) if arg is not None and other != position else None
        if not isinstance(other_type, TensorType):
            continue
        trial = Unifier(fn, receiver_type)
        pairs = sorted([(position, other_type), (other, mine_type)], key=lambda p: p[0])
        if all(
            unify(chk, trial, fn.params[i].type, t, mine) is None  # type: ignore[arg-type]
            for i, t in pairs
        ):
            first, second = sorted((fn.params[position].name, fn.params[other].name))
            d = chk.ctx.diags[reported]
            swapped = (f"the arguments for `{first}` and `{second}` look swapped",)
            chk.ctx.diags[reported] = Diagnostic(
                d.code, d.message, d.span, d.label, d.related, d.notes, swapped + d.help
            )
            return


def _hint(u: Unifier, t: Type) -> Type | None:
    """The parameter type as a hint for the argument (literals, `none`, tuples).

    Only a fully known type is a hint: one still naming the callee's unbound
    generics would leak them into the caller (they bind from other arguments).
    """
    if not isinstance(t, (ScalarType, OptionalType, TupleType)):
        return None
    hinted = u.subst.apply(t)
    unbound = u.unbound()
    if unbound and _mentions(hinted, unbound):
        return None
    return hinted


def _mentions(t: Type, keys: set[Symbol | DTypeVar]) -> bool:
    if isinstance(t, ScalarType):
        return t.dtype in keys
    if isinstance(t, TensorType):
        if t.dtype in keys:
            return True
        for item in t.shape:
            if type(item) is Symbol:
                if item in keys:
                    return True
            elif any(s in keys for s in item.symbols()):  # type: ignore[union-attr]
                return True
        return False
    if isinstance(t, OptionalType):
        return _mentions(t.inner, keys)
    if isinstance(t, TupleType):
        return any(_mentions(e, keys) for e in t.elems)
    if isinstance(t, StructType):
        s = t.subst
        return (
            any(d in keys for d in s.dtypes.values())
            or any(sym in keys for d in s.dims.values() for sym in d.symbols())
            or any(
                item in keys if type(item) is Symbol else bool(item.symbols() & keys)  # type: ignore[union-attr]
                for items in s.packs.values()
                for item in items
            )
        )
    return False


def bind_default(u: Unifier, g: GenericInfo) -> None:
    s = u.subst
    value = g.default
    if g.kind == "Dim":
        assert isinstance(value, Dim)
        s.bind_dim(g.key, s.dim(value))  # type: ignore[arg-type]
    elif g.kind == "Shape":
        assert isinstance(value, tuple)
        s.bind_pack(g.key, s.shape(value))  # type: ignore[arg-type]
    else:
        s.bind_dtype(g.key, s.dtype(value))  # type: ignore[arg-type]


def explicit_generics(
    chk: BodyChecker, call: ast.Call, fn: FnInfo | StructInfo, u: Unifier
) -> bool:
    """5.6 step 1: explicit arguments bind the first generics in order (E2111/E2112)."""
    from linnet.check.typeconv import generic_argument

    args = call.generic_args or ()
    if len(args) > len(fn.generics):
        chk.ctx.error(
            "E2111",
            f"`{fn.name}` takes {len(fn.generics)} generic arguments but {len(args)} were given",
            args[len(fn.generics)].span,
            "unexpected generic argument",
            help=generics_help(fn.name, fn.generics),
        )
        return False
    ok = True
    for g, arg in zip(fn.generics, args, strict=False):
        value = generic_argument(chk, g, arg)
        if value is None:
            ok = False
            continue
        if g.kind == "Dim":
            u.subst.bind_dim(g.key, value)  # type: ignore[arg-type]
        elif g.kind == "Shape":
            u.subst.bind_pack(g.key, value)  # type: ignore[arg-type]
        else:
            u.subst.bind_dtype(g.key, value)  # type: ignore[arg-type]
    return ok


def match_arguments(
    chk: BodyChecker, call: ast.Call, fn: FnInfo, bound: Subst | None = None
) -> list[ast.Expr | None] | None:
    """7.7: positional then named arguments onto parameters; E2102 on any problem.

    `bound` holds what is known of the generics (a child's, explicit ones), so
    the signature in the notes shows `Tensor[*S, 4; f32]`, not `Tensor[*S, In; T]`.
    """
    params = fn.params
    slots: list[ast.Expr | None] = [None] * len(params)
    filled = [False] * len(params)
    index = {p.name: i for i, p in enumerate(params)}
    ok = True
    position = 0
    for arg in call.args:
        if arg.name is None:
            if position >= len(params):
                chk.ctx.error(
                    "E2102",
                    f"`{fn.name}` takes {len(params)} arguments but more were given",
                    arg.span,
                    "unexpected argument",
                    notes=(f"the signature is `{signature_text(fn, bound)}`",),
                    help=("remove the extra arguments",),
                )
                ok = False
                break
            slots[position] = arg.value
            filled[position] = True
            position += 1
            continue
        i = index.get(arg.name.name)
        if i is None:
            chk.ctx.error(
                "E2102",
                f"`{fn.name}` has no parameter `{arg.name.name}`",
                arg.name.span,
                "unknown parameter",
                notes=(f"the signature is `{signature_text(fn, bound)}`",),
                help=did_you_mean(arg.name.name, index, "the parameter")
                or ("name one of the parameters in the signature",),
            )
            ok = False
            continue
        if filled[i]:
            chk.ctx.error(
                "E2102",
                f"the parameter `{arg.name.name}` is given twice",
                arg.span,
                "given again here",
                help=("give each parameter one argument",),
            )
            ok = False
            continue
        slots[i] = arg.value
        filled[i] = True
    if not ok:
        return None
    missing = [p.name for p, f in zip(params, filled, strict=True) if not f and p.default is None]
    if missing:
        names = ", ".join(f"`{m}`" for m in missing)
        chk.ctx.error(
            "E2102",
            f"missing argument {names} in call to `{fn.name}`",
            call.span,
            "missing argument",
            notes=(f"the signature is `{signature_text(fn, bound)}`",),
            help=("optional parameters take `none` or `some(x)`",),
        )
        return None
    return slots


def signature_text(fn: FnInfo, bound: Subst | None = None) -> str:
    s = bound if bound is not None else Subst()
    params = ", ".join(f"{p.name}: {s.apply(p.type)!r}" for p in fn.params)
    result = f" -> {s.apply(fn.result)!r}" if fn.result is not None else ""
    return f"{fn.kind} {fn.name}({params}){result}"


# ---------------------------------------------------------------- unification


def unify_argument(chk: BodyChecker, u: Unifier, param: LocalInfo, arg: ast.Expr, t: Type) -> bool:
    """5.6 step 2 for one argument; reports E2101/E2103/E2202 on failure."""
    reason = unify(chk, u, param.type, t, arg)
    if reason is None:
        return True
    expected = u.subst.apply(param.type)
    notes = [f"parameter `{param.name}` has type {show(expected)}", f"the argument is {show(t)}"]
    helps: list[str] = []
    if reason == "E2101" and isinstance(expected, OptionalType) and not isinstance(t, OptionalType):
        helps.append("wrap the value in `some(...)`")
    if t is UNIT:
        chk.ctx.error("E2101", "this call returns no value", arg.span, "used as a value here")
        return False
    messages = {
        "E2103": f"the argument for `{param.name}` has the wrong dtype",
        "E2202": f"the argument for `{param.name}` does not have the required shape",
        "E2101": f"mismatched types: argument `{param.name}` should be {show(expected)}",
        "E2104": "",
    }
    if reason == "E2104":
        return False  # adoption already reported
    if reason == "E2103" and isinstance(expected, (TensorType, ScalarType)):
        helps.append(
            f"there is no implicit promotion: convert it with `cast<{expected.dtype}>(...)`"
            if isinstance(expected.dtype, ScalarDType)
            else "there is no implicit promotion: every argument of one dtype generic "
            "has the same dtype"
        )
    elif reason == "E2202":
        helps.append(
            f"pass a tensor of shape `[{shape_str(expected.shape)}]`, or state the missing "
            "equality in a `where` clause"
            if isinstance(expected, TensorType)
            else "state the missing equality in a `where` clause"
        )
    elif reason == "E2101" and not helps:
        helps.append(f"pass {show(expected)} for `{param.name}`")
    report = chk.proof_error if reason == "E2202" else chk.ctx.error
    report(reason, messages[reason], arg.span, "argument", notes=tuple(notes), help=tuple(helps))
    return False


def unify(chk: BodyChecker, u: Unifier, p: Type, a: Type, node: ast.Expr) -> str | None:
    """Unify a parameter type with an argument type; None or the failure code."""
    if isinstance(a, ErrorType) or isinstance(p, ErrorType):
        return None
    if isinstance(p, TensorType):
        if not isinstance(a, TensorType):
            return "E2101"
        dtype_ok = unify_dtype(u, p.dtype, a.dtype)
        shape_ok = unify_shape(chk, u, p.shape, a.shape, node)
        if not dtype_ok:
            return "E2103"
        return None if shape_ok else "E2202"
    if isinstance(p, ScalarType):
        if isinstance(a, ScalarType):
            return None if unify_dtype(u, p.dtype, a.dtype) else "E2103"
        if isinstance(a, (CtIntType, CtFloatType)):
            dtype = u.subst.dtype(p.dtype)
            if isinstance(dtype, DTypeVar) and dtype in u.own:
                u.deferred_literals.append((node, a, dtype))
                return None
            return None if assignability.adopt_literal(chk, node, a, dtype) else "E2104"
        return "E2101"
    if isinstance(p, OptionalType):
        if a is NONE:
            return None
        if isinstance(a, OptionalType):
            inner = unify(chk, u, p.inner, a.inner, _some_value(node))
            return None if inner is None else "E2101" if inner != "E2104" else inner
        return "E2101"
    if isinstance(p, TupleType):
        if not isinstance(a, TupleType) or len(a.elems) != len(p.elems):
            return "E2101"
        parts = _tuple_parts(node, len(p.elems))
        for pe, ae, part in zip(p.elems, a.elems, parts, strict=True):
            reason = unify(chk, u, pe, ae, part)
            if reason is not None:
                return "E2101" if reason != "E2104" else reason
        return None
    if isinstance(p, EnumType):
        return None if isinstance(a, EnumType) and a.info is p.info else "E2101"
    if isinstance(p, StructType):
        if not isinstance(a, StructType) or a.info is not p.info:
            return "E2101"
        return None if unify_struct_arguments(chk, u, p, a, node) else "E2101"
    return "E2101"


def unify_struct_arguments(
    chk: BodyChecker, u: Unifier, p: StructType, a: StructType, node: ast.Expr
) -> bool:
    """A struct's generic arguments unified one by one (5.6 step 2): a struct value binds the
    callee's generics as the tensors it holds would (`fn f<N: Dim>(s: Stats<N>)`)."""
    for g in p.info.generics:
        key = g.key
        if isinstance(key, DTypeVar):
            pd, ad = p.subst.dtypes.get(key), a.subst.dtypes.get(key)
            ok = pd is ad if pd is None or ad is None else unify_dtype(u, pd, ad)
        elif key.is_pack:
            pp, ap = p.subst.packs.get(key), a.subst.packs.get(key)
            ok = pp is ap if pp is None or ap is None else unify_shape(chk, u, pp, ap, node)
        else:
            pdim, adim = p.subst.dims.get(key), a.subst.dims.get(key)
            ok = (
                pdim is adim
                if pdim is None or adim is None
                else unify_item(chk, u, pdim, adim, node)
            )
        if not ok:
            return False
    return True


def _some_value(node: ast.Expr) -> ast.Expr:
    inner = assignability.strip_parens(node)
    return inner.value if isinstance(inner, ast.SomeExpr) else node


def _tuple_parts(node: ast.Expr, n: int) -> list[ast.Expr]:
    inner = assignability.strip_parens(node)
    if isinstance(inner, ast.TupleExpr) and len(inner.elems) == n:
        return list(inner.elems)
    return [node] * n


def unify_dtype(u: Unifier, p: DType, a: DType) -> bool:
    bound = u.subst.dtype(p)
    if isinstance(bound, DTypeVar) and bound in u.own:
        u.subst.bind_dtype(bound, a)
        return True
    return bound is a


def unify_shape(chk: BodyChecker, u: Unifier, p: Shape, a: Shape, node: ast.Expr) -> bool:
    """Match a parameter shape against an argument shape (5.6, 6.6)."""
    s = u.subst
    # Expand packs bound so far; keep unbound own packs as they are.
    items: list[Dim | Symbol] = []
    unbound_packs: list[int] = []
    for item in p:
        if type(item) is Symbol:
            bound = s.packs.get(item)
            if bound is not None:
                items.extend(bound)
                continue
            if item in u.own:
                unbound_packs.append(len(items))
        items.append(item)
    if len(unbound_packs) > 1:
        # Two unbound packs in one tensor type cannot be inferred (5.6): they stay
        # unbound, and step 3 reports E2110 unless another argument binds them.
        return True
    if unbound_packs:
        at = unbound_packs[0]
        prefix, suffix = items[:at], items[at + 1 :]
        if len(a) < len(prefix) + len(suffix):
            return False
        split = len(a) - len(suffix)
        pack = items[at]
        assert type(pack) is Symbol
        # Bound before the other axes are compared, so a note about a mismatch
        # shows the pack's axes (`Tensor[B, 4; f32]`, not `Tensor[*S, 4; f32]`).
        s.bind_pack(pack, tuple(a[len(prefix) : split]))
        if not all(
            unify_item(chk, u, x, y, node) for x, y in zip(prefix, a[: len(prefix)], strict=True)
        ):
            return False
        return all(unify_item(chk, u, x, y, node) for x, y in zip(suffix, a[split:], strict=True))
    if len(items) != len(a):
        return False
    return all(unify_item(chk, u, x, y, node) for x, y in zip(items, a, strict=True))


def unify_item(
    chk: BodyChecker, u: Unifier, p: Dim | Symbol, a: Dim | Symbol, node: ast.Expr
) -> bool:
    if type(p) is Symbol or type(a) is Symbol:
        return p is a
    assert isinstance(p, Dim) and isinstance(a, Dim)
    s = u.subst
    # A parameter dimension that is exactly an own `Dim` generic binds (5.6 step 2).
    sym = p.as_symbol()
    if sym is not None and sym in u.own:
        bound = s.dims.get(sym)
        if bound is None:
            s.bind_dim(sym, a)
            return True
        return bound == a or chk.facts.prove(bound, "==", a)
    if u.own and any(
        sym in u.own and sym not in s.dims and sym not in s.packs for sym in p.symbols()
    ):
        u.deferred_dims.append((p, a, node))
        return True
    want = s.dim(p)
    return want == a or chk.facts.prove(want, "==", a)
