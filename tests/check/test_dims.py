"""Normal forms, eager simplification, printing and evaluation of `Dim` (6.1, 6.4)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from linnet.check.dims import I64_MAX, Dim, DimEvalError, DimOverflow, Symbol

SB, SS, SH, SN, SD, SM, SK = (Symbol(n) for n in ("B", "S", "H", "N", "D", "M", "K"))
B, S, H, N, D, M, K = (Dim.symbol(s) for s in (SB, SS, SH, SN, SD, SM, SK))
PACK = Symbol("Lead", is_pack=True)


def c(v: int) -> Dim:
    return Dim.const(v)


# --- symbols ------------------------------------------------------------------


def test_symbols_are_identity_equal_and_ordered_by_declaration() -> None:
    a, b = Symbol("N"), Symbol("N")
    assert a != b
    assert Dim.symbol(a) != Dim.symbol(b)
    assert a.serial < b.serial
    assert Dim.symbol(a) == Dim.symbol(a)


def test_symbol_and_pack_constructors_reject_the_wrong_kind() -> None:
    with pytest.raises(ValueError):
        Dim.symbol(PACK)
    with pytest.raises(ValueError):
        Dim.pack_size(SN)


# --- normal form ----------------------------------------------------------------


def test_like_terms_merge_and_zero_terms_vanish() -> None:
    assert H + H == 2 * H
    assert (H - H).as_int() == 0
    assert (B + S) * (B - S) == B * B - S * S
    assert 3 + N - 3 == N
    assert (N * 2 - N).as_int() is None


def test_products_are_commutative_multisets() -> None:
    assert B * S * H == H * S * B
    assert N * N != 2 * N
    assert (N * N).symbols() == frozenset({SN})


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        (c(2) * 3, 6),
        (c(7).floordiv(2), 3),
        (c(-7).floordiv(2), -4),  # floor division
        (c(7).floordiv(-2), -4),
        (c(7).mod(3), 1),
        (c(-7).mod(3), 2),  # remainder with the divisor's sign
        (c(7).mod(-3), -2),
        (c(4).minimum(7), 4),
        (c(4).maximum(7), 7),
    ],
)
def test_constants_fold(expr: Dim, expected: int) -> None:
    assert expr.as_int() == expected


def test_eager_floor_division_rules() -> None:
    # The examples of 6.1 and 6.4.
    assert (2 * H).floordiv(2) == H
    assert (8 * D).floordiv(8) == D
    assert (2 * D + 1).floordiv(2) == D
    assert (N * K).floordiv(N) == K
    assert (2 * D + 5).floordiv(2) == D + 2
    assert (H + 1).floordiv(2) != H.floordiv(2)
    assert (N * K + 1).floordiv(N) == K + c(1).floordiv(N)
    assert (2 * H).floordiv(2 * N) == H.floordiv(N)
    assert (-H).floordiv(-N) == H.floordiv(N)
    assert H.floordiv(1) == H
    assert (H + N).floordiv(H + N) == c(1)
    assert (2 * H + 2 * N).floordiv(H + N) == c(2)


def test_nested_constant_divisions_reduce_by_gcd() -> None:
    assert (2 * D + 2).floordiv(4) == (D + 1).floordiv(2)
    assert (2 * D + 1).floordiv(4) == D.floordiv(2)


def test_eager_mod_rules() -> None:
    assert (8 * D).mod(8) == c(0)
    assert (H + H).mod(2) == c(0)
    assert (8 * D + 3).mod(8) == c(3)
    assert (N * K).mod(N) == c(0)
    assert (N * K + 1).mod(N) == c(1).mod(N)
    assert (3 * H).mod(2) == H.mod(2)
    assert (2 * H + 1).mod(4) == 2 * H.mod(2) + 1
    assert H.mod(1) == c(0)


def test_eager_min_max_rules() -> None:
    assert N.minimum(N) == N
    assert N.maximum(N) == N
    assert (N + 1).minimum(N + 3) == N + 1
    assert (N + 1).maximum(N + 3) == N + 3
    assert N.minimum(M) == M.minimum(N)
    assert N.maximum(M) == M.maximum(N)
    assert (N + 1).minimum(M + 1) == N.minimum(M) + 1
    assert N.minimum(M) != N.maximum(M)


def test_nested_min_max_merge_repeats_and_fold_constants() -> None:
    assert N.minimum(c(8).minimum(N)) == N.minimum(8)
    assert N.minimum(8).minimum(N) == N.minimum(8)
    assert N.maximum(M.maximum(N)) == N.maximum(M)
    assert N.minimum(8).minimum(3) == N.minimum(3)
    assert N.maximum(8).maximum(3) == N.maximum(8)
    assert c(2).minimum(N.minimum(c(5))) == N.minimum(2)
    assert (N + 1).minimum(M.minimum(N + 3)) == (N + 1).minimum(M)
    assert (N + 1).minimum(M.minimum(N)) == N.minimum(M)
    assert N.minimum(M).minimum(K.minimum(N)) == N.minimum(K.minimum(M))
    assert N.minimum(M.minimum(K)).minimum(M) == N.minimum(M.minimum(K))
    assert str(N.minimum(c(8).minimum(N))) == "min(8, N)"


def test_min_max_absorb_each_other() -> None:
    assert N.minimum(N.maximum(M)) == N
    assert N.maximum(M).minimum(N) == N
    assert N.maximum(N.minimum(M)) == N
    assert N.minimum(M).minimum(N.maximum(M)) == N.minimum(M)
    assert N.maximum(M).maximum(N.minimum(K)) == N.maximum(M)
    # Not absorbed: `max(N, M)` and `max(N, K)` are incomparable.
    assert str(N.maximum(M).minimum(N.maximum(K))) == "min(max(N, M), max(N, K))"


def test_distinct_operands_are_kept() -> None:
    assert str(N.minimum(M.minimum(8))) == "min(N, min(8, M))"
    assert str(N.minimum(2 * N)) == "min(N, 2 * N)"
    assert str(N.minimum(2 * M.minimum(N))) == "min(N, 2 * min(N, M))"


def test_equal_expressions_compare_equal_and_hash_alike() -> None:
    a = (2 * H).floordiv(2)
    assert a == H
    assert hash(a) == hash(H)
    assert len({B * S, S * B, B * S + 0}) == 1


def test_zero_divisors_stay_opaque_and_fail_evaluation() -> None:
    bad = H.floordiv(0)
    assert bad.as_int() is None
    with pytest.raises(DimEvalError, match="division by zero"):
        bad.evaluate({SH: 4})
    with pytest.raises(DimEvalError):
        H.mod(N).evaluate({SH: 4, SN: 0})


# --- overflow -------------------------------------------------------------------


def test_folding_overflow_raises() -> None:
    big = c(I64_MAX)
    with pytest.raises(DimOverflow):
        _ = big + 1
    with pytest.raises(DimOverflow):
        _ = big * 2
    with pytest.raises(DimOverflow):
        _ = (N + I64_MAX) * 2
    with pytest.raises(DimOverflow):
        c(-(2**63)).floordiv(-1)
    assert (big - 1 + 1).as_int() == I64_MAX


# --- printing -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "text"),
    [
        (B * S * H, "B * S * H"),
        (H.floordiv(N), "H / N"),
        ((H + 1).floordiv(2), "(H + 1) / 2"),
        (c(3).minimum(M) - 1, "min(3, M) - 1"),
        ((c(3).minimum(S) - 1).maximum(0), "max(min(3, S) - 1, 0)"),
        (2 * D, "2 * D"),
        (3 - N, "3 - N"),
        (-N, "-N"),
        (-2 * N, "-2 * N"),
        (N - 1, "N - 1"),
        (c(0), "0"),
        (c(-5), "-5"),
        (B * N * H.floordiv(N), "B * N * (H / N)"),
        (-H.floordiv(N), "-(H / N)"),
        (S - H.floordiv(N), "S - H / N"),
        (H.mod(N), "H % N"),
        (2 * H.mod(N), "2 * (H % N)"),
        (H.floordiv(2 * N), "H / (2 * N)"),
        (H.floordiv(N.floordiv(2)), "H / (N / 2)"),
        (H.floordiv(N.minimum(M)), "H / min(N, M)"),
        (H.floordiv(N).floordiv(M), "H / N / M"),
        ((B * S).floordiv(N), "B * S / N"),
        (H.floordiv(N + 1), "H / (N + 1)"),
        (N.minimum(2 * N), "min(N, 2 * N)"),
        (Dim.pack_size(PACK) * H, "H * numel(*Lead)"),
        (N * N, "N * N"),
        (B * S + H + 1, "B * S + H + 1"),
    ],
)
def test_printing_is_source_like(expr: Dim, text: str) -> None:
    assert str(expr) == text


def test_conv_output_extent_prints_like_the_stdlib() -> None:
    pad, stride = Dim.symbol(Symbol("Pad")), Dim.symbol(Symbol("Stride"))
    extent = (H + 2 * pad - K).floordiv(stride) + 1
    assert str(extent) == "(H + 2 * Pad - K) / Stride + 1"


# --- substitution and evaluation -----------------------------------------------


def test_substitute_renormalises() -> None:
    expr = (N * K).floordiv(M) + H.mod(M)
    assert expr.substitute({SM: N}) == K + H.mod(N)
    assert H.floordiv(N).substitute({SN: c(4), SH: 8 * D}) == 2 * D
    assert expr.substitute({}) is expr
    assert B.substitute({SN: c(1)}) is B


def test_substitute_pack_counts() -> None:
    expr = Dim.pack_size(PACK) * H
    assert expr.substitute({PACK: B * S}) == B * S * H
    assert expr.symbols() == frozenset({PACK, SH})


def test_evaluate_uses_floor_semantics_and_packs() -> None:
    expr = (H - 2 * K).floordiv(N) + H.mod(N) * Dim.pack_size(PACK)
    assert expr.evaluate({SH: 7, SK: 5, SN: 2}, {PACK: [2, 3]}) == (7 - 10) // 2 + (7 % 2) * 6
    assert Dim.pack_size(PACK).evaluate({}, {PACK: []}) == 1
    assert Dim.pack_size(PACK).evaluate({PACK: 12}) == 12


def test_evaluate_reports_unbound_symbols() -> None:
    with pytest.raises(DimEvalError, match="`H` is not bound"):
        (H + 1).evaluate({})
    with pytest.raises(DimEvalError, match=r"\*Lead"):
        Dim.pack_size(PACK).evaluate({})


def test_as_symbol_only_for_a_bare_generic() -> None:
    assert H.as_symbol() is SH
    assert (2 * H).as_symbol() is None
    assert (H + 1).as_symbol() is None
    assert Dim.pack_size(PACK).as_symbol() is None


def test_arithmetic_rejects_non_integers() -> None:
    with pytest.raises(TypeError):
        _ = H + 1.5  # type: ignore[operator]
    with pytest.raises(TypeError):
        _ = H + True


# --- properties: arithmetic is a ring homomorphism into evaluation ----------------

SYMS = (SB, SS, SH)


def _leaf() -> st.SearchStrategy[Dim]:
    return st.one_of(
        st.integers(-4, 6).map(Dim.const),
        st.sampled_from([Dim.symbol(s) for s in SYMS]),
    )


def _extend(children: st.SearchStrategy[Dim]) -> st.SearchStrategy[Dim]:
    pair = st.tuples(children, children)
    return st.one_of(
        pair.map(lambda p: p[0] + p[1]),
        pair.map(lambda p: p[0] - p[1]),
        pair.map(lambda p: p[0] * p[1]),
        pair.map(lambda p: p[0].minimum(p[1])),
        pair.map(lambda p: p[0].maximum(p[1])),
        st.tuples(children, st.integers(1, 5)).map(lambda p: p[0].floordiv(p[1])),
        st.tuples(children, st.integers(1, 5)).map(lambda p: p[0].mod(p[1])),
    )


DIMS = st.recursive(_leaf(), _extend, max_leaves=6)
VALUES = st.fixed_dictionaries({s: st.integers(0, 9) for s in SYMS})


@settings(derandomize=True, max_examples=300, deadline=None)
@given(DIMS, DIMS, VALUES)
def test_arithmetic_commutes_with_evaluation(a: Dim, b: Dim, values: dict[Symbol, int]) -> None:
    x, y = a.evaluate(values), b.evaluate(values)
    assert (a + b).evaluate(values) == x + y
    assert (a - b).evaluate(values) == x - y
    assert (a * b).evaluate(values) == x * y
    assert (-a).evaluate(values) == -x
    assert a.minimum(b).evaluate(values) == min(x, y)
    assert a.maximum(b).evaluate(values) == max(x, y)
    if y != 0:
        assert a.floordiv(b).evaluate(values) == x // y
        assert a.mod(b).evaluate(values) == x % y
    assert a + b == b + a
    assert a * b == b * a
    assert a.minimum(b) == b.minimum(a)


@settings(derandomize=True, max_examples=300, deadline=None)
@given(DIMS, DIMS, DIMS, VALUES)
def test_nested_min_max_agree_with_evaluation(
    a: Dim, b: Dim, d: Dim, values: dict[Symbol, int]
) -> None:
    """The merging and absorption rules are sound: repeats and mixed nests evaluate right."""
    x, y, z = (e.evaluate(values) for e in (a, b, d))
    nests = [
        (a.minimum(b.minimum(a)), min(x, y)),
        (a.maximum(b.maximum(a)), max(x, y)),
        (a.minimum(b).minimum(d.minimum(a)), min(x, y, z)),
        (a.minimum(a.maximum(b)), x),
        (a.maximum(a.minimum(b)), x),
        (a.maximum(b).minimum(a.maximum(d)), min(max(x, y), max(x, z))),
        (a.minimum(b.maximum(d)).maximum(d.minimum(a)), max(min(x, max(y, z)), min(z, x))),
        (a.minimum(3).minimum(b.minimum(5)), min(x, y, 3)),
    ]
    for nest, expected in nests:
        assert nest.evaluate(values) == expected
    assert a.minimum(b.minimum(a)) == b.minimum(a).minimum(a)


@settings(derandomize=True, max_examples=200, deadline=None)
@given(DIMS)
def test_substituting_constants_agrees_with_evaluation(a: Dim) -> None:
    values = {SB: 3, SS: 0, SH: 7}
    folded = a.substitute({s: Dim.const(v) for s, v in values.items()})
    assert folded.as_int() == a.evaluate(values)
