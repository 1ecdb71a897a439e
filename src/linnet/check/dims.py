"""Symbolic dimensions: the normal form of language.md 6.4.

Stage: used by the checker (and later by binding) whenever a dimension is
built, compared, substituted or evaluated. Input: constants, `Dim` generic
symbols, shape-pack counts and the operators of 6.1 (`+ - * / % min max`).
Output: an immutable, hashable `Dim` in normal form, so that two expressions
with the same normal form compare equal (`2 * H / 2` and `H`).

A `Dim` is a polynomial with i64 coefficients over *atoms*: symbols, pack
counts `numel(*S)` (the pack's `Symbol` itself is the atom) and the opaque
applications `floor(a / b)`, `mod(a, b)`, `min(a, b)`, `max(a, b)` whose
arguments are normalised `Dim`s. Constructing an opaque atom simplifies
eagerly without facts (6.4 "Normal form"); everything that needs facts lives
in `prover.py`.

Semantics (6.1): `/` is floor division and `%` the remainder with the
divisor's sign, exactly Python's `//` and `%`. An expression with a zero
divisor is undefined: the eager rules may assume every divisor is non-zero
(`(N * K) / N` is `K`), and `evaluate` raises on a zero divisor.

>>> b, h = Symbol("B"), Symbol("H")
>>> print(Dim.symbol(b) * Dim.symbol(h) * 2 / 2)
B * H
>>> print((2 * Dim.symbol(h) + 1).floordiv(2))
H
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from math import gcd
from typing import Final, Union

I64_MIN: Final = -(1 << 63)
I64_MAX: Final = (1 << 63) - 1

FLOOR: Final = 1
MOD: Final = 2
MIN: Final = 3
MAX: Final = 4


class DimOverflow(ArithmeticError):
    """A coefficient left the i64 range while folding (the checker reports E2123)."""


class DimEvalError(ValueError):
    """A dimension could not be evaluated: an unbound symbol or a zero divisor."""


_serials = itertools.count(1)


class Symbol:
    """One declared `Dim` generic, or one `Shape` pack (then its atom is `numel(*S)`).

    Symbols are identity-equal: two generics named `N` in different functions
    are different symbols. `serial` records the global declaration order; the
    prover solves equalities for the most recently declared symbol (6.4) and
    the printer orders factors by it.
    """

    __slots__ = ("_dim", "_key", "is_pack", "name", "serial")

    def __init__(self, name: str, is_pack: bool = False) -> None:
        self.name = name
        self.is_pack = is_pack
        self.serial = next(_serials)
        self._key: tuple[int, int] = (0, self.serial)
        self._dim: Dim | None = None

    def __repr__(self) -> str:
        star = "*" if self.is_pack else ""
        return f"Symbol({star}{self.name}#{self.serial})"


class Op:
    """An opaque atom `floor(a / b)`, `mod(a, b)`, `min(a, b)` or `max(a, b)`.

    Structurally equal; built only by the eager constructors below, which
    guarantee normalised arguments (and a canonical order for min/max).
    """

    __slots__ = ("_hash", "_k", "a", "b", "kind")

    def __init__(self, kind: int, a: Dim, b: Dim) -> None:
        self.kind = kind
        self.a = a
        self.b = b
        self._k: tuple[object, ...] | None = None
        self._hash = hash((kind, a._hash, b._hash))

    @property
    def _key(self) -> tuple[object, ...]:
        # Computed on first use: only sorting needs it.
        k = self._k
        if k is None:
            k = (1, self.kind, self.a.key, self.b.key)
            self._k = k
        return k

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Op):
            return False
        return (
            self._hash == other._hash
            and self.kind == other.kind
            and self.a == other.a
            and self.b == other.b
        )

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"Op({_fmt_atom(self)})"


Atom = Union[Symbol, Op]  # noqa: UP007 - a runtime alias used in annotations
Mono = tuple[Atom, ...]  # sorted by atom key; repetition encodes powers
Terms = tuple[tuple[Mono, int], ...]

_MONO_KEYS: dict[Mono, tuple[object, ...]] = {(): (0, ())}


def _mono_key(mono: Mono) -> tuple[object, ...]:
    """Terms sort by degree (descending), then by their atoms' keys; constant last."""
    key = _MONO_KEYS.get(mono)
    if key is None:
        key = (-len(mono), tuple(a._key for a in mono))
        _MONO_KEYS[mono] = key
    return key


