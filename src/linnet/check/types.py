"""Semantic types of the checker (language.md sections 5.1-5.4, 7.3, 7.10).

Stage: used by every part of `check/`; produced from syntax types by
`check.typeconv` and from expressions by the body checker; consumed by the
lowering to Core IR through `CheckedProgram.types`.

In: nothing but dimensions (`check.dims.Dim`). Out: immutable type values.

- Dtypes are interned: a concrete dtype is one `ScalarDType` object per name,
  a dtype generic is its `DTypeVar`; both compare by identity, which is exactly
  section 5.5's rule that a generic dtype "equals only itself".
- Shapes are tuples of `ShapeItem`: a `Dim` per axis, or the pack `Symbol`
  itself standing for a run of axes (section 6.6).
- Compile-time values (5.4) have types of their own (`CtIntType`,
  `CtFloatType`, `NONE`, `ShapeType`) until a context makes them runtime
  values (7.3); `ERROR` is compatible with everything so one mistake is
  reported once.
- `Subst` maps generic parameters to arguments; applying it to a type is how
  calls, `sub` members and aliases instantiate declarations.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Final

from linnet.check.dims import Dim, Symbol

if TYPE_CHECKING:
    from linnet.check.decls import BlockInfo, EnumInfo, StructInfo

# ---------------------------------------------------------------- dtypes


class ScalarDType:
    """A concrete dtype (`f32`, `i8`, `bool`); one object per name."""

    __slots__ = ("bits", "float_max", "is_float", "is_int", "is_signed", "max", "min", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self.is_float = name.startswith(("f", "bf"))
        self.is_int = name[0] in "iu"
        self.is_signed = name[0] == "i"
        self.bits = 1 if name == "bool" else int(name.lstrip("bfiu"))
        if self.is_int:
            # A literal cannot exceed the i64 maximum, so u64 tops out there (5.1).
            width = self.bits
            self.min = -(1 << (width - 1)) if self.is_signed else 0
            self.max = (1 << (width - 1)) - 1 if self.is_signed or width == 64 else (1 << width) - 1
        else:
            self.min = self.max = 0
        self.float_max = _FLOAT_MAX.get(name, 0.0)

    def __repr__(self) -> str:
        return self.name

    __str__ = __repr__


_FLOAT_MAX: Final = {
    "f16": 65504.0,
    "bf16": 3.3895313892515355e38,
    "f32": 3.4028234663852886e38,
    "f64": 1.7976931348623157e308,
}

SCALAR_DTYPES: Final[dict[str, ScalarDType]] = {
    name: ScalarDType(name)
    for name in [
        "bool",
        "i8",
        "i16",
        "i32",
        "i64",
        "u8",
        "u16",
        "u32",
        "u64",
        "f16",
        "bf16",
        "f32",
        "f64",
    ]
}
BOOL: Final = SCALAR_DTYPES["bool"]
I64: Final = SCALAR_DTYPES["i64"]
F64: Final = SCALAR_DTYPES["f64"]


class DTypeVar:
    """A dtype generic (`T: Float`): rigid inside its declaration (5.5)."""

    __slots__ = ("kind", "name")

    def __init__(self, name: str, kind: str) -> None:
        self.name = name
        self.kind = kind

    def __repr__(self) -> str:
        return self.name

    __str__ = __repr__


DType = ScalarDType | DTypeVar


def in_class(dtype: DType, kind: str) -> bool:
    """Does `dtype` satisfy the dtype class `kind` (5.1 nesting, 5.5 generics)?"""
    if kind == "DType":
        return True
    if isinstance(dtype, ScalarDType):
        if kind == "Numeric":
            return dtype.is_int or dtype.is_float
        if kind == "Integer":
            return dtype.is_int
        return dtype.is_float  # Float
    if dtype.kind == kind:
        return True
    return kind == "Numeric" and dtype.kind in ("Integer", "Float")


def is_integer(dtype: DType) -> bool:
    return in_class(dtype, "Integer")


def is_float(dtype: DType) -> bool:
    return in_class(dtype, "Float")


def is_numeric(dtype: DType) -> bool:
    return in_class(dtype, "Numeric")


def int_literal_adopts(dtype: DType) -> bool:
    """7.3: integer literals become integer or float dtypes, never `bool` or a bare `DType`."""
    return in_class(dtype, "Numeric")


def float_literal_adopts(dtype: DType) -> bool:
    """7.3: floating literals become floating dtypes only."""
    return in_class(dtype, "Float")


# ---------------------------------------------------------------- types

ShapeItem = Dim | Symbol  # a Symbol in a shape is always a pack (`*S`)
Shape = tuple[ShapeItem, ...]


class Type:
    """Base of every semantic type; all are immutable."""

    __slots__ = ()

    @property
    def is_compile_time(self) -> bool:
        return False


class ErrorType(Type):
    """The type of an expression whose checking already failed: fits everywhere."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<error>"


