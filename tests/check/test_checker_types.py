"""Types, literals, operators, calls and statements (language.md 5, 7, 11, 13, 14; 16.2 E21xx).

Each case is a whole module and the exact list of findings it must produce,
as (code, line, column) of the primary span in the sorted order of 16.5: no
finding may be missing, and no follow-up error may appear.
"""

from __future__ import annotations

import pytest
from checker_support import Finding, check, clean, findings, only

TYPE_CASES: dict[str, tuple[str, list[Finding]]] = {
    "e2101_annotation_and_optional": (
        """\
module t.a
fn g(b: Tensor[3; f32]? = none) -> f32 {
    return 0.0
}
pub fn f(x: Tensor[3; f32]) -> f32 {
    let y: (f32, f32) = x
    let z = g(x)
    return z
}
""",
        [("E2101", 6, 25), ("E2101", 7, 15)],
    ),
    "e2101_return_value_rules": (
        """\
module t.a
fn unit(x: f32) {
    return x
}
fn needs(x: f32) -> f32 {
    return
}
fn use_unit(x: f32) -> f32 {
    let y = unit(x)
    return x
}
""",
        [("E2101", 3, 12), ("E2101", 6, 5), ("E2101", 9, 13)],
    ),
    "e2101_block_type_param": (
        """\
module t.a
block B<H: Dim> {
    param w: Tensor[H; f32]
}
fn f(b: B<3>) -> f32 {
    return 0.0
}
""",
        [("E2101", 5, 9)],
    ),
    "e2102_bad_arguments": (
        """\
module t.a
fn g(x: f32, y: f32 = 1.0) -> f32 {
    return x + y
}
fn f(x: f32) -> f32 {
    let a = g(x, x, x)
    let b = g(y = x)
    let c = g(x, z = x)
    let d = g(x, x = x)
    let e = exp(x, x)
    let h = concat(x)
    let i = max(x, 1.0, axis = 1)
    return a
}
""",
        [
            ("E2102", 6, 21),
            ("E2102", 7, 13),
            ("E2102", 8, 18),
            ("E2102", 9, 18),
            ("E2102", 10, 13),
            ("E2102", 11, 13),
            ("E2102", 12, 25),
        ],
    ),
    "e2103_dtypes": (
        """\
module t.a
fn f(a: Tensor[3; f16], b: Tensor[3; f32], c: f32, d: bf16) -> f32 {
    let x = a * b
    let y = c + d
    let z: Tensor[3; f32] = a
    return d
}
""",
        [("E2103", 3, 13), ("E2103", 4, 13), ("E2103", 5, 29), ("E2103", 6, 12)],
    ),
    "e2104_operands": (
        """\
module t.a
fn f<T: DType, N: Dim>(b: Tensor[N; bool], t: Tensor[N; T], x: f32, i: i32) -> f32 {
    let p = b + b
    let q = t * t
    let r = x & x
    let s = exp(i)
    let u = exp(3)
    let v = select(b, 1, 0)
    let w: bool = 1
    let y: i32 = 1.5
    let z = "text"
    let k = x[0]
    let m = sum[n] b[n]
    let o = any[n] t[n]
    return x
}
""",
        [
            ("E2104", 3, 13),
            ("E2104", 4, 13),
            ("E2104", 5, 13),
            ("E2104", 6, 13),
            ("E2104", 7, 17),
            ("E2104", 8, 13),
            ("E2104", 9, 19),
            ("E2104", 10, 18),
            ("E2104", 11, 13),
            ("E2104", 12, 13),
            ("E2104", 13, 13),
            ("E2104", 14, 13),
        ],
    ),
    "e2105_ranges": (
        """\
module t.a
fn f(x: u8) -> f32 {
    let a: u8 = 300
    let b: i8 = -129
    let c = 9223372036854775808
    let d: f16 = 70000.0
    let e = 1e999
    let g = x + 256
    return 0.0
}
""",
        [
            ("E2105", 3, 17),
            ("E2105", 4, 17),
            ("E2105", 5, 13),
            ("E2105", 6, 18),
            ("E2105", 7, 13),
            ("E2105", 8, 17),
        ],
    ),
    "e2106_not_callable": (
        """\
module t.a
const C = 3
block B<H: Dim> {
    param w: Tensor[H; f32]
    pub fn f(x: f32) -> f32 {
        let y = w(x)
        return x
    }
}
fn f(x: f32) -> f32 {
    let a = x(1.0)
    let b = C()
    return x
}
""",
        [("E2106", 6, 17), ("E2106", 11, 13), ("E2106", 12, 13)],
    ),
    "e2107_unknown_members": (
        """\
module t.a
enum E { A, B }
block Inner<H: Dim> {
    param w: Tensor[H; f32]
    pub fn go(x: f32) -> f32 {
        return x
    }
}
block Outer<H: Dim> {
    sub inner: Inner<H>
    pub fn f(x: f32) -> f32 {
        let a = inner.nothing
        let b = inner.fly(x)
        let c = E.C
        let d = x.y
        return x
    }
}
""",
        [("E2107", 12, 23), ("E2107", 13, 23), ("E2107", 14, 19), ("E2107", 15, 19)],
    ),
    "e2108_targets": (
        """\
module t.a
const C = 1.0
block B<H: Dim> {
    param w: Tensor[H; f32]
    state s: Tensor[H; f32]
    pub fn f(x: Tensor[H; f32]) -> Tensor[H; f32] {
        x = x
        w = x
        let l = x
        l = x
        C = 2.0
        s = x
        return s
    }
}
""",
        [("E2108", 7, 9), ("E2108", 8, 9), ("E2108", 10, 9), ("E2108", 11, 9)],
    ),
    "e2109_changes_type": (
        """\
module t.a
block B<H: Dim> {
    state s: Tensor[H; f32]
    pub fn f(x: Tensor[H; f16]) -> Tensor[H; f32] {
        s = x
        var v = x
        v = cast<f32>(x)
        var n = H
        n = H + 1
        n = H
        return s
    }
}
""",
        [("E2109", 5, 13), ("E2109", 7, 13), ("E2109", 9, 13)],
    ),
    "e2110_infer": (
        """\
module t.a
fn mask<S: Dim>() -> Tensor[S, S; bool] {
    let pos = iota<i32>(S)
    let keep[r, c] = pos[c] <= pos[r]
    return keep
}
fn f(x: f32) -> f32 {
    let m = mask()
    let c = cast(x)
    let z = fill([2], 0.0)
    return x
}
""",
        [("E2110", 8, 13), ("E2110", 9, 13), ("E2110", 10, 23)],
    ),
    "e2111_generic_args": (
        """\
module t.a
fn g<N: Dim>(x: Tensor[N; f32]) -> Tensor[N; f32] {
    return x
}
fn bad<S: Shape, *N: Dim>(x: f32) -> f32 {
    return x
}
block B<H: Dim, W: Dim> {
    param w: Tensor[H, W; f32]
}
block C {
    sub b1: B<2>
    sub b2: B<2, 3, 4>
    sub b3: B<f32, 3>
}
fn f(x: Tensor[3; f32]) -> Tensor[3; f32] {
    let a: f32<3> = 1.0
    let b = g<3, 4>(x)
    let c = exp<f32>(1.0)
    return x
}
""",
        [
            ("E2111", 5, 8),
            ("E2111", 5, 18),
            ("E2111", 12, 13),
            ("E2111", 13, 21),
            ("E2111", 14, 15),
            ("E2111", 17, 12),
            ("E2111", 18, 18),
            ("E2111", 19, 17),
        ],
    ),
    "e2112_dtype_class": (
        """\
module t.a
fn g<T: Float, N: Dim>(x: Tensor[N; T]) -> Tensor[N; T] {
    return x
}
fn h<T: Integer = f32>(x: f32) -> f32 {
    return x
}
block K<T: Float> {
    param w: Tensor[2; T]
}
block L {
    sub k: K<i32>
}
fn f(x: Tensor[3; i32]) -> f32 {
    let a = g(x)
    let b = g<f32, 3>(cast<f32>(x))
    let c = iota<bool>(3)
    return 0.0
}
""",
        [("E2112", 5, 19), ("E2112", 12, 14), ("E2112", 15, 13), ("E2112", 17, 13)],
    ),
    "e2113_none": (
        """\
module t.a
fn f(x: f32) -> f32 {
    let a = none
    var b = none
    return x
}
""",
        [("E2113", 3, 13), ("E2113", 4, 13)],
    ),
    "e2114_conditions": (
        """\
module t.a
fn f<N: Dim>(m: Tensor[N; bool], x: Tensor[N; f32], i: i32) -> Tensor[N; f32] {
    let a = if m { x } else { x }
    let b = if i { x } else { x }
    let c = select(x, x, x)
    while m {
        let q = 1
    }
    return x
}
""",
        [("E2114", 3, 16), ("E2114", 4, 16), ("E2114", 5, 20), ("E2114", 6, 11)],
    ),
    "e2115_branches": (
        """\
module t.a
fn f(c: bool, a: f32, b: i32, o: f32?) -> f32 {
    let y = if c { a } else { b }
    let z = match o {
        some(v) => v
        none => b
    }
    return a
}
""",
        [("E2115", 3, 31), ("E2115", 6, 17)],
    ),
    "e2116_logical": (
        """\
module t.a
fn f<N: Dim>(m: Tensor[N; bool], x: f32) -> bool {
    let a = m && m
    let b = !m
    let c = x || true
    return true
}
""",
        [("E2116", 3, 13), ("E2116", 3, 18), ("E2116", 4, 13), ("E2116", 5, 13)],
    ),
    "e2117_patterns": (
        """\
module t.a
enum E { A, B }
fn pair(x: f32) -> (f32, f32) {
    return (x, x)
}
fn f(x: f32, o: f32?, e: E) -> f32 {
    let (a, b, c) = pair(x)
    let some(d) = o
    let m = match x {
        _ => 1.0
    }
    let n = match o {
        some(v) => v
        rest => 0.0
        none => 1.0
    }
    let p = match e {
        A => 1.0
        A => 2.0
        B => 3.0
        some(z) => 4.0
    }
    return x
}
""",
        [
            ("E2117", 7, 9),
            ("E2117", 8, 9),
            ("E2117", 9, 19),
            ("E2117", 15, 9),
            ("E2117", 19, 9),
            ("E2117", 21, 9),
        ],
    ),
    "e2118_exhaustive": (
        """\
module t.a
enum E { A, B, C }
fn f(o: f32?, e: E) -> f32 {
    let a = match o {
        some(v) => v
    }
    let b = match e {
        A => 1.0
    }
    let c = match o {
        none => 1.0
    }
    return a
}
""",
        [("E2118", 4, 19), ("E2118", 7, 19), ("E2118", 10, 19)],
    ),
    "e2119_recursion": (
        """\
module t.a
fn a(x: f32) -> f32 {
    return b(x)
}
fn b(x: f32) -> f32 {
    return a(x)
}
fn c(x: f32) -> f32 {
    return c(x)
}
""",
        [("E2119", 6, 12), ("E2119", 9, 12)],
    ),
    "e2120_returns": (
        """\
module t.a
fn f(x: f32) -> f32 {
    let y = x
}
fn g<N: Dim>(x: f32) -> f32 {
    static for i in 0..N {
        return x
    }
    while true {
        return x
    }
    return x
}
""",
        [("E2120", 2, 4), ("E2120", 7, 9), ("E2120", 10, 9)],
    ),
    "e2121_static_for": (
        """\
module t.a
fn f(x: Tensor[3; f32], count: i64) -> f32 {
    static for i in 0..count {
        let q = i
    }
    static for e in x {
        let r = e
    }
    return 0.0
}
""",
        [("E2121", 3, 24), ("E2121", 6, 21)],
    ),
    "e2122_cycles": (
        """\
module t.a
const A = B + 1
const B = A * 2
type X = Y
type Y = X
struct S {
    next: S
}
struct P {
    q: Q
}
struct Q {
    p: P
}
""",
        [("E2122", 2, 7), ("E2122", 5, 10), ("E2122", 7, 11), ("E2122", 13, 8)],
    ),
    "e2123_not_compile_time": (
        """\
module t.a
const N: i64 = 4
fn f<H: Dim>(x: f32, n: i64) -> Tensor[N; f32]
where x > 0 {
    let four = 4
    let a = fill<f32>([four], 0.0)
    let b = iota(n)
    let c = H & 1
    let d = 9223372036854775807 + 1
    return fill<f32>([2], 0.0)
}
""",
        [
            ("E2123", 3, 40),
            ("E2123", 4, 7),
            ("E2123", 6, 24),
            ("E2123", 7, 18),
            ("E2123", 8, 13),
            ("E2123", 9, 13),
        ],
    ),
    "e2190_unsupported": (
        """\
module t.a
fn f(x: Tensor[3; f32]) -> f32 {
    let a = pad(x)
    let b = gather(x, 1)
    let c = scatter(x)
    return 0.0
}
""",
        [("E2190", 3, 13), ("E2190", 4, 13), ("E2190", 5, 13)],
    ),
}


