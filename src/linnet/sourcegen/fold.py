"""Shape subgraphs folded to compile-time dimensions.

Stage: translation, before a node's translator runs. Exporters compute
reshape targets, slice bounds and sizes at run time from `Shape`:
`Concat(Unsqueeze(Gather(Shape(x), 0)), [-1, 12, 64])`. With symbolic input
extents those values are not constants, but they are dimension expressions
(`[batch, seq, 12, 64]`). This module evaluates such nodes over
`Value.elements` (integers as `Dim`s), so translators see compile-time
shapes and the generated code reads `reshape(x, [batch, seq, 12, 64])`.

It runs when some input holds symbolic elements, or when every input is a
small integer vector or scalar (a shape computation over constants); other
nodes over constants are left to their translators (which fold with NumPy). The
vocabulary is ONNX's operator set, which every importer maps onto. Integer
`Div` truncates in ONNX and floors in dimension arithmetic; they agree on the
non-negative values extents take, and a quotient that is not provably
non-negative is not folded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from linnet.check.dims import Dim
from linnet.sourcegen.graph import Node
from linnet.sourcegen.translate import Translation
from linnet.sourcegen.values import INT_DTYPES, Value

Elems = tuple[Dim, ...]


def fold_symbolic(t: Translation, node: Node) -> list[Value] | None:
    """The node's outputs as compile-time values, or None to let its translator run."""
    if node.domain != "":
        return None
    if node.op == "Shape":
        return _shape(node, _inputs(t, node))
    values = _inputs(t, node)
    present = [v for v in values if v is not None]
    symbolic = any(v.elements is not None and v.const is None for v in present)
    shape_like = bool(present) and all(
        v.elements is not None and v.rank <= 1 and (v.dtype in INT_DTYPES or v.dtype == "bool")
        for v in present
    )
    if not (symbolic or shape_like):
        return None
    rule = _RULES.get(node.op)
    if rule is None:
        return None
    try:
        return rule(t, node, values)
    except _NoFold:
        return None


class _NoFold(Exception):
    pass


def _inputs(t: Translation, node: Node) -> list[Value | None]:
    return [t.values.get(i) if i else None for i in node.inputs]


def _value(elems: Sequence[Dim], shape: tuple[Dim, ...], dtype: str = "i64") -> Value:
    import numpy as np

    const = None
    if all(e.as_int() is not None for e in elems):
        const = np.array([e.as_int() for e in elems], dtype=np.int64).reshape(
            tuple(int(d.as_int() or 0) for d in shape)
        )
        if dtype != "i64":
            from linnet.ir.core import numpy_dtype

            const = const.astype(numpy_dtype(dtype))
    return Value(shape, dtype, const=const, elements=tuple(elems))


def _elems(v: Value | None) -> Elems:
    if v is None or v.elements is None or v.dtype not in INT_DTYPES:
        raise _NoFold
    return v.elements


def _ints(v: Value | None) -> list[int]:
    out: list[int] = []
    for e in _elems(v):
        i = e.as_int()
        if i is None:
            raise _NoFold
        out.append(i)
    return out


def _vec(n: int) -> tuple[Dim, ...]:
    return (Dim.const(n),)


def _shape(node: Node, values: list[Value | None]) -> list[Value] | None:
    x = values[0] if values else None
    if x is None:
        return None
    dims = list(x.shape)
    start = int(node.attrs.get("start", 0))
    end = node.attrs.get("end")
    rank = len(dims)
    start = max(0, min(rank, start + rank if start < 0 else start))
    stop = rank if end is None else int(end)
    stop = max(0, min(rank, stop + rank if stop < 0 else stop))
    picked = dims[start:stop]
    return [_value(picked, _vec(len(picked)))]


def _broadcast_pair(a: Value, b: Value) -> tuple[Elems, Elems, tuple[Dim, ...]]:
    ea, eb = _elems(a), _elems(b)
    if len(ea) == len(eb):
        return ea, eb, a.shape if a.rank >= b.rank else b.shape
    if len(ea) == 1:
        return ea * len(eb), eb, b.shape
    if len(eb) == 1:
        return ea, eb * len(ea), a.shape
    raise _NoFold