class UnitType(Type):
    """The 'result' of calling a function without `-> R` (11.3): not a value."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "()"


class NoneLitType(Type):
    """`none` before an optional type is known (5.4)."""

    __slots__ = ()

    @property
    def is_compile_time(self) -> bool:
        return True

    def __repr__(self) -> str:
        return "none"


ERROR: Final = ErrorType()
UNIT: Final = UnitType()
NONE: Final = NoneLitType()


class ScalarType(Type):
    """A scalar of one dtype (5.1); interned per dtype by `scalar()`."""

    __slots__ = ("dtype",)

    def __init__(self, dtype: DType) -> None:
        self.dtype = dtype

    def __repr__(self) -> str:
        return str(self.dtype)


_SCALARS: dict[DType, ScalarType] = {}


def scalar(dtype: DType) -> ScalarType:
    found = _SCALARS.get(dtype)
    if found is None:
        found = _SCALARS[dtype] = ScalarType(dtype)
    return found


class TensorType(Type):
    """`Tensor[dims; dtype]` (5.2): a shape of dimensions and packs, and a dtype."""

    __slots__ = ("dtype", "shape")

    def __init__(self, shape: Shape, dtype: DType) -> None:
        self.shape = shape
        self.dtype = dtype

    @property
    def has_pack(self) -> bool:
        return any(type(item) is Symbol for item in self.shape)

    def __repr__(self) -> str:
        return f"Tensor[{shape_str(self.shape)}; {self.dtype}]"


class CtIntType(Type):
    """A compile-time integer (5.4): its value is a dimension expression."""

    __slots__ = ("value",)

    def __init__(self, value: Dim) -> None:
        self.value = value

    @property
    def is_compile_time(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"compile-time integer `{self.value}`"


class CtFloatType(Type):
    """A float literal, or literal arithmetic involving one (5.4); value None if unknown."""

    __slots__ = ("value",)

    def __init__(self, value: float | None) -> None:
        self.value = value

    @property
    def is_compile_time(self) -> bool:
        return True

    def __repr__(self) -> str:
        return "float literal" if self.value is None else f"float literal `{self.value!r}`"


class ShapeType(Type):
    """A shape literal `[B, S * H]` (7.10), or a `Shape` generic argument."""

    __slots__ = ("dims",)

    def __init__(self, dims: Shape) -> None:
        self.dims = dims

    @property
    def is_compile_time(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"shape `[{shape_str(self.dims)}]`"


class OptionalType(Type):
    """`T?` (5.3): `none` or `some(v)`; consumed with `match`."""

    __slots__ = ("inner",)

    def __init__(self, inner: Type) -> None:
        self.inner = inner

    def __repr__(self) -> str:
        return f"{self.inner!r}?"


class TupleType(Type):
    __slots__ = ("elems",)

    def __init__(self, elems: tuple[Type, ...]) -> None:
        self.elems = elems

    def __repr__(self) -> str:
        if len(self.elems) == 1:
            return f"({self.elems[0]!r},)"
        return "(" + ", ".join(repr(e) for e in self.elems) + ")"


class EnumType(Type):
    """A value of a payload-free enum (14.2); nominal."""

    __slots__ = ("info",)

    def __init__(self, info: EnumInfo) -> None:
        self.info = info

    def __repr__(self) -> str:
        return self.info.name


class StructType(Type):
    """A nominal struct instance (5.3); fields are read with `.field`."""

    __slots__ = ("info", "subst")

    def __init__(self, info: StructInfo, subst: Subst) -> None:
        self.info = info
        self.subst = subst

    def __repr__(self) -> str:
        return self.info.name + self.subst.args_str(self.info.generics)


class BlockType(Type):
    """An instantiated block (`Dense<H, 4>`): the type of a `sub` and of a child reference.

    `subst` maps the block's generics to arguments in the enclosing scope's terms.
    """

    __slots__ = ("info", "subst")

    def __init__(self, info: BlockInfo, subst: Subst) -> None:
        self.info = info
        self.subst = subst

    def __repr__(self) -> str:
        return self.info.name + self.subst.args_str(self.info.generics)


class ArrayType(Type):
    """`[Block<..>; N]`: a structural array, only as the type of a `sub` (5.3, 12.2)."""

    __slots__ = ("elem", "length")

    def __init__(self, elem: Type, length: Dim) -> None:
        self.elem = elem
        self.length = length

    def __repr__(self) -> str:
        return f"[{self.elem!r}; {self.length}]"


# ---------------------------------------------------------------- printing


def shape_str(shape: Iterable[ShapeItem]) -> str:
    """`B, S, H / N` with packs as `*S`, as in source."""
    return ", ".join(f"*{item.name}" if type(item) is Symbol else str(item) for item in shape)


def show(t: Type) -> str:
    """A type for a note: source-like in backticks, or a phrase for compile-time values."""
    if isinstance(t, CtIntType):
        return f"compile-time integer `{t.value}`"
    if isinstance(t, CtFloatType):
        return "float literal" if t.value is None else f"float literal `{t.value!r}`"
    if t is NONE:
        return "`none`"
    if t is UNIT:
        return "no value"
    if isinstance(t, ShapeType):
        return f"shape literal `[{shape_str(t.dims)}]`"
    if isinstance(t, BlockType):
        return f"block `{t!r}`"
    return f"`{t!r}`"


# ---------------------------------------------------------------- substitution


GenericValue = Dim | tuple[ShapeItem, ...] | DType


class Subst:
    """Bindings of generic parameters: dims, packs and dtypes (5.6).

    Keys are the declaring generics' `Symbol`s (Dim, Shape) and `DTypeVar`s.
    Applying a substitution never re-proves anything; callers prove what needs
    proving with the facts of the use site.
    """

    __slots__ = ("_dim_map", "dims", "dtypes", "packs")

    def __init__(
        self,
        dims: dict[Symbol, Dim] | None = None,
        packs: dict[Symbol, Shape] | None = None,
        dtypes: dict[DTypeVar, DType] | None = None,
    ) -> None:
        self.dims: dict[Symbol, Dim] = dims if dims is not None else {}
        self.packs: dict[Symbol, Shape] = packs if packs is not None else {}
        self.dtypes: dict[DTypeVar, DType] = dtypes if dtypes is not None else {}
        self._dim_map: dict[Symbol, Dim] | None = None

    @property
    def is_empty(self) -> bool:
        return not (self.dims or self.packs or self.dtypes)

    def bind_dim(self, sym: Symbol, value: Dim) -> None:
        self.dims[sym] = value
        self._dim_map = None

    def bind_pack(self, sym: Symbol, value: Shape) -> None:
        self.packs[sym] = value
        self._dim_map = None

    def bind_dtype(self, var: DTypeVar, value: DType) -> None:
        self.dtypes[var] = value

    def copy(self) -> Subst:
        return Subst(dict(self.dims), dict(self.packs), dict(self.dtypes))

    def dim_map(self) -> dict[Symbol, Dim]:
        """The mapping for `Dim.substitute`: dims, plus each pack's element count."""
        if self._dim_map is None:
            mapping = dict(self.dims)
            for sym, items in self.packs.items():
                mapping[sym] = shape_numel(items)
            self._dim_map = mapping
        return self._dim_map

    # -- application

    def dim(self, d: Dim) -> Dim:
        if not (self.dims or self.packs):
            return d
        return d.substitute(self.dim_map())

    def shape(self, shape: Sequence[ShapeItem]) -> Shape:
        if not (self.dims or self.packs):
            return tuple(shape)
        out: list[ShapeItem] = []
        mapping = self.dim_map()
        for item in shape:
            if type(item) is Symbol:
                bound = self.packs.get(item)
                if bound is None:
                    out.append(item)
                else:
                    out.extend(bound)
            else:
                assert isinstance(item, Dim)
                out.append(item.substitute(mapping))
        return tuple(out)

    def dtype(self, dt: DType) -> DType:
        if isinstance(dt, DTypeVar):
            return self.dtypes.get(dt, dt)
        return dt

    def apply(self, t: Type) -> Type:
        """Substitute into any type (blocks and structs compose their own bindings)."""
        if self.is_empty:
            return t
        if isinstance(t, TensorType):
            return TensorType(self.shape(t.shape), self.dtype(t.dtype))
        if isinstance(t, ScalarType):
            return scalar(self.dtype(t.dtype))
        if isinstance(t, OptionalType):
            return OptionalType(self.apply(t.inner))
        if isinstance(t, TupleType):
            return TupleType(tuple(self.apply(e) for e in t.elems))
        if isinstance(t, BlockType):
            return BlockType(t.info, self.compose(t.subst))
        if isinstance(t, StructType):
            return StructType(t.info, self.compose(t.subst))
        if isinstance(t, ArrayType):
            return ArrayType(self.apply(t.elem), self.dim(t.length))
        if isinstance(t, CtIntType):
            return CtIntType(self.dim(t.value))
        if isinstance(t, ShapeType):
            return ShapeType(self.shape(t.dims))
        return t

    def compose(self, inner: Subst) -> Subst:
        """`inner`'s bindings with this substitution applied to their values."""
        return Subst(
            {k: self.dim(v) for k, v in inner.dims.items()},
            {k: self.shape(v) for k, v in inner.packs.items()},
            {k: self.dtype(v) for k, v in inner.dtypes.items()},
        )

    def value_str(self, key: Symbol | DTypeVar) -> str:
        if isinstance(key, DTypeVar):
            return str(self.dtypes.get(key, key))
        if key.is_pack:
            bound = self.packs.get(key)
            return f"*{key.name}" if bound is None else f"[{shape_str(bound)}]"
        d = self.dims.get(key)
        return key.name if d is None else str(d)

    def args_str(self, generics: Sequence[object]) -> str:
        """`<H, 4>` for printing an instantiated block or struct."""
        keys = [getattr(g, "key", None) for g in generics]
        shown = [self.value_str(k) for k in keys if k is not None]
        return "<" + ", ".join(shown) + ">" if shown else ""


def shape_numel(items: Iterable[ShapeItem]) -> Dim:
    """The element count of a shape: a product, packs contributing `numel(*S)` (10.3)."""
    total = Dim.const(1)
    for item in items:
        if type(item) is Symbol:
            total = total * Dim.pack_size(item)
        else:
            assert isinstance(item, Dim)
            total = total * item
    return total
