"""Index notation lowered to Core IR and run (language.md 8, the 8.8 examples).

Each program is lowered through binding, verified, run raw and optimized by
the NumPy interpreter, and compared with a NumPy f64 reference on random data.
The structural tests pin what architecture.md asks of the lowering: a sum of
a product of plain accesses becomes one `contract`, everything else
broadcast + elementwise + `reduce`, runtime positions `gather`/`take`.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from lower_support import checked, close, execute, kinds, t

from linnet.check.program import CheckedProgram
from linnet.ir.core import Function, TensorType
from linnet.ir.lower import lower_function
from linnet.ir.verify import verify

ALGEBRA = """
module t

pub entry matmul<M: Dim, K: Dim, N: Dim, T: Numeric>(
    a: Tensor[M, K; T],
    b: Tensor[K, N; T],
) -> Tensor[M, N; T] {
    let c[m, n] = sum[k] a[m, k] * b[k, n]
    return c
}

pub entry batched<*Batch: Shape, M: Dim, K: Dim, N: Dim>(
    a: Tensor[*Batch, M, K; f32],
    b: Tensor[*Batch, K, N; f32],
) -> Tensor[*Batch, M, N; f32] {
    let c[*z, m, n] = sum[k] a[*z, m, k] * b[*z, k, n]
    return c
}

pub entry trace<N: Dim>(a: Tensor[N, N; f32]) -> f32 {
    return sum[i] a[i, i]
}

pub entry diagonal<N: Dim>(a: Tensor[N, N; f32]) -> Tensor[N; f32] {
    let d[i] = a[i, i]
    return d
}

pub entry outer<P: Dim, Q: Dim>(u: Tensor[P; f32], v: Tensor[Q; f32]) -> Tensor[P, Q; f32] {
    let o[p, q] = u[p] * v[q]
    return o
}

pub entry swap_axes<P: Dim, Q: Dim>(x: Tensor[P, Q; f32]) -> Tensor[Q, P; f32] {
    let y[q, p] = x[p, q]
    return y
}

pub entry pick<B: Dim, V: Dim>(scores: Tensor[B, V; f32], labels: Tensor[B; i32]) -> Tensor[B; f32] {
    let chosen[b] = scores[b, labels[b]]
    return chosen
}

pub entry dot_wide<D: Dim>(x: Tensor[D; bf16], y: Tensor[D; bf16]) -> f32 {
    return sum<f32>[d] cast<f32>(x[d]) * cast<f32>(y[d])
}

pub entry lower_triangle<S: Dim>() -> Tensor[S, S; bool] {
    let pos = iota<i32>(S)
    let keep[r, c] = pos[c] <= pos[r]
    return keep
}

pub entry row_peak<R: Dim, C: Dim>(x: Tensor[R, C; f32]) -> Tensor[R; f32] {
    let peak[r] = max[c] x[r, c]
    return peak
}

pub entry any_negative<N: Dim>(x: Tensor[N; f32]) -> bool {
    return any[n] (x[n] < 0.0)
}

pub entry weighted<B: Dim, N: Dim>(x: Tensor[B, N; f32], w: Tensor[N; f32]) -> Tensor[B; f32] {
    let s[b] = sum[n] -w[n] * x[b, n]
    return s
}

pub entry centered<B: Dim, N: Dim>(x: Tensor[B, N; f32]) -> Tensor[N, B; f32]
where B > 0 {
    let mean[n] = sum[b] x[b, n] / cast<f32>(B)
    let c[n, b] = x[b, n] - mean[n]
    return c
}

pub entry gather_rows<*S: Shape, V: Dim, H: Dim>(
    ids: Tensor[*S; i32],
    table: Tensor[V, H; f32],
) -> Tensor[*S, H; f32] {
    let out[*s, h] = table[ids[*s], h]
    return out
}

pub entry two_positions<B: Dim, R: Dim, C: Dim>(
    x: Tensor[R, C; f32],
    rows: Tensor[B; i64],
    cols: Tensor[B; u8],
) -> Tensor[B; f32] {
    let picked[b] = x[rows[b], cols[b]]
    return picked
}