def _atom_key(a: Atom) -> tuple[object, ...]:
    return a._key


def _mono_mul(m1: Mono, m2: Mono) -> Mono:
    if not m1:
        return m2
    if not m2:
        return m1
    if len(m1) == 1 and len(m2) == 1:
        return (m1[0], m2[0]) if m1[0]._key <= m2[0]._key else (m2[0], m1[0])
    return tuple(sorted(m1 + m2, key=_atom_key))


def mono_div(mono: Mono, div: Mono) -> Mono | None:
    """`mono / div` as a multiset difference, or None if `div` is not contained."""
    if not div:
        return mono
    rest = list(mono)
    for atom in div:
        for i, r in enumerate(rest):
            if r is atom or r == atom:
                del rest[i]
                break
        else:
            return None
    return tuple(rest)


def _check(c: int) -> int:
    if c > I64_MAX or c < I64_MIN:
        raise DimOverflow(f"integer arithmetic overflows: {c} does not fit in i64")
    return c


class Dim:
    """An immutable dimension in normal form (language.md 6.4).

    `==` compares normal forms: it means "provably equal without facts".
    Arithmetic accepts `Dim` or `int` on either side.
    """

    __slots__ = ("_has_ops", "_hash", "_key", "_str", "_syms", "_terms")

    _CONSTS: dict[int, Dim]

    def __init__(self, terms: Terms) -> None:
        # Callers use the constructors; only this module and the prover build
        # a Dim from terms, which must already be in normal form and order.
        self._terms = terms
        self._hash = hash(terms)
        self._key: tuple[object, ...] | None = None
        self._syms: frozenset[Symbol] | None = None
        self._str: str | None = None
        self._has_ops: bool | None = None

    # --- constructors -------------------------------------------------------

    @staticmethod
    def const(v: int) -> Dim:
        """The constant `v` (must fit in i64)."""
        d = Dim._CONSTS.get(v)
        if d is None:
            d = Dim((((), _check(v)),) if v else ())
            if len(Dim._CONSTS) < 4096:
                Dim._CONSTS[v] = d
        return d

    @staticmethod
    def symbol(s: Symbol) -> Dim:
        """The dimension `s` for a `Dim` generic."""
        if s.is_pack:
            raise ValueError(f"`{s.name}` is a shape pack; use Dim.pack_size")
        return atom_dim(s)

    @staticmethod
    def pack_size(p: Symbol) -> Dim:
        """`numel(*p)`: the element count of the pack `p` (its dimensions' product)."""
        if not p.is_pack:
            raise ValueError(f"`{p.name}` is not a shape pack; use Dim.symbol")
        return atom_dim(p)

    # --- inspection ---------------------------------------------------------

    def as_int(self) -> int | None:
        """The value if this is a constant, else None."""
        t = self._terms
        if not t:
            return 0
        if len(t) == 1 and not t[0][0]:
            return t[0][1]
        return None

    def as_symbol(self) -> Symbol | None:
        """The symbol if this is exactly one `Dim` generic (not a pack count)."""
        t = self._terms
        if len(t) == 1 and t[0][1] == 1 and len(t[0][0]) == 1:
            a = t[0][0][0]
            if type(a) is Symbol and not a.is_pack:
                return a
        return None

    def symbols(self) -> frozenset[Symbol]:
        """Every symbol (and pack) mentioned, nested atoms included."""
        s = self._syms
        if s is None:
            acc: set[Symbol] = set()
            for mono, _ in self._terms:
                for a in mono:
                    if type(a) is Symbol:
                        acc.add(a)
                    else:
                        assert isinstance(a, Op)
                        acc |= a.a.symbols()
                        acc |= a.b.symbols()
            s = frozenset(acc)
            self._syms = s
        return s

    def has_ops(self) -> bool:
        """Whether any floor/mod/min/max atom occurs (the prover's fast path)."""
        h = self._has_ops
        if h is None:
            h = any(type(a) is Op for mono, _ in self._terms for a in mono)
            self._has_ops = h
        return h

    @property
    def key(self) -> tuple[object, ...]:
        """A total, deterministic sort key (used to order min/max arguments)."""
        k = self._key
        if k is None:
            k = tuple((_mono_key(m), c) for m, c in self._terms)
            self._key = k
        return k

    @property
    def terms(self) -> Terms:
        """The normal form: `(monomial, coefficient)` pairs, constant last."""
        return self._terms

    # --- equality and hashing ---------------------------------------------

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Dim):
            return NotImplemented
        return self._hash == other._hash and self._terms == other._terms

    def __hash__(self) -> int:
        return self._hash

    # --- arithmetic ---------------------------------------------------------

    def __add__(self, other: Dim | int) -> Dim:
        o = _coerce(other)
        if not o._terms:
            return self
        if not self._terms:
            return o
        m = dict(self._terms)
        for mono, c in o._terms:
            m[mono] = m.get(mono, 0) + c
        return _from_map(m)

    __radd__ = __add__

    def __neg__(self) -> Dim:
        if not self._terms:
            return self
        return Dim(tuple((m, _check(-c)) for m, c in self._terms))

    def __sub__(self, other: Dim | int) -> Dim:
        return self + (-_coerce(other))

    def __rsub__(self, other: Dim | int) -> Dim:
        return _coerce(other) + (-self)

    def __mul__(self, other: Dim | int) -> Dim:
        o = _coerce(other)
        if not self._terms or not o._terms:
            return _ZERO
        c = o.as_int()
        if c is not None:
            return self._scale(c)
        c = self.as_int()
        if c is not None:
            return o._scale(c)
        if len(self._terms) == 1 and len(o._terms) == 1:
            (m1, c1), (m2, c2) = self._terms[0], o._terms[0]
            return Dim(((_mono_mul(m1, m2), _check(c1 * c2)),))
        m: dict[Mono, int] = {}
        for m1, c1 in self._terms:
            for m2, c2 in o._terms:
                mono = _mono_mul(m1, m2)
                m[mono] = m.get(mono, 0) + c1 * c2
        return _from_map(m)

    __rmul__ = __mul__

    def _scale(self, c: int) -> Dim:
        if c == 1:
            return self
        if c == 0:
            return _ZERO
        return Dim(tuple((m, _check(k * c)) for m, k in self._terms))

    def floordiv(self, other: Dim | int) -> Dim:
        """`self / other` (floor division), simplified eagerly."""
        return _floor(self, _coerce(other))

    def mod(self, other: Dim | int) -> Dim:
        """`self % other` (remainder with the divisor's sign), simplified eagerly."""
        return _mod(self, _coerce(other))

    def minimum(self, other: Dim | int) -> Dim:
        """`min(self, other)`, simplified eagerly."""
        return _minmax(MIN, self, _coerce(other))

    def maximum(self, other: Dim | int) -> Dim:
        """`max(self, other)`, simplified eagerly."""
        return _minmax(MAX, self, _coerce(other))

    def __floordiv__(self, other: Dim | int) -> Dim:
        return self.floordiv(other)

    def __truediv__(self, other: Dim | int) -> Dim:
        # Linnet's `/` on dimensions is floor division (6.1).
        return self.floordiv(other)

    def __mod__(self, other: Dim | int) -> Dim:
        return self.mod(other)

    # --- substitution and evaluation --------------------------------------

    def substitute(self, mapping: Mapping[Symbol, Dim]) -> Dim:
        """Replace symbols (and pack counts) by dimensions, re-normalising."""
        if not mapping or not self._terms:
            return self
        syms = self.symbols()
        if not any(s in mapping for s in syms):
            return self
        memo: dict[Atom, Dim] = {}
        acc = _ZERO
        for mono, c in self._terms:
            t = Dim.const(c)
            for a in mono:
                r = memo.get(a)
                if r is None:
                    r = _subst_atom(a, mapping)
                    memo[a] = r
                t = t * r
            acc = acc + t
        return acc

    def evaluate(
        self,
        values: Mapping[Symbol, int],
        packs: Mapping[Symbol, Sequence[int]] | None = None,
    ) -> int:
        """The value under a concrete binding, with integer floor division (6.7).

        A pack's count comes from `packs` (the product of its dimensions) or,
        failing that, from `values`. Raises `DimEvalError` on an unbound symbol
        or a zero divisor and `DimOverflow` when a value leaves the i64 range.
        """
        total = 0
        for mono, c in self._terms:
            v = c
            for a in mono:
                v *= _eval_atom(a, values, packs)
            total += _check(v)
        return _check(total)

    # --- printing -----------------------------------------------------------

    def __str__(self) -> str:
        s = self._str
        if s is None:
            s = _fmt_sum(self)
            self._str = s
        return s

    def __repr__(self) -> str:
        return f"Dim({str(self)!r})"


