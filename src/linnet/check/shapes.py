"""Shape relations under the facts in scope (language.md 5.2, 5.7, 6.3, 7.6).

Stage: pure helpers of the body checker. In: shapes/types and a `Facts`.
Out: yes/no answers (and where they failed), never diagnostics.

Equal dimensions are first compared by normal form (`Dim.__eq__`, no
facts needed), then by the prover; the fast path keeps common programs
(`[B, S, H] + [H]`) away from the prover entirely.
"""

from __future__ import annotations

from linnet.check.dims import Dim, Symbol
from linnet.check.prover import Facts
from linnet.check.types import (
    ArrayType,
    BlockType,
    EnumType,
    ErrorType,
    OptionalType,
    ScalarType,
    Shape,
    ShapeItem,
    ShapeType,
    StructType,
    TensorType,
    TupleType,
    Type,
)

ONE = Dim.const(1)


def dims_equal(a: Dim, b: Dim, facts: Facts) -> bool:
    return a == b or facts.prove(a, "==", b)


def is_one(d: Dim, facts: Facts) -> bool:
    value = d.as_int()
    if value is not None:
        return value == 1
    return facts.prove(d, "==", ONE)


def items_equal(a: ShapeItem, b: ShapeItem, facts: Facts) -> bool:
    if type(a) is Symbol or type(b) is Symbol:
        return a is b
    assert isinstance(a, Dim) and isinstance(b, Dim)
    return dims_equal(a, b, facts)


def first_shape_difference(a: Shape, b: Shape, facts: Facts) -> int | None:
    """None if the shapes are provably equal; else the first differing axis (-1: rank)."""
    if len(a) != len(b):
        return -1
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if x is not y and not items_equal(x, y, facts):
            return i
    return None


def types_equal(a: Type, b: Type, facts: Facts) -> bool:
    """Structural equality with dimensions compared by the prover (5.7)."""
    if a is b or isinstance(a, ErrorType) or isinstance(b, ErrorType):
        return True
    if isinstance(a, TensorType):
        return (
            isinstance(b, TensorType)
            and a.dtype is b.dtype
            and first_shape_difference(a.shape, b.shape, facts) is None
        )
    if isinstance(a, ScalarType):
        return isinstance(b, ScalarType) and a.dtype is b.dtype
    if isinstance(a, OptionalType):
        return isinstance(b, OptionalType) and types_equal(a.inner, b.inner, facts)
    if isinstance(a, TupleType):
        return (
            isinstance(b, TupleType)
            and len(a.elems) == len(b.elems)
            and all(types_equal(x, y, facts) for x, y in zip(a.elems, b.elems, strict=True))
        )
    if isinstance(a, EnumType):
        return isinstance(b, EnumType) and a.info is b.info
    if isinstance(a, StructType):
        return isinstance(b, StructType) and a.info is b.info and substs_equal(a, b, facts)
    if isinstance(a, BlockType):
        return isinstance(b, BlockType) and a.info is b.info and substs_equal(a, b, facts)
    if isinstance(a, ArrayType):
        return (
            isinstance(b, ArrayType)
            and types_equal(a.elem, b.elem, facts)
            and dims_equal(a.length, b.length, facts)
        )
    if isinstance(a, ShapeType):
        return isinstance(b, ShapeType) and first_shape_difference(a.dims, b.dims, facts) is None
    return False


def substs_equal(a: StructType | BlockType, b: StructType | BlockType, facts: Facts) -> bool:
    sa, sb = a.subst, b.subst
    for key, value in sa.dims.items():
        other = sb.dims.get(key)
        if other is None or not dims_equal(value, other, facts):
            return False
    for key, items in sa.packs.items():
        other_items = sb.packs.get(key)
        if other_items is None or first_shape_difference(items, other_items, facts) is not None:
            return False
    return all(sb.dtypes.get(key) is value for key, value in sa.dtypes.items())


class BroadcastFailure:
    """Where broadcasting failed: the two items (None when one side has no axis there)."""

    __slots__ = ("left", "right")

    def __init__(self, left: ShapeItem | None, right: ShapeItem | None) -> None:
        self.left = left
        self.right = right


def broadcast(a: Shape, b: Shape, facts: Facts) -> Shape | BroadcastFailure:
    """Align from the right (7.6); each pair provably equal or one of them 1.

    Packs align only with the same pack symbol. The result axis is the non-1
    one, the left one when equal; axes present in only one shape are copied.
    """
    if a is b:
        return a
    la, lb = len(a), len(b)
    n = max(la, lb)
    out: list[ShapeItem] = [ONE] * n
    for k in range(1, n + 1):
        x = a[la - k] if k <= la else None
        y = b[lb - k] if k <= lb else None
        if x is None:
            assert y is not None
            out[n - k] = y
            continue
        if y is None:
            out[n - k] = x
            continue
        if x is y:
            out[n - k] = x
            continue
        if type(x) is Symbol or type(y) is Symbol:
            # A pack aligns only with the same pack symbol (7.6).
            return BroadcastFailure(x, y)
        assert isinstance(x, Dim) and isinstance(y, Dim)
        if x == y:
            out[n - k] = x
        elif x.as_int() == 1:
            out[n - k] = y
        elif y.as_int() == 1 or facts.prove(x, "==", y):
            out[n - k] = x
        elif is_one(x, facts):
            out[n - k] = y
        elif is_one(y, facts):
            out[n - k] = x
        else:
            return BroadcastFailure(x, y)
    return tuple(out)


def broadcast_to_ok(src: Shape, dst: Shape, facts: Facts) -> int | None:
    """`broadcast_to` (10.3): None if fine; else the failing source axis (-1: rank)."""
    if len(dst) < len(src):
        return -1
    offset = len(dst) - len(src)
    for i, item in enumerate(src):
        target = dst[offset + i]
        if type(item) is Symbol or type(target) is Symbol:
            if item is not target:
                return i
            continue
        assert isinstance(item, Dim) and isinstance(target, Dim)
        if not (dims_equal(item, target, facts) or is_one(item, facts)):
            return i
    return None