@pytest.mark.parametrize("name", sorted(TYPE_CASES))
def test_findings(name: str) -> None:
    source, expected = TYPE_CASES[name]
    assert findings(source) == expected


def test_e2103_operand_notes_and_help() -> None:
    d = only(
        """
        module scratch.mix

        pub fn mix<N: Dim>(a: Tensor[N; f16], b: Tensor[N; f32]) -> Tensor[N; f32] {
            return a * b
        }
        """
    )
    assert d.code == "E2103"
    assert d.message == "operands have different dtypes"
    assert d.notes == ("the left operand is f16", "the right operand is f32")
    assert d.help == ("convert one side explicitly, e.g. cast<f32>(a)",)
    assert d.span is not None and d.span.text == "a * b"


def test_e2108_labels_the_declaration() -> None:
    d = only(
        """
        module scratch.acc
        pub fn acc(x: f32) -> f32 {
            let total = x
            total = total + 1.0
            return total
        }
        """
    )
    assert d.code == "E2108" and d.message == "`total` cannot be assigned"
    assert d.label == ""
    assert [r.text for r in d.related] == ["declared here without `var`"]
    assert d.help == ("declare it with `var`, or assign a `state` member of this block",)


def test_e2101_optional_parameter_suggests_some() -> None:
    program = check(TYPE_CASES["e2101_annotation_and_optional"][0])
    d = program.diagnostics[1]
    assert d.help == ("wrap the value in `some(...)`",)
    assert d.notes[0] == "parameter `b` has type `Tensor[3; f32]?`"


