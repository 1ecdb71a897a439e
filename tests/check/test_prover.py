"""The prover (language.md 6.4): facts, simplification, divisibility, bounds, queries.

Besides unit tests and every row of the "Worked obligations" table, a
derandomized property test compares the prover with a brute-force oracle: a
random expression tree is evaluated directly (Python's `//` and `%` are the
floor semantics of 6.1) on every assignment of a small range that satisfies
random facts. A `True` from `prove`/`divides` must hold on all of them, and
`simplify`/`bounds` must agree with the values. "Unknown" is always allowed.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Union

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from linnet.check.dims import I64_MAX, Dim, DimEvalError, Symbol
from linnet.check.prover import Facts

SB, SS, SH, SN, SD, SM, SK, SR = (Symbol(n) for n in ("B", "S", "H", "N", "D", "M", "K", "R"))
B, S, H, N, D, M, K, R = (Dim.symbol(s) for s in (SB, SS, SH, SN, SD, SM, SK, SR))
EMPTY = Facts.EMPTY
RELS = ("==", "!=", "<", "<=", ">", ">=")


def c(v: int) -> Dim:
    return Dim.const(v)


def facts(*clauses: tuple[Dim, str, Dim | int]) -> Facts:
    f = EMPTY
    for lhs, rel, rhs in clauses:
        f = f.assume(lhs, rel, rhs if isinstance(rhs, Dim) else c(rhs))
    return f


# --- the worked obligations of 6.4, one test each --------------------------------


def test_worked_identical_products() -> None:
    assert EMPTY.prove(B * S * H, "==", B * S * H)


def test_worked_product_rule_with_divisibility() -> None:
    f = facts((N, ">", 0), (H.mod(N), "==", 0))
    assert f.prove(B * S * H, "==", B * S * N * H.floordiv(N))
    assert f.simplify(N * H.floordiv(N)) == H
    assert f.simplify(B * N * H.floordiv(N)) == B * H


def test_worked_even_slice_extent() -> None:
    f = facts((D.mod(2), "==", 0))
    assert f.prove((D + 1).floordiv(2), "==", D.floordiv(2))  # x[::2]


def test_worked_odd_slice_extent() -> None:
    f = facts((D.mod(2), "==", 0))
    assert f.prove((D - 1 + 1).floordiv(2), "==", D.floordiv(2))  # x[1::2]
    assert (D - 1 + 1).floordiv(2) == D.floordiv(2)  # folds without facts


def test_worked_term_divisibility() -> None:
    assert EMPTY.prove((8 * D).mod(8), "==", c(0))
    assert EMPTY.prove((8 * D).floordiv(8), "==", D)


def test_worked_recorded_divisibility_fact() -> None:
    f = facts((H.mod(8), "==", 0))
    assert f.prove(H.mod(8), "==", c(0))
    assert f.prove(c(8), ">", c(0))
    assert f.divides(c(8), H)
    assert not EMPTY.prove(H.mod(8), "==", c(0))


def test_worked_min_under_lower_bound() -> None:
    f = facts((M, ">=", 3))
    assert f.prove(c(3).minimum(M) - 1, "==", c(2))  # x[1:3]
    assert not EMPTY.prove(c(3).minimum(M) - 1, "==", c(2))


def test_worked_min_without_facts() -> None:
    assert EMPTY.prove(N.minimum(2 * N), "==", N)
    assert EMPTY.prove((2 * N).minimum(2 * N) - N, "==", N)


def test_worked_symbol_interval() -> None:
    f = facts((N, ">", 0))
    assert f.prove(N, ">", c(0))
    assert not EMPTY.prove(N, ">", c(0))


def test_worked_callee_constraint_with_constants() -> None:
    f = facts((R, ">", 0), (R, "<", 32))
    callee_needs = R.substitute({SR: c(13)})
    assert f.prove(callee_needs, ">", c(0))
    assert f.bounds(R) == (1, 31)


# --- facts ------------------------------------------------------------------------


def test_symbols_and_pack_counts_are_non_negative() -> None:
    pack = Dim.pack_size(Symbol("P", is_pack=True))
    assert EMPTY.prove(N, ">=", c(0))
    assert EMPTY.prove(pack * N, ">=", c(0))
    assert EMPTY.bounds(N) == (0, None)
    assert not EMPTY.prove(N - 1, ">=", c(0))


def test_pack_counts_take_intervals_too() -> None:
    pack = Dim.pack_size(Symbol("P", is_pack=True))
    f = facts((pack, ">=", 1))
    assert f.bounds(pack) == (1, None)
    assert f.prove(pack, ">", c(0))
    assert f.prove(H * pack + pack, ">=", c(1))


def test_equality_is_solved_for_the_latest_symbol() -> None:
    first, second = Symbol("First"), Symbol("Second")
    a, b = Dim.symbol(first), Dim.symbol(second)
    f = facts((a + 1, "==", b))
    assert f.simplify(b) == a + 1
    assert f.simplify(a) == a
    assert f.prove(b - a, "==", c(1))
    # Solving for `b` moves its non-negativity onto `a - 2`: a >= 2 from then on.
    g = facts((a, "==", b + 2))
    assert g.simplify(b) == a - 2
    assert g.bounds(a) == (2, None)
    assert g.prove(a, ">=", c(2))


def test_substitution_restates_earlier_facts() -> None:
    f = facts((N, ">", 3), (H.mod(N), "==", 0), (N, "==", K + 1))
    # K is declared after N, so `N == K + 1` is solved for K := N - 1 (the latest).
    assert f.simplify(K) == N - 1
    assert f.prove(K, ">=", c(3))
    g = facts((K, ">", 3), (H.mod(K), "==", 0), (K, "==", N * 2))
    # K (latest) := 2 * N: K's interval and divisibility move onto 2 * N.
    assert g.simplify(K) == 2 * N
    assert g.prove(N, ">=", c(2))
    assert g.prove(H.mod(2 * N), "==", c(0))
    assert g.prove(2 * N * H.floordiv(2 * N), "==", H)


def test_equality_without_a_solvable_symbol_is_a_zero_fact() -> None:
    f = facts((N * M, "==", 12))
    assert f.prove(N * M, "==", c(12))
    assert f.prove(c(12), "==", M * N)
    assert f.prove(N * M, ">=", c(12))
    assert f.prove(N * M + 1, ">", c(12))
    assert not f.prove(N, "==", c(3))
    g = facts((H.floordiv(N), "==", 4))
    assert g.bounds(H.floordiv(N)) == (4, 4)
    assert g.prove(H.floordiv(N), "==", c(4))


def test_mod_equal_to_a_constant_records_divisibility() -> None:
    f = facts((H.mod(8), "==", 3))
    assert f.divides(c(8), H - 3)
    assert f.prove(H.mod(8), "==", c(3))
    assert f.prove((H + 5).mod(8), "==", c(0))


def test_inequalities_of_every_direction() -> None:
    f = facts((H, ">=", N), (c(2), "<", M), (K, "<=", 5))
    assert f.prove(H - N, ">=", c(0))
    assert f.prove(H, ">=", N)
    assert f.prove(M, ">=", c(3))
    assert f.bounds(K) == (0, 5)
    assert f.prove(K, "<", c(6))
    assert not f.prove(H, ">", N)
    assert f.prove(H + 1, ">", N)


def test_not_equal_becomes_strict_when_one_side_is_known_larger() -> None:
    f = facts((N, "!=", 0))
    assert f.prove(N, ">", c(0))
    assert f.prove(N, "!=", c(0))
    g = facts((H, ">=", M), (H, "!=", M))
    assert g.prove(H, ">", M)
    # Neither side known larger: nothing is recorded.
    h = facts((H, "!=", M))
    assert not h.prove(H, "!=", M)


def test_interval_tightening_with_coefficients() -> None:
    f = facts((2 * N, ">=", 3), (3 * M, "<=", 10))
    assert f.bounds(N) == (2, None)
    assert f.bounds(M) == (0, 3)


def test_constant_facts_are_ignored() -> None:
    f = facts((c(3), ">", 5), (c(1), "==", 1))
    assert not f.prove(N, ">", c(0))


def test_facts_are_immutable() -> None:
    f = facts((N, ">", 0))
    g = f.assume(N, ">", c(5))
    assert f.bounds(N) == (1, None)
    assert g.bounds(N) == (6, None)
    assert EMPTY.bounds(N) == (0, None)


def test_unknown_relation_is_rejected() -> None:
    with pytest.raises(ValueError):
        EMPTY.prove(N, "=<", c(0))
    with pytest.raises(ValueError):
        EMPTY.assume(N, "~", c(0))


# --- simplification ---------------------------------------------------------------


def test_divisibility_facts_simplify_mod_and_floor() -> None:
    f = facts((N, ">", 0), (H.mod(N), "==", 0))
    assert f.simplify(H.mod(N)) == c(0)
    assert f.simplify(H.floordiv(N) * N * B) == B * H
    assert f.simplify(2 * N * H.floordiv(N)) == 2 * H
    assert f.simplify((H + 1).mod(N)).as_int() is None  # needs N > 1


def test_constant_offsets_below_the_divisor_drop() -> None:
    f = facts((N, ">", 1), (H.mod(N), "==", 0))
    assert f.simplify((H + 1).floordiv(N)) == H.floordiv(N)
    assert f.simplify((H + 1).mod(N)) == c(1)


def test_small_dividend_floors_to_zero() -> None:
    f = facts((N, ">", 3))
    assert f.simplify(c(3).floordiv(N)) == c(0)
    assert f.simplify(c(3).mod(N)) == c(3)
    assert f.simplify(M.floordiv(N)).as_int() is None


def test_chained_divisibility_for_group_quantisation() -> None:
    # std.nn.quant Int4GroupLinear: `Group > 0, Group % 2 == 0, In % Group == 0`.
    group, inputs = Dim.symbol(Symbol("Group")), Dim.symbol(Symbol("In"))
    f = facts((group, ">", 0), (group.mod(2), "==", 0), (inputs.mod(group), "==", 0))
    groups, half = inputs.floordiv(group), group.floordiv(2)
    assert f.prove(groups * (2 * half), "==", inputs)
    assert f.divides(c(2), inputs)
    assert f.prove(inputs.mod(2), "==", c(0))
    assert not EMPTY.divides(c(2), inputs)


def test_divisibility_through_coefficients() -> None:
    f = facts((H.mod(2), "==", 0))
    assert f.divides(c(4), 2 * H)
    assert f.divides(c(2), H * M + 4)
    assert not f.divides(c(4), H)
    assert f.divides(c(6), c(12))
    assert not f.divides(c(0), H)
    assert EMPTY.divides(N, N * K)
    assert EMPTY.divides(N + 1, 3 * N + 3)
    assert EMPTY.divides(H, c(0))


def test_min_max_selection() -> None:
    assert EMPTY.simplify(N.minimum(2 * N)) == N
    assert EMPTY.simplify(N.maximum(2 * N)) == 2 * N
    f = facts((H, ">=", M))
    assert f.simplify(H.minimum(M)) == M
    assert f.simplify(H.maximum(M)) == H
    assert EMPTY.simplify(H.minimum(M)) == H.minimum(M)


def test_slice_extent_with_and_without_facts() -> None:
    # 9.3: floor((min(stop, D) - start + step - 1) / step); x[:, 1:3] on S.
    extent = (c(3).minimum(S) - 1 + 1 - 1).floordiv(1)
    assert not EMPTY.prove(extent, ">=", c(0))
    assert str(EMPTY.simplify(extent).maximum(0)) == "max(min(3, S) - 1, 0)"
    assert facts((S, ">=", 3)).simplify(extent) == c(2)
    # x[..., 0::2] on H is (H + 1) / 2, and x[:, D:2 * D] on 2 * D is D.
    assert str(EMPTY.simplify((H.minimum(H) + 2 - 1).floordiv(2))) == "(H + 1) / 2"
    assert EMPTY.simplify((2 * D).minimum(2 * D) - D) == D


def test_simplify_under_substitution_reaches_atoms() -> None:
    f = facts((K, "==", 2 * N))
    assert f.simplify(K.floordiv(2)) == N
    assert f.simplify(H.mod(K) + K.minimum(N)) == H.mod(2 * N) + N


# --- bounds and non-negativity -----------------------------------------------------


def test_bounds_by_interval_arithmetic() -> None:
    f = facts((N, ">=", 2), (N, "<=", 4), (M, ">=", 1), (M, "<=", 3))
    assert f.bounds(N * M) == (2, 12)
    assert f.bounds(N - M) == (-1, 3)
    assert f.bounds(N.floordiv(M)) == (0, 4)
    assert f.bounds(H.mod(M)) == (0, 2)
    assert f.bounds(N.minimum(M)) == (1, 3)
    assert f.bounds(N.maximum(M)) == (2, 4)
    assert f.bounds(N.floordiv(2)) == (1, 2)
    assert EMPTY.bounds(H.mod(N)) == (None, None)  # N may be 0
    assert EMPTY.bounds(H - 2 * N) == (None, None)


def test_bounds_beyond_i64_are_clamped() -> None:
    # Past i64 an upper bound becomes unbounded; a lower bound stays a valid
    # (smaller) lower bound.
    f = facts((N, ">=", 2**62), (M, ">=", 4))
    assert f.bounds(N * M) == (I64_MAX, None)
    g = facts((N, "<=", 2**62), (M, "<=", 4))
    assert g.bounds(N * M) == (0, None)
    assert g.bounds(-N * M) == (None, 0)


def test_floor_trick() -> None:
    assert EMPTY.prove(N, ">=", N.floordiv(2))
    assert EMPTY.prove(N - N.floordiv(3), ">=", c(0))
    assert not EMPTY.prove(N - H.floordiv(2), ">=", c(0))  # false at N = 0, H = 2
    assert EMPTY.prove(H - H.mod(4), ">=", c(0))
    assert facts((N, ">", 0)).prove(H.floordiv(N), "<=", H)  # symbolic k >= 1
    assert not EMPTY.prove(H.floordiv(N), "<=", H)  # N might be 0


def test_scaled_floor_trick_for_constant_divisors() -> None:
    assert EMPTY.prove((H + 1).floordiv(2), "<=", H)
    assert EMPTY.prove(2 * H.floordiv(2), "<=", H)
    assert EMPTY.prove(2 * (H + 1).floordiv(2), ">=", H)
    assert EMPTY.prove(3 * (H + 2).floordiv(3), ">=", H)
    assert not EMPTY.prove(3 * (H + 1).floordiv(3), ">=", H)  # false at H = 1


def test_halves_fold_back_under_divisibility() -> None:
    f = facts((D.mod(2), "==", 0))
    half = D.floordiv(2)
    assert f.simplify(D - half) == half  # the extent of x[..., D / 2:]
    assert f.simplify(D + half) == D + half
    assert f.simplify(2 * D - 3 * half) == half
    assert EMPTY.simplify(D - half) == D - half


def test_nonneg_facts_are_subtracted() -> None:
    f = facts((H, ">=", N + M))
    assert f.prove(H - N, ">=", M)
    assert f.prove(H + 1, ">", N)
    assert not EMPTY.prove(H - N, ">=", M)


def test_negative_dimension_is_refutable() -> None:
    assert EMPTY.prove(H - H - 1, "<", c(0))
    assert not EMPTY.prove(H - 1, "<", c(0))


def test_division_needs_a_positive_divisor() -> None:
    assert not EMPTY.prove(N, ">", c(0))
    assert facts((N, ">=", 1)).prove(N, ">", c(0))
    assert facts((N, ">", M)).prove(N, ">", c(0))


def test_equality_by_two_inequalities() -> None:
    f = facts((N, ">=", 4), (N, "<=", 4))
    assert f.prove(N, "==", c(4))
    g = facts((H, ">=", M), (M, ">=", H))
    assert g.prove(H, "==", M)


def test_results_are_cached_per_facts() -> None:
    f = facts((N, ">", 0))
    assert f.prove(N, ">", c(0)) is f.prove(N, ">", c(0))
    expr = B * N * H.floordiv(N)
    assert f.simplify(expr) is f.simplify(expr)


# --- property test against a brute-force oracle -------------------------------------

# An expression tree: ("c", value) | ("s", index) | (op, left, right) | ("neg", x).
Tree = Union[tuple[str, int], tuple[str, "Tree", "Tree"], tuple[str, "Tree"]]  # noqa: UP007
PSYMS = (Symbol("X"), Symbol("Y"), Symbol("Z"))


def _to_dim(t: Tree) -> Dim:
    op = t[0]
    if op == "c":
        assert isinstance(t[1], int)
        return Dim.const(t[1])
    if op == "s":
        assert isinstance(t[1], int)
        return Dim.symbol(PSYMS[t[1]])
    if op == "neg":
        return -_to_dim(t[1])  # type: ignore[arg-type]
    a, b = _to_dim(t[1]), _to_dim(t[2])  # type: ignore[arg-type, misc]
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "/":
        return a.floordiv(b)
    if op == "%":
        return a.mod(b)
    if op == "min":
        return a.minimum(b)
    return a.maximum(b)


def _code(t: Tree) -> str:
    op = t[0]
    if op == "c":
        return f"({t[1]})"
    if op == "s":
        return f"v{t[1]}"
    if op == "neg":
        return f"(-{_code(t[1])})"  # type: ignore[arg-type]
    a, b = _code(t[1]), _code(t[2])  # type: ignore[arg-type, misc]
    if op in ("min", "max"):
        return f"{op}({a}, {b})"
    py = {"+": "+", "-": "-", "*": "*", "/": "//", "%": "%"}[op]
    return f"({a} {py} {b})"


def _compile(t: Tree) -> Callable[..., int]:
    fn: Callable[..., int] = eval(f"lambda v0, v1, v2: {_code(t)}")
    return fn


def _value(fn: Callable[..., int], point: Sequence[int]) -> int | None:
    """The tree's value at `point`, or None where a divisor is zero (undefined)."""
    try:
        return fn(*point)
    except ZeroDivisionError:
        return None


