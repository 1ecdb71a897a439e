"""Shapes and the obligations the prover discharges (language.md 6, 7.6, 9, 10; 16.2 E22xx).

Each case is a whole module and the exact list of findings it must produce,
as (code, line, column) of the primary span in the sorted order of 16.5: no
finding may be missing, and no follow-up error may appear.
"""

from __future__ import annotations

import pytest
from checker_support import Finding, check, clean, findings, only

from linnet.syntax import ast

SHAPE_CASES: dict[str, tuple[str, list[Finding]]] = {
    "e2201_extents": (
        """\
module t.a
fn f<M: Dim, K1: Dim, K2: Dim, N: Dim>(a: Tensor[M, K1; f32], b: Tensor[K2, N; f32], s: Tensor[M, N; f32]) -> Tensor[M, N; f32] {
    let c[m, n] = sum[k] a[m, k] * b[k, n]
    let d[i] = s[i, i]
    return c
}
""",
        [("E2201", 3, 23), ("E2201", 4, 11)],
    ),
    "e2202_shapes": (
        """\
module t.a
fn g<N: Dim>(x: Tensor[N; f32], y: Tensor[N; f32]) -> Tensor[N; f32] {
    return x
}
fn h<N: Dim, D: Dim>(x: Tensor[N * D; f32], y: Tensor[N; f32], z: Tensor[D; f32]) -> Tensor[N; f32] {
    return y
}
fn f<A: Dim, B: Dim>(a: Tensor[A; f32], b: Tensor[B; f32]) -> Tensor[B; f32] {
    let x = g(a, b)
    let y: Tensor[B; f32] = a
    let z = h(a, b, b)
    let w = concat(reshape(a, [A, 1]), reshape(b, [1, B]), axis = 0)
    return a
}
""",
        [
            ("E2202", 9, 18),
            ("E2202", 10, 29),
            ("E2202", 11, 15),
            ("E2202", 12, 40),
            ("E2202", 13, 12),
        ],
    ),
    "e2203_reshape": (
        """\
module t.a
fn f<H: Dim, N: Dim>(x: Tensor[H; f32]) -> Tensor[N, H / N; f32]
where N > 0 {
    return reshape(x, [N, H / N])
}
""",
        [("E2203", 4, 12)],
    ),
    "e2204_rank": (
        """\
module t.a
fn f<M: Dim, N: Dim>(a: Tensor[M, N; f32]) -> f32 {
    let y[i] = a[i]
    let z = a[0, 0, 0]
    let w = a[..., 0, ...]
    return 0.0
}
""",
        [("E2204", 3, 16), ("E2204", 4, 13), ("E2204", 5, 23)],
    ),
    "e2205_divisors": (
        """\
module t.a
fn f<H: Dim, N: Dim>(x: Tensor[H / N; f32]) -> f32 {
    let r = H % N
    let q = [H / 0]
    return 0.0
}
""",
        [("E2205", 2, 36), ("E2205", 3, 17), ("E2205", 4, 18)],
    ),
    "e2206_constraints": (
        """\
module t.a
fn half<D: Dim>(x: Tensor[D; f32]) -> Tensor[D / 2; f32]
where D % 2 == 0 {
    return x[0::2]
}
block G<H: Dim>
where H % 4 == 0 {
    param w: Tensor[H; f32]
}
block O<H: Dim> {
    sub g: G<H>
}
fn f<D: Dim>(x: Tensor[D; f32]) -> f32 {
    let y = half(x)
    return 0.0
}
""",
        [("E2206", 11, 12), ("E2206", 14, 13)],
    ),
    "e2207_broadcast": (
        """\
module t.a
fn f<A: Dim, B: Dim, *S: Shape>(a: Tensor[A; f32], b: Tensor[B; f32], p: Tensor[*S, A; f32]) -> f32 {
    let c = a + b
    let d = broadcast_to(a, [B])
    let e = p * reshape(a, [1, A])
    let g = max(a, b)
    return 0.0
}
""",
        [("E2207", 3, 13), ("E2207", 4, 13), ("E2207", 5, 13), ("E2207", 6, 13)],
    ),
    "e2208_negative": (
        """\
module t.a
fn f<H: Dim>(x: Tensor[H - H - 1; f32]) -> f32 {
    let a = fill<f32>([0 - 2], 0.0)
    return 0.0
}
""",
        [("E2208", 2, 24), ("E2208", 3, 24)],
    ),
    "e2209_indices": (
        """\
module t.a
block L<H: Dim> {
    param w: Tensor[H; f32]
}
block B<H: Dim> {
    sub layers: [L<H>; 2]
    pub fn f<N: Dim>(x: Tensor[N; f32], i: i64) -> f32 {
        let a = x[-1]
        let b = x[i:]
        let c = x[0:N:0]
        let d = x[0:N:i]
        let e = concat(x, x, axis = i)
        let g = layers[2].w
        let h = layers[i].w
        let k = fill<f32>([3], 0.0)[3]
        return 0.0
    }
}
""",
        [
            ("E2209", 8, 19),
            ("E2209", 9, 19),
            ("E2209", 10, 23),
            ("E2209", 11, 23),
            ("E2209", 12, 37),
            ("E2209", 13, 24),
            ("E2209", 14, 24),
            ("E2209", 15, 37),
        ],
    ),
    "e2210_axes": (
        """\
module t.a
fn f<A: Dim, B: Dim, *S: Shape>(x: Tensor[A, B; f32], p: Tensor[*S, A; f32]) -> f32 {
    let a = permute(x, [0, 0])
    let b = permute(p, [0, 1])
    let c = concat(x, x, axis = 2)
    let d = concat(p, p, axis = 0)
    return 0.0
}
""",
        [("E2210", 3, 24), ("E2210", 4, 21), ("E2210", 5, 33), ("E2210", 6, 33)],
    ),
}