def test_passing_some_is_accepted() -> None:
    clean(
        """
        module t.a
        fn g(b: Tensor[3; f32]? = none) -> f32 {
            return match b {
                some(v) => v[0]
                none => 0.0
            }
        }
        pub fn f(x: Tensor[3; f32]) -> f32 {
            return g(some(x)) + g(none) + g()
        }
        """
    )


def test_help_lines() -> None:
    helps = {
        d.code: d.help
        for case in ("e2110_infer", "e2113_none", "e2116_logical", "e2104_operands")
        for d in check(TYPE_CASES[case][0]).diagnostics
    }
    assert helps["E2110"] == ("write the dtype: `fill<f32>(shape, value)`",)
    assert helps["E2113"] == ("add a type annotation, e.g. `let x: Tensor[N; f32]? = none`",)
    assert helps["E2116"] == ("for boolean tensors use `&`, `|`, `^` and `select`",)
    bool_arith = check(TYPE_CASES["e2104_operands"][0]).diagnostics[0]
    assert bool_arith.help == ("use `&&`, `||`, `!` or `select` for booleans",)


def test_condition_help_depends_on_the_statement() -> None:
    diagnostics = check(TYPE_CASES["e2114_conditions"][0]).diagnostics
    assert diagnostics[0].help == ("choose elementwise with `select(condition, a, b)`",)
    assert diagnostics[-1].help == ("reduce a boolean tensor first with `all[...]` or `any[...]`",)