def _holds(x: int, rel: str, y: int) -> bool:
    return {
        "==": x == y,
        "!=": x != y,
        "<": x < y,
        "<=": x <= y,
        ">": x > y,
        ">=": x >= y,
    }[rel]


def _leaves(nsyms: int) -> st.SearchStrategy[Tree]:
    return st.one_of(
        st.integers(-2, 5).map(lambda v: ("c", v)),
        st.integers(0, nsyms - 1).map(lambda i: ("s", i)),
    )


def _trees(nsyms: int) -> st.SearchStrategy[Tree]:
    divisor = st.one_of(st.integers(1, 4).map(lambda v: ("c", v)), _leaves(nsyms))

    def extend(children: st.SearchStrategy[Tree]) -> st.SearchStrategy[Tree]:
        return st.one_of(
            st.tuples(st.sampled_from(["+", "-", "*", "min", "max"]), children, children),
            st.tuples(st.sampled_from(["/", "%"]), children, st.one_of(divisor, children)),
            st.tuples(st.just("neg"), children),
        )

    return st.recursive(_leaves(nsyms), extend, max_leaves=5)


def _facts(nsyms: int) -> st.SearchStrategy[tuple[Tree, str, Tree]]:
    sym = st.integers(0, nsyms - 1).map(lambda i: ("s", i))
    trees = _trees(nsyms)
    small = st.integers(0, 6).map(lambda v: ("c", v))
    return st.one_of(
        st.tuples(sym, st.sampled_from(RELS), small),
        st.tuples(
            st.tuples(st.just("%"), st.one_of(sym, trees), st.one_of(small, sym)),
            st.just("=="),
            st.one_of(st.just(("c", 0)), small),
        ),
        st.tuples(sym, st.just("=="), trees),
        st.tuples(trees, st.sampled_from(RELS), trees),
    )