pub entry fixed_and_runtime<A: Dim, B: Dim, C: Dim>(
    x: Tensor[A, B, C; f32],
    at: i32,
) -> Tensor[C; f32]
where A > 1 {
    let y[c] = x[1, at, c] * 2.0
    return y
}

pub entry nested<I: Dim, J: Dim, K: Dim>(x: Tensor[I, J, K; f32]) -> Tensor[I; f32] {
    let y[i] = sum[j] max[k] x[i, j, k]
    return y
}

pub entry empty_max<N: Dim, M: Dim>(x: Tensor[N, M; f32]) -> Tensor[N; f32] {
    let y[n] = max[m] x[n, m]
    return y
}
"""


@functools.cache
def _program() -> CheckedProgram:
    return checked(ALGEBRA)


def lower(
    name: str, inputs: list[TensorType], generics: dict[str, object] | None = None
) -> Function:
    fn = lower_function(_program(), "t", name, inputs, generics=generics)
    verify(fn)
    return fn


rng = np.random.default_rng(7)


def rand(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def test_matmul_is_one_contract() -> None:
    fn = lower("matmul", [t((3, 4)), t((4, 5))])
    assert kinds(fn) == ["contract"]
    a, b = rand(3, 4), rand(4, 5)
    (c,), _ = execute(fn, [a, b])
    close(c, a.astype(np.float64) @ b)


def test_integer_matmul_wraps_exactly() -> None:
    fn = lower("matmul", [t((2, 3), "i8"), t((3, 2), "i8")])
    a = np.array([[100, 100, 1], [-128, 2, 3]], np.int8)
    b = np.array([[2, 1], [1, 1], [5, 0]], np.int8)
    (c,), _ = execute(fn, [a, b])
    expected = (a.astype(np.int64) @ b.astype(np.int64) + 128) % 256 - 128
    np.testing.assert_array_equal(c, expected.astype(np.int8))


def test_batched_pack_contract() -> None:
    fn = lower("batched", [t((2, 3, 4, 5)), t((2, 3, 5, 6))])
    assert kinds(fn) == ["contract"]
    a, b = rand(2, 3, 4, 5), rand(2, 3, 5, 6)
    (c,), _ = execute(fn, [a, b])
    close(c, np.einsum("xymk,xykn->xymn", a.astype(np.float64), b))


def test_batched_with_empty_pack() -> None:
    fn = lower("batched", [t((4, 5)), t((5, 2))])
    a, b = rand(4, 5), rand(5, 2)
    (c,), _ = execute(fn, [a, b])
    close(c, a.astype(np.float64) @ b)


def test_trace_and_diagonal_use_take() -> None:
    a = rand(4, 4)
    fn = lower("trace", [t((4, 4))])
    assert "take" in kinds(fn) and "reduce" in kinds(fn)
    (tr,), _ = execute(fn, [a])
    close(tr, np.trace(a.astype(np.float64)))
    (d,), _ = execute(lower("diagonal", [t((4, 4))]), [a])
    np.testing.assert_array_equal(d, np.diag(a))


def test_outer_product_broadcasts() -> None:
    fn = lower("outer", [t((3,)), t((4,))])
    assert "contract" not in kinds(fn)
    u, v = rand(3), rand(4)
    (o,), _ = execute(fn, [u, v])
    close(o, np.outer(u.astype(np.float64), v))


def test_swap_axes_permutes() -> None:
    fn = lower("swap_axes", [t((2, 3))])
    assert kinds(fn) == ["permute"]
    x = rand(2, 3)
    (y,), _ = execute(fn, [x])
    np.testing.assert_array_equal(y, x.T)


def test_pick_gathers_runtime_positions() -> None:
    fn = lower("pick", [t((3, 5)), t((3,), "i32")])
    assert "take" in kinds(fn)
    scores = rand(3, 5)
    labels = np.array([4, 0, 2], np.int32)
    (chosen,), _ = execute(fn, [scores, labels])
    np.testing.assert_array_equal(chosen, scores[np.arange(3), labels])


def test_dot_wide_accumulates_in_f32() -> None:
    import ml_dtypes

    fn = lower("dot_wide", [t((6,), "bf16"), t((6,), "bf16")])
    assert kinds(fn) == ["cast", "cast", "contract"]
    x = rand(6).astype(ml_dtypes.bfloat16)
    y = rand(6).astype(ml_dtypes.bfloat16)
    (d,), _ = execute(fn, [x, y])
    assert d.dtype == np.float32
    close(d, np.dot(x.astype(np.float64), y.astype(np.float64)))


def test_lower_triangle_from_iota() -> None:
    fn = lower("lower_triangle", [], {"S": 4})
    (keep,), _ = execute(fn, [])
    np.testing.assert_array_equal(keep, np.tril(np.ones((4, 4), bool)))


def test_row_peak_and_any_negative() -> None:
    x = rand(3, 4)
    (peak,), _ = execute(lower("row_peak", [t((3, 4))]), [x])
    np.testing.assert_array_equal(peak, x.max(axis=1))
    fn = lower("any_negative", [t((4,))])
    assert fn.results[0].type == t((), "bool")
    for v in (np.array([1, 2, 3, 4], np.float32), np.array([1, -2, 3, 4], np.float32)):
        (flag,), _ = execute(fn, [v])
        assert bool(flag) == bool((v < 0).any())


def test_negated_factor_still_contracts() -> None:
    fn = lower("weighted", [t((2, 5)), t((5,))])
    assert "contract" in kinds(fn)
    x, w = rand(2, 5), rand(5)
    (s,), _ = execute(fn, [x, w])
    close(s, -(x.astype(np.float64) @ w))


def test_reduction_then_elementwise_in_output_order() -> None:
    x = rand(3, 4)
    (c,), _ = execute(lower("centered", [t((3, 4))]), [x])
    xd = x.astype(np.float64)
    close(c, (xd - xd.mean(axis=0)).T)


@pytest.mark.parametrize("shape", [(2, 3), (5,), ()])
def test_gather_rows_over_a_pack(shape: tuple[int, ...]) -> None:
    fn = lower("gather_rows", [t(shape, "i32"), t((6, 4))])
    assert "gather" in kinds(fn)
    ids = rng.integers(0, 6, shape).astype(np.int32)
    table = rand(6, 4)
    (out,), _ = execute(fn, [ids, table])
    np.testing.assert_array_equal(out, table[ids])


def test_two_runtime_positions_of_mixed_dtypes() -> None:
    fn = lower("two_positions", [t((4, 5)), t((3,), "i64"), t((3,), "u8")])
    x = rand(4, 5)
    rows = np.array([3, 0, 1], np.int64)
    cols = np.array([4, 4, 0], np.uint8)
    (picked,), _ = execute(fn, [x, rows, cols])
    np.testing.assert_array_equal(picked, x[rows, cols])


def test_compile_time_and_runtime_scalar_positions() -> None:
    fn = lower("fixed_and_runtime", [t((2, 3, 4)), t((), "i32")])
    assert {"slice", "gather"} <= set(kinds(fn))
    x = rand(2, 3, 4)
    (y,), _ = execute(fn, [x, np.int32(2)])
    np.testing.assert_array_equal(y, x[1, 2] * np.float32(2))


def test_nested_reductions() -> None:
    x = rand(2, 3, 4)
    (y,), _ = execute(lower("nested", [t((2, 3, 4))]), [x])
    close(y, x.astype(np.float64).max(axis=2).sum(axis=1))


def test_max_over_an_empty_domain_is_the_lowest_value() -> None:
    (y,), _ = execute(lower("empty_max", [t((2, 0))]), [np.zeros((2, 0), np.float32)])
    assert np.all(y == -np.inf)
