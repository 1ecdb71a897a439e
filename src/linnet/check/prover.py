"""The prover: facts from `where` clauses and the relations they establish.

Stage: used by the checker for every shape obligation of language.md 6.3
(equal shapes, broadcasting, reshape, positive divisors, callee and block
`where` clauses, index ranges, slice extents). Input: `Dim`s and the facts in
scope. Output: `True` only when the relation certainly holds under the facts
("cannot prove" is `False`; the checker turns that into a diagnostic).

`Facts` follows 6.4 literally:

- `X % Y == 0` records a divisibility fact `Y | X`;
- another equality is solved for a symbol with coefficient +-1 occurring
  nowhere else (the most recently declared one) and substituted everywhere
  from then on, else it is kept as a zero fact;
- inequalities become non-negativity facts, or tighten an atom's interval
  when they mention a single atom (`N > 0` gives `N` in `[1, inf)`);
- `!=` becomes a strict inequality when one side is already provably larger;
- every symbol and pack count is non-negative.

Soundness: a fact whose expressions divide by zero cannot hold (load-time
evaluation fails, 6.7), and a goal is about the assignments where it is
defined, so simplifications may assume divisors are non-zero.

>>> from linnet.check.dims import Dim, Symbol
>>> h, n = Dim.symbol(Symbol("H")), Dim.symbol(Symbol("N"))
>>> facts = Facts.EMPTY.assume(n, ">", Dim.const(0)).assume(h % n, "==", Dim.const(0))
>>> facts.prove(n * (h / n), "==", h)
True
"""

from __future__ import annotations

import math
from typing import ClassVar, Final

from linnet.check.dims import (
    FLOOR,
    I64_MAX,
    I64_MIN,
    MAX,
    MIN,
    MOD,
    Dim,
    DimOverflow,
    Op,
    Symbol,
    atom_dim,
    exact_multiple,
    mono_div,
    rebuild,
)

RELATIONS: Final = frozenset({"==", "!=", "<", "<=", ">", ">="})

_INF: Final = float("inf")
_NEG_INF: Final = float("-inf")
# An endpoint is an int or +-inf (unbounded); floats never hold finite values.
Bound = int | float
Interval = tuple[Bound, Bound]
_UNBOUNDED: Final[Interval] = (_NEG_INF, _INF)
_UNSET: Final = Dim(())  # a fresh object: a sentinel compared by identity (not Dim.const(0))
_NATURAL: Final[Interval] = (0, _INF)

# Recursion budget for chained divisibility facts (`2 | G`, `G | In` give `2 | In`).
_DIV_DEPTH: Final = 3