@st.composite
def _cases(draw: st.DrawFn) -> tuple[int, list[tuple[Tree, str, Tree]], list[Tree]]:
    nsyms = draw(st.sampled_from([2, 3]))
    clauses = draw(st.lists(_facts(nsyms), max_size=3))
    goals = draw(st.lists(_trees(nsyms), min_size=1, max_size=3))
    # Goals built from the facts' own sides are the ones most likely to be provable.
    for lhs, _, rhs in clauses[:2]:
        goals.extend([lhs, rhs])
    return nsyms, clauses, goals


def _points(nsyms: int) -> list[tuple[int, ...]]:
    top = 12 if nsyms == 2 else 7
    return [p + (0,) * (3 - nsyms) for p in itertools.product(range(top + 1), repeat=nsyms)]


@settings(derandomize=True, max_examples=250, deadline=None)
@given(_cases())
def test_prover_agrees_with_brute_force(
    case: tuple[int, list[tuple[Tree, str, Tree]], list[Tree]],
) -> None:
    nsyms, clauses, goals = case
    points = _points(nsyms)
    f = EMPTY
    checks = []
    for lhs, rel, rhs in clauses:
        f = f.assume(_to_dim(lhs), rel, _to_dim(rhs))
        checks.append((_compile(lhs), rel, _compile(rhs)))

    def satisfies(p: tuple[int, ...]) -> bool:
        for lf, rel, rf in checks:
            x, y = _value(lf, p), _value(rf, p)
            if x is None or y is None or not _holds(x, rel, y):
                return False
        return True

    sat = [p for p in points if satisfies(p)]
    dims = [_to_dim(g) for g in goals]
    fns = [_compile(g) for g in goals]

    # Eager normal forms are exact wherever the tree is defined.
    for d, fn in zip(dims, fns, strict=True):
        for p in points[::5]:
            v = _value(fn, p)
            if v is not None:
                assert d.evaluate(dict(zip(PSYMS, p, strict=True))) == v, (str(d), p)

    if not sat:
        return  # contradictory facts: anything goes
    values = [[_value(fn, p) for p in sat] for fn in fns]
    env = [dict(zip(PSYMS, p, strict=True)) for p in sat]

    for d, vals in zip(dims, values, strict=True):
        simple = f.simplify(d)
        lo, hi = f.bounds(d)
        for e, v in zip(env, vals, strict=True):
            if v is None:
                continue
            try:
                got = simple.evaluate(e)
            except DimEvalError:
                raise AssertionError(f"{simple} undefined where {d} is defined at {e}") from None
            assert got == v, (str(d), str(simple), f, e)
            assert lo is None or lo <= v, (str(d), lo, f, e)
            assert hi is None or v <= hi, (str(d), hi, f, e)

    for (d1, v1), (d2, v2) in itertools.product(zip(dims, values, strict=True), repeat=2):
        pairs = [(x, y) for x, y in zip(v1, v2, strict=True) if x is not None and y is not None]
        for rel in RELS:
            if f.prove(d1, rel, d2):
                bad = next(((x, y) for x, y in pairs if not _holds(x, rel, y)), None)
                assert bad is None, f"proved {d1} {rel} {d2} under {f}, false at {bad}"
        if f.divides(d2, d1):
            for x, y in pairs:
                assert (x == 0) if y == 0 else (x % y == 0), f"{d2} | {d1} under {f}"


@settings(derandomize=True, max_examples=150, deadline=None)
@given(_trees(2), _trees(2))
def test_simplify_without_facts_is_exact_and_prove_is_sound(a: Tree, b: Tree) -> None:
    da, db = _to_dim(a), _to_dim(b)
    fa, fb = _compile(a), _compile(b)
    sa = EMPTY.simplify(da)
    for p in _points(2):
        x, y = _value(fa, p), _value(fb, p)
        if x is None:
            continue
        assert sa.evaluate(dict(zip(PSYMS, p, strict=True))) == x
        if y is None:
            continue
        for rel in RELS:
            if EMPTY.prove(da, rel, db):
                assert _holds(x, rel, y), (str(da), rel, str(db), p)
