"""JSON encodings of the plan's values: dims, shapes, dtypes, types, generics (language.md 19).

Stage: a helper of `linnet.plan`. In: the checker's semantic objects
(`check.dims.Dim`, `check.types.Type`, `GenericInfo`, `Constraint`). Out:
plain JSON-ready values, with dimensions kept symbolic:

- `dim`: an integer, `{"sym": n, "name": "H"}`, `{"packsize": n, "name": "S"}`
  (the element count of a pack), or `{"op": "add"|"mul"|"floordiv"|"mod"|"min"|"max",
  "args": [dim]}`. A `Dim` is a polynomial in normal form (6.4), so it becomes
  an `add` of `mul` terms, each a coefficient times its atoms; subtraction is a
  negative coefficient.
- `unit` (one element of a shape): a `dim`, or `{"pack": n, "name": "S"}`.
- `dtype`: a name (`"bf16"`) or `{"var": n, "name": "T"}`.
- `type`: `{"kind": "scalar"|"tensor"|"tuple"|"optional"|"array"|"block"|"struct"|"enum", ...}`;
  compile-time values that have not become runtime values (5.4) get the kinds
  `dim` (with its `value`), `float_literal`, `none` and `shape`; a call
  without a result has kind `unit`.

Symbols (`Dim` and `Shape` generics) and dtype variables are numbered in the
order the encoder first meets them, so one checked program always yields the
same numbers; `sym` and `var` are two separate counters. Two generics with
one name in different declarations are different symbols with different
numbers (5.5: a generic equals only itself).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from linnet.check import dims as dims_mod
from linnet.check.decls import Constraint, GenericInfo
from linnet.check.dims import Dim, Symbol
from linnet.check.types import (
    NONE,
    UNIT,
    ArrayType,
    BlockType,
    CtFloatType,
    CtIntType,
    DType,
    DTypeVar,
    EnumType,
    GenericValue,
    OptionalType,
    ScalarType,
    ShapeItem,
    ShapeType,
    StructType,
    Subst,
    TensorType,
    TupleType,
    Type,
)
from linnet.errors import InternalError

JSON = object  # a value `json.dumps` accepts: dict, list, str, int, float, bool, None

_OP_NAMES = {
    dims_mod.FLOOR: "floordiv",
    dims_mod.MOD: "mod",
    dims_mod.MIN: "min",
    dims_mod.MAX: "max",
}

# Generic kinds of 5.5 as the plan names them; dtype classes go to `class`.
_KINDS = {"Dim": "dim", "Shape": "shape"}


class Numbering:
    """Document-wide numbers for symbols and dtype variables, in order of first use."""

    __slots__ = ("syms", "vars")

    def __init__(self) -> None:
        self.syms: dict[Symbol, int] = {}
        self.vars: dict[DTypeVar, int] = {}

    def sym(self, s: Symbol) -> int:
        n = self.syms.get(s)
        if n is None:
            n = self.syms[s] = len(self.syms)
        return n

    def var(self, v: DTypeVar) -> int:
        n = self.vars.get(v)
        if n is None:
            n = self.vars[v] = len(self.vars)
        return n


class ValueEncoder:
    """Encodes dims, shapes, dtypes and types; `subst` is applied first (for callee defaults)."""

    __slots__ = ("numbering", "subst")

    def __init__(self, numbering: Numbering, subst: Subst | None = None) -> None:
        self.numbering = numbering
        self.subst = subst if subst is not None and not subst.is_empty else None

    def with_subst(self, subst: Subst) -> ValueEncoder:
        """An encoder that first substitutes `subst` (composed with this one's)."""
        combined = subst if self.subst is None else self.subst.compose(subst)
        return ValueEncoder(self.numbering, combined)

    # -- dimensions ------------------------------------------------------------------

    def dim(self, d: Dim) -> JSON:
        if self.subst is not None:
            d = self.subst.dim(d)
        return self._dim(d)

    def _dim(self, d: Dim) -> JSON:
        value = d.as_int()
        if value is not None:
            return value
        terms: list[JSON] = []
        for mono, coeff in d.terms:
            factors: list[JSON] = [self._atom(a) for a in mono]
            if not factors:
                terms.append(coeff)
                continue
            if coeff != 1:
                factors.insert(0, coeff)
            terms.append(factors[0] if len(factors) == 1 else {"op": "mul", "args": factors})
        return terms[0] if len(terms) == 1 else {"op": "add", "args": terms}

    def _atom(self, atom: Symbol | dims_mod.Op) -> JSON:
        if type(atom) is Symbol:
            if atom.is_pack:
                return {"packsize": self.numbering.sym(atom), "name": atom.name}
            return {"sym": self.numbering.sym(atom), "name": atom.name}
        assert isinstance(atom, dims_mod.Op)
        return {"op": _OP_NAMES[atom.kind], "args": [self._dim(atom.a), self._dim(atom.b)]}

    def unit(self, item: ShapeItem) -> JSON:
        if type(item) is Symbol:
            return {"pack": self.numbering.sym(item), "name": item.name}
        assert isinstance(item, Dim)
        return self._dim(item)

    def shape(self, items: Sequence[ShapeItem]) -> list[JSON]:
        if self.subst is not None:
            items = self.subst.shape(items)
        return [self.unit(item) for item in items]

    # -- dtypes and types --------------------------------------------------------------

    def dtype(self, dt: DType) -> JSON:
        if self.subst is not None:
            dt = self.subst.dtype(dt)
        if isinstance(dt, DTypeVar):
            return {"var": self.numbering.var(dt), "name": dt.name}
        return dt.name

    def type_(self, t: Type) -> JSON:
        if self.subst is not None:
            t = self.subst.apply(t)
        return _TypeWriter(self).write(t)

    def results(self, t: Type | None) -> list[JSON]:
        """A function's `results`: the elements of a tuple result, one type, or none (11.3)."""
        if t is None or t is UNIT:
            return []
        if isinstance(t, TupleType):
            return [self.type_(e) for e in t.elems]
        return [self.type_(t)]

    # -- generics and constraints --------------------------------------------------------

    def generic(self, g: GenericInfo) -> JSON:
        """`{name, kind, sym|var, default?, class?}` (19 "generic")."""
        out: dict[str, JSON] = {"name": g.name, "kind": _KINDS.get(g.kind, "dtype")}
        key = g.key
        if isinstance(key, DTypeVar):
            out["var"] = self.numbering.var(key)
            out["class"] = g.kind
        else:
            out["sym"] = self.numbering.sym(key)
        if g.has_default and g.default is not None:
            out["default"] = self.generic_value(g.kind, g.default)
        return out

    def generic_value(self, kind: str, value: GenericValue) -> JSON:
        """A generic's value: a dim, a list of units for a pack, or a dtype."""
        if kind == "Dim":
            assert isinstance(value, Dim)
            return self.dim(value)
        if kind == "Shape":
            assert isinstance(value, tuple)
            return self.shape(value)
        assert not isinstance(value, (Dim, tuple))
        return self.dtype(value)

    def generics_of(self, generics: Iterable[GenericInfo], subst: Subst) -> list[JSON]:
        """The values `subst` gives `generics`, in declaration order (unbound: themselves)."""
        out: list[JSON] = []
        for g in generics:
            key = g.key
            if isinstance(key, DTypeVar):
                out.append(self.dtype(subst.dtype(key)))
            elif key.is_pack:
                packs = subst.packs.get(key)
                out.append(self.shape(packs if packs is not None else (key,)))
            else:
                out.append(self.dim(subst.dim(Dim.symbol(key))))
        return out

    def substitution(self, subst: Subst) -> list[JSON]:
        """A call's `substitution`: callee numbers mapped to caller values (19)."""
        out: list[JSON] = []
        for sym, d in subst.dims.items():
            out.append({"sym": self.numbering.sym(sym), "name": sym.name, "value": self.dim(d)})
        for sym, items in subst.packs.items():
            out.append(
                {"pack": self.numbering.sym(sym), "name": sym.name, "value": self.shape(items)}
            )
        for var, dt in subst.dtypes.items():
            out.append({"var": self.numbering.var(var), "name": var.name, "value": self.dtype(dt)})
        return out

    def constraint(self, c: Constraint) -> JSON:
        return {"lhs": self.dim(c.lhs), "rel": c.rel, "rhs": self.dim(c.rhs)}


class _TypeWriter:
    """One `type` encoding; substitution already applied by the caller."""

    __slots__ = ("enc",)

    def __init__(self, enc: ValueEncoder) -> None:
        # A plain encoder: the type handed to `write` is already substituted.
        self.enc = ValueEncoder(enc.numbering)

    def write(self, t: Type) -> JSON:
        enc = self.enc
        if isinstance(t, ScalarType):
            return {"kind": "scalar", "dtype": enc.dtype(t.dtype)}
        if isinstance(t, TensorType):
            return {"kind": "tensor", "shape": enc.shape(t.shape), "dtype": enc.dtype(t.dtype)}
        if isinstance(t, TupleType):
            return {"kind": "tuple", "elems": [self.write(e) for e in t.elems]}
        if isinstance(t, OptionalType):
            return {"kind": "optional", "inner": self.write(t.inner)}
        if isinstance(t, ArrayType):
            return {"kind": "array", "elem": self.write(t.elem), "length": enc.dim(t.length)}
        if isinstance(t, (BlockType, StructType)):
            kind = "block" if isinstance(t, BlockType) else "struct"
            return {
                "kind": kind,
                "name": t.info.name,
                "module": t.info.module.name,
                "args": enc.generics_of(t.info.generics, t.subst),
            }
        if isinstance(t, EnumType):
            return {"kind": "enum", "name": t.info.name, "module": t.info.module.name, "args": []}
        if isinstance(t, CtIntType):
            return {"kind": "dim", "value": enc.dim(t.value)}
        if isinstance(t, CtFloatType):
            return {"kind": "float_literal"}
        if t is NONE:
            return {"kind": "none"}
        if isinstance(t, ShapeType):
            return {"kind": "shape", "dims": enc.shape(t.dims)}
        if t is UNIT:
            return {"kind": "unit"}
        raise InternalError(f"the plan cannot encode the type {t!r}")