@pytest.mark.parametrize("name", sorted(SHAPE_CASES))
def test_findings(name: str) -> None:
    source, expected = SHAPE_CASES[name]
    assert findings(source) == expected


def test_e2201_labels_and_notes() -> None:
    d = check(SHAPE_CASES["e2201_extents"][0]).diagnostics[0]
    assert d.label == "index declared here"
    assert [r.text for r in d.related] == ["used here with a different extent"]
    assert d.notes == (
        "`k` has extent `K1` from axis 1 of `a`",
        "here it indexes an axis of extent `K2`",
    )


def test_e2202_notes_show_both_types() -> None:
    d = check(SHAPE_CASES["e2202_shapes"][0]).diagnostics[1]
    assert d.notes[:2] == ("expected `Tensor[B; f32]`", "found `Tensor[A; f32]`")
    assert d.help == ("state the missing equality in a `where` clause",)


def test_e2203_notes_show_both_counts() -> None:
    d = only(SHAPE_CASES["e2203_reshape"][0])
    assert d.notes == ("the tensor has `H` elements", "the new shape has `N * (H / N)`")
    assert d.help == ("state divisibility in `where`, e.g. `where H % N == 0`",)


def test_e2206_points_at_the_required_constraint() -> None:
    d = check(SHAPE_CASES["e2206_constraints"][0]).diagnostics[1]
    assert [r.text for r in d.related] == ["required here"]
    assert d.related[0].span.text == "D % 2 == 0"
    assert d.help == ("state the same constraint in the calling function's or block's `where`",)


def test_e2207_notes_and_help() -> None:
    d = check(SHAPE_CASES["e2207_broadcast"][0]).diagnostics[0]
    assert d.notes[0] == "the aligned dimensions are `A` and `B`; they must be equal or 1"
    assert d.help == ("share one generic between the axes, or relate them in `where`",)


def test_e2205_help_names_the_divisor() -> None:
    d = check(SHAPE_CASES["e2205_divisors"][0]).diagnostics[0]
    assert d.help == ("add a constraint such as `where N > 0`",)


