"""Shape polynomials over an entry's dynamic generics, fitted from concrete lowerings.

Stage: used by `linnet.ir.dynamic` (which lowers an entry at several sizes
and fits every size-dependent integer) and by the exporters that turn the
fitted sizes into computations (`linnet.onnx.export`). A `Poly` is a
polynomial with rational coefficients over named generics (`B`, `S`):
`B * S`, `2 * S + 1`, `1/2 * S`. Constant polynomials never appear: every
function here returns a plain `int` for them, so `Dim = int | Poly`.

Fitting (`fit_grid`) is exact: the values at a tensor grid of sample points
(three per generic: degree up to 2 in each) determine one interpolating
polynomial, solved with `Fraction`s; `linnet.ir.dynamic` then checks it at a
point off the grid and refuses what does not fit (`(S + 63) / 64`).

`Poly` text (`str`) is what the ONNX exporter writes as a `dim_param`, and
`parse_poly` reads it back (no `eval`): terms joined by ` + `, each an
optional coefficient (`3`, `-1/2`) and factors `B`, `S^2` joined by `*`.

Where clauses are carried to run time as JSON (`dim_to_json`, `eval_dim_json`):
the checker's `Dim` normal form with the static generics already substituted.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import TypeAlias, Union

from linnet.check.dims import FLOOR, MAX, MIN, MOD, Symbol
from linnet.check.dims import Dim as CheckDim
from linnet.check.dims import Op as CheckOp
from linnet.errors import LinnetError

Exponents = tuple[int, ...]


class Poly:
    """A non-constant polynomial over `names` (see the module docstring); immutable."""

    __slots__ = ("_hash", "names", "terms")

    def __init__(self, names: tuple[str, ...], terms: Mapping[Exponents, Fraction]) -> None:
        self.names = names
        self.terms: tuple[tuple[Exponents, Fraction], ...] = tuple(
            sorted(((e, Fraction(c)) for e, c in terms.items() if c != 0), reverse=True)
        )
        self._hash = hash((names, self.terms))

    # -- construction ------------------------------------------------------------------

    @staticmethod
    def var(names: tuple[str, ...], name: str) -> Poly:
        exps = tuple(1 if n == name else 0 for n in names)
        return Poly(names, {exps: Fraction(1)})

    @staticmethod
    def make(names: tuple[str, ...], terms: Mapping[Exponents, Fraction]) -> Dim:
        """The polynomial, or a plain int when it is constant (and integral)."""
        nonzero = {e: c for e, c in terms.items() if c != 0}
        zero = tuple(0 for _ in names)
        if set(nonzero) <= {zero}:
            value = nonzero.get(zero, Fraction(0))
            if value.denominator != 1:
                raise LinnetError(f"a size fitted to the non-integer constant {value}")
            return int(value)
        return Poly(names, nonzero)

    # -- arithmetic (with ints and Polys over the same names) -----------------------------

    def _terms_of(self, other: Dim) -> dict[Exponents, Fraction]:
        if isinstance(other, Poly):
            if other.names != self.names:
                raise ValueError("polynomials over different generics")
            return dict(other.terms)
        return {tuple(0 for _ in self.names): Fraction(int(other))}

    def __add__(self, other: Dim) -> Dim:
        out = dict(self.terms)
        for e, c in self._terms_of(other).items():
            out[e] = out.get(e, Fraction(0)) + c
        return Poly.make(self.names, out)

    __radd__ = __add__

    def __neg__(self) -> Dim:
        return Poly.make(self.names, {e: -c for e, c in self.terms})

    def __sub__(self, other: Dim) -> Dim:
        return self + (-other)

    def __rsub__(self, other: Dim) -> Dim:
        return (-self) + other

    def __mul__(self, other: Dim) -> Dim:
        if not isinstance(other, Poly):  # the common case: a size times a constant
            factor = int(other)
            if factor == 1:
                return self
            if factor == 0:
                return 0
            return Poly(self.names, {e: c * factor for e, c in self.terms})
        out: dict[Exponents, Fraction] = {}
        for e1, c1 in self.terms:
            for e2, c2 in self._terms_of(other).items():
                e = tuple(a + b for a, b in zip(e1, e2, strict=True))
                out[e] = out.get(e, Fraction(0)) + c1 * c2
        return Poly.make(self.names, out)

    __rmul__ = __mul__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Poly) and (self.names, self.terms) == (other.names, other.terms)

    def __hash__(self) -> int:
        return self._hash

    # -- reading -----------------------------------------------------------------------

    def as_var(self) -> str | None:
        """The generic's name when the polynomial is exactly one generic."""
        if len(self.terms) == 1:
            exps, c = self.terms[0]
            if c == 1 and sorted(exps) == [0] * (len(exps) - 1) + [1]:
                return self.names[exps.index(1)]
        return None

    def exact(self, values: Mapping[str, int]) -> Fraction:
        """The value at `values`, as a fraction."""
        total = Fraction(0)
        for exps, c in self.terms:
            term = c
            for name, power in zip(self.names, exps, strict=True):
                term *= Fraction(values[name]) ** power
            total += term
        return total

    def evaluate(self, values: Mapping[str, int]) -> int:
        total = self.exact(values)
        if total.denominator != 1:
            raise LinnetError(f"size `{self}` is not an integer for {dict(values)}")
        return int(total)

    @property
    def denominator(self) -> int:
        """The least common denominator of the coefficients."""
        d = 1
        for _, c in self.terms:
            d = d * c.denominator // _gcd(d, c.denominator)
        return d

    def __str__(self) -> str:
        parts = []
        for exps, c in self.terms:
            factors = [
                name if p == 1 else f"{name}^{p}"
                for name, p in zip(self.names, exps, strict=True)
                if p
            ]
            if c != 1 or not factors:
                factors.insert(0, str(c))
            parts.append("*".join(factors))
        return " + ".join(parts)

    def __repr__(self) -> str:
        return f"Poly({str(self)!r})"


