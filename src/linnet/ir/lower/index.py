"""Index notation to Core IR: comprehensions, reductions, element accesses (language.md 8).

Stage: lowering. In: `ComprehensionStmt`, `Reduction` and element-access
`Index` nodes with the checker's `comprehensions` / `reductions` /
`indexings` tables. Out: IR values.

How (architecture.md "Core IR"): every index variable is an axis of the
iteration domain (a pack index `*s` is one axis per pack dimension), ordered
as declared: a comprehension's outputs first, then each reduction's indices.
Inside a body every subexpression is an `IxVal`: an IR value over some of
those axes. Then:

- a `sum` whose body is a product `a * b` becomes one `contract`
  (dot_general): indices both factors share and the sum reduces contract,
  shared others are batch axes, the rest stay free. A plain access
  (`x[m, k]`, also under `cast` or unary `-`) is its whole tensor, so
  `sum[k] a[m, k] * b[k, n]` is exactly one `contract`;
- otherwise each access is viewed on its own axes (`permute`/`reshape`
  only), elementwise ops broadcast operands over the union of their axes, and
  the reduction is a `reduce` over its axes;
- integer positions select: compile-time ones with `slice` + `reshape`,
  runtime scalars with `gather`, one runtime position tensor with `gather`,
  anything else (several, or diagonals `a[i, i]`) with `take` on iota index
  tensors;
- the comprehension's result is arranged into output order with `permute`
  (and `broadcast` if an output is constant along an axis).

A product without any index to sum over (an outer product) stays an
elementwise multiply: there is nothing to contract.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from linnet.check.decls import IndexVar
from linnet.check.dims import Dim
from linnet.check.types import Shape
from linnet.errors import InternalError, LinnetError
from linnet.ir.core import Value
from linnet.ir.lower.context import Frame, Lowerer
from linnet.ir.lower.values import LV, AxisKey, IxVal, is_number
from linnet.ir.size_decisions import note
from linnet.syntax import ast


class IndexScope:
    """The index axes in scope while a comprehension or reduction body is lowered."""

    __slots__ = ("extent", "order", "var_axes")

    def __init__(self) -> None:
        self.order: dict[AxisKey, int] = {}
        self.extent: dict[AxisKey, int] = {}
        self.var_axes: dict[IndexVar, tuple[AxisKey, ...]] = {}

    def declare(self, var: IndexVar, fr: Frame) -> tuple[AxisKey, ...]:
        """Give `var` its axes (one per pack dimension for a pack index, 8.4)."""
        domain = var.domain
        if var.is_pack:
            assert isinstance(domain, tuple)
            extents = fr.env.shape(cast(Shape, domain))
        else:
            assert isinstance(domain, Dim)
            extents = (fr.env.extent(domain),)
        keys = tuple((var, j) for j in range(len(extents)))
        for key, n in zip(keys, extents, strict=True):
            self.order[key] = len(self.order)
            self.extent[key] = n
        self.var_axes[var] = keys
        return keys

    def sorted(self, keys: Sequence[AxisKey]) -> tuple[AxisKey, ...]:
        return tuple(sorted(set(keys), key=self.order.__getitem__))


# ---------------------------------------------------------------- alignment


def as_ix(lw: Lowerer, lv: LV, dtype: str | None) -> IxVal:
    """An operand inside index notation (numbers become constants of `dtype`)."""
    if isinstance(lv, IxVal):
        return lv
    value = lw.value(lv, dtype)
    if value.type.rank != 0:
        raise InternalError(f"a tensor {value.type} used as an element value")
    return IxVal(value, ())


def align(lw: Lowerer, ix: IndexScope, x: IxVal, union: tuple[AxisKey, ...]) -> Value:
    """`x` laid out for right-aligned broadcasting against the axes `union` (sorted)."""
    axes = x.axes
    if axes == union or not axes:
        return x.value
    value = x.value
    present = [k for k in union if k in axes]
    if list(axes) != present:
        value = lw.b.permute(value, [axes.index(k) for k in present])
    first = union.index(present[0])
    wanted = [ix.extent[k] if k in axes else 1 for k in union[first:]]
    if len(wanted) != len(present):
        value = lw.b.reshape(value, wanted)
    return value


def elementwise(
    lw: Lowerer, fr: Frame, kind: str, operands: Sequence[LV], dtype: str | None = None
) -> IxVal:
    """An elementwise op over index values: operands broadcast over the union of their axes."""
    ix = fr.ix
    assert ix is not None
    if dtype is None:
        dtype = next(
            (
                (o.value.type.dtype if isinstance(o, IxVal) else o.type.dtype)
                for o in operands
                if isinstance(o, (IxVal, Value))
            ),
            None,
        )
    xs = [as_ix(lw, o, dtype) for o in operands]
    union = ix.sorted([k for x in xs for k in x.axes])
    values = [align(lw, ix, x, union) for x in xs]
    result = lw.b.emit(kind, values)
    return complete(lw, ix, result, union)


def cast_ix(lw: Lowerer, x: IxVal, dtype: str) -> IxVal:
    if x.value.type.dtype == dtype:
        return x
    return IxVal(lw.b.cast(x.value, dtype), x.axes)


def complete(lw: Lowerer, ix: IndexScope, value: Value, union: tuple[AxisKey, ...]) -> IxVal:
    """Broadcast a result that lost leading axes back to the full union (defensive)."""
    shape = tuple(ix.extent[k] for k in union)
    if value.type.shape != shape:
        value = lw.b.broadcast(value, shape)
    return IxVal(value, union)


def arrange(lw: Lowerer, ix: IndexScope, x: IxVal, axes: tuple[AxisKey, ...]) -> Value:
    """`x` as a tensor over exactly `axes`, in that order (missing axes broadcast)."""
    if x.axes == axes:
        return x.value
    extra = [k for k in x.axes if k not in axes]
    if extra:
        raise InternalError(f"index axes {extra} were neither outputs nor reduced")
    value = x.value
    present = [k for k in axes if k in x.axes]
    if list(x.axes) != present:
        value = lw.b.permute(value, [x.axes.index(k) for k in present])
    if len(present) != len(axes):
        holes = [ix.extent[k] if k in x.axes else 1 for k in axes]
        value = lw.b.reshape(value, holes)
        value = lw.b.broadcast(value, [ix.extent[k] for k in axes])
    return value


# ---------------------------------------------------------------- comprehensions and reductions


def lower_comprehension(lw: Lowerer, fr: Frame, s: ast.ComprehensionStmt) -> Value:
    """`let name[i, *s] = body` (8.1): the body over the output axes, in output order."""
    from linnet.ir.lower.exprs import lower_expr

    info = lw.program.comprehensions.get(s)
    if info is None:
        raise InternalError("comprehension without checker information")
    if fr.ix is not None:
        raise InternalError("nested comprehension")
    ix = IndexScope()
    outputs: list[AxisKey] = []
    for var in info.outputs:
        outputs.extend(ix.declare(var, fr))
    fr.ix = ix
    try:
        body = lower_expr(lw, fr, s.value)
        result = as_ix(lw, body, None)
    finally:
        fr.ix = None
    value = arrange(lw, ix, result, tuple(outputs))
    expected = fr.env.tensor_type(info.result)
    if value.type != expected:
        raise InternalError(f"comprehension `{s.name.name}` is {value.type}, expected {expected}")
    return value


def lower_reduction(lw: Lowerer, fr: Frame, e: ast.Reduction) -> LV:
    """`kind<D>[i, j] body` (8.6): `contract` for a sum of a plain product, else `reduce`."""
    from linnet.ir.lower.exprs import lower_expr

    info = lw.program.reductions.get(e)
    if info is None:
        raise InternalError("reduction without checker information")
    outer = fr.ix
    ix = fr.ix = outer if outer is not None else IndexScope()
    try:
        own: list[AxisKey] = []
        for var in info.indices:
            own.extend(ix.declare(var, fr))
        result = _sum_of_product(lw, fr, ix, e, own) if e.kind == "sum" else None
        if result is None:
            body = as_ix(lw, lower_expr(lw, fr, e.body), None)
            result = _reduce(lw, ix, body, e.kind, own)
    finally:
        fr.ix = outer
    if outer is None:
        if result.axes:
            raise InternalError("a reduction outside index notation kept index axes")
        return result.value
    return result


def _reduce(lw: Lowerer, ix: IndexScope, body: IxVal, kind: str, own: list[AxisKey]) -> IxVal:
    missing = [k for k in own if k not in body.axes]
    if missing:
        # A body constant along a reduced axis still reduces over its extent (8.6).
        union = ix.sorted([*body.axes, *missing])
        body = IxVal(arrange(lw, ix, body, union), union)
    axes = [i for i, k in enumerate(body.axes) if k in own]
    if not axes:
        return body
    value = lw.b.reduce(body.value, kind, axes)
    return IxVal(value, tuple(k for k in body.axes if k not in own))


# ---------------------------------------------------------------- contraction


def _strip(e: ast.Expr) -> ast.Expr:
    while isinstance(e, ast.Paren):
        e = e.inner
    return e


def _sum_of_product(
    lw: Lowerer, fr: Frame, ix: IndexScope, e: ast.Reduction, own: list[AxisKey]
) -> IxVal | None:
    """`sum[k] a * b` as a `contract` over the indices both factors share (None if not a product).

    Each factor is lowered on its own axes first (a plain access is its whole
    tensor; `cast`/`-` apply to the whole tensor). An index reduced but used by
    one factor only is summed out of that factor first (`sum_k a(k) * b = (sum_k
    a(k)) * b`); shared reduced indices contract; shared others are batch axes.
    """
    from linnet.ir.lower.exprs import lower_expr

    body = _strip(e.body)
    if not (isinstance(body, ast.Binary) and body.op == "*"):
        return None
    left = lower_expr(lw, fr, body.left)
    right = lower_expr(lw, fr, body.right)
    dtype = _dtype(left) or _dtype(right)
    a, b = as_ix(lw, left, dtype), as_ix(lw, right, dtype)
    reduced = set(own)
    if any(k not in a.axes and k not in b.axes for k in own):
        return _reduce(lw, ix, elementwise(lw, fr, "mul", [a, b]), "sum", own)
    a = _reduce(lw, ix, a, "sum", [k for k in a.axes if k in reduced and k not in b.axes])
    b = _reduce(lw, ix, b, "sum", [k for k in b.axes if k in reduced and k not in a.axes])
    shared = set(a.axes) & set(b.axes)
    contracted = [k for k in a.axes if k in shared and k in reduced]
    if not contracted:
        return elementwise(lw, fr, "mul", [a, b])
    batch = list(ix.sorted([k for k in shared if k not in reduced]))
    value = lw.b.contract(
        a.value,
        b.value,
        lhs_batch=[a.axes.index(k) for k in batch],
        rhs_batch=[b.axes.index(k) for k in batch],
        lhs_contract=[a.axes.index(k) for k in contracted],
        rhs_contract=[b.axes.index(k) for k in contracted],
    )
    free_a = [k for k in a.axes if k not in shared]
    free_b = [k for k in b.axes if k not in shared]
    return IxVal(value, (*batch, *free_a, *free_b))


def _dtype(lv: LV) -> str | None:
    if isinstance(lv, IxVal):
        return lv.value.type.dtype
    if isinstance(lv, Value):
        return lv.type.dtype
    return None


def _target(lw: Lowerer, fr: Frame, access: ast.Index) -> Value:
    """The indexed tensor of an access, lowered outside index notation (8.3)."""
    from linnet.ir.lower.exprs import lower_expr

    saved = fr.ix
    fr.ix = None
    try:
        target = lower_expr(lw, fr, access.target)
    finally:
        fr.ix = saved
    if not isinstance(target, Value):
        raise InternalError(f"the target of an element access lowered to {target!r}")
    return target


# ---------------------------------------------------------------- element access


def lower_access(lw: Lowerer, fr: Frame, e: ast.Index) -> LV:
    """`t[c1, ..., cn]` in index notation (8.3): index variables, pack indices, positions."""
    from linnet.ir.lower.exprs import lower_expr

    ix = fr.ix
    assert ix is not None
    value = _target(lw, fr, e)
    rank = value.type.rank
    comps = e.components
    packs = [i for i, c in enumerate(comps) if isinstance(c, ast.PackIndex)]
    # One entry per tensor axis: an axis key, or a lowered position.
    per_axis: list[AxisKey | LV] = []
    for i, c in enumerate(comps):
        if isinstance(c, ast.PackIndex):
            var = lw.program.resolutions.get(c)
            assert isinstance(var, IndexVar)
            keys = ix.var_axes[var]
            if packs and len(keys) != rank - (len(comps) - 1):
                raise InternalError("pack index width does not match the tensor")
            per_axis.extend(keys)
            continue
        var = lw.program.resolutions.get(c) if isinstance(c, ast.Name) else None
        if isinstance(var, IndexVar):
            per_axis.extend(ix.var_axes[var])
            continue
        assert not isinstance(c, (ast.Slice, ast.EllipsisComponent))
        del i
        per_axis.append(lower_expr(lw, fr, c))
    if len(per_axis) != rank:
        raise InternalError(f"access with {len(per_axis)} components on {value.type}")
    return _select(lw, fr, ix, value, per_axis)


def _is_key(item: object) -> bool:
    return isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], IndexVar)


def _select(
    lw: Lowerer, fr: Frame, ix: IndexScope, value: Value, per_axis: list[AxisKey | LV]
) -> IxVal:
    shape = value.type.shape
    # 1. compile-time positions: one static slice, then drop the axes.
    fixed = {a: item for a, item in enumerate(per_axis) if not _is_key(item) and is_number(item)}
    if fixed:
        start = [0] * len(shape)
        stop = list(shape)
        for a, item in fixed.items():
            assert isinstance(item, int) and not isinstance(item, bool)
            note(">=", "index", item, 0, item >= 0, f"a position in {fr.where}")
            note("<", "index", item, shape[a], item < shape[a], f"a position in {fr.where}")
            if not 0 <= item < shape[a]:
                raise LinnetError(
                    f"index {item} is out of range for an axis of extent {shape[a]} (in {fr.where})"
                )
            start[a], stop[a] = item, item + 1
        value = lw.b.slice(value, start, stop)
        value = lw.b.reshape(value, [d for a, d in enumerate(shape) if a not in fixed])
        per_axis = [item for a, item in enumerate(per_axis) if a not in fixed]
    # 2. runtime scalar positions: gather with a rank-0 index removes the axis.
    for a in reversed(range(len(per_axis))):
        item = per_axis[a]
        if _is_key(item):
            continue
        position = _position(lw, item)
        if not position.axes:
            value = lw.b.gather(value, position.value, a)
            del per_axis[a]
    keys = [item for item in per_axis if _is_key(item)]
    tensors = [(a, _position(lw, item)) for a, item in enumerate(per_axis) if not _is_key(item)]
    if not tensors and len(set(keys)) == len(keys):
        return IxVal(value, tuple(keys))  # type: ignore[arg-type]
    # 3. one position tensor on distinct other indices: gather along its axis.
    if len(tensors) == 1 and len(set(keys)) == len(keys):
        a, position = tensors[0]
        if not set(position.axes) & set(keys):
            gathered = lw.b.gather(value, position.value, a)
            before = per_axis[:a]
            after = per_axis[a + 1 :]
            return IxVal(gathered, (*before, *position.axes, *after))  # type: ignore[arg-type]
    # 4. general: one index tensor per axis, broadcast together (NumPy advanced indexing).
    return _take(lw, ix, value, per_axis)


def _position(lw: Lowerer, item: object) -> IxVal:
    if isinstance(item, IxVal):
        return item
    v = lw.value(item)  # type: ignore[arg-type]
    if v.type.rank != 0 or v.type.dtype == "bool" or v.type.dtype.startswith(("f", "bf")):
        raise InternalError(f"position {v.type} is not an integer scalar")
    return IxVal(v, ())


def _take(lw: Lowerer, ix: IndexScope, value: Value, per_axis: list[AxisKey | LV]) -> IxVal:
    all_keys: list[AxisKey] = []
    for item in per_axis:
        if _is_key(item):
            all_keys.append(item)  # type: ignore[arg-type]
        else:
            all_keys.extend(_position(lw, item).axes)
    union = ix.sorted(all_keys)
    indices: list[Value] = []
    for item in per_axis:
        if _is_key(item):
            key: AxisKey = item  # type: ignore[assignment]
            iota = lw.b.iota(ix.extent[key], "i64")
            indices.append(align(lw, ix, IxVal(iota, (key,)), union))
        else:
            indices.append(align(lw, ix, _position(lw, item), union))
    taken = lw.b.take(value, *indices)
    return complete(lw, ix, taken, union)
