"""Index notation, reductions and comprehensions (language.md 8; 16.2 E31xx).

Each case is a whole module and the exact list of findings it must produce,
as (code, line, column) of the primary span in the sorted order of 16.5: no
finding may be missing, and no follow-up error may appear.
"""

from __future__ import annotations

import pytest
from checker_support import Finding, check, clean, findings

from linnet.check.decls import IndexVar
from linnet.syntax import ast

INDEX_CASES: dict[str, tuple[str, list[Finding]]] = {
    "e3101_unbound": (
        """\
module t.a
fn f<N: Dim>(a: Tensor[N, N; f32], b: Tensor[N; f32]) -> Tensor[N; f32] {
    let y[i] = a[i, j] * b[j] + a[j, i]
    let z[*s] = b[*t]
    return y
}
""",
        [("E3101", 3, 21), ("E3101", 4, 19)],
    ),
    "e3102_unused_reduction": (
        """\
module t.a
fn f<N: Dim>(x: Tensor[N; f32]) -> f32 {
    return sum[i, j] x[i]
}
""",
        [("E3102", 3, 19)],
    ),
    "e3103_no_domain": (
        """\
module t.a
fn f<N: Dim>(x: Tensor[N; f32]) -> Tensor[N, N; f32] {
    let z[i, k] = x[i]
    return z
}
""",
        [("E3103", 3, 14)],
    ),
    "e3104_invalid": (
        """\
module t.a
block L<H: Dim> {
    param w: Tensor[H; f32]
}
block B<H: Dim> {
    sub layers: [L<H>; 2]
    pub fn f<N: Dim>(x: Tensor[N; f32], k: f32) -> f32 {
        let w[i] = x[i] * i
        let v[i] = 1.0
        let u[i] = x
        let t[i] = x[k]
        let s = sum[i] x
        let r = layers[0:1]
        let q = x[1.5]
        return 0.0
    }
}
""",
        [
            ("E3104", 8, 27),
            ("E3104", 9, 20),
            ("E3104", 10, 20),
            ("E3104", 11, 22),
            ("E3104", 12, 24),
            ("E3104", 13, 17),
            ("E3104", 14, 19),
        ],
    ),
    "e3105_duplicates": (
        """\
module t.a
fn f<N: Dim>(x: Tensor[N; f32]) -> f32 {
    let y[i, i] = x[i]
    return sum[j, j] x[j]
}
""",
        [("E3105", 3, 14), ("E3105", 4, 19)],
    ),
    "e3106_packs": (
        """\
module t.a
fn f<*S: Shape, H: Dim>(x: Tensor[*S, H; f32], y: Tensor[H; f32]) -> f32 {
    let a[*s, h] = x[*s, *s]
    let b[h] = y[*h]
    let c[*s, h] = x[s, h]
    let d = x[0]
    let e = x[*s]
    let g[h] = sum[k] x[k, h]
    return 0.0
}
""",
        [
            ("E3106", 3, 26),
            ("E3106", 4, 18),
            ("E3106", 5, 22),
            ("E3106", 6, 15),
            ("E3106", 7, 15),
            ("E3106", 8, 25),
        ],
    ),
}


@pytest.mark.parametrize("name", sorted(INDEX_CASES))
def test_findings(name: str) -> None:
    source, expected = INDEX_CASES[name]
    assert findings(source) == expected


def test_index_notation_notes_and_help() -> None:
    unbound = check(INDEX_CASES["e3101_unbound"][0]).diagnostics[0]
    assert unbound.notes == ("free indices are never summed implicitly",)
    assert unbound.help == ("reduce over it with `sum[j] ...` or list it on the left",)
    unused = check(INDEX_CASES["e3102_unused_reduction"][0]).diagnostics[0]
    assert unused.notes == ("an index takes its extent from the axes it is used on",)
    assert unused.help == ("remove it",)
    as_value = check(INDEX_CASES["e3104_invalid"][0]).diagnostics[0]
    assert as_value.help == ("read the position from a tensor: `iota<i32>(N)[i]`",)


def test_unbound_index_reported_once_per_statement() -> None:
    codes = [d.code for d in check(INDEX_CASES["e3101_unbound"][0]).diagnostics]
    assert codes.count("E3101") == 2  # `j` once on line 3, `*t` on line 4


def test_comprehension_and_reduction_records() -> None:
    program = clean(
        """
        module t.a
        pub fn bmm<*Batch: Shape, M: Dim, K: Dim, N: Dim>(
            a: Tensor[*Batch, M, K; bf16],
            b: Tensor[*Batch, K, N; bf16],
        ) -> Tensor[*Batch, M, N; f32] {
            let c[*z, m, n] = sum<f32>[k] cast<f32>(a[*z, m, k]) * cast<f32>(b[*z, k, n])
            return c
        }
        """
    )
    ((stmt, info),) = program.comprehensions.items()
    assert isinstance(stmt, ast.ComprehensionStmt)
    assert [v.name for v in info.outputs] == ["z", "m", "n"]
    assert repr(info.result) == "Tensor[*Batch, M, N; f32]"
    ((_, reduction),) = program.reductions.items()
    assert str(reduction.dtype) == "f32"
    assert [str(v.domain) for v in reduction.indices] == ["K"]
    components = [v for k, v in program.resolutions.items() if isinstance(v, IndexVar)]
    assert {v.name for v in components} == {"z", "m", "n", "k"}


def test_gather_by_runtime_position_and_diagonal() -> None:
    clean(
        """
        module t.a
        pub fn pick<B: Dim, V: Dim>(scores: Tensor[B, V; f32], labels: Tensor[B; i32]) -> Tensor[B; f32] {
            let chosen[b] = scores[b, labels[b]]
            return chosen
        }
        pub fn diag<N: Dim>(a: Tensor[N, N; f32]) -> (Tensor[N; f32], f32) {
            let d[i] = a[i, i]
            return (d, sum[i] a[i, i])
        }
        pub fn last<N: Dim>(x: Tensor[N; f32]) -> Tensor[N; f32]
        where N > 0 {
            let y[i] = x[i] * x[N - 1]
            return y
        }
        """
    )


def test_accumulator_must_match_the_body() -> None:
    program = check(
        """
        module t.a
        pub fn f<D: Dim>(x: Tensor[D; bf16]) -> f32 {
            return sum<f32>[d] x[d]
        }
        """
    )
    (d,) = program.diagnostics
    assert (d.code, d.span.text if d.span else "") == ("E2103", "x[d]")
    assert d.help == ("convert the body: `sum<f32>[...] cast<f32>(...)`",)