class Facts:
    """The where-facts in scope, immutable; `assume` returns an extended copy.

    Each instance memoises its simplifications, bounds and proofs, so asking
    the same question twice under the same facts is a dictionary lookup.
    """

    __slots__ = (
        "_atom_bounds",
        "_atom_cache",
        "_bound_cache",
        "_div_cache",
        "_divs",
        "_intervals",
        "_nonneg_cache",
        "_nonnegs",
        "_prove_cache",
        "_simp_cache",
        "_subst",
        "_zeros",
        "incomplete",
    )

    EMPTY: ClassVar[Facts]

    def __init__(self) -> None:
        self._subst: dict[Symbol, Dim] = {}
        self._divs: list[tuple[Dim, Dim]] = []  # (divisor, value): divisor | value
        self._zeros: set[Dim] = set()  # each normalised to a positive leading coefficient
        self._nonnegs: list[Dim] = []  # each F >= 0 (zero facts contribute F and -F)
        self._intervals: dict[Symbol | Op, Interval] = {}
        # A `where` constraint of this scope failed to resolve (and was reported):
        # what it would have stated is unknown, so failed proofs here are not reported.
        self.incomplete = False
        self._reset_caches()

    def _reset_caches(self) -> None:
        self._simp_cache: dict[Dim, Dim] = {}
        self._atom_cache: dict[Symbol | Op, Dim | None] = {}
        self._bound_cache: dict[Dim, Interval] = {}
        self._atom_bounds: dict[Symbol | Op, Interval] = {}
        self._nonneg_cache: dict[Dim, bool] = {}
        self._div_cache: dict[tuple[Dim, Dim], bool] = {}
        self._prove_cache: dict[tuple[Dim, str, Dim], bool] = {}

    def _copy(self) -> Facts:
        f = Facts()
        f._subst = dict(self._subst)
        f._divs = list(self._divs)
        f._zeros = set(self._zeros)
        f._nonnegs = list(self._nonnegs)
        f._intervals = dict(self._intervals)
        f.incomplete = self.incomplete
        return f

    def __repr__(self) -> str:
        parts = [f"{s.name} := {d}" for s, d in self._subst.items()]
        parts += [f"{d} | {x}" for d, x in self._divs]
        parts += [f"{z} == 0" for z in sorted(self._zeros, key=str)]
        parts += [f"{f} >= 0" for f in self._nonnegs]
        for a, (lo, hi) in self._intervals.items():
            name = str(atom_dim(a))
            parts.append(f"{name} in [{_show(lo)}, {_show(hi)}]")
        return "Facts(" + ", ".join(parts) + ")"

    # --- public API ---------------------------------------------------------

    def assume(self, lhs: Dim, rel: str, rhs: Dim) -> Facts:
        """These facts plus `lhs rel rhs` (a `where` constraint, 6.2)."""
        _check_rel(rel)
        new = self._copy()
        try:
            new._add(lhs - rhs, rel)
        except DimOverflow:
            return self  # a fact we cannot represent is dropped: weaker, still sound
        return new

    def without_some(self) -> Facts:
        """These facts, marked as missing a constraint that failed to resolve."""
        new = self._copy()
        new.incomplete = True
        return new

    def simplify(self, d: Dim) -> Dim:
        """`d` rewritten under the facts (6.4 "Simplification"); equal in value."""
        try:
            return self._simp(d)
        except DimOverflow:
            return d

    def prove(self, lhs: Dim, rel: str, rhs: Dim) -> bool:
        """Whether `lhs rel rhs` certainly holds; `False` means "cannot prove"."""
        key = (lhs, rel, rhs)
        r = self._prove_cache.get(key)
        if r is None:
            _check_rel(rel)
            try:
                r = self._prove(self._simp(lhs - rhs), rel)
            except DimOverflow:
                r = False
            self._prove_cache[key] = r
        return r

    def divides(self, divisor: Dim, value: Dim) -> bool:
        """Whether `divisor | value` certainly holds (`value` is a multiple)."""
        try:
            return self._divides(self._simp(divisor), self._simp(value), 0)
        except DimOverflow:
            return False

    def bounds(self, d: Dim) -> tuple[int | None, int | None]:
        """An interval `[low, high]` containing `d`; `None` means unbounded."""
        try:
            lo, hi = self._bounds(self._simp(d))
        except DimOverflow:
            return None, None
        return (None if lo == _NEG_INF else int(lo)), (None if hi == _INF else int(hi))

    # --- recording facts ----------------------------------------------------

    def _add(self, p: Dim, rel: str) -> None:
        p = self._simp(p)
        if rel == "==":
            self._add_eq(p)
        elif rel == ">=":
            self._add_nonneg(p)
        elif rel == ">":
            self._add_nonneg(p - 1)
        elif rel == "<=":
            self._add_nonneg(-p)
        elif rel == "<":
            self._add_nonneg(-p - 1)
        elif self._nonneg(p):  # "!=": only useful when one side is known larger
            self._add_nonneg(p - 1)
        elif self._nonneg(-p):
            self._add_nonneg(-p - 1)

    def _add_eq(self, p: Dim) -> None:
        if p.as_int() is not None:
            return  # trivially true, or contradictory (nothing useful to record)
        mod = _single_mod(p)
        if mod is not None:
            op, k = mod
            # `X % Y == k` means `Y | X - k`; with k == 0 that is all it says.
            self._add_div(op.b, op.a - k)
            if k == 0:
                return
        solved = _solvable_symbol(p)
        if solved is not None:
            sym, value = solved
            self._substitute(sym, value)
            return
        z = _positive_lead(p)
        if z not in self._zeros:
            self._zeros.add(z)
            self._reset_caches()
            # Also as two inequalities, so bounds and `>=` queries can use it.
            self._add_nonneg(z)
            self._add_nonneg(-z)

    def _add_div(self, divisor: Dim, value: Dim) -> None:
        divisor, value = _positive_lead(divisor), _positive_lead(value)
        if (divisor, value) not in self._divs:
            self._divs.append((divisor, value))
            self._reset_caches()

    def _add_nonneg(self, p: Dim) -> None:
        c = p.as_int()
        if c is not None:
            return
        single = _single_atom(p)
        if single is not None:
            atom, coef, k = single
            self._tighten(atom, coef, k)
            return
        if self._lower(p) >= 0:
            return  # already implied by the bounds
        if p not in self._nonnegs:
            self._nonnegs.append(p)
            self._reset_caches()

    def _tighten(self, atom: Symbol | Op, coef: int, k: int) -> None:
        # coef * atom + k >= 0
        lo, hi = self._intervals.get(atom, _NATURAL if type(atom) is Symbol else _UNBOUNDED)
        if coef > 0:
            lo = max(lo, -(k // coef))  # atom >= ceil(-k / coef)
        else:
            hi = min(hi, k // -coef)  # atom <= floor(k / -coef)
        self._intervals[atom] = (lo, hi)
        self._reset_caches()

    def _substitute(self, sym: Symbol, value: Dim) -> None:
        """Record `sym := value` and re-state every earlier fact through it."""
        old_divs, old_zeros = self._divs, self._zeros
        old_nonnegs, old_intervals = self._nonnegs, self._intervals
        mapping = {sym: value}
        self._subst = {s: d.substitute(mapping) for s, d in self._subst.items()}
        self._subst[sym] = value
        self._divs, self._zeros, self._nonnegs, self._intervals = [], set(), [], {}
        self._reset_caches()
        # `sym` was a dimension, so its value is non-negative, and within its interval.
        lo, hi = old_intervals.get(sym, _NATURAL)
        restated: list[tuple[Dim, str]] = [(value - int(lo), ">=")]
        if hi != _INF:
            restated.append((int(hi) - value, ">="))
        for atom, (alo, ahi) in old_intervals.items():
            if atom is sym:
                continue
            a = atom_dim(atom)
            if alo != _NEG_INF:
                restated.append((a - int(alo), ">="))
            if ahi != _INF:
                restated.append((int(ahi) - a, ">="))
        restated += [(f, ">=") for f in old_nonnegs]
        for d, x in old_divs:
            self._add_div(self._simp(d), self._simp(x))
        for p, rel in restated:
            self._add(p, rel)
        for z in old_zeros:
            self._add(z, "==")

    # --- simplification -----------------------------------------------------

    def _simp(self, d: Dim) -> Dim:
        r = self._simp_cache.get(d)
        if r is not None:
            return r
        if not d.has_ops() and (not self._subst or d.symbols().isdisjoint(self._subst)):
            r = d
        else:
            kept: list[tuple[tuple[Symbol | Op, ...], int]] = []
            acc: Dim | None = None
            for mono, c in d.terms:
                reps = [self._simp_atom(a) for a in mono]
                if all(x is None for x in reps):
                    kept.append((mono, c))
                    continue
                t = Dim.const(c)
                for a, x in zip(mono, reps, strict=True):
                    t = t * (atom_dim(a) if x is None else x)
                acc = t if acc is None else acc + t
            r = d if acc is None else Dim(tuple(kept)) + acc
            r = self._fold_multiples(self._product_rule(r))
        self._simp_cache[d] = r
        return r

    def _simp_atom(self, atom: Symbol | Op) -> Dim | None:
        """The simplified atom, or None when it is already simple."""
        r = self._atom_cache.get(atom, _UNSET)
        if r is not _UNSET:
            return r
        if type(atom) is Symbol:
            r = self._subst.get(atom)
        else:
            assert isinstance(atom, Op)
            sa, sb = self._simp(atom.a), self._simp(atom.b)
            if sa is atom.a and sb is atom.b:
                r = self._atom_rule(atom)
            else:
                r = self._refine(rebuild(atom, sa, sb))
        self._atom_cache[atom] = r
        return r

    def _refine(self, d: Dim) -> Dim:
        """Apply the fact-based atom rules to the top-level atoms of `d`."""
        if not d.has_ops():
            return d
        changed = False
        acc = Dim.const(0)
        for mono, c in d.terms:
            t = Dim.const(c)
            for atom in mono:
                if type(atom) is Op:
                    a = self._atom_rule(atom)
                    changed = changed or a is not None
                    t = t * (atom_dim(atom) if a is None else a)
                else:
                    t = t * atom_dim(atom)
            acc = acc + t
        return acc if changed else d

    def _atom_rule(self, op: Op) -> Dim | None:
        """One simplification of an atom whose arguments are already simplified."""
        a, b = op.a, op.b
        if op.kind == MIN or op.kind == MAX:
            # min(a, b) is a when b - a >= 0 is provable (6.4; slice extents).
            a_first = self._nonneg(b - a) if op.kind == MIN else self._nonneg(a - b)
            if a_first:
                return a
            b_first = self._nonneg(a - b) if op.kind == MIN else self._nonneg(b - a)
            return b if b_first else None
        if op.kind == MOD and self._divides(b, a, 0):
            return Dim.const(0)  # `H % N` is 0 under `H % N == 0`
        # a = m + k with b | m and 0 <= k < b: floor(a / b) = m / b, mod(a, b) = k.
        # This is how `(D + 1) / 2` becomes `D / 2` under `D % 2 == 0`.
        k = a.terms[-1][1] if a.terms and not a.terms[-1][0] else 0
        if k > 0:
            m = a - k
            if self._nonneg(b - (k + 1)) and self._divides(b, m, 0):
                return Dim.const(k) if op.kind == MOD else m.floordiv(b)
        # 0 <= a < b: floor(a / b) = 0, mod(a, b) = a.
        if self._nonneg(a) and self._nonneg(b - a - 1):
            return a if op.kind == MOD else Dim.const(0)
        return None

    def _product_rule(self, d: Dim) -> Dim:
        """`floor(X / Y) * Y` becomes `X` in a product when `Y | X` (6.4).

        So `N * (H / N)` is `H` under `H % N == 0`. Only single-term `Y`
        (a constant or a monomial) is recognised.
        """
        if not d.has_ops():
            return d
        for _ in range(8):  # each round removes a floor atom; a few suffice
            kept: list[tuple[tuple[Symbol | Op, ...], int]] = []
            acc = Dim.const(0)
            for mono, c in d.terms:
                t = self._cancel_floor(mono, c)
                if t is None:
                    kept.append((mono, c))
                else:
                    acc = acc + t
            if len(kept) == len(d.terms):
                return d
            d = Dim(tuple(kept)) + acc
        return d

    def _fold_multiples(self, d: Dim) -> Dim:
        """Write `X` as `k * floor(X / k)` when `k | X` and that cancels a term.

        Under `D % 2 == 0`, `D - D / 2` becomes `D / 2` (the extent of
        `x[..., D / 2:]`), while `D + D / 2` stays as it is.
        """
        if not d.has_ops():
            return d
        coefs = dict(d.terms)
        for mono, _ in d.terms:
            if len(mono) != 1 or type(mono[0]) is not Op or mono[0].kind != FLOOR:
                continue
            op = mono[0]
            k = op.b.as_int()
            if k is None or k < 1 or len(op.a.terms) != 1:
                continue
            xmono, xc = op.a.terms[0]
            a = coefs.get(xmono)
            if a is None or a % xc or mono not in coefs:
                continue
            moved = a // xc * k
            if abs(coefs[mono] + moved) >= abs(moved) or not self._divides(op.b, op.a, 0):
                continue
            del coefs[xmono]
            coefs[mono] += moved
        if len(coefs) == len(d.terms):
            return d
        return Dim(tuple((m, coefs[m]) for m, _ in d.terms if coefs.get(m)))

    def _cancel_floor(self, mono: tuple[Symbol | Op, ...], c: int) -> Dim | None:
        for i, atom in enumerate(mono):
            if type(atom) is not Op or atom.kind != FLOOR or len(atom.b.terms) != 1:
                continue
            ymono, ycoef = atom.b.terms[0]
            if c % ycoef:
                continue
            rest = mono_div(mono[:i] + mono[i + 1 :], ymono)
            if rest is None or not self._divides(atom.b, atom.a, 0):
                continue
            t = atom.a * (c // ycoef)
            for r in rest:
                t = t * atom_dim(r)
            return t
        return None

    # --- divisibility ---------------------------------------------------------

    def _divides(self, d: Dim, p: Dim, depth: int) -> bool:
        """`d | p` (6.4 "Divisibility"), both already simplified."""
        if not p.terms:
            return True
        dc = d.as_int()
        if dc == 1 or dc == -1:
            return True
        if dc == 0 or depth > _DIV_DEPTH:
            return False
        d, p = _positive_lead(d), _positive_lead(p)
        key = (d, p)
        r = self._div_cache.get(key)
        if r is None:
            self._div_cache[key] = False  # guards against cycles through facts
            r = self._divides_uncached(d, p, depth)
            self._div_cache[key] = r
        return r

    def _divides_uncached(self, d: Dim, p: Dim, depth: int) -> bool:
        if (d, p) in self._divs:
            return True
        if len(d.terms) == 1 and all(self._term_divisible(m, c, d, depth) for m, c in p.terms):
            return True
        if exact_multiple(p, d) is not None:
            return True
        for fd, fx in self._divs:
            k = exact_multiple(p, fx)
            if k is not None and self._divides(d, fd * k, depth + 1):
                return True
            # p = k * X + rest with `fd | X`: `d | fd` and `d | rest` suffice
            # (`8 | H + 5` from `8 | H - 3`).
            k = _lead_ratio(p, fx)
            if (
                k is not None
                and self._divides(d, fd, depth + 1)
                and self._divides(d, p - fx * k, depth + 1)
            ):
                return True
        return False

    def _term_divisible(self, mono: tuple[Symbol | Op, ...], c: int, d: Dim, depth: int) -> bool:
        dmono, dcoef = d.terms[0]
        if c % dcoef == 0 and mono_div(mono, dmono) is not None:
            return True
        # c * mono = k * X * rest with a fact `fd | X`: then `d | k * fd` suffices.
        for fd, fx in self._divs:
            if len(fx.terms) != 1:
                continue
            xmono, xcoef = fx.terms[0]
            if c % xcoef or mono_div(mono, xmono) is None:
                continue
            if self._divides(d, fd * (c // xcoef), depth + 1):
                return True
        return False

    # --- bounds ---------------------------------------------------------------

    def _bounds(self, d: Dim) -> Interval:
        r = self._bound_cache.get(d)
        if r is not None:
            return r
        lo: Bound = 0
        hi: Bound = 0
        for mono, c in d.terms:
            tlo: Bound = c
            thi: Bound = c
            for atom in mono:
                alo, ahi = self._atom_interval(atom)
                tlo, thi = _mul(tlo, thi, alo, ahi)
            lo += tlo
            hi += thi
        r = _clamp(lo, hi)
        self._bound_cache[d] = r
        return r

    def _lower(self, d: Dim) -> Bound:
        return self._bounds(d)[0]

    def _atom_interval(self, atom: Symbol | Op) -> Interval:
        r = self._atom_bounds.get(atom)
        if r is not None:
            return r
        if type(atom) is Symbol:
            r = self._intervals.get(atom, _NATURAL)
        else:
            assert isinstance(atom, Op)
            lo, hi = self._op_interval(atom)
            flo, fhi = self._intervals.get(atom, _UNBOUNDED)
            r = (max(lo, flo), min(hi, fhi))
        self._atom_bounds[atom] = r
        return r

    def _op_interval(self, op: Op) -> Interval:
        la, ha = self._bounds(op.a)
        lb, hb = self._bounds(op.b)
        if op.kind == MIN:
            return min(la, lb), min(ha, hb)
        if op.kind == MAX:
            return max(la, lb), max(ha, hb)
        if op.kind == FLOOR:
            if lb >= 1:
                return _floor_interval(la, ha, lb, hb)
            if hb <= -1:  # floor(a / b) == floor(-a / -b)
                return _floor_interval(-ha, -la, -hb, -lb)
            return _UNBOUNDED
        if lb >= 1:  # mod(a, b) in [0, b - 1], and mod(a, b) == a when 0 <= a < b
            if la >= 0 and ha < lb:
                return la, ha
            top = hb - 1
            if la >= 0:
                top = min(top, ha)
            return 0, top
        if hb <= -1:
            return lb + 1, 0
        return _UNBOUNDED

    # --- queries --------------------------------------------------------------

    def _prove(self, p: Dim, rel: str) -> bool:
        if rel == "==":
            if not p.terms:
                return True
            if p.as_int() is not None:
                return False
            if _positive_lead(p) in self._zeros:
                return True
            return self._nonneg(p) and self._nonneg(-p)
        if rel == ">=":
            return self._nonneg(p)
        if rel == ">":
            return self._nonneg(p - 1)
        if rel == "<=":
            return self._nonneg(-p)
        if rel == "<":
            return self._nonneg(-p - 1)
        return self._nonneg(p - 1) or self._nonneg(-p - 1)

    def _nonneg(self, q: Dim) -> bool:
        """`q >= 0` for a simplified `q` (6.4 "Queries")."""
        c = q.as_int()
        if c is not None:
            return c >= 0
        r = self._nonneg_cache.get(q)
        if r is None:
            self._nonneg_cache[q] = False  # no cycles through the floor trick
            r = self._nonneg_uncached(q)
            self._nonneg_cache[q] = r
        return r

    def _nonneg_uncached(self, q: Dim) -> bool:
        if self._lower_with_facts(q):
            return True
        # The floor trick: with x >= 0 and k >= 1, 0 <= floor(x / k) <= x, and
        # 0 <= mod(x, k) <= x; replacing `c * floor(x / k)` (c < 0) by `c * x`
        # can only make q smaller.
        if not q.has_ops():
            return False
        smaller = self._replace_floors(q)
        if smaller is not None and self._lower_with_facts(smaller):
            return True
        return self._scaled_floor_trick(q)

    def _scaled_floor_trick(self, q: Dim) -> bool:
        """A sharper floor trick for constant divisors (beyond 6.4, still sound).

        For k >= 1, `x - (k - 1) <= k * floor(x / k) <= x` for every integer x.
        With L the lcm of the divisors, bound `L * q` from below by replacing
        each `L * c * floor(x / k)` with `c * (L / k) * x` (c < 0) or
        `c * (L / k) * (x - k + 1)` (c > 0). Since q is an integer,
        `L * q >= -(L - 1)` already gives `q >= 0`. So `(H + 1) / 2 <= H`.
        """
        lcm = 1
        floors: list[tuple[int, Op, int]] = []
        for mono, c in q.terms:
            if len(mono) == 1 and type(mono[0]) is Op and mono[0].kind == FLOOR:
                k = mono[0].b.as_int()
                if k is not None and k >= 1:
                    floors.append((c, mono[0], k))
                    lcm = math.lcm(lcm, k)
        if not floors or lcm > 1 << 20:
            return False
        replaced = {op for _, op, _ in floors}
        relaxed = Dim(tuple(t for t in q.terms if len(t[0]) != 1 or t[0][0] not in replaced))
        relaxed = relaxed * lcm
        for c, op, k in floors:
            x = op.a if c < 0 else op.a - (k - 1)
            relaxed = relaxed + x * (c * (lcm // k))
        slack = lcm - 1
        if self._lower(relaxed) >= -slack:
            return True
        return any(self._lower(relaxed - f) >= -slack for f in self._nonnegs)

    def _lower_with_facts(self, q: Dim) -> bool:
        if self._lower(q) >= 0:
            return True
        return any(self._lower(q - f) >= 0 for f in self._nonnegs)

    def _replace_floors(self, q: Dim) -> Dim | None:
        changed = False
        acc = Dim.const(0)
        for mono, c in q.terms:
            if c < 0 and len(mono) == 1 and type(mono[0]) is Op:
                op = mono[0]
                if op.kind in (FLOOR, MOD) and self._lower(op.b) >= 1 and self._nonneg(op.a):
                    acc = acc + op.a * c
                    changed = True
                    continue
            acc = acc + Dim(((mono, c),))
        return acc if changed else None


Facts.EMPTY = Facts()


def _check_rel(rel: str) -> None:
    if rel not in RELATIONS:
        raise ValueError(f"unknown relation {rel!r}; expected one of == != < <= > >=")


def _show(b: Bound) -> str:
    return "inf" if b == _INF else "-inf" if b == _NEG_INF else str(b)


def _positive_lead(d: Dim) -> Dim:
    return -d if d.terms and d.terms[0][1] < 0 else d


def _lead_ratio(p: Dim, x: Dim) -> int | None:
    """The `k` making `p - k * x` lose p's leading term, if it is an integer."""
    if not p.terms or not x.terms:
        return None
    (pm, pc), (xm, xc) = p.terms[0], x.terms[0]
    if pm != xm or pc % xc:
        return None
    return pc // xc


def _single_mod(p: Dim) -> tuple[Op, int] | None:
    """`p` as `c * mod(X, Y) - c * k` (c != 0), giving `(mod(X, Y), k)`."""
    terms = p.terms
    if not terms or len(terms) > 2:
        return None
    mono, c = terms[0]
    if len(mono) != 1 or type(mono[0]) is not Op or mono[0].kind != MOD:
        return None
    if len(terms) == 1:
        return mono[0], 0
    kmono, kc = terms[1]
    if kmono or kc % c:
        return None
    return mono[0], -kc // c


def _single_atom(p: Dim) -> tuple[Symbol | Op, int, int] | None:
    """`p` as `coef * atom + k`, giving `(atom, coef, k)`."""
    terms = p.terms
    if not terms or len(terms) > 2 or len(terms[0][0]) != 1:
        return None
    k = 0
    if len(terms) == 2:
        if terms[1][0]:
            return None
        k = terms[1][1]
    return terms[0][0][0], terms[0][1], k


def _solvable_symbol(p: Dim) -> tuple[Symbol, Dim] | None:
    """Solve `p == 0` for the latest symbol with coefficient +-1 occurring once."""
    best: tuple[Symbol, Dim] | None = None
    for mono, c in p.terms:
        if len(mono) != 1 or c not in (1, -1) or type(mono[0]) is not Symbol:
            continue
        sym = mono[0]
        if sym.is_pack or (best is not None and best[0].serial > sym.serial):
            continue
        rest = p - Dim(((mono, c),))
        if sym in rest.symbols():
            continue
        best = (sym, -rest if c == 1 else rest)
    return best


def _mul_end(x: Bound, y: Bound) -> Bound:
    # Interval endpoints: 0 * inf is 0 (the set of values is bounded there).
    if x == 0 or y == 0:
        return 0
    return x * y


def _mul(l1: Bound, h1: Bound, l2: Bound, h2: Bound) -> Interval:
    cands = (_mul_end(l1, l2), _mul_end(l1, h2), _mul_end(h1, l2), _mul_end(h1, h2))
    return min(cands), max(cands)


def _clamp(lo: Bound, hi: Bound) -> Interval:
    # Bounds beyond i64 are treated as unbounded (6.4); that only loses precision.
    if lo < I64_MIN or lo > I64_MAX:
        lo = _NEG_INF if lo < 0 else I64_MAX
    if hi > I64_MAX or hi < I64_MIN:
        hi = _INF if hi > 0 else I64_MIN
    return lo, hi


def _floor_interval(la: Bound, ha: Bound, lb: Bound, hb: Bound) -> Interval:
    """Bounds of floor(a / b) for a in [la, ha], b in [lb, hb] with lb >= 1."""
    if la >= 0:
        lo: Bound = 0 if hb == _INF else int(la) // int(hb)
    else:
        lo = _NEG_INF if la == _NEG_INF else int(la) // int(lb)
    if ha == _INF:
        hi: Bound = _INF
    elif ha >= 0:
        hi = int(ha) // int(lb)
    else:
        hi = -1 if hb == _INF else int(ha) // int(hb)
    return lo, hi
