"""What a Linnet expression lowers to: IR values plus the parts that stay compile-time.

Stage: lowering (checked AST -> Core IR). Every expression lowers to an `LV`:

- an IR `Value` (tensors; scalars are rank-0 tensors, 5.1);
- an `IxVal` inside index notation (8): a value over some index axes;
- a Python `int` / `float` / `bool` for compile-time integers, float literals
  and folded comparisons (5.4); they become constants of the dtype their
  context gives them (7.3, the checker's `adopted` table) or the defaults
  `i64` / `f64` / `bool` (`materialize`);
- a Python `tuple` of LVs (7.9), an `Opt` (an optional whose presence is
  known at lowering: 14.4), a `BlockRef` / `ArrayRef` (blocks are not values,
  12.1, but a name can denote one), an `EnumVariant`, a `ShapeLV` (7.10), or a
  `ModuleInfo` (`m.item`).

`flatten` / `rebuild` turn an LV into its IR values and back; control flow
(`while`, `if`) and `op` call regions carry exactly those values.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Union

from linnet.check.decls import EnumVariant, IndexVar, ModuleInfo
from linnet.check.types import (
    CtFloatType,
    CtIntType,
    ScalarType,
    StructType,
    TupleType,
    Type,
)
from linnet.errors import InternalError, LinnetError
from linnet.ir.core import FLOAT_DTYPES, INTEGER_DTYPES, UNSIGNED_DTYPES, Value, dtype_bits

if TYPE_CHECKING:
    from linnet.ir.bind import BlockInstance
    from linnet.ir.env import Env

AxisKey = tuple[IndexVar, int]
"""One axis of an index-notation domain: a plain index (position 0) or one axis of a pack index."""


class IxVal:
    """A value inside index notation: `value`'s axes are the index axes `axes`, in order.

    A scalar outside any index (`eps`, a runtime position) has no axes.
    """

    __slots__ = ("axes", "value")

    def __init__(self, value: Value, axes: tuple[AxisKey, ...]) -> None:
        if len(axes) != value.type.rank:
            raise InternalError(f"index axes {len(axes)} do not match {value.type}")
        self.value = value
        self.axes = axes

    def __repr__(self) -> str:
        names = ", ".join(f"{k[0].name}{k[1] if k[0].is_pack else ''}" for k in self.axes)
        return f"IxVal({self.value!r} over [{names}])"


class Opt:
    """An optional with known presence: `value` is None for `none` (12.8, 14.4)."""

    __slots__ = ("value",)

    def __init__(self, value: LV | None) -> None:
        self.value = value

    def __repr__(self) -> str:
        return "none" if self.value is None else f"some({self.value!r})"


class BlockRef:
    """A block instance denoted by a name (`child`, `layers[2]`, a `static for` element)."""

    __slots__ = ("instance",)

    def __init__(self, instance: BlockInstance) -> None:
        self.instance = instance


class ArrayRef:
    """A `sub` array's element instances, in order (13.1)."""

    __slots__ = ("instances",)

    def __init__(self, instances: list[BlockInstance]) -> None:
        self.instances = instances


class ShapeLV:
    """A shape literal with concrete dimensions (7.10)."""

    __slots__ = ("dims",)

    def __init__(self, dims: tuple[int, ...]) -> None:
        self.dims = dims


LV = Union[  # noqa: UP007 - a recursive alias
    Value,
    IxVal,
    int,
    float,
    bool,
    tuple["LV", ...],
    Opt,
    BlockRef,
    ArrayRef,
    EnumVariant,
    ShapeLV,
    ModuleInfo,
]


def is_number(lv: object) -> bool:
    """A compile-time number or bool (not yet an IR value)."""
    return isinstance(lv, (int, float))


def flatten(lv: LV) -> list[Value]:
    """The IR values inside an LV, in order (static parts contribute nothing)."""
    if isinstance(lv, Value):
        return [lv]
    if isinstance(lv, tuple):
        out: list[Value] = []
        for item in lv:
            out.extend(flatten(item))
        return out
    if isinstance(lv, Opt):
        return [] if lv.value is None else flatten(lv.value)
    if isinstance(lv, IxVal):
        raise InternalError("an index-notation value cannot be flattened")
    if is_number(lv):
        raise InternalError(f"compile-time value {lv!r} must be materialized first")
    return []