Dim._CONSTS = {}
_ZERO: Final = Dim.const(0)


def _coerce(v: Dim | int) -> Dim:
    if isinstance(v, Dim):
        return v
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"expected Dim or int, got {type(v).__name__}")
    return Dim.const(v)


def _from_map(m: dict[Mono, int]) -> Dim:
    items = [(mono, c) for mono, c in m.items() if c]
    for _, c in items:
        if c > I64_MAX or c < I64_MIN:
            _check(c)
    if len(items) > 1:
        items.sort(key=lambda t: _mono_key(t[0]))
    return Dim(tuple(items))


def atom_dim(a: Atom) -> Dim:
    """The dimension consisting of the single atom `a` (cached for symbols)."""
    if type(a) is Symbol:
        d = a._dim
        if d is None:
            d = Dim((((a,), 1),))
            a._dim = d
        return d
    return Dim((((a,), 1),))


def _op_dim(kind: int, a: Dim, b: Dim) -> Dim:
    return Dim((((Op(kind, a, b),), 1),))


def _lead(d: Dim) -> tuple[Mono, int]:
    return d._terms[0]


def _content(d: Dim) -> int:
    g = 0
    for _, c in d._terms:
        g = gcd(g, c)
    return g


def _exact_div_const(d: Dim, g: int) -> Dim:
    return Dim(tuple((m, c // g) for m, c in d._terms))


def exact_multiple(a: Dim, b: Dim) -> int | None:
    """The integer `k` with `a == k * b`, if there is one (b non-zero)."""
    if not b._terms:
        return None
    if not a._terms:
        return 0
    if len(a._terms) != len(b._terms):
        return None
    (am, ac), (bm, bc) = a._terms[0], b._terms[0]
    if am != bm or ac % bc:
        return None
    k = ac // bc
    for (m1, c1), (m2, c2) in zip(a._terms, b._terms, strict=True):
        if m1 != m2 or c1 != c2 * k:
            return None
    return k


# --- eager construction of the opaque atoms (6.4 "Normal form") -------------


def _floor(a: Dim, b: Dim) -> Dim:
    bc = b.as_int()
    if bc is not None:
        if bc == 0:
            return _op_dim(FLOOR, a, b)  # undefined; kept so it can be reported
        ac = a.as_int()
        if ac is not None:
            return Dim.const(ac // bc)
        if bc < 0:  # floor(a / c) == floor(-a / -c)
            a, bc = -a, -bc
        if bc == 1:
            return a
        return _floor_const(a, bc)
    if not a._terms:
        return _ZERO
    a, b, _, _ = _normalise_pair(a, b)
    if len(b._terms) == 1:
        # `(N * K + R) / N` is `K + R / N`: split off the terms `b` divides exactly.
        bmono, bcoef = b._terms[0]
        quot: dict[Mono, int] = {}
        rest: dict[Mono, int] = {}
        for mono, c in a._terms:
            q = mono_div(mono, bmono)
            if q is not None and c % bcoef == 0:
                quot[q] = quot.get(q, 0) + c // bcoef
            else:
                rest[mono] = c
        if quot:
            return _from_map(quot) + _floor(_from_map(rest), b)
    else:
        k = exact_multiple(a, b)
        if k is not None:
            return Dim.const(k)
    return _op_dim(FLOOR, a, b)


def _split_const_divisor(a: Dim, c: int) -> tuple[Dim, Dim]:
    """Write `a = c * q + r` with every coefficient of `r` in `[0, c)`."""
    q: dict[Mono, int] = {}
    r: dict[Mono, int] = {}
    for mono, coef in a._terms:
        qq, rr = divmod(coef, c)
        if qq:
            q[mono] = qq
        if rr:
            r[mono] = rr
    return _from_map(q), _from_map(r)


def _reduce_by_gcd(r: Dim, c: int) -> tuple[int, Dim, int, int]:
    """For `r = g * r1 + k` (g the gcd of `c` and r's non-constant coefficients).

    Returns `(g, r1 + k // g, c // g, k % g)`; floor and mod by `c` then reduce
    to floor and mod of the second item by the third.
    """
    k = 0
    g = c
    for mono, coef in r._terms:
        if mono:
            g = gcd(g, coef)
        else:
            k = coef
    if g == 1:
        return 1, r, c, 0
    body = Dim(tuple((m, coef // g) for m, coef in r._terms if m))
    return g, body + (k // g), c // g, k % g


def _floor_const(a: Dim, c: int) -> Dim:
    # a = c*Q + R with R's coefficients in [0, c): floor(a/c) = Q + floor(R/c).
    # So `(2D + 1) / 2` is `D` and `(8 * D) / 8` is `D` (6.4).
    q, r = _split_const_divisor(a, c)
    if r.as_int() is not None:
        return q  # 0 <= R < c
    _, r1, c1, _ = _reduce_by_gcd(r, c)
    return q + _op_dim(FLOOR, r1, Dim.const(c1))


def _mod(a: Dim, b: Dim) -> Dim:
    bc = b.as_int()
    if bc is not None:
        if bc == 0:
            return _op_dim(MOD, a, b)  # undefined; kept so it can be reported
        ac = a.as_int()
        if ac is not None:
            return Dim.const(ac % bc)
        if bc < 0:  # the remainder takes the divisor's sign: a % -c == -((-a) % c)
            return -_mod_const(-a, -bc)
        return _mod_const(a, bc)
    if not a._terms:
        return _ZERO
    a, b, neg, scale = _normalise_pair(a, b)
    if len(b._terms) == 1:
        bmono, bcoef = b._terms[0]
        rest: dict[Mono, int] = {}
        dropped = False
        for mono, c in a._terms:
            if c % bcoef == 0 and mono_div(mono, bmono) is not None:
                dropped = True
            else:
                rest[mono] = c
        if dropped:
            a = _from_map(rest)
            if not a._terms:
                return _ZERO
            r = _mod(a, b) * scale
            return -r if neg else r
    elif exact_multiple(a, b) is not None:
        return _ZERO
    r = _op_dim(MOD, a, b) * scale
    return -r if neg else r


def _mod_const(a: Dim, c: int) -> Dim:
    if c == 1:
        return _ZERO
    # Only the remainders of the coefficients matter: `(8 * D + 3) % 8` is 3.
    _, r = _split_const_divisor(a, c)
    if r.as_int() is not None:
        return r
    g, r1, c1, low = _reduce_by_gcd(r, c)
    return _op_dim(MOD, r1, Dim.const(c1)) * g + low


def _normalise_pair(a: Dim, b: Dim) -> tuple[Dim, Dim, bool, int]:
    """Make `b`'s leading coefficient positive and divide out the common content.

    With `neg` and `g` returned, `floor(a / b) == floor(a' / b')` and
    `mod(a, b) == (-1 if neg else 1) * g * mod(a', b')`.
    """
    neg = _lead(b)[1] < 0
    if neg:
        a, b = -a, -b
    g = gcd(_content(a), _content(b))
    if g > 1:
        a, b = _exact_div_const(a, g), _exact_div_const(b, g)
    return a, b, neg, max(g, 1)


def _lattice_operands(kind: int, d: Dim) -> list[Dim]:
    """The operands of `d` read as a nest of `kind` (`min(a, min(b, c))` is `[a, b, c]`).

    Only a bare atom (coefficient 1, nothing added) is a nest; anything else
    is one operand.
    """
    if len(d._terms) == 1:
        mono, coeff = d._terms[0]
        if coeff == 1 and len(mono) == 1:
            atom = mono[0]
            if type(atom) is Op and atom.kind == kind:
                return _lattice_operands(kind, atom.a) + _lattice_operands(kind, atom.b)
    return [d]


def _prune_lattice(kind: int, operands: list[Dim]) -> list[Dim]:
    """Drop the operands of a flattened `min` (`max`) that can never be chosen.

    Sound for every value of the symbols (no facts needed):
    - of two operands differing by a constant, only the smaller (larger) one
      can be the `min` (`max`): this merges repeats (`min(a, min(b, a))` is
      `min(a, b)`) and folds constants (`min(3, min(8, N))` is `min(3, N)`);
    - absorption: an operand `max(...)` (`min(...)`) whose own operands
      include every operand of another one is at least (at most) that one
      (`min(a, max(a, b))` is `a`).
    Equal values keep the operand with the smaller key, so the result does not
    depend on the order of the operands.
    """
    kept: list[Dim] = []
    for d in operands:
        for i, k in enumerate(kept):
            diff = (d - k).as_int()
            if diff is not None:
                better = diff < 0 if kind == MIN else diff > 0
                if better or (diff == 0 and d.key < k.key):
                    kept[i] = d
                break
        else:
            kept.append(d)
    other = MAX if kind == MIN else MIN
    sets = [frozenset(_lattice_operands(other, d)) for d in kept]

    def dominated(j: int) -> bool:
        for i, s in enumerate(sets):
            if i != j and s <= sets[j] and (s != sets[j] or kept[i].key < kept[j].key):
                return True
        return False

    return [d for j, d in enumerate(kept) if not dominated(j)]


def _minmax(kind: int, a: Dim, b: Dim) -> Dim:
    if a == b:
        return a
    flat = _lattice_operands(kind, a) + _lattice_operands(kind, b)
    pruned = _prune_lattice(kind, flat)
    if len(pruned) < len(flat):
        # Rebuild from fewer operands, in a canonical order (constants first in
        # min, last in max), so `min(a, min(b, a))` and `min(min(a, b), b)`
        # reach the same form; each nested call has fewer operands again.
        const_last = kind == MAX
        pruned.sort(key=lambda d: ((d.as_int() is not None) == const_last, d.key))
        acc = pruned[-1]
        for d in reversed(pruned[:-1]):
            acc = _minmax(kind, d, acc)
        return acc
    diff = (a - b).as_int()
    if diff is not None:
        if kind == MIN:
            return b if diff > 0 else a
        return a if diff > 0 else b
    # min(X + C, Y + C) == min(X, Y) + C for the terms both share.
    bterms = dict(b._terms)
    common = {m: c for m, c in a._terms if bterms.get(m) == c}
    if common:
        shared = _from_map(common)
        return shared + _minmax(kind, a - shared, b - shared)
    # Canonical order: constants first in min (`min(3, M)`), last in max
    # (`max(min(3, S) - 1, 0)`), matching how slices read in 9.3 and 9.7.
    const_last = kind == MAX
    ka = ((a.as_int() is not None) == const_last, a.key)
    kb = ((b.as_int() is not None) == const_last, b.key)
    if kb < ka:
        a, b = b, a
    return _op_dim(kind, a, b)


def _build(kind: int, a: Dim, b: Dim) -> Dim:
    if kind == FLOOR:
        return _floor(a, b)
    if kind == MOD:
        return _mod(a, b)
    return _minmax(kind, a, b)


def rebuild(op: Op, a: Dim, b: Dim) -> Dim:
    """The eager normal form of `op` with its arguments replaced by `a`, `b`."""
    if a is op.a and b is op.b:
        return atom_dim(op)
    return _build(op.kind, a, b)


def _subst_atom(a: Atom, mapping: Mapping[Symbol, Dim]) -> Dim:
    if type(a) is Symbol:
        r = mapping.get(a)
        return atom_dim(a) if r is None else _coerce(r)
    assert isinstance(a, Op)
    return rebuild(a, a.a.substitute(mapping), a.b.substitute(mapping))


def _eval_atom(
    a: Atom,
    values: Mapping[Symbol, int],
    packs: Mapping[Symbol, Sequence[int]] | None,
) -> int:
    if type(a) is Symbol:
        if a.is_pack and packs is not None and a in packs:
            n = 1
            for size in packs[a]:
                n *= size
            return _check(n)
        v = values.get(a)
        if v is None:
            what = f"shape pack `*{a.name}`" if a.is_pack else f"dimension `{a.name}`"
            raise DimEvalError(f"{what} is not bound")
        return v
    assert isinstance(a, Op)
    x = a.a.evaluate(values, packs)
    y = a.b.evaluate(values, packs)
    if a.kind == MIN:
        return min(x, y)
    if a.kind == MAX:
        return max(x, y)
    if y == 0:
        raise DimEvalError(f"division by zero in `{_fmt_atom(a)}`")
    return x // y if a.kind == FLOOR else x % y


# --- printing: source-like text with minimal parentheses (7.4 precedence) ---


def _fmt_sum(d: Dim) -> str:
    terms = d._terms
    if not terms:
        return "0"
    # Positive terms first (`3 - N`, `H + 2 * Pad - K`), each group in normal order.
    ordered = [t for t in terms if t[1] > 0] + [t for t in terms if t[1] < 0]
    parts: list[str] = []
    for i, (mono, c) in enumerate(ordered):
        body = _fmt_term(mono, abs(c), i == 0 and c < 0)
        if i == 0:
            parts.append("-" + body if c < 0 else body)
        else:
            parts.append((" - " if c < 0 else " + ") + body)
    return "".join(parts)


def _fmt_term(mono: Mono, c: int, negated: bool) -> str:
    factors: list[str] = []
    if c != 1 or not mono:
        factors.append(str(c))
    alone = not factors and len(mono) == 1 and not negated
    for a in mono:
        s = _fmt_atom(a)
        if type(a) is Op and a.kind in (FLOOR, MOD) and not alone:
            s = f"({s})"  # `B * (H / N)`: `B * H / N` would mean `(B * H) / N`
        factors.append(s)
    return " * ".join(factors)


def _fmt_atom(a: Atom) -> str:
    if type(a) is Symbol:
        return f"numel(*{a.name})" if a.is_pack else a.name
    assert isinstance(a, Op)
    if a.kind == MIN:
        return f"min({_fmt_sum(a.a)}, {_fmt_sum(a.b)})"
    if a.kind == MAX:
        return f"max({_fmt_sum(a.a)}, {_fmt_sum(a.b)})"
    left = _fmt_sum(a.a)
    if len(a.a._terms) > 1:
        left = f"({left})"
    op = " / " if a.kind == FLOOR else " % "
    return left + op + _fmt_divisor(a.b)


def _fmt_divisor(b: Dim) -> str:
    c = b.as_int()
    if c is not None and c >= 0:
        return str(c)
    t = b._terms
    if len(t) == 1 and t[0][1] == 1 and len(t[0][0]) == 1:
        a = t[0][0][0]
        if isinstance(a, Symbol) or a.kind in (MIN, MAX):
            return _fmt_atom(a)
    return f"({_fmt_sum(b)})"
