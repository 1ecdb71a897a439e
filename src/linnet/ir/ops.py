"""Per-op shape and dtype rules of the Core IR: the closed op set and what each accepts.

Stage: used by `Builder` (to infer result types while lowering) and by the
verifier (to re-check every op). Input: operand types, attrs, regions, and the
declared result types where the rule cannot infer them (`iota`, `cast`,
`param`, `buffer`, `state`). Output: the result types, or an `InternalError`
naming the op: a malformed op is a compiler bug, never a user error (style.md
"Lowering never reports user errors").

The rules follow the language where the op comes from it: broadcasting is the
right-aligned rule of language.md 7.6; operator dtype classes follow 7.5;
slices follow 9.3 (non-negative start/stop, positive step, stop clamped);
reductions 8.6; prelude shapes 10.2. `rules` is a table keyed by op kind
(style.md: "a table of lowering rules keyed by op"), named `check_<op>`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from linnet.errors import InternalError
from linnet.ir.core import (
    DTYPES,
    FLOAT_DTYPES,
    INTEGER_DTYPES,
    NUMERIC_DTYPES,
    Region,
    TensorType,
    Value,
    dtype_of_numpy,
)

Types = tuple[TensorType, ...]
Rule = Callable[
    [str, Sequence[TensorType], Mapping[str, object], Sequence[Region], Types | None], Types
]

FLOAT_UNARY = frozenset({"exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh"})
NUMERIC_UNARY = frozenset({"neg", "abs"})
UNARY_KINDS = FLOAT_UNARY | NUMERIC_UNARY | {"not"}
ARITHMETIC = frozenset({"add", "sub", "mul", "div", "rem", "max", "min"})
BITWISE = frozenset({"and", "or", "xor"})
SHIFTS = frozenset({"shl", "shr"})
EQUALITY = frozenset({"eq", "ne"})
ORDERING = frozenset({"lt", "le", "gt", "ge"})
COMPARISONS = EQUALITY | ORDERING
BINARY_KINDS = ARITHMETIC | BITWISE | SHIFTS | COMPARISONS
REDUCE_KINDS = ("sum", "prod", "max", "min", "any", "all")
CONTRACT_ATTRS = ("lhs_batch", "rhs_batch", "lhs_contract", "rhs_contract")


def fail(kind: str, message: str) -> InternalError:
    """The error for a malformed op (a compiler bug)."""
    return InternalError(f"op {kind}: {message}")


def broadcast_shapes(kind: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    """Right-aligned broadcasting of static shapes (language.md 7.6, NumPy's rule)."""
    rank = max((len(s) for s in shapes), default=0)
    out: list[int] = []
    for axis in range(-rank, 0):
        dims = {s[axis] for s in shapes if len(s) >= -axis}
        dims.discard(1)
        if len(dims) > 1:
            shown = " with ".join(str(list(s)) for s in shapes)
            raise fail(kind, f"cannot broadcast {shown}")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def _arity(kind: str, operands: Sequence[TensorType], n: int) -> None:
    if len(operands) != n:
        raise fail(kind, f"expects {n} operand(s), got {len(operands)}")


def _no_regions(kind: str, regions: Sequence[Region]) -> None:
    if regions:
        raise fail(kind, "takes no regions")


def _given_one(kind: str, given: Types | None) -> TensorType:
    if given is None or len(given) != 1:
        raise fail(kind, "needs exactly one declared result type")
    t = given[0]
    _check_type(kind, t)
    return t


def _check_type(kind: str, t: TensorType) -> None:
    if t.dtype not in DTYPES:
        raise fail(kind, f"unknown dtype {t.dtype!r}")
    if not isinstance(t.shape, tuple) or any(
        not isinstance(d, int) or isinstance(d, bool) or d < 0 for d in t.shape
    ):
        raise fail(kind, f"shape {t.shape!r} is not a tuple of non-negative ints")


def _int_tuple(kind: str, attrs: Mapping[str, object], key: str) -> tuple[int, ...]:
    value = attrs.get(key)
    if not isinstance(value, tuple) or any(
        not isinstance(v, int) or isinstance(v, bool) for v in value
    ):
        raise fail(kind, f"attr {key} must be a tuple of ints, got {value!r}")
    return value


def _int_attr(kind: str, attrs: Mapping[str, object], key: str) -> int:
    value = attrs.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise fail(kind, f"attr {key} must be an int, got {value!r}")
    return value


def _same_dtype(kind: str, types: Sequence[TensorType]) -> str:
    dtypes = {t.dtype for t in types}
    if len(dtypes) != 1:
        raise fail(kind, f"operands must share one dtype, got {', '.join(sorted(dtypes))}")
    return dtypes.pop()


def _types_of(values: Sequence[Value]) -> Types:
    return tuple(v.type for v in values)


# -- sources ---------------------------------------------------------------------------


def check_const(
    kind: str,
    operands: Sequence[TensorType],
    attrs: Mapping[str, object],
    regions: Sequence[Region],
    given: Types | None,
) -> Types:
    _arity(kind, operands, 0)
    _no_regions(kind, regions)
    value = attrs.get("value")
    shape = getattr(value, "shape", None)
    if shape is None or not hasattr(value, "dtype"):
        raise fail(kind, f"attr value must be a numpy array, got {type(value).__name__}")
    return (TensorType(tuple(int(d) for d in shape), dtype_of_numpy(value.dtype)),)


def check_iota(
    kind: str,
    operands: Sequence[TensorType],
    attrs: Mapping[str, object],
    regions: Sequence[Region],
    given: Types | None,
) -> Types:
    _arity(kind, operands, 0)
    _no_regions(kind, regions)
    t = _given_one(kind, given)
    if t.rank != 1 or t.dtype not in NUMERIC_DTYPES:
        raise fail(kind, f"result must be a rank-1 numeric tensor, got {t}")
    return (t,)


def check_path_read(
    kind: str,
    operands: Sequence[TensorType],
    attrs: Mapping[str, object],
    regions: Sequence[Region],
    given: Types | None,
) -> Types:
    """`param`, `buffer`, `state`: the declared type; the verifier checks it against the program."""
    _arity(kind, operands, 0)
    _no_regions(kind, regions)
    path = attrs.get("path")
    if not isinstance(path, str) or not path:
        raise fail(kind, f"attr path must be a non-empty string, got {path!r}")
    return (_given_one(kind, given),)


# -- elementwise ---------------------------------------------------------------------------


def check_cast(
    kind: str,
    operands: Sequence[TensorType],
    attrs: Mapping[str, object],
    regions: Sequence[Region],
    given: Types | None,
) -> Types:
    _arity(kind, operands, 1)
    _no_regions(kind, regions)
    t = _given_one(kind, given)
    if t.shape != operands[0].shape:
        raise fail(
            kind, f"result shape {list(t.shape)} differs from operand {list(operands[0].shape)}"
        )
    return (t,)


def check_unary(
    kind: str,
    operands: Sequence[TensorType],
    attrs: Mapping[str, object],
    regions: Sequence[Region],
    given: Types | None,
) -> Types:
    _arity(kind, operands, 1)
    _no_regions(kind, regions)
    (x,) = operands
    if kind in FLOAT_UNARY:
        allowed = FLOAT_DTYPES
    elif kind in NUMERIC_UNARY:
        allowed = NUMERIC_DTYPES
    else:  # not: bitwise on integers, logical on bool (language.md 7.5)
        allowed = INTEGER_DTYPES | {"bool"}
    if x.dtype not in allowed:
        raise fail(kind, f"does not accept dtype {x.dtype}")
    return (x,)


def check_binary(
    kind: str,
    operands: Sequence[TensorType],
    attrs: Mapping[str, object],
    regions: Sequence[Region],
    given: Types | None,
) -> Types:
    _arity(kind, operands, 2)
    _no_regions(kind, regions)
    dtype = _same_dtype(kind, operands)
    if kind in ARITHMETIC or kind in ORDERING:
        allowed: frozenset[str] = NUMERIC_DTYPES
    elif kind in BITWISE:
        allowed = INTEGER_DTYPES | {"bool"}
    elif kind in SHIFTS:
        allowed = INTEGER_DTYPES
    else:
        allowed = frozenset(DTYPES)
    if dtype not in allowed:
        raise fail(kind, f"does not accept dtype {dtype}")
    shape = broadcast_shapes(kind, operands[0].shape, operands[1].shape)
    return (TensorType(shape, "bool" if kind in COMPARISONS else dtype),)


def check_select(
    kind: str,
    operands: Sequence[TensorType],
    attrs: Mapping[str, object],
    regions: Sequence[Region],
    given: Types | None,
) -> Types:
    _arity(kind, operands, 3)
    _no_regions(kind, regions)
    cond, a, b = operands
    if cond.dtype != "bool":
        raise fail(kind, f"condition must be bool, got {cond.dtype}")
    dtype = _same_dtype(kind, (a, b))
    return (TensorType(broadcast_shapes(kind, cond.shape, a.shape, b.shape), dtype),)


# -- shape ops ---------------------------------------------------------------------------


def check_broadcast(
    kind: str,
    operands: Sequence[TensorType],
    attrs: Mapping[str, object],
    regions: Sequence[Region],
    given: Types | None,
) -> Types:
    _arity(kind, operands, 1)
    _no_regions(kind, regions)
    (x,) = operands
    shape = _int_tuple(kind, attrs, "shape")
    if len(shape) < x.rank or any(d < 0 for d in shape):
        raise fail(kind, f"cannot broadcast {list(x.shape)} to {list(shape)}")
    for axis in range(1, x.rank + 1):
        if x.shape[-axis] not in (1, shape[-axis]):
            raise fail(kind, f"cannot broadcast {list(x.shape)} to {list(shape)}")
    return (TensorType(shape, x.dtype),)


def check_reshape(
    kind: str,
    operands: Sequence[TensorType],
    attrs: Mapping[str, object],
    regions: Sequence[Region],
    given: Types | None,
) -> Types:
    _arity(kind, operands, 1)
    _no_regions(kind, regions)
    (x,) = operands
    shape = _int_tuple(kind, attrs, "shape")
    result = TensorType(shape, x.dtype)
    if any(d < 0 for d in shape) or result.size != x.size:
        raise fail(kind, f"cannot reshape {list(x.shape)} to {list(shape)}")
    return (result,)


def check_permute(
    kind: str,
    operands: Sequence[TensorType],
    attrs: Mapping[str, object],
    regions: Sequence[Region],
    given: Types | None,
) -> Types:
    _arity(kind, operands, 1)
    _no_regions(kind, regions)
    (x,) = operands
    perm = _int_tuple(kind, attrs, "perm")
    if sorted(perm) != list(range(x.rank)):
        raise fail(kind, f"perm {list(perm)} is not a permutation of 0..{x.rank - 1}")
    return (TensorType(tuple(x.shape[p] for p in perm), x.dtype),)


def slice_extent(dim: int, start: int, stop: int, step: int) -> int:
    """Extent of `start:stop:step` on an axis of `dim` (language.md 9.3: stop clamped)."""
    return max(0, (min(stop, dim) - start + step - 1) // step)


def check_slice(
    kind: str,
    operands: Sequence[TensorType],
    attrs: Mapping[str, object],
    regions: Sequence[Region],
    given: Types | None,
) -> Types:
    _arity(kind, operands, 1)
    _no_regions(kind, regions)
    (x,) = operands
    start, stop, step = (_int_tuple(kind, attrs, k) for k in ("start", "stop", "step"))
    if not len(start) == len(stop) == len(step) == x.rank:
        raise fail(kind, f"start/stop/step need one entry per axis of {x}")
    if any(s < 0 for s in start + stop) or any(s < 1 for s in step):
        raise fail(kind, "start and stop must be >= 0 and step >= 1 (language.md 9.3)")
    shape = tuple(slice_extent(*args) for args in zip(x.shape, start, stop, step, strict=True))
    return (TensorType(shape, x.dtype),)


def check_cumsum(
    kind: str,
    operands: Sequence[TensorType],
    attrs: Mapping[str, object],
    regions: Sequence[Region],
    given: Types | None,
) -> Types:
    """Inclusive running sums along `axis` (language-extensions 5.2), in the operand's dtype."""
    _no_regions(kind, regions)
    if len(operands) != 1:
        raise fail(kind, "takes one operand")
    (x,) = operands
    if x.dtype == "bool":
        raise fail(kind, "needs a numeric operand, not bool")
    axis = _int_attr(kind, attrs, "axis")
    if not 0 <= axis < x.rank:
        raise fail(kind, f"axis {axis} is out of range for rank {x.rank}")
    return (x,)


def check_concat(
    kind: str,
    operands: Sequence[TensorType],
    attrs: Mapping[str, object],
    regions: Sequence[Region],
    given: Types | None,
) -> Types:
    _no_regions(kind, regions)
    if not operands:
        raise fail(kind, "needs at least one operand")
    dtype = _same_dtype(kind, operands)
    axis = _int_attr(kind, attrs, "axis")
    first = operands[0]
    if not 0 <= axis < first.rank:
        raise fail(kind, f"axis {axis} is out of range for rank {first.rank}")
    for t in operands:
        if t.rank != first.rank or any(
            a != b for i, (a, b) in enumerate(zip(t.shape, first.shape, strict=True)) if i != axis
        ):
            raise fail(
                kind, f"shapes {list(first.shape)} and {list(t.shape)} differ off axis {axis}"
            )
    shape = list(first.shape)
    shape[axis] = sum(t.shape[axis] for t in operands)
    return (TensorType(tuple(shape), dtype),)


# -- indexing -----------------------------------------------------------------------------


def check_gather(
    kind: str,
    operands: Sequence[TensorType],
    attrs: Mapping[str, object],
    regions: Sequence[Region],
    given: Types | None,
) -> Types:
    _arity(kind, operands, 2)
    _no_regions(kind, regions)
    x, indices = operands
    axis = _int_attr(kind, attrs, "axis")
    if not 0 <= axis < x.rank:
        raise fail(kind, f"axis {axis} is out of range for rank {x.rank}")
    if indices.dtype not in INTEGER_DTYPES:
        raise fail(kind, f"indices must have an integer dtype, got {indices.dtype}")
    return (TensorType(x.shape[:axis] + indices.shape + x.shape[axis + 1 :], x.dtype),)


def check_take(
    kind: str,
    operands: Sequence[TensorType],
    attrs: Mapping[str, object],
    regions: Sequence[Region],
    given: Types | None,
) -> Types:
    _no_regions(kind, regions)
    if not operands:
        raise fail(kind, "needs the indexed tensor")
    x, *indices = operands
    if len(indices) != x.rank:
        raise fail(kind, f"needs {x.rank} index tensors (one per axis), got {len(indices)}")
    for t in indices:
        if t.dtype not in INTEGER_DTYPES:
            raise fail(kind, f"indices must have an integer dtype, got {t.dtype}")
    return (TensorType(broadcast_shapes(kind, *(t.shape for t in indices)), x.dtype),)


# -- reductions and contraction ---------------------------------------------------------------


def _axes(kind: str, axes: tuple[int, ...], rank: int, what: str) -> None:
    if len(set(axes)) != len(axes) or any(not 0 <= a < rank for a in axes):
        raise fail(kind, f"{what} {list(axes)} must be distinct axes in 0..{rank - 1}")


def check_reduce(
    kind: str,
    operands: Sequence[TensorType],
    attrs: Mapping[str, object],
    regions: Sequence[Region],
    given: Types | None,
) -> Types:
    _arity(kind, operands, 1)
    _no_regions(kind, regions)
    (x,) = operands
    which = attrs.get("kind")
    if which not in REDUCE_KINDS:
        raise fail(kind, f"attr kind must be one of {', '.join(REDUCE_KINDS)}, got {which!r}")
    boolean = which in ("any", "all")
    if boolean != (x.dtype == "bool") or (not boolean and x.dtype not in NUMERIC_DTYPES):
        raise fail(kind, f"{which} does not accept dtype {x.dtype} (language.md 8.6)")
    axes = _int_tuple(kind, attrs, "axes")
    _axes(kind, axes, x.rank, "axes")
    return (TensorType(tuple(d for i, d in enumerate(x.shape) if i not in axes), x.dtype),)


def check_contract(
    kind: str,
    operands: Sequence[TensorType],
    attrs: Mapping[str, object],
    regions: Sequence[Region],
    given: Types | None,
) -> Types:
    _arity(kind, operands, 2)
    _no_regions(kind, regions)
    lhs, rhs = operands
    dtype = _same_dtype(kind, operands)
    if dtype not in NUMERIC_DTYPES:
        raise fail(kind, f"does not accept dtype {dtype}")
    lb, rb, lc, rc = (_int_tuple(kind, attrs, k) for k in CONTRACT_ATTRS)
    if len(lb) != len(rb) or len(lc) != len(rc):
        raise fail(kind, "batch and contracting axis lists must pair up")
    _axes(kind, lb + lc, lhs.rank, "lhs axes")
    _axes(kind, rb + rc, rhs.rank, "rhs axes")
    for a, b in zip(lb + lc, rb + rc, strict=True):
        if lhs.shape[a] != rhs.shape[b]:
            raise fail(
                kind, f"lhs axis {a} ({lhs.shape[a]}) does not match rhs axis {b} ({rhs.shape[b]})"
            )
    lhs_free = [d for i, d in enumerate(lhs.shape) if i not in lb + lc]
    rhs_free = [d for i, d in enumerate(rhs.shape) if i not in rb + rc]
    shape = tuple(lhs.shape[a] for a in lb) + tuple(lhs_free) + tuple(rhs_free)
    return (TensorType(shape, dtype),)


# -- control flow and calls -------------------------------------------------------------------

BOOL_SCALAR = TensorType((), "bool")
I64_SCALAR = TensorType((), "i64")


def _signature(kind: str, region: Region, what: str, args: Types, results: Types | None) -> None:
    if _types_of(region.args) != args:
        raise fail(
            kind, f"{what} region args {_show(_types_of(region.args))} should be {_show(args)}"
        )
    if results is not None and _types_of(region.results) != results:
        got = _show(_types_of(region.results))
        raise fail(kind, f"{what} region results {got} should be {_show(results)}")


def _show(types: Sequence[TensorType]) -> str:
    return "(" + ", ".join(str(t) for t in types) + ")"


def check_while(
    kind: str,
    operands: Sequence[TensorType],
    attrs: Mapping[str, object],
    regions: Sequence[Region],
    given: Types | None,
) -> Types:
    if len(regions) != 2:
        raise fail(kind, "needs a cond and a body region")
    carried = tuple(operands)
    _signature(kind, regions[0], "cond", carried, (BOOL_SCALAR,))
    _signature(kind, regions[1], "body", carried, carried)
    return carried


def check_for(
    kind: str,
    operands: Sequence[TensorType],
    attrs: Mapping[str, object],
    regions: Sequence[Region],
    given: Types | None,
) -> Types:
    """`for` (language-extensions 0.5): the body takes (i64 index, carried) and yields the
    next carried values then one row per scan value; results are the final carried values,
    then each scan value stacked on a new leading axis of `stop - start` rows."""
    start = _int_attr(kind, attrs, "start")
    stop = _int_attr(kind, attrs, "stop")
    if stop < start:
        raise fail(kind, f"stop {stop} is below start {start}")
    if len(regions) != 1:
        raise fail(kind, "needs exactly one body region")
    carried = tuple(operands)
    body = regions[0]
    _signature(kind, body, "body", (I64_SCALAR, *carried), None)
    results = _types_of(body.results)
    if results[: len(carried)] != carried:
        raise fail(kind, f"body yields {_show(results)}, should start with {_show(carried)}")
    rows = results[len(carried) :]
    return carried + tuple(TensorType((stop - start, *t.shape), t.dtype) for t in rows)


def check_if(
    kind: str,
    operands: Sequence[TensorType],
    attrs: Mapping[str, object],
    regions: Sequence[Region],
    given: Types | None,
) -> Types:
    _arity(kind, operands, 1)
    if operands[0] != BOOL_SCALAR:
        raise fail(kind, f"condition must be a bool scalar, got {operands[0]}")
    if len(regions) != 2:
        raise fail(kind, "needs a then and an else region")
    results = _types_of(regions[0].results)
    _signature(kind, regions[0], "then", (), None)
    _signature(kind, regions[1], "else", (), results)
    return results


def check_call(
    kind: str,
    operands: Sequence[TensorType],
    attrs: Mapping[str, object],
    regions: Sequence[Region],
    given: Types | None,
) -> Types:
    callee = attrs.get("callee")
    if not isinstance(callee, str) or not callee:
        raise fail(kind, f"attr callee must be a non-empty string, got {callee!r}")
    if not isinstance(attrs.get("generics", {}), dict):
        raise fail(kind, "attr generics must be a dict")
    clause = "wrt" in attrs  # a gradient clause follows the body (language-extensions 3.4)
    if len(regions) != 1 + clause:
        wanted = "a body and a gradient region" if clause else "exactly one body region"
        raise fail(kind, f"{callee} needs {wanted}")
    _signature(kind, regions[0], f"{callee} body", tuple(operands), None)
    results = _types_of(regions[0].results)
    if clause:
        _check_gradient(kind, str(callee), operands, attrs, regions[1], results)
    return results


def _check_gradient(
    kind: str,
    callee: str,
    operands: Sequence[TensorType],
    attrs: Mapping[str, object],
    region: Region,
    results: Types,
) -> None:
    """A gradient clause region (language-extensions 3.4): args (operands, result,
    incoming gradient), results the gradients of the operands listed in attr `wrt`."""
    wrt = attrs.get("wrt")
    if (
        not isinstance(wrt, list)
        or not wrt
        or not all(isinstance(i, int) and 0 <= i < len(operands) for i in wrt)
    ):
        raise fail(kind, f"{callee}: attr wrt must list operand positions, got {wrt!r}")
    if len(results) != 1 or results[0].dtype not in FLOAT_DTYPES:
        raise fail(kind, f"{callee}: a gradient region needs one floating result")
    wanted = tuple(operands[i] for i in wrt)
    _signature(kind, region, f"{callee} gradient", (*operands, *results, *results), wanted)


RULES: dict[str, Rule] = {
    "const": check_const,
    "iota": check_iota,
    "param": check_path_read,
    "buffer": check_path_read,
    "state": check_path_read,
    "cast": check_cast,
    **dict.fromkeys(UNARY_KINDS, check_unary),
    **dict.fromkeys(BINARY_KINDS, check_binary),
    "select": check_select,
    "broadcast": check_broadcast,
    "reshape": check_reshape,
    "permute": check_permute,
    "slice": check_slice,
    "concat": check_concat,
    "cumsum": check_cumsum,
    "gather": check_gather,
    "take": check_take,
    "reduce": check_reduce,
    "contract": check_contract,
    "while": check_while,
    "for": check_for,
    "if": check_if,
    "call": check_call,
}
OP_KINDS = frozenset(RULES)
NEEDS_DECLARED_TYPE = frozenset({"iota", "cast", "param", "buffer", "state"})


def infer(
    kind: str,
    operands: Sequence[TensorType],
    attrs: Mapping[str, object],
    regions: Sequence[Region],
    given: Types | None,
) -> Types:
    """Result types of an op; with `given`, also check that they equal the declared ones."""
    rule = RULES.get(kind)
    if rule is None:
        raise InternalError(f"unknown op kind {kind!r}")
    result = rule(kind, operands, attrs, regions, given)
    if given is not None and tuple(given) != result:
        raise fail(kind, f"declared result types {_show(given)} differ from {_show(result)}")
    return result
