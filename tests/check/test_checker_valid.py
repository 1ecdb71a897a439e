"""Valid programs check without any diagnostic.

- every ```linnet block of language.md (those importing `crate` need a
  package and are skipped; `std` ones use the repository's stdlib);
- one program per "must be accepted" bullet of Appendix C;
- the standard library itself, checked as roots;
- the generated benchmark program (a small copy; the full size is `slow`).
"""

from __future__ import annotations

import re
import sys
import time

import pytest
from checker_support import LANGUAGE_MD, ROOT, STDLIB, check, clean

from linnet.check.types import TensorType
from linnet.pipeline import check_paths
from linnet.syntax import ast


def spec_blocks() -> list[str]:
    if not LANGUAGE_MD.exists():
        return []
    text = LANGUAGE_MD.read_text()
    return [b for b in re.findall(r"```linnet\n(.*?)```", text, re.S) if "use crate" not in b]


@pytest.mark.parametrize("source", spec_blocks(), ids=lambda s: s.split()[1])
def test_language_md_blocks_are_clean(source: str) -> None:
    clean(source)


ACCEPTED = {
    "float_literal_plus_f32": """
        module c.a
        pub fn f(x: f32) -> f32 {
            return x + 1.5
        }
    """,
    "identity_over_pack_and_numeric": """
        module c.a
        pub fn id<*S: Shape, T: Numeric>(x: Tensor[*S; T]) -> Tensor[*S; T] {
            return x
        }
        pub fn use_it<B: Dim>(x: Tensor[B, 3; i32]) -> Tensor[B, 3; i32] {
            return id(x)
        }
    """,
    "pack_linear_contraction": """
        module c.a
        pub op linear<*S: Shape, In: Dim, Out: Dim, T: Float>(
            x: Tensor[*S, In; T],
            w: Tensor[Out, In; T],
        ) -> Tensor[*S, Out; T] {
            let y[*s, o] = sum[i] x[*s, i] * w[o, i]
            return y
        }
    """,
    "reshape_heads": """
        module c.a
        pub fn heads<B: Dim, S: Dim, H: Dim, N: Dim>(x: Tensor[B, S, H; f32]) -> Tensor[B, N, S, H / N; f32]
        where
            H % N == 0,
            N > 0
        {
            let y = reshape(x, [B, S, N, H / N])
            return permute(y, [0, 2, 1, 3])
        }
    """,
    "generic_matmul": """
        module c.a
        pub fn matmul<M: Dim, K: Dim, N: Dim, T: Numeric>(a: Tensor[M, K; T], b: Tensor[K, N; T]) -> Tensor[M, N; T] {
            let c[m, n] = sum[k] a[m, k] * b[k, n]
            return c
        }
    """,
    "optional_bias_op_and_block": """
        module c.a
        pub op dense<*S: Shape, In: Dim, Out: Dim, T: Float>(
            x: Tensor[*S, In; T],
            w: Tensor[Out, In; T],
            b: Tensor[Out; T]? = none,
        ) -> Tensor[*S, Out; T] {
            let y[*s, o] = sum[i] x[*s, i] * w[o, i]
            return match b {
                some(bias) => y + bias
                none => y
            }
        }
        pub block Dense<In: Dim, Out: Dim, T: Float = f32> {
            param weight: Tensor[Out, In; T]
            param bias: Tensor[Out; T]? = none
            pub fn forward<B: Dim>(x: Tensor[B, In; T]) -> Tensor[B, Out; T] {
                return dense(x, weight, bias)
            }
        }
    """,
    "static_for_over_sub_array": """
        module c.a
        pub block Scale<H: Dim> {
            param g: Tensor[H; f32]
            pub fn forward<B: Dim>(x: Tensor[B, H; f32]) -> Tensor[B, H; f32] {
                return x * g
            }
        }
        pub block Stack<H: Dim, L: Dim> {
            sub layers: [Scale<H>; L]
            pub entry forward<B: Dim>(x: Tensor[B, H; f32]) -> Tensor[B, H; f32] {
                var h = x
                static for layer in layers {
                    h = layer.forward(h)
                }
                return h
            }
        }
    """,
    "match_on_optional_parameter": """
        module c.a
        pub fn f<N: Dim>(x: Tensor[N; f32], scale: f32? = none) -> Tensor[N; f32] {
            return match scale {
                some(s) => x * s
                none => x
            }
        }
    """,
    "broadcast_bsh_plus_h": """
        module c.a
        pub fn f<B: Dim, S: Dim, H: Dim>(x: Tensor[B, S, H; f32], b: Tensor[H; f32]) -> Tensor[B, S, H; f32] {
            return x + b
        }
    """,
    "strided_slices": """
        module c.a
        pub fn even<*L: Shape, D: Dim>(x: Tensor[*L, D; f32]) -> Tensor[*L, D / 2; f32]
        where D % 2 == 0 {
            return x[..., 0::2]
        }
        pub fn odd<*L: Shape, D: Dim>(x: Tensor[*L, D; f32]) -> Tensor[*L, D / 2; f32]
        where D % 2 == 0 {
            return x[..., 1::2]
        }
    """,
    "two_entries": """
        module c.a
        pub block Two<H: Dim> {
            param w: Tensor[H; f32]
            pub entry forward<B: Dim>(x: Tensor[B, H; f32]) -> Tensor[B, H; f32] {
                return x * w
            }
            pub entry score(x: Tensor[H; f32]) -> f32 {
                return sum[h] x[h] * w[h]
            }
        }
    """,
    "struct_and_tuple_swap": """
        module c.a
        pub struct Pair<N: Dim> {
            left: Tensor[N; f32]
            right: Tensor[N; f32]
        }
        fn swap<N: Dim>(a: Tensor[N; f32], b: Tensor[N; f32]) -> (Tensor[N; f32], Tensor[N; f32]) {
            return (b, a)
        }
        pub fn g<N: Dim>(a: Tensor[N; f32], b: Tensor[N; f32]) -> Tensor[N; f32] {
            let (x, y) = swap(a, b)
            return x - y
        }
    """,
    "literal_contexts": """
        module c.a
        pub fn f<N: Dim>(x: Tensor[N; f32]) -> Tensor[N; f32] {
            let half: f32 = 0.5
            return x * 0.5 + half
        }
    """,
    "generic_call_and_comparison_chain": """
        module c.a
        pub fn f(x: i32, a: f32, b: f32, c: f32) -> bool {
            let y = cast<f32>(x)
            return a < b && c > (a) && y > 0.0
        }
    """,
    "local_named_sum_and_max_call": """
        module c.a
        pub fn f<N: Dim>(x: Tensor[N; f32]) -> Tensor[N; f32] {
            let sum = sum[i] x[i]
            return max(x, 0.0) + sum
        }
    """,
    "prelude_use": """
        module c.a
        pub fn f<S: Dim, A: Dim, B: Dim, H: Dim>(
            scores: Tensor[S, S; f32],
            a: Tensor[S, A; f32],
            b: Tensor[S, B; f32],
            x: Tensor[H, S; f32],
        ) -> (Tensor[S, S; f32], Tensor[S, A + B; f32], Tensor[S, H; f32], f32) {
            let pos = iota<i32>(S)
            let allowed[q, k] = pos[k] <= pos[q]
            let masked = select(allowed, max(scores, 0.0), fill<f32>([S, S], -1e9))
            let joined = concat(a, b, axis = -1)
            let flipped = permute(reshape(x, [H, S]), [1, 0])
            return (masked, joined, flipped, cast<f32>(H))
        }
    """,
    "named_arguments_defaults_explicit_generics": """
        module c.a
        fn split<B: Dim, S: Dim, H: Dim, N: Dim>(x: Tensor[B, S, H; f32], scale: f32 = 1.0) -> Tensor[B, S, N, H / N; f32]
        where
            N > 0,
            H % N == 0
        {
            return reshape(x, [B, S, N, H / N]) * scale
        }
        pub fn f<B: Dim, S: Dim, D: Dim>(x: Tensor[B, S, 8 * D; f32]) -> Tensor[B, S, 8, D; f32] {
            let a = split<B, S, 8 * D, 8>(scale = 2.0, x = x)
            let b = split<B, S, 8 * D, 8>(x)
            return a + b
        }
    """,
    "block_where_instantiated": """
        module c.a
        pub block Grouped<H: Dim, G: Dim>
        where
            G > 0,
            H % G == 0
        {
            param scale: Tensor[G; f32]
            pub fn forward<B: Dim>(x: Tensor[B, H; f32]) -> Tensor[B, G, H / G; f32] {
                let g = reshape(x, [B, G, H / G])
                let out[b, i, k] = g[b, i, k] * scale[i]
                return out
            }
        }
        pub block Outer<H: Dim>
        where H % 4 == 0 {
            sub groups: Grouped<H, 4>
            pub entry forward<B: Dim>(x: Tensor[B, H; f32]) -> Tensor[B, 4, H / 4; f32] {
                return groups.forward(x)
            }
        }
    """,
    "state_everywhere": """
        module c.a
        pub block Counter<D: Dim> {
            state total: Tensor[D; f32]
            pub fn add(x: Tensor[D; f32]) -> Tensor[D; f32] {
                total = total + x
                return total
            }
        }
        pub block Parent<D: Dim, L: Dim> {
            sub counters: [Counter<D>; L]
            sub first: Counter<D>
            pub entry step(x: Tensor[D; f32]) -> Tensor[D; f32] {
                var acc = first.add(x)
                static for c in counters {
                    acc = acc + c.add(x) + c.total
                }
                return acc + first.total
            }
        }
    """,
    "static_for_ranges": """
        module c.a
        pub fn f<N: Dim, Steps: Dim>(x: Tensor[N; f32]) -> Tensor[N; f32] {
            var acc = x
            static for i in 0..Steps {
                acc = acc + cast<f32>(i)
            }
            static for j in 1..Steps + 1 {
                acc = acc * cast<f32>(j)
            }
            return acc
        }
    """,
    "bitwise_and_shifts": """
        module c.a
        const FOLDED = (0xff & 0x0f) | (1 ^ 3)
        const SHIFTED = shl(1, 4) + shr(256, 2)
        pub fn f<N: Dim>(x: Tensor[N; i64], m: Tensor[N; bool]) -> (Tensor[N; i64], Tensor[N; bool], Tensor[FOLDED + SHIFTED; f32]) {
            let bits = shl(x & 255, 8) | shr(x, 56) ^ (x & 0xff)
            let mask = (m ^ true) & m | m
            return (bits, mask, fill<f32>([FOLDED + SHIFTED], 0.0))
        }
    """,
    "while_with_counter_and_all": """
        module c.a
        pub entry f<N: Dim>(x: Tensor[N; f32], limit: i32) -> (Tensor[N; f32], i32) {
            var current = x
            var steps: i32 = 0
            var going = true
            while going && steps < limit {
                current = current * 0.5
                steps = steps + 1
                let small = all[n] (current[n] < 1.0)
                going = !small
            }
            return (current, steps)
        }
    """,
    "module_entry_called_from_block": """
        module c.a
        pub entry loss<N: Dim>(a: Tensor[N; f32], b: Tensor[N; f32]) -> f32 {
            return sum[n] abs(a[n] - b[n])
        }
        pub block Model<N: Dim> {
            param w: Tensor[N; f32]
            pub entry forward(x: Tensor[N; f32]) -> f32 {
                return loss(x, w)
            }
        }
    """,
    "runtime_indices_and_window": """
        module c.a
        pub entry f<R: Dim, M: Dim>(m: Tensor[R, M; f32], r: i64, c: i32) -> (Tensor[M; f32], Tensor[R; f32], Tensor[2; f32])
        where M >= 3 {
            return (m[r], m[:, c], m[r, 1:3])
        }
    """,
    "optional_sub_with_match": """
        module c.a
        pub block Scale<H: Dim> {
            param g: Tensor[H; f32]
            pub fn forward(x: Tensor[H; f32]) -> Tensor[H; f32] {
                return x * g
            }
        }
        pub block Maybe<H: Dim> {
            sub extra: Scale<H>? = none
            pub entry forward(x: Tensor[H; f32]) -> Tensor[H; f32] {
                return match extra {
                    some(e) => e.forward(x)
                    none => x
                }
            }
        }
    """,
}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_appendix_c_accepted(name: str) -> None:
    clean(ACCEPTED[name])