def test_notes_of_patterns_matches_recursion_returns_and_loops() -> None:
    unreachable = check(TYPE_CASES["e2117_patterns"][0]).diagnostics[3]
    assert unreachable.notes == ("a previous arm catches every value",)
    missing = check(TYPE_CASES["e2118_exhaustive"][0]).diagnostics
    assert [d.notes for d in missing] == [
        ("not covered: `none`",),
        ("not covered: `B`, `C`",),
        ("not covered: `some(_)`",),
    ]
    recursion = check(TYPE_CASES["e2119_recursion"][0]).diagnostics[0]
    assert "acyclic" in recursion.notes[0]
    no_return = check(TYPE_CASES["e2120_returns"][0]).diagnostics[0]
    assert no_return.notes == ("the declared result type is `f32`",)
    static_for = check(TYPE_CASES["e2121_static_for"][0]).diagnostics[0]
    assert static_for.notes == ("the number of iterations has to be fixed at compile time",)
    too_big = check(TYPE_CASES["e2105_ranges"][0]).diagnostics[2]
    assert "i64" in too_big.notes[0]


def test_literals_adopt_their_context() -> None:
    clean(
        """
        module t.a
        pub fn f<N: Dim, T: Float>(x: Tensor[N; T], i: Tensor[N; u8], k: i32) -> (Tensor[N; T], Tensor[N; u8], bool) {
            let a = x * 2 + 0.5
            let b = i + 255
            let c = k < N && 3 == 3
            return (a - 1, b, c)
        }
        """
    )


