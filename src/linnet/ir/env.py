"""Concrete values of generics: what binding produces and lowering reads (language.md 6.7).

Stage: between checking and Core IR. After binding every `Dim` generic is an
int, every shape pack a tuple of ints and every dtype generic a dtype name;
an `Env` holds one such binding (the generics visible in one block instance
or one inlined function) and evaluates the checker's symbolic dimensions,
shapes and dtypes under it.

In: `check.dims.Dim` / `check.types` values. Out: ints, int tuples, dtype
names and `ir.core.TensorType`s. Dimensions use integer floor division
(6.7 step 5); a dimension that evaluates below zero, or overflows, is a
`LinnetError` naming it; an unbound symbol is an `InternalError` (the checker
guarantees every symbol in a body is bound by its function or block).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from linnet.check.dims import Dim, DimEvalError, DimOverflow, Symbol
from linnet.check.types import (
    DType,
    DTypeVar,
    ScalarType,
    ShapeItem,
    TensorType,
    Type,
)
from linnet.errors import InternalError, LinnetError
from linnet.ir import core
from linnet.ir.size_decisions import note_dim_ops

GenericValue = int | str | tuple[int, ...]
"""A concrete generic: an int (`Dim`), a dtype name, or a tuple of ints (a `Shape` pack)."""


class Env:
    """One concrete binding of generic symbols; evaluation results are cached per env."""

    __slots__ = ("_cache", "dims", "dtypes", "packs")

    def __init__(
        self,
        dims: Mapping[Symbol, int] | None = None,
        packs: Mapping[Symbol, tuple[int, ...]] | None = None,
        dtypes: Mapping[DTypeVar, str] | None = None,
    ) -> None:
        self.dims: dict[Symbol, int] = dict(dims or {})
        self.packs: dict[Symbol, tuple[int, ...]] = dict(packs or {})
        self.dtypes: dict[DTypeVar, str] = dict(dtypes or {})
        self._cache: dict[Dim, int] = {}

    def __repr__(self) -> str:
        parts = [f"{k.name}={v}" for k, v in self.dims.items()]
        parts += [f"{k.name}={show_value(v)}" for k, v in self.packs.items()]
        parts += [f"{k.name}={v}" for k, v in self.dtypes.items()]
        return f"Env({', '.join(parts)})"

    def extended(self, other: Env) -> Env:
        """This binding plus `other`'s (which wins on a shared key)."""
        return Env(
            {**self.dims, **other.dims},
            {**self.packs, **other.packs},
            {**self.dtypes, **other.dtypes},
        )

    # -- evaluation -------------------------------------------------------------------

    def dim(self, d: Dim) -> int:
        """The value of a dimension (floor division, 6.7 step 5)."""
        found = self._cache.get(d)
        if found is None:
            constant = d.as_int()
            if constant is not None:
                return constant
            try:
                found = d.evaluate(self.dims, self.packs)
                if d.has_ops():
                    note_dim_ops(d, self.dims, self.packs)
            except DimEvalError as exc:
                raise InternalError(f"cannot evaluate `{d}`: {exc}") from exc
            except DimOverflow as exc:
                raise LinnetError(f"the dimension `{d}` overflows i64 with these generics") from exc
            self._cache[d] = found
        return found

    def extent(self, d: Dim) -> int:
        """A dimension used as an extent: it must not be negative (6.5)."""
        value = self.dim(d)
        if value < 0:
            raise LinnetError(
                f"the dimension `{d}` is {value} with these generics; extents are >= 0"
            )
        return value

    def shape(self, items: Sequence[ShapeItem]) -> tuple[int, ...]:
        """A checker shape with packs expanded to their bound dimensions."""
        out: list[int] = []
        for item in items:
            if type(item) is Symbol:
                bound = self.packs.get(item)
                if bound is None:
                    raise InternalError(f"shape pack `*{item.name}` is not bound")
                out.extend(bound)
            else:
                assert isinstance(item, Dim)
                out.append(self.extent(item))
        return tuple(out)

    def dtype(self, dt: DType) -> str:
        if isinstance(dt, DTypeVar):
            found = self.dtypes.get(dt)
            if found is None:
                raise InternalError(f"dtype generic `{dt.name}` is not bound")
            return found
        return dt.name

    def tensor_type(self, t: Type) -> core.TensorType:
        """The IR type of a checker scalar (rank 0) or tensor type."""
        if isinstance(t, ScalarType):
            return core.TensorType((), self.dtype(t.dtype))
        if isinstance(t, TensorType):
            return core.TensorType(self.shape(t.shape), self.dtype(t.dtype))
        raise InternalError(f"{t!r} is not a tensor or scalar type")

    def value_of(self, key: Symbol | DTypeVar) -> GenericValue:
        """The bound value of one generic, as users write it."""
        if isinstance(key, DTypeVar):
            return self.dtypes[key]
        if key.is_pack:
            return self.packs[key]
        return self.dims[key]

    def has(self, key: Symbol | DTypeVar) -> bool:
        if isinstance(key, DTypeVar):
            return key in self.dtypes
        return key in (self.packs if key.is_pack else self.dims)

    def bind(self, key: Symbol | DTypeVar, value: GenericValue) -> None:
        if isinstance(key, DTypeVar):
            assert isinstance(value, str)
            self.dtypes[key] = value
        elif key.is_pack:
            assert isinstance(value, tuple)
            self.packs[key] = value
        else:
            assert isinstance(value, int)
            self.dims[key] = value
        self._cache.clear()


def evaluate_generic(env: Env, kind: str, value: object) -> GenericValue:
    """A checker generic value (a default or a substitution entry) evaluated under `env`.

    `kind` is the generic's kind (`Dim`, `Shape`, or a dtype class).
    """
    if kind == "Dim":
        assert isinstance(value, Dim)
        return env.extent(value)
    if kind == "Shape":
        assert isinstance(value, tuple)
        return env.shape(value)
    assert not isinstance(value, (Dim, tuple))
    return env.dtype(value)  # type: ignore[arg-type]


def show_value(value: GenericValue) -> str:
    """`64`, `f32`, or `[2, 3]` for a pack."""
    if isinstance(value, tuple):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)