Dim: TypeAlias = Union[int, Poly]  # noqa: UP007 - a runtime alias
"""A size: a plain int, or a polynomial in the dynamic generics."""


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


def evaluate(d: Dim, values: Mapping[str, int]) -> int:
    return d.evaluate(values) if isinstance(d, Poly) else int(d)


def parse_poly(text: str, names: Sequence[str]) -> Dim:
    """A polynomial written by `str(Poly)` (or a plain int); LinnetError for anything else."""
    order = tuple(names)
    terms: dict[Exponents, Fraction] = {}
    try:
        for part in text.split(" + "):
            coef = Fraction(1)
            exps = [0] * len(order)
            for factor in part.split("*"):
                factor = factor.strip()
                base, _, power = factor.partition("^")
                if base in order:
                    exps[order.index(base)] += int(power) if power else 1
                else:
                    coef *= Fraction(factor)
            key = tuple(exps)
            terms[key] = terms.get(key, Fraction(0)) + coef
    except (ValueError, ZeroDivisionError):
        raise LinnetError(f"`{text}` is no size over {', '.join(order)}") from None
    return Poly.make(order, terms)


# -- fitting -------------------------------------------------------------------------------


def _inverse(matrix: list[list[Fraction]]) -> list[list[Fraction]]:
    """Gauss-Jordan inverse of a small non-singular matrix, exactly."""
    n = len(matrix)
    rows = [[*row, *(Fraction(int(i == j)) for j in range(n))] for i, row in enumerate(matrix)]
    for col in range(n):
        pivot = next(r for r in range(col, n) if rows[r][col] != 0)
        rows[col], rows[pivot] = rows[pivot], rows[col]
        lead = rows[col][col]
        rows[col] = [v / lead for v in rows[col]]
        for r in range(n):
            if r != col and rows[r][col] != 0:
                factor = rows[r][col]
                rows[r] = [a - factor * b for a, b in zip(rows[r], rows[col], strict=True)]
    return [row[n:] for row in rows]


def fit_grid(
    names: tuple[str, ...], grid: Sequence[Sequence[int]], values: Mapping[tuple[int, ...], int]
) -> Dim:
    """The polynomial through `values` at the tensor grid `grid` (per name, distinct points).

    `values` maps grid index tuples to the value there; the degree in each name
    is below the number of its points.
    """
    return GridFit(names, grid)(values)


class GridFit:
    """`fit_grid` for one grid, many tables: the Vandermonde inverses solved once and
    the fits of tables already seen remembered (most sizes repeat: `B`, `S`, `B*S`)."""

    def __init__(self, names: tuple[str, ...], grid: Sequence[Sequence[int]]) -> None:
        self.names = names
        self.inverses = [
            _inverse([[Fraction(x) ** j for j in range(len(points))] for x in points])
            for points in grid
        ]
        self._seen: dict[tuple[tuple[tuple[int, ...], int], ...], Dim] = {}

    def __call__(self, values: Mapping[tuple[int, ...], int]) -> Dim:
        key = tuple(sorted(values.items()))
        found = self._seen.get(key)
        if found is None:
            found = self._seen[key] = self._solve(values)
        return found

    def _solve(self, values: Mapping[tuple[int, ...], int]) -> Dim:
        return _solve(self.names, self.inverses, values)


def _solve(
    names: tuple[str, ...],
    inverses: Sequence[list[list[Fraction]]],
    values: Mapping[tuple[int, ...], int],
) -> Dim:
    table: dict[tuple[int, ...], Fraction] = {k: Fraction(v) for k, v in values.items()}
    for axis, inverse in enumerate(inverses):
        solved: dict[tuple[int, ...], Fraction] = {}
        for key in table:
            if key[axis] != 0:
                continue
            column = [table[(*key[:axis], i, *key[axis + 1 :])] for i in range(len(inverse))]
            for j, row in enumerate(inverse):
                solved[(*key[:axis], j, *key[axis + 1 :])] = sum(
                    (a * b for a, b in zip(row, column, strict=True)), Fraction(0)
                )
        table = solved
    return Poly.make(names, table)


