"""The "must be rejected" rows of language.md Appendix C, with our own programs.

Like the spec-test harness (16.5), a case passes when at least one error is
reported and every error has the expected code. Two rows are syntax errors
(E1004, E1101); they go through the whole pipeline like the others.
"""

from __future__ import annotations

import textwrap

import pytest

from linnet.pipeline import check_source

REJECTED: dict[str, tuple[str, str]] = {
    "contraction_extents": (
        "E2201",
        """
        module r.a
        pub fn f<M: Dim, K1: Dim, K2: Dim, N: Dim>(a: Tensor[M, K1; f32], b: Tensor[K2, N; f32]) -> Tensor[M, N; f32] {
            let c[m, n] = sum[k] a[m, k] * b[k, n]
            return c
        }
        """,
    ),
    "bf16_plus_f32": (
        "E2103",
        """
        module r.a
        pub fn f(a: bf16, b: f32) -> f32 {
            return a + b
        }
        """,
    ),
    "unbound_index": (
        "E3101",
        """
        module r.a
        pub fn f<N: Dim>(a: Tensor[N, N; f32], b: Tensor[N; f32]) -> Tensor[N; f32] {
            let y[i] = a[i, j] * b[j]
            return y
        }
        """,
    ),
    "assign_let": (
        "E2108",
        """
        module r.a
        pub fn f(x: f32) -> f32 {
            let total = x
            total = total + 1.0
            return total
        }
        """,
    ),
    "unknown_name": (
        "E1201",
        """
        module r.a
        pub fn f(x: f32) -> f32 {
            return x + missing
        }
        """,
    ),
    "if_on_bool_tensor": (
        "E2114",
        """
        module r.a
        pub fn f<N: Dim>(m: Tensor[N; bool], x: Tensor[N; f32]) -> Tensor[N; f32] {
            return if m { x } else { x * 2.0 }
        }
        """,
    ),
    "match_without_none": (
        "E2118",
        """
        module r.a
        pub fn f(o: f32?) -> f32 {
            return match o {
                some(v) => v
            }
        }
        """,
    ),
    "param_initialiser": (
        "E4102",
        """
        module r.a
        pub block B<H: Dim> {
            param w: Tensor[H; f32] = load_weights(H)
        }
        """,
    ),
    "two_functions_one_name": (
        "E1204",
        """
        module r.a
        pub fn f(x: f32) -> f32 {
            return x
        }
        fn f(x: f32) -> f32 {
            return x * 2.0
        }
        """,
    ),
    "unrelated_broadcast": (
        "E2207",
        """
        module r.a
        pub fn f<A: Dim, B: Dim>(a: Tensor[A; f32], b: Tensor[B; f32]) -> Tensor[A; f32] {
            return a + b
        }
        """,
    ),
    "self_call": (
        "E2119",
        """
        module r.a
        pub fn f(x: f32) -> f32 {
            return f(x)
        }
        """,
    ),
    "reserved_parameter_name": (
        "E1004",
        """
        module r.a
        pub fn f(async: f32) -> f32 {
            return 1.0
        }
        """,
    ),
    "unproven_callee_constraint": (
        "E2206",
        """
        module r.a
        fn half<D: Dim>(x: Tensor[D; f32]) -> Tensor[D / 2; f32]
        where D % 2 == 0 {
            return x[0::2]
        }
        pub fn f<D: Dim>(x: Tensor[D; f32]) -> Tensor[D / 2; f32] {
            return half(x)
        }
        """,
    ),
    "reshape_without_divisibility": (
        "E2203",
        """
        module r.a
        pub fn f<H: Dim, N: Dim>(x: Tensor[H; f32]) -> Tensor[N, H / N; f32]
        where N > 0 {
            return reshape(x, [N, H / N])
        }
        """,
    ),
    "local_named_like_prelude": (
        "E1207",
        """
        module r.a
        pub fn f(x: f32) -> f32 {
            let exp = x
            return exp
        }
        """,
    ),
    "reduction_index_unused": (
        "E3102",
        """
        module r.a
        pub fn f<N: Dim>(x: Tensor[N; f32]) -> f32 {
            return sum[i, j] x[i]
        }
        """,
    ),
    "tuple_pattern_arm": (
        "E1101",
        """
        module r.a
        pub fn f(o: (f32, f32)?) -> f32 {
            return match o {
                (a, b) => a
                none => 0.0
            }
        }
        """,
    ),
    "sub_where_unproven": (
        "E2206",
        """
        module r.a
        pub block G<H: Dim>
        where H % 4 == 0 {
            param w: Tensor[H; f32]
        }
        pub block Outer<H: Dim> {
            sub g: G<H>
        }
        """,
    ),
    "state_other_dtype": (
        "E2109",
        """
        module r.a
        pub block B<H: Dim> {
            state s: Tensor[H; f32]
            pub entry f(x: Tensor[H; f16]) -> Tensor[H; f32] {
                s = x
                return s
            }
        }
        """,
    ),
    "optional_state": (
        "E4101",
        """
        module r.a
        pub block B<H: Dim> {
            state s: Tensor[H; f32]?
        }
        """,
    ),
    "assign_param_member": (
        "E2108",
        """
        module r.a
        pub block B<H: Dim> {
            param w: Tensor[H; f32]
            pub entry f(x: Tensor[H; f32]) -> Tensor[H; f32] {
                w = x
                return x
            }
        }
        """,
    ),
    "static_for_runtime_bound": (
        "E2121",
        """
        module r.a
        pub fn f(x: f32, count: i64) -> f32 {
            var y = x
            static for i in 0..count {
                y = y + 1.0
            }
            return y
        }
        """,
    ),
    "while_on_bool_tensor": (
        "E2114",
        """
        module r.a
        pub fn f<N: Dim>(m: Tensor[N; bool], x: f32) -> f32 {
            var y = x
            while m {
                y = y + 1.0
            }
            return y
        }
        """,
    ),
    "logical_and_on_tensors": (
        "E2116",
        """
        module r.a
        pub fn f<N: Dim>(a: Tensor[N; bool], b: Tensor[N; bool]) -> Tensor[N; bool] {
            return a && b
        }
        """,
    ),
    "negative_index": (
        "E2209",
        """
        module r.a
        pub fn f<N: Dim>(x: Tensor[N; f32]) -> f32 {
            return x[-1]
        }
        """,
    ),
    "non_optional_sub_none": (
        "E4101",
        """
        module r.a
        pub block Leaf<H: Dim> {
            param w: Tensor[H; f32]
        }
        pub block B<H: Dim> {
            sub leaf: Leaf<H> = none
        }
        """,
    ),
}


@pytest.mark.parametrize("name", sorted(REJECTED))
def test_appendix_c_rejected(name: str) -> None:
    code, source = REJECTED[name]
    program = check_source(textwrap.dedent(source).lstrip("\n"), "r.linnet")
    codes = [d.code for d in program.diagnostics if d.is_error]
    assert codes, "expected an error"
    assert set(codes) == {code}, codes
