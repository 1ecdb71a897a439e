"""Shape polynomials (`linnet.ir.symbolic`): exact fits on a grid, their text, where clauses as data."""

from __future__ import annotations

from fractions import Fraction

import pytest

from linnet.check.dims import Dim, Symbol
from linnet.errors import LinnetError
from linnet.ir.symbolic import (
    Poly,
    StarFit,
    dim_to_json,
    eval_dim_json,
    evaluate,
    fit_grid,
    grid_points,
    parse_poly,
)

NAMES = ("B", "S")
GRID = [[5, 3, 6], [7, 9, 11]]


def _fit(f: object) -> object:
    table = {
        point: f(GRID[0][point[0]], GRID[1][point[1]])  # type: ignore[operator]
        for point in grid_points(GRID)
    }
    return fit_grid(NAMES, GRID, table)


@pytest.mark.parametrize(
    ("f", "text"),
    [
        (lambda b, s: b * s, "B*S"),
        (lambda b, s: 2 * s + 1, "2*S + 1"),
        (lambda b, s: b * s * s - 3, "B*S^2 + -3"),
        (lambda b, s: s * 4 // 2, "2*S"),
    ],
)
def test_a_polynomial_is_fitted_exactly_and_reads_back(f: object, text: str) -> None:
    poly = _fit(f)
    assert isinstance(poly, Poly)
    assert str(poly) == text
    assert parse_poly(str(poly), NAMES) == poly
    for b, s in [(1, 1), (4, 20), (17, 2)]:
        assert evaluate(poly, {"B": b, "S": s}) == f(b, s)  # type: ignore[operator]


def test_constants_stay_plain_ints_and_halves_are_rational() -> None:
    assert _fit(lambda b, s: 12) == 12
    half = fit_grid(("N",), [[4, 6, 8]], {(0,): 2, (1,): 3, (2,): 4})
    assert isinstance(half, Poly)
    assert half.terms == (((1,), Fraction(1, 2)),)
    assert half.denominator == 2
    assert half.evaluate({"N": 10}) == 5
    with pytest.raises(LinnetError, match="not an integer"):
        half.evaluate({"N": 3})


def test_sums_are_fitted_from_a_base_point_and_one_move_per_generic() -> None:
    star = StarFit(NAMES, GRID)
    assert star.points() == [(0, 0), (1, 0), (0, 1)]

    def fitted(f: object) -> object:
        return star({p: f(GRID[0][p[0]], GRID[1][p[1]]) for p in star.points()})  # type: ignore[operator]

    sum_ = fitted(lambda b, s: 3 * b + 2 * s - 1)
    assert isinstance(sum_, Poly) and str(sum_) == "3*B + 2*S + -1"
    assert fitted(lambda b, s: 8) == 8
    # A product is not a sum: the fit is some sum, which the off-point check refutes.
    product = fitted(lambda b, s: b * s)
    assert isinstance(product, Poly) and evaluate(product, {"B": 6, "S": 11}) != 66
    assert star.points()[0] == (0, 0)  # the base point first, as `grid_points` orders it


def test_variables_and_arithmetic() -> None:
    b, s = Poly.var(NAMES, "B"), Poly.var(NAMES, "S")
    assert b.as_var() == "B"
    assert (b * s).as_var() is None
    assert b * s - s * b == 0
    assert (b + 1) * s == b * s + s
    assert b * 1 is b and b * 0 == 0 and str(b * 3) == "3*B"
    with pytest.raises(LinnetError):
        parse_poly("B*Q", NAMES)


def test_where_clauses_round_trip_as_json() -> None:
    s, p = Symbol("S"), Symbol("P")
    clause = (Dim.symbol(s) + 3).floordiv(2) - Dim.symbol(p) % 4
    data = dim_to_json(clause)
    for sv, pv in [(5, 7), (8, 1), (0, 3)]:
        assert eval_dim_json(data, {"S": sv, "P": pv}) == (sv + 3) // 2 - pv % 4
    with pytest.raises(LinnetError):
        eval_dim_json(data, {"S": 1})
