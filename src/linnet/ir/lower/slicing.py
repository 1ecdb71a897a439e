"""Slicing and structural-array indexing to Core IR (language.md 9).

Stage: lowering. In: an `Index` node in slicing mode with the checker's
`IndexingInfo` (one `AxisSelection` per explicit component). Out: IR values.

One static `slice` covers every `a:b:s` component and every compile-time
integer index (as `p:p+1`); a `reshape` then drops the indexed axes (9.2: an
integer index removes its axis); runtime scalar indices become `gather`s
with a rank-0 index, which also removes the axis. The checker's selections
address *shape items*, where a pack counts once, so item positions are
mapped to concrete axes with the bound pack lengths.
"""

from __future__ import annotations

from linnet.check.dims import Symbol
from linnet.check.types import TensorType as CheckedTensor
from linnet.errors import InternalError, LinnetError
from linnet.ir.core import Value
from linnet.ir.lower.context import Frame, Lowerer, not_supported
from linnet.ir.lower.values import LV, ArrayRef, BlockRef, IxVal
from linnet.ir.size_decisions import at, note
from linnet.syntax import ast


def lower_index(lw: Lowerer, fr: Frame, e: ast.Index) -> LV:
    """Any `x[...]`: element access (8.3), slicing (9.2) or a `sub` array element (9.6)."""
    info = lw.program.indexings.get(e)
    if info is None:
        raise InternalError("index expression without checker information")
    if info.mode == "element":
        if fr.ix is None:
            raise InternalError("element access outside index notation")
        from linnet.ir.lower.index import lower_access

        return lower_access(lw, fr, e)
    from linnet.ir.lower.exprs import lower_expr

    saved = fr.ix
    fr.ix = None
    try:
        target = lower_expr(lw, fr, e.target)
    finally:
        fr.ix = saved
    if info.mode == "array":
        if not isinstance(target, ArrayRef) or info.position is None:
            raise InternalError(f"array element of {target!r}")
        return BlockRef(target.instances[info.position])
    if not isinstance(target, Value):
        raise InternalError(f"slicing {target!r}")
    return _slice(lw, fr, e, target)


def _slice(lw: Lowerer, fr: Frame, e: ast.Index, value: Value) -> LV:
    from linnet.ir.lower.exprs import lower_expr

    info = lw.program.indexings[e]
    t = lw.program.types.get(e.target)
    if not isinstance(t, CheckedTensor):
        raise InternalError("sliced value without a tensor type")
    # Concrete axis of each shape item (a pack spans its bound length).
    offsets: list[int] = []
    axis = 0
    for item in t.shape:
        offsets.append(axis)
        axis += len(fr.env.packs[item]) if type(item) is Symbol else 1
    shape = value.type.shape
    start = [0] * len(shape)
    stop = list(shape)
    step = [1] * len(shape)
    dropped: set[int] = set()
    runtime: list[tuple[int, Value]] = []
    for sel in info.selections:
        a = offsets[sel.axis]
        if sel.kind == "slice":
            begin = fr.env.dim(sel.start) if sel.start is not None else 0
            end = fr.env.dim(sel.stop) if sel.stop is not None else shape[a]
            start[a] = _clamped(begin, shape[a], e)
            stop[a] = _clamped(end, shape[a], e)
            step[a] = sel.step
        elif sel.start is not None:
            p = fr.env.dim(sel.start)
            note(">=", "index", p, 0, p >= 0, at(e.span))
            note("<", "index", p, shape[a], p < shape[a], at(e.span))
            if not 0 <= p < shape[a]:
                raise LinnetError(
                    f"index {p} is out of range for an axis of extent {shape[a]} (in {fr.where})"
                )
            start[a], stop[a] = p, p + 1
            dropped.add(a)
        else:
            assert isinstance(sel.component, ast.Expr)
            position = lower_expr(lw, fr, sel.component)
            if isinstance(position, IxVal):
                if position.axes:
                    raise not_supported(
                        "slicing with an index that varies over index variables", fr
                    )
                position = position.value
            runtime.append((a, lw.value(position)))
    if start != [0] * len(shape) or stop != list(shape) or step != [1] * len(shape):
        value = lw.b.slice(value, start, stop, step)
    if dropped:
        kept = [d for a, d in enumerate(value.type.shape) if a not in dropped]
        value = lw.b.reshape(value, kept)
    for a, position in sorted(runtime, key=lambda r: r[0], reverse=True):
        shift = sum(1 for d in dropped if d < a)
        value = lw.b.gather(value, position, a - shift)
    expected = lw.program.types.get(e)
    if expected is not None and not expected.is_compile_time:
        want = fr.env.tensor_type(expected)
        if want != value.type:
            raise InternalError(f"slicing gave {value.type}, the checker says {want}")
    return value


def _clamped(bound: int, extent: int, e: ast.Index) -> int:
    """A slice bound clamped to `[0, extent]` (each clamp a size decision when dynamic)."""
    where = at(e.span)
    low = max(bound, 0)
    note("max", "slice", bound, 0, low, where)
    clamped = min(low, extent)
    note("min", "slice", low, extent, clamped, where)
    return clamped