def test_prover_obligations_from_the_spec() -> None:
    clean(
        """
        module t.a
        fn groups<Rows: Dim, Width: Dim, G: Dim>(x: Tensor[Rows, Width; f32]) -> Tensor[G, Rows, Width / G; f32]
        where
            G > 0,
            Width % G == 0
        {
            return permute(reshape(x, [Rows, G, Width / G]), [1, 0, 2])
        }
        pub fn eight<Rows: Dim, C: Dim>(x: Tensor[Rows, 8 * C; f32]) -> Tensor[8, Rows, C; f32] {
            return groups<Rows, 8 * C, 8>(x)
        }
        pub fn window<M: Dim>(x: Tensor[M; f32]) -> Tensor[2; f32]
        where M >= 3 {
            return x[1:3]
        }
        pub fn same<N: Dim>(x: Tensor[N; f32], y: Tensor[2 * N; f32]) -> Tensor[N; f32] {
            return x + y[0:N] + y[N:2 * N]
        }
        pub fn broadcast<N: Dim>(a: Tensor[N, N; f32], b: Tensor[1, N; f32]) -> Tensor[N, N; f32] {
            return a + b
        }
        pub fn by_fact<A: Dim, B: Dim>(a: Tensor[A; f32], b: Tensor[B; f32]) -> Tensor[A; f32]
        where A == B {
            return a + b
        }
        """
    )


SLICES = [
    ("x[0]", "Tensor[S, H; f32]"),
    ("x[:, S - 1, :]", "Tensor[B, H; f32]"),
    ("x[..., 0::2]", "Tensor[B, S, (H + 1) / 2; f32]"),
    ("x[:, 1:3]", "Tensor[B, max(min(3, S) - 1, 0), H; f32]"),
    ("x[b, t]", "Tensor[H; f32]"),
    ("x[0, 0, 0]", "f32"),
    ("x[1:, ...]", "Tensor[max(B - 1, 0), S, H; f32]"),
    ("x[:, 0:min(S, 8)]", "Tensor[B, min(8, S), H; f32]"),
    ("x[:, 0:max(S, 8)]", "Tensor[B, S, H; f32]"),
]


@pytest.mark.parametrize(("expr", "expected"), SLICES)
def test_slicing_result_types(expr: str, expected: str) -> None:
    """The table of 9.7 for `x: Tensor[B, S, H; f32]`, without facts."""
    program = check(
        f"""
        module t.a
        pub fn f<B: Dim, S: Dim, H: Dim>(x: Tensor[B, S, H; f32], b: i64, t: i32) -> f32 {{
            let r = {expr}
            return 0.0
        }}
        """
    )
    assert not [d for d in program.diagnostics if d.is_error]
    (local,) = [loc for ident, loc in program.bindings.items() if ident.name == "r"]
    assert repr(local.type) == expected


def test_slice_extent_uses_facts() -> None:
    program = check(
        """
        module t.a
        pub fn f<B: Dim, S: Dim, H: Dim>(x: Tensor[B, S, H; f32]) -> Tensor[B, 2, H; f32]
        where S >= 3 {
            return x[:, 1:3]
        }
        """
    )
    assert not program.diagnostics
    index = next(e for e in program.types if isinstance(e, ast.Index))
    info = program.indexings[index]
    assert info.mode == "slice"
    assert [(s.axis, s.kind, str(s.extent)) for s in info.selections] == [
        (0, "slice", "B"),
        (1, "slice", "2"),
    ]


def test_slice_up_to_a_min_has_the_min_as_its_extent() -> None:
    """`x[0:min(N, 8)]` is `Tensor[min(N, 8)]`: the clamp `min(min(N, 8), N)` merges."""
    clean(
        """
        module t.a
        pub fn head<N: Dim>(x: Tensor[N; f32]) -> Tensor[min(N, 8); f32] {
            return x[0:min(N, 8)]
        }
        pub fn head2<N: Dim, M: Dim>(x: Tensor[N, M; f32]) -> Tensor[min(8, N), min(M, min(4, M)); f32] {
            return x[0:min(8, N), 0:min(4, M)]
        }
        pub fn tail<N: Dim>(x: Tensor[N; f32]) -> Tensor[max(N - 2, 0); f32] {
            return x[2:max(N, 2)]
        }
        """
    )


def test_a_merged_min_still_refuses_a_different_bound() -> None:
    d = only(
        """
        module t.a
        pub fn head<N: Dim>(x: Tensor[N; f32]) -> Tensor[min(N, 4); f32] {
            return x[0:min(N, 8)]
        }
        """
    )
    assert d.code == "E2202"