def rebuild(lv: LV, values: Iterator[Value]) -> LV:
    """`lv` with its IR values replaced, in `flatten` order, by `values`."""
    if isinstance(lv, Value):
        return next(values)
    if isinstance(lv, tuple):
        return tuple(rebuild(item, values) for item in lv)
    if isinstance(lv, Opt):
        return lv if lv.value is None else Opt(rebuild(lv.value, values))
    return lv


def same_structure(a: LV, b: LV) -> bool:
    """Whether two LVs differ only in their IR values (so one region signature fits both)."""
    if isinstance(a, Value) or isinstance(b, Value):
        return isinstance(a, Value) and isinstance(b, Value) and a.type == b.type
    if isinstance(a, tuple) or isinstance(b, tuple):
        return (
            isinstance(a, tuple)
            and isinstance(b, tuple)
            and len(a) == len(b)
            and all(same_structure(x, y) for x, y in zip(a, b, strict=True))
        )
    if isinstance(a, Opt) or isinstance(b, Opt):
        if not (isinstance(a, Opt) and isinstance(b, Opt)):
            return False
        if a.value is None or b.value is None:
            return a.value is None and b.value is None
        return same_structure(a.value, b.value)
    if isinstance(a, BlockRef) and isinstance(b, BlockRef):
        return a.instance is b.instance
    if isinstance(a, EnumVariant) and isinstance(b, EnumVariant):
        return a.enum is b.enum and a.name == b.name
    return a is b


# ---------------------------------------------------------------- constants


def convert_scalar(value: int | float | bool, dtype: str) -> int | float | bool:
    """A Python number converted to `dtype` as `cast` does (language.md 10.3).

    Float to integer truncates toward zero, integers wrap to the width, bool
    becomes 0/1, a number becomes bool as `!= 0`; float dtypes take the value
    (NumPy rounds it to nearest even on storage).
    """
    if dtype == "bool":
        return bool(value != 0)
    traced = type(value) is not int and isinstance(value, int) and type(value) is not bool
    if dtype in FLOAT_DTYPES:  # a traced size (`ir.traced`) stays one: the array converts it
        return value if traced and -(1 << 24) < value < 1 << 24 else float(value)
    if dtype not in INTEGER_DTYPES:
        raise InternalError(f"unknown dtype {dtype}")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise LinnetError(f"cannot convert {value} to {dtype}: not a finite number")
        value = math.trunc(value)
    bits = dtype_bits(dtype)
    low = 0 if dtype in UNSIGNED_DTYPES else -(1 << (bits - 1))
    if traced and low <= value < low + (1 << bits):
        return value  # in range: the traced size itself
    wrapped = int(value) & ((1 << bits) - 1)
    if dtype not in UNSIGNED_DTYPES and wrapped >= 1 << (bits - 1):
        wrapped -= 1 << bits
    return wrapped


def default_dtype(value: int | float | bool) -> str:
    """The dtype of a compile-time value without context (5.4)."""
    if isinstance(value, bool):
        return "bool"
    return "i64" if isinstance(value, int) else "f64"


def scalar_dtype(t: Type | None, env: Env) -> str | None:
    """The dtype a checker type gives a compile-time value, or None for no context."""
    if isinstance(t, ScalarType):
        return env.dtype(t.dtype)
    if isinstance(t, CtIntType):
        return "i64"
    if isinstance(t, CtFloatType):
        return "f64"
    return None


def element_types(t: Type | None, n: int) -> list[Type | None]:
    """The types of a tuple's elements, or of a struct's fields in declaration order (a struct
    value lowers to the tuple of its fields)."""
    if isinstance(t, TupleType) and len(t.elems) == n:
        return list(t.elems)
    if isinstance(t, StructType) and len(t.info.fields) == n:
        return [t.subst.apply(f) for f in t.info.fields.values()]
    return [None] * n