def _arith(
    op: Callable[[Dim, Dim], Dim],
) -> Callable[[Translation, Node, list[Value | None]], list[Value]]:
    def rule(t: Translation, node: Node, values: list[Value | None]) -> list[Value]:
        a, b = values[0], values[1]
        if a is None or b is None or a.dtype != b.dtype:
            raise _NoFold
        ea, eb, shape = _broadcast_pair(a, b)
        return [_value([op(x, y) for x, y in zip(ea, eb, strict=True)], shape, a.dtype)]

    return rule


def _div(x: Dim, y: Dim) -> Dim:
    if y.as_int() is None or (y.as_int() or 0) <= 0:
        raise _NoFold
    return x.floordiv(y)


def _mod(x: Dim, y: Dim) -> Dim:
    if y.as_int() is None or (y.as_int() or 0) <= 0:
        raise _NoFold
    return x % y


def _identity(t: Translation, node: Node, values: list[Value | None]) -> list[Value]:
    x = values[0]
    if x is None:
        raise _NoFold
    return [_value(_elems(x), x.shape, x.dtype)]


# `Cast(to=...)` names element types by the ONNX codes, part of the vocabulary;
# casts between integer types keep a dimension's value (extents are small).
_INT_CODES = {2: "u8", 3: "i8", 4: "u16", 5: "i16", 6: "i32", 7: "i64", 12: "u32", 13: "u64"}


def _cast(t: Translation, node: Node, values: list[Value | None]) -> list[Value]:
    x = values[0]
    to = _INT_CODES.get(int(node.attrs.get("to", 0)))
    if x is None or to is None:
        raise _NoFold
    return [_value(_elems(x), x.shape, to)]


def _unsqueeze(t: Translation, node: Node, values: list[Value | None]) -> list[Value]:
    x = values[0]
    if x is None or x.rank > 1:
        raise _NoFold
    axes = node.attrs.get("axes")
    if axes is None:
        axes = _ints(values[1] if len(values) > 1 else None)
    if x.rank == 0 and list(axes) in ([0], [-1]):
        return [_value(_elems(x), _vec(1), x.dtype)]
    if x.rank == 1 and list(axes) in ([0], [-2]):
        return [_value(_elems(x), (Dim.const(1), x.shape[0]), x.dtype)]
    raise _NoFold


def _squeeze(t: Translation, node: Node, values: list[Value | None]) -> list[Value]:
    x = values[0]
    if x is None or x.rank != 1 or len(_elems(x)) != 1:
        raise _NoFold
    return [_value(_elems(x), (), x.dtype)]


def _concat(t: Translation, node: Node, values: list[Value | None]) -> list[Value]:
    out: list[Dim] = []
    dtype = None
    for v in values:
        if v is None or v.rank != 1:
            raise _NoFold
        if dtype is not None and v.dtype != dtype:
            raise _NoFold
        dtype = v.dtype
        out.extend(_elems(v))
    assert dtype is not None
    return [_value(out, _vec(len(out)), dtype)]


def _gather(t: Translation, node: Node, values: list[Value | None]) -> list[Value]:
    data, idx = values[0], values[1] if len(values) > 1 else None
    if (
        data is None
        or idx is None
        or data.rank != 1
        or int(node.attrs.get("axis", 0)) not in (0, -1)
    ):
        raise _NoFold
    elems = _elems(data)
    picks = _ints(idx)
    n = len(elems)
    if any(not -n <= p < n for p in picks):
        raise _NoFold
    chosen = [elems[p + n if p < 0 else p] for p in picks]
    shape = idx.shape
    return [_value(chosen, shape, data.dtype)]


def _slice(t: Translation, node: Node, values: list[Value | None]) -> list[Value]:
    data = values[0]
    if data is None or data.rank != 1:
        raise _NoFold
    elems = _elems(data)
    if node.opset and node.opset < 10:
        starts, ends = node.attrs.get("starts"), node.attrs.get("ends")
        axes, steps = node.attrs.get("axes"), None
    else:
        starts = _ints(values[1]) if len(values) > 1 else None
        ends = _ints(values[2]) if len(values) > 2 else None
        axes = _ints(values[3]) if len(values) > 3 and values[3] is not None else None
        steps = _ints(values[4]) if len(values) > 4 and values[4] is not None else None
    if starts is None or ends is None or len(starts) != 1 or len(ends) != 1:
        raise _NoFold
    if axes is not None and list(axes) not in ([0], [-1]):
        raise _NoFold
    step = 1 if not steps else steps[0]
    if step == 0:
        raise _NoFold
    picked = list(elems)[slice(starts[0], ends[0], step)]
    return [_value(picked, _vec(len(picked)), data.dtype)]