def test_symbolic_let_stays_compile_time_and_constant_let_does_not() -> None:
    clean(
        """
        module t.a
        pub fn f<H: Dim>(x: Tensor[H; f32]) -> Tensor[H / 2; f32] {
            let half = H / 2
            let y: Tensor[half; f32] = fill<f32>([half], 0.0)
            return y
        }
        """
    )
    d = only(
        """
        module t.a
        pub fn f(x: f32) -> Tensor[4; f32] {
            let four = 4
            return fill<f32>([four], 0.0)
        }
        """
    )
    assert d.code == "E2123"


def test_constants() -> None:
    clean(
        """
        module t.a
        pub enum Mode {
            Fast,
            Slow,
        }
        pub const MODE: Mode = Mode.Slow
        pub const EPS: f32 = 0.00001
        pub const MASK: i64 = 4294967295
        const WINDOW = 2 * 2
        const HALF = 0.5
        pub fn f<H: Dim>(x: Tensor[H; f32]) -> Tensor[WINDOW, H; f32] {
            let y = match MODE {
                Fast => x * HALF
                Slow => x + EPS
            }
            return broadcast_to(reshape(y, [1, H]), [WINDOW, H])
        }
        pub fn g(x: i64) -> i64 {
            return x & MASK
        }
        """
    )


def test_generic_defaults() -> None:
    """5.5: defaults see earlier parameters only, after the `where` facts."""
    clean(
        """
        module t.a
        fn split<H: Dim, G: Dim, N: Dim = H / G>(x: Tensor[H; f32]) -> Tensor[G, N; f32]
        where
            G > 0,
            H % G == 0
        {
            return fill<f32>([G, N], 0.0)
        }
        pub fn f<H: Dim>(x: Tensor[4 * H; f32]) -> Tensor[4, H; f32] {
            return split<4 * H, 4>(x)
        }
        pub fn pack_default<B: Dim, *S: Shape = [B, 2]>(x: Tensor[*S; f32]) -> Tensor[*S; f32] {
            return x
        }
        """
    )
    program = check(
        """
        module t.a
        fn g<A: Dim, B: Dim = C, C: Dim = 1, T: Float = i32>(x: f32) -> f32 {
            return x
        }
        """
    )
    assert [(d.code, d.message) for d in program.diagnostics] == [
        ("E1201", "cannot find `C` in this scope"),
        ("E2112", "the default `i32` does not satisfy `Float`"),
    ]


def test_calls_are_not_dimensions() -> None:
    program = check(
        """
        module t.a
        fn f(x: Tensor[f(3); f32]) -> f32 {
            return 0.0
        }
        fn g(x: f32) -> f32 {
            return x
        }
        fn h(x: Tensor[g(2.0); f32]) -> f32 {
            return 0.0
        }
        """
    )
    assert [d.code for d in program.diagnostics] == ["E2123", "E2123"]


def test_where_operands_must_be_dimensions() -> None:
    d = only(
        """
        module t.a
        pub fn f<N: Dim>(x: f32) -> f32
        where x > 0 {
            return x
        }
        """
    )
    assert d.code == "E2123"
    assert d.message == "the parameter `x` is a runtime value, not a compile-time dimension"


def test_two_unbound_packs_cannot_be_inferred() -> None:
    program = check(
        """
        module t.a
        fn two<*A: Shape, *B: Shape>(x: Tensor[*A, *B; f32]) -> f32 {
            return 0.0
        }
        pub fn f<N: Dim, M: Dim>(y: Tensor[N, M; f32]) -> f32 {
            let a = two<[N], [M]>(y)
            return two(y) + a
        }
        """
    )
    assert [d.code for d in program.diagnostics] == ["E2110", "E2110"]