class StarFit:
    """The polynomial of degree at most 1 in each generic and without products of generics
    (`B + S`, `2 * S + 1`) through a base point and one point per generic moved off it.

    `grid` holds two values per generic; `points()` are the index tuples fitted
    (the base, then one per generic). With two or more dynamic generics this
    needs one point less per extra generic than the multilinear grid, and
    sizes of batch-and-length models are mostly this form; `linnet.ir.dynamic`
    checks the fit off the points and falls back to the grid.
    """

    def __init__(self, names: tuple[str, ...], grid: Sequence[Sequence[int]]) -> None:
        self.names = names
        self.grid = grid
        self._seen: dict[tuple[tuple[tuple[int, ...], int], ...], Dim] = {}

    def points(self) -> list[tuple[int, ...]]:
        count = len(self.names)
        return [tuple(int(j == i) for j in range(count)) for i in range(-1, count)]

    def __call__(self, values: Mapping[tuple[int, ...], int]) -> Dim:
        key = tuple(sorted(values.items()))
        found = self._seen.get(key)
        if found is None:
            found = self._seen[key] = self._solve(values)
        return found

    def _solve(self, values: Mapping[tuple[int, ...], int]) -> Dim:
        base_point, *moved = self.points()
        base = Fraction(values[base_point])
        terms: dict[Exponents, Fraction] = {base_point: base}
        for i, point in enumerate(moved):
            low, high = self.grid[i][0], self.grid[i][1]
            slope = (Fraction(values[point]) - base) / (high - low)
            terms[base_point] -= slope * low
            terms[point] = slope
        return Poly.make(self.names, terms)


def grid_points(grid: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
    """Every index tuple of the grid, the first point (all zeros) first."""
    return list(itertools.product(*(range(len(points)) for points in grid)))


# -- where clauses as data -----------------------------------------------------------------


def dim_to_json(d: CheckDim) -> object:
    """A checker `Dim` as JSON data: `[[coefficient, [atom, ...]], ...]`."""
    return [[c, [_atom_json(a) for a in mono]] for mono, c in d.terms]


def _atom_json(a: Symbol | CheckOp) -> object:
    if isinstance(a, Symbol):
        return a.name
    kind = {FLOOR: "floor", MOD: "mod", MIN: "min", MAX: "max"}[a.kind]
    return [kind, dim_to_json(a.a), dim_to_json(a.b)]


def dim_from_json(data: object, symbol: Callable[[str], CheckDim]) -> CheckDim:
    """The checker `Dim` of a `dim_to_json` form, each generic name read by `symbol`
    (the importers map it to the generic of the entry they write)."""
    if not isinstance(data, list):
        raise LinnetError(f"malformed size expression {json.dumps(data)}")
    total = CheckDim.const(0)
    for term in data:
        if not isinstance(term, list) or len(term) != 2 or type(term[0]) is not int:
            raise LinnetError(f"malformed size expression {json.dumps(data)}")
        coef, atoms = term
        if not isinstance(atoms, list):
            raise LinnetError(f"malformed size expression {json.dumps(data)}")
        value = CheckDim.const(coef)
        for atom in atoms:
            value = value * _atom_from_json(atom, symbol)
        total = total + value
    return total


def _atom_from_json(atom: object, symbol: Callable[[str], CheckDim]) -> CheckDim:
    if isinstance(atom, str):
        return symbol(atom)
    if not isinstance(atom, list) or len(atom) != 3 or atom[0] not in _JSON_OPS:
        raise LinnetError(f"malformed size expression {json.dumps(atom)}")
    kind, a_json, b_json = atom
    a, b = dim_from_json(a_json, symbol), dim_from_json(b_json, symbol)
    return _JSON_OPS[kind](a, b)


_JSON_OPS: dict[str, Callable[[CheckDim, CheckDim], CheckDim]] = {
    "floor": CheckDim.floordiv,
    "mod": CheckDim.mod,
    "min": CheckDim.minimum,
    "max": CheckDim.maximum,
}


def eval_dim_json(data: object, values: Mapping[str, int]) -> int:
    """The value of a `dim_to_json` form; `/` and `%` are Python's floor forms (6.1)."""
    if not isinstance(data, list):
        raise LinnetError(f"malformed size expression {json.dumps(data)}")
    total = 0
    for term in data:
        coef, atoms = term
        value = int(coef)
        for atom in atoms:
            value *= _eval_atom(atom, values)
        total += value
    return total


def _eval_atom(atom: object, values: Mapping[str, int]) -> int:
    if isinstance(atom, str):
        if atom not in values:
            raise LinnetError(f"size `{atom}` has no value here")
        return int(values[atom])
    if not isinstance(atom, list) or len(atom) != 3:
        raise LinnetError(f"malformed size expression {json.dumps(atom)}")
    kind, a_json, b_json = atom
    a, b = eval_dim_json(a_json, values), eval_dim_json(b_json, values)
    if kind in ("floor", "mod") and b == 0:
        raise LinnetError("a size divides by zero here")
    if kind == "floor":
        return a // b
    if kind == "mod":
        return a % b
    if kind == "min":
        return min(a, b)
    if kind == "max":
        return max(a, b)
    raise LinnetError(f"malformed size expression {json.dumps(atom)}")


RELATIONS = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}