def _reshape(t: Translation, node: Node, values: list[Value | None]) -> list[Value]:
    x, target = values[0], values[1] if len(values) > 1 else None
    if x is None or target is None:
        raise _NoFold
    elems = _elems(x)
    shape = _ints(target)
    if shape == [] and len(elems) == 1:
        return [_value(elems, (), x.dtype)]
    if len(shape) == 1 and shape[0] in (-1, len(elems)):
        return [_value(elems, _vec(len(elems)), x.dtype)]
    raise _NoFold


def _minmax(pick: str) -> Callable[[Translation, Node, list[Value | None]], list[Value]]:
    def rule(t: Translation, node: Node, values: list[Value | None]) -> list[Value]:
        present = [v for v in values if v is not None]
        if len(present) != 2:
            raise _NoFold
        a, b = present
        if a.dtype != b.dtype:
            raise _NoFold
        ea, eb, shape = _broadcast_pair(a, b)
        fn = Dim.minimum if pick == "min" else Dim.maximum
        return [_value([fn(x, y) for x, y in zip(ea, eb, strict=True)], shape, a.dtype)]

    return rule


def _equal(t: Translation, node: Node, values: list[Value | None]) -> list[Value]:
    """Elementwise `==` of dimensions: decided when provable either way (extents are
    never negative, so a dimension never equals a negative constant)."""
    import numpy as np

    a, b = values[0], values[1]
    if a is None or b is None:
        raise _NoFold
    ea, eb, shape = _broadcast_pair(a, b)
    out: list[bool] = []
    for x, y in zip(ea, eb, strict=True):
        xi, yi = x.as_int(), y.as_int()
        if xi is not None and yi is not None:
            out.append(xi == yi)
        elif (xi is not None and xi < 0) or (yi is not None and yi < 0):
            out.append(False)
        elif t.facts.prove(x, "==", y):
            out.append(True)
        elif t.facts.prove(x, "!=", y):
            out.append(False)
        else:
            raise _NoFold
    dims = tuple(int(d.as_int() or 0) for d in shape)
    arr = np.array(out, dtype=bool).reshape(dims)
    return [Value(shape, "bool", const=arr)]


def _where(t: Translation, node: Node, values: list[Value | None]) -> list[Value]:
    cond, a, b = ([*values, None, None, None])[:3]
    if cond is None or cond.const is None or cond.dtype != "bool" or a is None or b is None:
        raise _NoFold
    flags = [bool(x) for x in cond.const.reshape(-1)]
    ea, eb = list(_elems(a)), list(_elems(b))
    n = max(len(flags), len(ea), len(eb))
    if any(len(x) not in (1, n) for x in (flags, ea, eb)) or a.dtype != b.dtype:
        raise _NoFold
    flags, ea, eb = (x * n if len(x) == 1 else x for x in (flags, ea, eb))  # type: ignore[assignment]
    picked = [x if f else y for f, x, y in zip(flags, ea, eb, strict=True)]
    shape = max((cond.shape, a.shape, b.shape), key=len)
    return [_value(picked, shape, a.dtype)]


_RULES: dict[str, Callable[[Translation, Node, list[Value | None]], list[Value]]] = {
    "Equal": _equal,
    "Where": _where,
    "Add": _arith(lambda x, y: x + y),
    "Sub": _arith(lambda x, y: x - y),
    "Mul": _arith(lambda x, y: x * y),
    "Div": _arith(_div),
    "Mod": _arith(_mod),
    "Min": _minmax("min"),
    "Max": _minmax("max"),
    "Identity": _identity,
    "Cast": _cast,
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Concat": _concat,
    "Gather": _gather,
    "Slice": _slice,
    "Reshape": _reshape,
}
