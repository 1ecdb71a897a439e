"""The prelude functions (language.md section 10).

Stage: part of the body checker; `check_prelude_call` is reached for a call
whose callee is a prelude function name (declarations can never shadow one,
E1207). Out: the call's type, a `CallInfo` (with `dtype_arg` and `axis`),
and the diagnostics of 10.2/10.3: E2102 arguments, E2110/E2111/E2112
generics, E2104 operand classes, E2114 `select` conditions, E2123 `iota`
lengths, E2203 reshape counts, E2207 `broadcast_to`, E2209/E2210 axes,
E2202/E2103 `concat` operands, E2190 reserved functions; `cumsum`
(language-extensions section 5: E2102 arguments, E2101 not a tensor, E2112
a dtype that is not Numeric, E2209/E2210 its axis).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from linnet.check import assignability
from linnet.check.decls import PreludeFn
from linnet.check.dims import Dim, Symbol
from linnet.check.operators import broadcast_or_report, fold_ints, report_class
from linnet.check.program import CallInfo
from linnet.check.shapes import broadcast_to_ok, dims_equal
from linnet.check.types import (
    BOOL,
    ERROR,
    I64,
    CtFloatType,
    CtIntType,
    DType,
    ErrorType,
    ScalarType,
    Shape,
    ShapeItem,
    ShapeType,
    Subst,
    TensorType,
    Type,
    in_class,
    scalar,
    shape_numel,
    shape_str,
    show,
)
from linnet.syntax import ast

if TYPE_CHECKING:
    from linnet.check.exprs import BodyChecker

SIGNATURES = {
    "cast": "cast<T>(x)",
    "reshape": "reshape(x, [d1, ..., dk])",
    "permute": "permute(x, [p0, ..., pn-1])",
    "broadcast_to": "broadcast_to(x, [d1, ..., dk])",
    "concat": "concat(t1, t2, ..., axis = k)",
    "cumsum": "cumsum(x, axis = k)",
    "iota": "iota<T = i64>(n)",
    "fill": "fill<T>(shape, v)",
    "min": "min(a, b)",
    "max": "max(a, b)",
    "shl": "shl(x, bits)",
    "shr": "shr(x, bits)",
    "select": "select(cond, a, b)",
    "abs": "abs(x)",
}
FLOAT_FUNCTIONS: dict[str, Callable[[float], float]] = {
    "exp": math.exp,
    "log": math.log,
    "sqrt": math.sqrt,
    "rsqrt": lambda v: 1.0 / math.sqrt(v),
    "sin": math.sin,
    "cos": math.cos,
    "tanh": math.tanh,
}
TAKES_DTYPE = frozenset({"cast", "iota", "fill"})
BOOL_T = scalar(BOOL)


class PreludeCall:
    """The pieces of one prelude call, for the per-function rules below."""

    __slots__ = ("args", "call", "chk", "dtype", "name")

    def __init__(self, chk: BodyChecker, call: ast.Call, name: str) -> None:
        self.chk = chk
        self.call = call
        self.name = name
        self.args: list[ast.Expr] = []
        self.dtype: DType | None = None

    def error(
        self,
        code: str,
        message: str,
        node: ast.Expr | ast.Call | ast.Arg,
        label: str = "",
        **kw: tuple[str, ...],
    ) -> Type:
        if code in _PROOF_CODES:
            self.chk.proof_error(code, message, node.span, label, **kw)  # type: ignore[arg-type]
        else:
            self.chk.ctx.error(code, message, node.span, label, **kw)  # type: ignore[arg-type]
        return ERROR

    def signature_note(self) -> tuple[str, ...]:
        return (f"the signature is `{SIGNATURES.get(self.name, self.name + '(x)')}`",)


# Codes of failed proofs: silent under facts missing a constraint (`BodyChecker.proof_error`).
_PROOF_CODES = frozenset({"E2201", "E2202", "E2203", "E2205", "E2206", "E2207"})


def check_prelude_call(chk: BodyChecker, call: ast.Call, name: str, expected: Type | None) -> Type:
    pc = PreludeCall(chk, call, name)
    if name in ("pad", "gather", "scatter"):
        for arg in call.args:
            chk.expr(arg.value)
        return pc.error(
            "E2190",
            f"`{name}` is not supported yet",
            call.callee,
            "reserved prelude function",
            notes=(f"`{name}` is reserved without a specified signature (10.1)",),
        )
    if not _generic_args(pc):
        for arg in call.args:
            chk.expr(arg.value)
        return ERROR
    axis_arg: ast.Arg | None = None
    ok = True
    for arg in call.args:
        if arg.name is None:
            pc.args.append(arg.value)
        elif name in ("concat", "cumsum") and arg.name.name == "axis" and axis_arg is None:
            axis_arg = arg
        else:
            pc.error(
                "E2102",
                f"`{name}` has no parameter `{arg.name.name}`",
                arg,
                "unknown parameter",
                notes=pc.signature_note(),
            )
            chk.expr(arg.value)
            ok = False
    if not ok:
        for value in pc.args:
            chk.expr(value)
        return ERROR
    rule = _RULES.get(name)
    if rule is None:
        rule = _float_function
    result_axis: list[int | None] = [None]
    if name == "concat":
        result = _concat(pc, axis_arg, result_axis)
    elif name == "cumsum":
        result = _cumsum(pc, axis_arg, result_axis)
    else:
        result = rule(pc)
    if not isinstance(result, ErrorType):
        args: tuple[ast.Expr | None, ...] = tuple(pc.args)
        if axis_arg is not None:
            args = (*args, axis_arg.value)
        chk.program.calls[call] = CallInfo(
            PreludeFn(name), Subst(), args, result, dtype_arg=pc.dtype, axis=result_axis[0]
        )
    return chk.prefer(call, result, expected)


def _generic_args(pc: PreludeCall) -> bool:
    """Only `cast`, `iota`, `fill` take one dtype argument (E2111 otherwise)."""
    from linnet.check.typeconv import dtype_of

    generic_args = pc.call.generic_args
    if generic_args is None:
        return True
    limit = 1 if pc.name in TAKES_DTYPE else 0
    if len(generic_args) > limit:
        pc.chk.ctx.error(
            "E2111",
            f"`{pc.name}` takes {limit} generic arguments but {len(generic_args)} were given",
            generic_args[limit].span,
            "unexpected generic argument",
            notes=pc.signature_note(),
        )
        return False
    if generic_args:
        pc.dtype = dtype_of(pc.chk, generic_args[0])
        return pc.dtype is not None
    return True


def _arity(pc: PreludeCall, n: int) -> bool:
    if len(pc.args) == n:
        return True
    for arg in pc.args:
        pc.chk.expr(arg)
    pc.error(
        "E2102",
        f"`{pc.name}` takes {n} argument{'s' if n != 1 else ''} but {len(pc.args)} were given",
        pc.call,
        "wrong number of arguments",
        notes=pc.signature_note(),
    )
    return False


# ---------------------------------------------------------------- conversions


def _cast(pc: PreludeCall) -> Type:
    if pc.dtype is None:
        if _arity(pc, 1):
            pc.chk.expr(pc.args[0])
        return pc.error(
            "E2110",
            "`cast` needs its target dtype",
            pc.call.callee,
            "missing `<T>`",
            help=("write the target dtype, e.g. `cast<f32>(x)`",),
        )
    if not _arity(pc, 1):
        return ERROR
    t = pc.chk.expr(pc.args[0])
    if isinstance(t, TensorType):
        return TensorType(t.shape, pc.dtype)
    if isinstance(t, (ScalarType, CtIntType, CtFloatType)):
        return scalar(pc.dtype)
    if isinstance(t, ErrorType):
        return ERROR
    return pc.error("E2104", f"`cast` cannot convert {show(t)}", pc.args[0], "not a number")


def _iota(pc: PreludeCall) -> Type:
    if not _arity(pc, 1):
        return ERROR
    dtype = pc.dtype if pc.dtype is not None else I64
    n = pc.chk.dim_of(pc.args[0])
    if n is None:
        return ERROR
    pc.chk.check_nonnegative(n, pc.args[0])
    if not in_class(dtype, "Numeric"):
        pc.chk.ctx.error(
            "E2112",
            f"`iota` needs a Numeric dtype, not `{dtype}`",
            pc.call.span,
            "not Numeric",
        )
        return ERROR
    return TensorType((n,), dtype)


def _fill(pc: PreludeCall) -> Type:
    if not _arity(pc, 2):
        return ERROR
    dims = _shape_arg(pc, pc.args[0])
    chk = pc.chk
    if pc.dtype is not None:
        target = scalar(pc.dtype)
        t = chk.expr(pc.args[1], target)
        if not assignability.coerce(chk, pc.args[1], t, target, "the fill value"):
            return ERROR
        dtype = pc.dtype
    else:
        t = chk.expr(pc.args[1])
        if isinstance(t, ErrorType):
            return ERROR
        if not isinstance(t, ScalarType):
            code = "E2110" if t.is_compile_time else "E2101"
            return pc.error(
                code,
                "`fill` without a dtype needs a typed scalar value",
                pc.args[1],
                f"found {show(t)}",
                help=("write the dtype: `fill<f32>(shape, value)`",),
            )
        dtype = t.dtype
        pc.dtype = dtype
    if dims is None:
        return ERROR
    return TensorType(dims, dtype)


def _shape_arg(pc: PreludeCall, node: ast.Expr) -> Shape | None:
    """A shape literal argument (7.10); anything else is E2101."""
    t = pc.chk.expr(node)
    if isinstance(t, ShapeType):
        return t.dims
    if not isinstance(t, ErrorType):
        pc.error(
            "E2101",
            f"`{pc.name}` needs a shape literal such as `[B, S * H]`",
            node,
            f"found {show(t)}",
        )
    return None


# ---------------------------------------------------------------- elementwise


def _float_function(pc: PreludeCall) -> Type:
    if not _arity(pc, 1):
        return ERROR
    t = pc.chk.expr(pc.args[0])
    if isinstance(t, ErrorType):
        return ERROR
    if isinstance(t, CtFloatType):
        if t.value is None:
            return t
        try:
            value = FLOAT_FUNCTIONS[pc.name](t.value)
        except (ValueError, OverflowError, ZeroDivisionError):
            return CtFloatType(None)
        return CtFloatType(value if math.isfinite(value) else None)
    if isinstance(t, CtIntType):
        return pc.error(
            "E2104",
            f"`{pc.name}` needs a float, found {show(t)}",
            pc.args[0],
            "integer literal",
            help=("write a float literal such as `2.0`, or convert with `cast<f32>(...)`",),
        )
    if isinstance(t, (ScalarType, TensorType)):
        if in_class(t.dtype, "Float"):
            return t
        report_class(pc.chk, pc.call, pc.name, t.dtype, "Float")
        return ERROR
    return pc.error("E2104", f"`{pc.name}` cannot be applied to {show(t)}", pc.args[0])


def _abs(pc: PreludeCall) -> Type:
    if not _arity(pc, 1):
        return ERROR
    t = pc.chk.expr(pc.args[0])
    if isinstance(t, ErrorType):
        return ERROR
    if isinstance(t, CtIntType):
        # NOTE: the reference returns the argument unchanged; we compute |c| for
        # constants and keep symbolic dimensions, which are non-negative (10.3).
        value = t.value.as_int()
        return t if value is None or value >= 0 else CtIntType(Dim.const(-value))
    if isinstance(t, CtFloatType):
        return t if t.value is None else CtFloatType(abs(t.value))
    if isinstance(t, (ScalarType, TensorType)):
        if in_class(t.dtype, "Numeric"):
            return t
        report_class(pc.chk, pc.call, "abs", t.dtype, "Numeric")
        return ERROR
    return pc.error("E2104", f"`abs` cannot be applied to {show(t)}", pc.args[0])


def _min_max(pc: PreludeCall) -> Type:
    if not _arity(pc, 2):
        return ERROR
    a = pc.chk.expr(pc.args[0])
    b = pc.chk.expr(pc.args[1])
    if isinstance(a, CtIntType) and isinstance(b, CtIntType):
        # Two compile-time integers build a dimension (10.3).
        if pc.name == "min":
            return pc.chk.fold(lambda: a.value.minimum(b.value), pc.call)
        return pc.chk.fold(lambda: a.value.maximum(b.value), pc.call)
    if isinstance(a, (CtIntType, CtFloatType)) and isinstance(b, (CtIntType, CtFloatType)):
        return CtFloatType(None)
    return elementwise(pc, [(pc.args[0], a), (pc.args[1], b)], "Numeric")


def _shift(pc: PreludeCall) -> Type:
    if not _arity(pc, 2):
        return ERROR
    a = pc.chk.expr(pc.args[0])
    b = pc.chk.expr(pc.args[1])
    if isinstance(a, CtIntType) and isinstance(b, CtIntType):
        x, y = a.value.as_int(), b.value.as_int()
        if x is None or y is None:
            return pc.error(
                "E2123",
                f"`{pc.name}` on compile-time integers needs constants",
                pc.call,
                "symbolic operand",
            )
        if pc.name == "shl":
            value = (x << y) if 0 <= y <= 63 else 0
            value &= (1 << 64) - 1
            if value >= 1 << 63:
                value -= 1 << 64
        else:
            value = x >> y if 0 <= y <= 63 else (-1 if x < 0 else 0)
        return CtIntType(Dim.const(value))
    return elementwise(pc, [(pc.args[0], a), (pc.args[1], b)], "Integer")


def _select(pc: PreludeCall) -> Type:
    if not _arity(pc, 3):
        return ERROR
    chk = pc.chk
    cond = chk.expr(pc.args[0])
    a = chk.expr(pc.args[1])
    b = chk.expr(pc.args[2])
    ok = True
    if not isinstance(cond, ErrorType) and not (
        isinstance(cond, (ScalarType, TensorType)) and cond.dtype is BOOL
    ):
        pc.error(
            "E2114",
            "the condition of `select` must have dtype `bool`",
            pc.args[0],
            f"found {show(cond)}",
            help=("compare to build a mask, e.g. `x > 0.0`",),
        )
        ok = False
    values = elementwise(pc, [(pc.args[1], a), (pc.args[2], b)], "DType")
    if not ok or isinstance(values, ErrorType) or isinstance(cond, ErrorType):
        return ERROR
    assert isinstance(cond, (ScalarType, TensorType))
    if isinstance(cond, TensorType):
        if isinstance(values, TensorType):
            shape = broadcast_or_report(chk, pc.call, cond.shape, values.shape)
            if shape is None:
                return ERROR
            return TensorType(shape, values.dtype)
        assert isinstance(values, ScalarType)
        return TensorType(cond.shape, values.dtype)
    return values


def elementwise(pc: PreludeCall, operands: list[tuple[ast.Expr, Type]], family: str) -> Type:
    """Elementwise operands (7.6): one dtype after literal adoption, shapes broadcast."""
    chk = pc.chk
    if any(isinstance(t, ErrorType) for _, t in operands):
        return ERROR
    typed = [(n, t) for n, t in operands if isinstance(t, (ScalarType, TensorType))]
    for node, t in operands:
        if not isinstance(t, (ScalarType, TensorType, CtIntType, CtFloatType)):
            return pc.error("E2104", f"`{pc.name}` cannot take {show(t)}", node, "invalid operand")
    if not typed:
        return pc.error(
            "E2104",
            f"`{pc.name}` needs at least one operand with a dtype",
            pc.call,
            "only literals",
            help=("give one value a type, e.g. a typed local, or `cast<i32>(...)`",),
        )
    dtype = typed[0][1].dtype
    for _, t in typed[1:]:
        if t.dtype is not dtype:
            return pc.error(
                "E2103",
                f"the operands of `{pc.name}` have different dtypes",
                pc.call,
                notes=(f"one operand is {dtype}", f"another is {t.dtype}"),
                help=("convert explicitly with `cast<T>(x)`",),
            )
    for node, t in operands:
        if isinstance(t, (CtIntType, CtFloatType)) and not assignability.adopt_literal(
            chk, node, t, dtype
        ):
            return ERROR
    if family == "Integer" and not in_class(dtype, "Integer"):
        report_class(chk, pc.call, pc.name, dtype, "Integer")
        return ERROR
    if family == "Numeric" and not in_class(dtype, "Numeric"):
        report_class(chk, pc.call, pc.name, dtype, "Numeric")
        return ERROR
    shape: Shape | None = None
    for _, t in typed:
        if isinstance(t, TensorType):
            if shape is None:
                shape = t.shape
            else:
                shape = broadcast_or_report(chk, pc.call, shape, t.shape)
                if shape is None:
                    return ERROR
    return scalar(dtype) if shape is None else TensorType(shape, dtype)


# ---------------------------------------------------------------- shapes


def _tensor_arg(pc: PreludeCall, node: ast.Expr) -> TensorType | None:
    t = pc.chk.expr(node)
    if isinstance(t, TensorType):
        return t
    if not isinstance(t, ErrorType):
        pc.error("E2104", f"`{pc.name}` needs a tensor, found {show(t)}", node, "not a tensor")
    return None


def _reshape(pc: PreludeCall) -> Type:
    if not _arity(pc, 2):
        return ERROR
    x = _tensor_arg(pc, pc.args[0])
    dims = _shape_arg(pc, pc.args[1])
    if x is None or dims is None:
        return ERROR
    facts = pc.chk.facts
    old, new = shape_numel(x.shape), shape_numel(dims)
    if not dims_equal(old, new, facts):
        return pc.error(
            "E2203",
            "cannot prove that `reshape` keeps the element count",
            pc.call,
            "element counts differ",
            notes=(
                f"the tensor has `{facts.simplify(old)}` elements",
                f"the new shape has `{facts.simplify(new)}`",
            ),
            help=("state divisibility in `where`, e.g. `where H % N == 0`",),
        )
    return TensorType(dims, x.dtype)


def _broadcast_to(pc: PreludeCall) -> Type:
    if not _arity(pc, 2):
        return ERROR
    t = pc.chk.expr(pc.args[0])
    dims = _shape_arg(pc, pc.args[1])
    if isinstance(t, ErrorType) or dims is None:
        return ERROR
    if isinstance(t, ScalarType):
        return TensorType(dims, t.dtype)
    if not isinstance(t, TensorType):
        return pc.error("E2104", f"`broadcast_to` needs a tensor, found {show(t)}", pc.args[0])
    if t.has_pack:
        return pc.error(
            "E2207",
            "`broadcast_to` needs a tensor without shape packs",
            pc.args[0],
            f"`[{shape_str(t.shape)}]` has a pack",
        )
    failed = broadcast_to_ok(t.shape, dims, pc.chk.facts)
    if failed is not None:
        if failed == -1:
            detail = f"the target has {len(dims)} axes, fewer than the tensor's {len(t.shape)}"
        else:
            offset = len(dims) - len(t.shape)
            detail = (
                f"source axis {failed} is `{t.shape[failed]}`, the target has "
                f"`{dims[offset + failed]}`; it must be equal or 1"
            )
        return pc.error(
            "E2207",
            f"cannot broadcast `[{shape_str(t.shape)}]` to `[{shape_str(dims)}]`",
            pc.call,
            "unproven broadcast",
            notes=(detail,),
            help=("share one generic between the axes, or relate them in `where`",),
        )
    return TensorType(dims, t.dtype)


def _permute(pc: PreludeCall) -> Type:
    if not _arity(pc, 2):
        return ERROR
    x = _tensor_arg(pc, pc.args[0])
    axes_node = pc.args[1]
    dims = _shape_arg(pc, axes_node)
    if x is None or dims is None:
        return ERROR
    if x.has_pack:
        return pc.error(
            "E2210",
            "`permute` needs a tensor whose rank is known",
            pc.args[0],
            f"`[{shape_str(x.shape)}]` has a shape pack",
        )
    axes = [d.as_int() for d in dims if isinstance(d, Dim)]
    n = len(x.shape)
    if any(a is None for a in axes) or sorted(axes) != list(range(n)):  # type: ignore[type-var]
        return pc.error(
            "E2210",
            f"the axes must be a permutation of 0..{n - 1}",
            axes_node,
            "not a permutation",
            notes=(f"the tensor is `{x!r}`",),
        )
    return TensorType(tuple(x.shape[a] for a in axes if a is not None), x.dtype)


def _concat(pc: PreludeCall, axis_arg: ast.Arg | None, out_axis: list[int | None]) -> Type:
    chk = pc.chk
    types = [chk.expr(a) for a in pc.args]
    if axis_arg is None or len(pc.args) < 2:
        if axis_arg is not None:
            chk.expr(axis_arg.value)
        return pc.error(
            "E2102",
            "`concat` needs at least two tensors and the named argument `axis`",
            pc.call,
            "missing arguments",
            notes=pc.signature_note(),
        )
    axis_type = chk.expr(axis_arg.value)
    k = axis_type.value.as_int() if isinstance(axis_type, CtIntType) else None
    if k is None:
        if isinstance(axis_type, ErrorType):
            return ERROR
        return pc.error(
            "E2209",
            "the `axis` of `concat` must be an integer constant",
            axis_arg.value,
            f"found {show(axis_type)}",
        )
    tensors: list[TensorType] = []
    for node, t in zip(pc.args, types, strict=True):
        if isinstance(t, ErrorType):
            return ERROR
        if not isinstance(t, TensorType):
            return pc.error("E2101", f"`concat` joins tensors, found {show(t)}", node)
        tensors.append(t)
    first = tensors[0]
    for node, t in zip(pc.args[1:], tensors[1:], strict=True):
        if t.dtype is not first.dtype:
            return pc.error(
                "E2103",
                "the operands of `concat` have different dtypes",
                node,
                f"dtype {t.dtype}",
                notes=(f"the first operand is {first.dtype}", f"this one is {t.dtype}"),
                help=("convert explicitly with `cast<T>(x)`",),
            )
    n = len(first.shape)
    position = k if k >= 0 else n + k
    span = range(0, position + 1) if k >= 0 else range(position, n)
    if not 0 <= position < n or any(type(first.shape[i]) is Symbol for i in span):
        return pc.error(
            "E2210",
            f"axis {k} does not name a dimension of `{first!r}`",
            axis_arg.value,
            "invalid axis",
        )
    out_axis[0] = position
    total = first.shape[position]
    assert isinstance(total, Dim)
    facts = chk.facts
    for node, t in zip(pc.args[1:], tensors[1:], strict=True):
        if len(t.shape) != n or any(
            (type(a) is Symbol) != (type(b) is Symbol)
            for a, b in zip(t.shape, first.shape, strict=True)
        ):
            return _concat_mismatch(pc, node, first, t, "the operands have different ranks")
        for i, (a, b) in enumerate(zip(first.shape, t.shape, strict=True)):
            if i == position:
                continue
            if not _item_equal(a, b, facts):
                return _concat_mismatch(pc, node, first, t, f"axis {i} is `{a}` and `{b}`")
        extent = t.shape[position]
        assert isinstance(extent, Dim)
        total = total + extent
    shape = list(first.shape)
    shape[position] = total
    return TensorType(tuple(shape), first.dtype)


def _constant_axis(pc: PreludeCall, axis_arg: ast.Arg, x: TensorType) -> int | None:
    """The axis `k` of `concat`/`cumsum` as a position in `x` (10.3: a pack counts as one
    unit and no pack may lie between the counted end and the axis), or None after E2209/E2210."""
    axis_type = pc.chk.expr(axis_arg.value)
    k = axis_type.value.as_int() if isinstance(axis_type, CtIntType) else None
    if k is None:
        if not isinstance(axis_type, ErrorType):
            pc.error(
                "E2209",
                f"the `axis` of `{pc.name}` must be an integer constant",
                axis_arg.value,
                f"found {show(axis_type)}",
            )
        return None
    n = len(x.shape)
    position = k if k >= 0 else n + k
    span = range(0, position + 1) if k >= 0 else range(position, n)
    if not 0 <= position < n or any(type(x.shape[i]) is Symbol for i in span):
        pc.error(
            "E2210",
            f"axis {k} does not name a dimension of `{x!r}`",
            axis_arg.value,
            "invalid axis",
        )
        return None
    return position


def _cumsum(pc: PreludeCall, axis_arg: ast.Arg | None, out_axis: list[int | None]) -> Type:
    """`cumsum(x, axis = k)`: inclusive running sums along `k`, in `x`'s own dtype."""
    chk = pc.chk
    types = [chk.expr(a) for a in pc.args]
    if axis_arg is None or len(pc.args) != 1:
        if axis_arg is not None:
            chk.expr(axis_arg.value)
        return pc.error(
            "E2102",
            "`cumsum` takes a tensor and `axis = k`",
            pc.call,
            "wrong arguments",
            notes=pc.signature_note(),
        )
    (x,) = types
    if isinstance(x, ErrorType):
        chk.expr(axis_arg.value)
        return ERROR
    if not isinstance(x, TensorType):
        chk.expr(axis_arg.value)
        return pc.error("E2101", "`cumsum` takes a tensor", pc.args[0], f"found {show(x)}")
    if not in_class(x.dtype, "Numeric"):
        chk.expr(axis_arg.value)
        return pc.error(
            "E2112",
            f"`cumsum` needs a Numeric dtype, found `{x.dtype}`",
            pc.args[0],
            "not Numeric",
            help=("convert first, e.g. `cast<i32>(flags)` to count `true` values",),
        )
    position = _constant_axis(pc, axis_arg, x)
    if position is None:
        return ERROR
    out_axis[0] = position
    return x


def _item_equal(a: ShapeItem, b: ShapeItem, facts: object) -> bool:
    if type(a) is Symbol or type(b) is Symbol:
        return a is b
    assert isinstance(a, Dim) and isinstance(b, Dim)
    return dims_equal(a, b, facts)  # type: ignore[arg-type]


def _concat_mismatch(
    pc: PreludeCall, node: ast.Expr, first: TensorType, t: TensorType, detail: str
) -> Type:
    return pc.error(
        "E2202",
        "the operands of `concat` differ outside the joined axis",
        node,
        "shape mismatch",
        notes=(f"the first operand is `{first!r}`", f"this one is `{t!r}`", detail),
        help=("state the missing equality in a `where` clause",),
    )


_RULES: dict[str, Callable[[PreludeCall], Type]] = {
    "cast": _cast,
    "iota": _iota,
    "fill": _fill,
    "abs": _abs,
    "min": _min_max,
    "max": _min_max,
    "shl": _shift,
    "shr": _shift,
    "select": _select,
    "reshape": _reshape,
    "broadcast_to": _broadcast_to,
    "permute": _permute,
}

__all__ = ["check_prelude_call", "elementwise", "fold_ints"]