def test_examples_tiny_is_clean() -> None:
    clean((ROOT / "examples" / "tiny" / "src" / "lib.linnet").read_text())


@pytest.mark.skipif(not any(STDLIB.rglob("*.linnet")), reason="no stdlib yet")
def test_standard_library_checks_clean() -> None:
    files = sorted(STDLIB.rglob("*.linnet"))
    program = check_paths(files, STDLIB)
    assert not program.diagnostics, [
        (d.code, d.span.file.path if d.span else "", d.message) for d in program.diagnostics
    ]


def _generated(lines: int) -> str:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from generated import linnet_program
    finally:
        sys.path.pop(0)
    return str(linnet_program(lines))


def test_generated_program_is_clean() -> None:
    program = clean(_generated(600))
    # Calls were recorded, and no expression was left with the error type.
    assert program.calls
    assert not any(type(t).__name__ == "ErrorType" for t in program.types.values())


@pytest.mark.slow
def test_checking_speed_on_20000_lines() -> None:
    """The aim of the front-end issue: >= 20,000 lines/s for full checking."""
    from linnet.pipeline import check_source

    text = _generated(20_000)
    lines = text.count("\n")
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        program = check_source(text, "generated.linnet")
        best = min(best, time.perf_counter() - start)
    assert not program.diagnostics
    assert lines / best >= 20_000, f"{lines / best:,.0f} lines/s"


def test_side_tables_record_types_and_calls() -> None:
    program = check(
        ACCEPTED["generic_matmul"]
        + """
        pub fn use_it(a: Tensor[2, 3; f32], b: Tensor[3, 4; f32]) -> Tensor[2, 4; f32] {
            return matmul(a, b)
        }
    """
    )
    assert not program.diagnostics
    calls = list(program.calls.items())
    assert len(calls) == 1
    call, info = calls[0]
    assert isinstance(call, ast.Call)
    result = info.result
    assert isinstance(result, TensorType)
    assert [str(d) for d in result.shape] == ["2", "4"]
    assert str(result.dtype) == "f32"
    assert position_of(call) == (8, 12)


def position_of(node: ast.Call) -> tuple[int, int]:
    return node.span.file.line_col(node.span.start)


def test_literal_adoption_is_recorded() -> None:
    program = check(ACCEPTED["literal_contexts"])
    adopted = {str(t) for t in program.adopted.values()}
    assert adopted == {"f32"}
