"""Expressions, the prelude, slicing and control flow lowered and run (language.md 7, 9, 10, 13, 14).

Programs are the language reference's examples (or close to them); each is
lowered, verified, run raw and optimized, and compared with NumPy.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from lower_support import checked, close, execute, kinds, t

from linnet.check.program import CheckedProgram
from linnet.errors import LinnetError
from linnet.ir.core import Function, TensorType
from linnet.ir.lower import lower_function
from linnet.ir.verify import verify

SOURCE = """
module t

pub enum Reduce {
    First,
    Average,
    Peak,
}

pub const MODE: Reduce = Reduce.Average
pub const EPS: f32 = 0.00001
const WINDOW = 4
const HALF = 0.5

pub entry pool<B: Dim, N: Dim, H: Dim>(x: Tensor[B, N, H; f32]) -> Tensor[B, H; f32]
where N > 0 {
    return match MODE {
        First => x[:, 0, :]
        Average => average(x)
        Peak => peak(x)
    }
}

fn average<B: Dim, N: Dim, H: Dim>(x: Tensor[B, N, H; f32]) -> Tensor[B, H; f32]
where N > 0 {
    let total[b, h] = sum[n] x[b, n, h]
    return total / cast<f32>(N) + EPS * HALF
}

fn peak<B: Dim, N: Dim, H: Dim>(x: Tensor[B, N, H; f32]) -> Tensor[B, H; f32] {
    let top[b, h] = max[n] x[b, n, h]
    return top
}

pub entry tile<H: Dim>(x: Tensor[H; f32]) -> Tensor[WINDOW, H; f32] {
    return broadcast_to(reshape(x, [1, H]), [WINDOW, H])
}

pub entry int_ops(a: Tensor[6; i32], b: Tensor[6; i32]) -> (Tensor[6; i32], Tensor[6; i32], Tensor[6; i32]) {
    return (a / b, a % b, a * b - 7)
}

pub entry float_rem(a: Tensor[4; f32], b: Tensor[4; f32]) -> Tensor[4; f32] {
    return a % b
}

pub entry literal_folding<N: Dim>(x: Tensor[N; f32]) -> Tensor[N; f32] {
    let half = N / 2
    return x * (2.0 * 0.25) + cast<f32>(half) + cast<f32>(7 / 2) + cast<f32>(-7 % 3)
}

pub entry casts(x: Tensor[5; f32], k: Tensor[3; i32]) -> (Tensor[5; i8], Tensor[5; bool], Tensor[3; u8], Tensor[3; f16], f32, i8) {
    return (cast<i8>(x), cast<bool>(x), cast<u8>(k), cast<f16>(k), cast<f32>(true), cast<i8>(300))
}

pub entry relu<*S: Shape, T: Float>(x: Tensor[*S; T]) -> Tensor[*S; T] {
    return max(x, 0.0)
}

pub entry flatten<B: Dim, S: Dim, H: Dim>(x: Tensor[B, S, H; f32]) -> Tensor[B * S, H; f32] {
    return reshape(x, [B * S, H])
}

pub entry join_last<*S: Shape, A: Dim, B: Dim>(
    a: Tensor[*S, A; f32],
    b: Tensor[*S, B; f32],
) -> Tensor[*S, A + B; f32] {
    return concat(a, b, axis = -1)
}

pub entry join_first<A: Dim, B: Dim, C: Dim>(a: Tensor[A, C; f32], b: Tensor[B, C; f32]) -> Tensor[A + B, C; f32] {
    return concat(a, b, axis = 0)
}

pub entry masked_scores<S: Dim>(scores: Tensor[S, S; f32]) -> Tensor[S, S; f32] {
    let pos = iota<i32>(S)
    let allowed[q, k] = pos[k] <= pos[q]
    return select(allowed, scores, fill<f32>([S, S], -1e9))
}

pub entry low_bits<N: Dim>(x: Tensor[N; i64]) -> Tensor[N; i64] {
    let masked = x & 255
    let moved = shl(masked, 8) | shr(x, 56)
    return moved ^ (x & 0xff)
}

pub entry logical_shift(x: Tensor[3; u8], y: Tensor[3; i8]) -> (Tensor[3; u8], Tensor[3; i8]) {
    return (shr(x, 1), shr(y, 1))
}

pub entry scaled<N: Dim>(x: Tensor[N; bf16]) -> Tensor[N; f32] {
    return cast<f32>(x) * cast<f32>(N)
}

pub entry math(x: Tensor[4; f32]) -> Tensor[4; f32] {
    let a = abs(x) + 1.0
    return exp(x) - log(a) + sqrt(a) * rsqrt(a) + sin(x) * cos(x) + tanh(x) + min(x, 0.5) - max(x, -0.5)
}

pub entry transpose3<A: Dim, B: Dim, C: Dim>(x: Tensor[A, B, C; f32]) -> Tensor[C, A, B; f32] {
    return permute(x, [2, 0, 1])
}

pub entry front_back<B: Dim, D: Dim>(
    x: Tensor[B, 2 * D; f32],
) -> (Tensor[B, D; f32], Tensor[B, D; f32]) {
    let front = x[:, 0:D]
    let back = x[:, D:2 * D]
    return (front, back)
}

pub entry odd_lanes<*Lead: Shape, D: Dim>(x: Tensor[*Lead, 2 * D; f32]) -> Tensor[*Lead, D; f32] {
    return x[..., 1::2]
}

pub entry last<N: Dim>(x: Tensor[N; f32]) -> f32
where N > 0 {
    return x[N - 1]
}

pub entry window<R: Dim, C: Dim>(m: Tensor[R, C; f32]) -> Tensor[R, 2; f32]
where C >= 3 {
    return m[:, 1:3]
}

pub entry row_col<R: Dim, C: Dim>(
    m: Tensor[R, C; f32],
    r: i64,
    c: i32,
) -> (Tensor[C; f32], Tensor[R; f32], f32) {
    return (m[r], m[:, c], m[r, c])
}

pub entry mixed_slice<A: Dim, B: Dim, C: Dim>(x: Tensor[A, B, C; f32], i: i32) -> Tensor[B; f32]
where C >= 4 {
    return x[i, :, 3]
}

pub entry choose(x: Tensor[3; f32], flag: bool) -> Tensor[3; f32] {
    return if flag { x * 2.0 } else { x - 1.0 }
}

pub entry static_choice<N: Dim>(x: Tensor[N; f32]) -> Tensor[N; f32] {
    return if N > 2 { x } else { -x }
}

pub entry mean_abs_error<B: Dim, N: Dim>(guess: Tensor[B, N; f32], truth: Tensor[B, N; f32]) -> f32
where
    B > 0,
    N > 0
{
    let gap[b, n] = abs(guess[b, n] - truth[b, n])
    return sum[b, n] gap[b, n] / cast<f32>(B * N)
}

fn extremes<N: Dim>(x: Tensor[N; f32]) -> (f32, f32) {
    let low = min[i] x[i]
    let high = max[i] x[i]
    return (low, high)
}

pub entry spread<N: Dim>(x: Tensor[N; f32]) -> f32 {
    let (low, high) = extremes(x)
    return high - low
}

pub entry halve_until<N: Dim>(
    x: Tensor[N; f32],
    limit: f32,
    max_steps: i32,
) -> (Tensor[N; f32], i32) {
    var current = x
    var steps: i32 = 0
    var going = true
    while going && steps < max_steps {
        current = current * 0.5
        steps = steps + 1
        let peak = max[n] current[n]
        going = peak > limit
    }
    return (current, steps)
}

pub entry horner<N: Dim, Degree: Dim>(
    x: Tensor[N; f32],
    coeffs: Tensor[Degree; f32],
) -> Tensor[N; f32] {
    var acc = fill<f32>([N], 0.0)
    static for k in 0..Degree {
        acc = acc * x + coeffs[Degree - 1 - k]
    }
    return acc
}

pub entry counted<Steps: Dim>(x: f32) -> f32 {
    var total = x
    static for i in 1..Steps + 1 {
        total = total + cast<f32>(i)
    }
    return total
}

fn add_bias<*Lead: Shape, H: Dim>(
    x: Tensor[*Lead, H; f32],
    bias: Tensor[H; f32]? = none,
) -> Tensor[*Lead, H; f32] {
    return match bias {
        some(b) => x + b
        none => x
    }
}

pub entry twice<*Lead: Shape, H: Dim>(
    x: Tensor[*Lead, H; f32],
    b: Tensor[H; f32],
) -> Tensor[*Lead, H; f32] {
    let once = add_bias(x, some(b))
    return add_bias(once)
}

pub entry grid<N: Dim>(limit: i32) -> (Tensor[N; i32], i32) {
    var row = iota<i32>(N)
    var count: i32 = 0
    while count < limit {
        var inner: i32 = 0
        while inner < 2 {
            row = row + 1
            inner = inner + 1
        }
        count = count + 1
    }
    return (row, count)
}

pub entry literal_branches(flag: bool) -> f32 {
    return if flag { 1.5 } else { 2.0 }
}

pub entry maybe_shift(x: Tensor[2; f32], shift: Tensor[2; f32]? = none) -> Tensor[2; f32] {
    return add_bias(x, shift)
}

pub entry runtime_optional(x: Tensor[2; f32], flag: bool) -> Tensor[2; f32] {
    let chosen: Tensor[2; f32]? = if flag { some(x) } else { none }
    return add_bias(x, chosen)
}

pub entry elementwise_fn<N: Dim>(x: Tensor[N; f32], y: Tensor[N; f32]) -> Tensor[N, N; f32] {
    let out[i, j] = clipped(x[i], y[j])
    return out
}

fn clipped(a: f32, b: f32) -> f32 {
    let s = a + b
    return if s > 0.0 { s } else { 0.0 }
}

pub entry stepper<N: Dim>(limit: i32) -> i32 {
    var n = N
    var i: i32 = 0
    while i < limit {
        n = N
        i = i + cast<i32>(n)
    }
    return i
}

pub entry swap(a: f32, b: Tensor[2; f32]) -> (Tensor[2; f32], f32) {
    let pair = (a, b)
    let (x, y) = pair
    return (y, x)
}
"""


@functools.cache
def _program() -> CheckedProgram:
    return checked(SOURCE)


def lower(
    name: str, inputs: list[TensorType], generics: dict[str, object] | None = None
) -> Function:
    fn = lower_function(_program(), "t", name, inputs, generics=generics)
    verify(fn)
    return fn


rng = np.random.default_rng(11)


def rand(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def test_match_on_an_enum_constant_picks_average() -> None:
    fn = lower("pool", [t((2, 3, 4))])
    x = rand(2, 3, 4)
    (y,), _ = execute(fn, [x])
    close(y, x.astype(np.float64).mean(axis=1) + 0.00001 * 0.5)


def test_tile_with_an_integer_constant() -> None:
    x = rand(3)
    (y,), _ = execute(lower("tile", [t((3,))]), [x])
    np.testing.assert_array_equal(y, np.tile(x, (4, 1)))


def test_integer_division_truncates_and_arithmetic_wraps() -> None:
    fn = lower("int_ops", [t((6,), "i32"), t((6,), "i32")])
    a = np.array([7, -7, 7, -7, 2**31 - 1, -(2**31)], np.int32)
    b = np.array([2, 2, -2, -2, 2, 3], np.int32)
    (q, r, p), _ = execute(fn, [a, b])
    ai, bi = a.astype(np.int64), b.astype(np.int64)
    np.testing.assert_array_equal(q, np.trunc(ai / bi).astype(np.int64))
    np.testing.assert_array_equal(r, ai - np.trunc(ai / bi).astype(np.int64) * bi)
    wrapped = (ai * bi - 7 + 2**31) % 2**32 - 2**31
    np.testing.assert_array_equal(p, wrapped)


def test_float_remainder_follows_the_dividend() -> None:
    a = np.array([5.5, -5.5, 5.5, -5.5], np.float32)
    b = np.array([2.0, 2.0, -2.0, -2.0], np.float32)
    (r,), _ = execute(lower("float_rem", [t((4,)), t((4,))]), [a, b])
    np.testing.assert_array_equal(r, np.fmod(a, b))


def test_compile_time_arithmetic_folds_with_floor_division() -> None:
    fn = lower("literal_folding", [t((5,))])
    x = rand(5)
    (y,), _ = execute(fn, [x])
    # N / 2 = 2, 7 / 2 = 3 and -7 % 3 = 2 are dimension arithmetic (6.1).
    close(y, x.astype(np.float64) * 0.5 + 2 + 3 + 2)


def test_casts_follow_section_10_3() -> None:
    fn = lower("casts", [t((5,)), t((3,), "i32")])
    x = np.array([1.9, -1.9, 0.0, 127.5, -0.5], np.float32)
    k = np.array([300, -1, 7], np.int32)
    (i8, b, u8, f16, one, wrapped), _ = execute(fn, [x, k])
    np.testing.assert_array_equal(i8, np.array([1, -1, 0, 127, 0], np.int8))
    np.testing.assert_array_equal(b, x != 0)
    np.testing.assert_array_equal(u8, np.array([44, 255, 7], np.uint8))
    np.testing.assert_array_equal(f16, k.astype(np.float16))
    assert one == np.float32(1.0) and one.dtype == np.float32
    assert wrapped == np.int8(44)


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32", "f64"])
def test_relu_literal_adopts_the_generic_dtype(dtype: str) -> None:
    from linnet.ir.core import numpy_dtype

    fn = lower("relu", [t((2, 3), dtype)])
    x = rand(2, 3).astype(numpy_dtype(dtype))
    (y,), _ = execute(fn, [x])
    assert y.dtype == numpy_dtype(dtype)
    np.testing.assert_array_equal(y, np.maximum(x, 0))


def test_shape_prelude() -> None:
    x = rand(2, 3, 4)
    (y,), _ = execute(lower("flatten", [t((2, 3, 4))]), [x])
    np.testing.assert_array_equal(y, x.reshape(6, 4))
    a, b = rand(2, 3, 1), rand(2, 3, 2)
    (y,), _ = execute(lower("join_last", [t((2, 3, 1)), t((2, 3, 2))]), [a, b])
    np.testing.assert_array_equal(y, np.concatenate([a, b], axis=-1))
    a, b = rand(1, 3), rand(2, 3)
    (y,), _ = execute(lower("join_first", [t((1, 3)), t((2, 3))]), [a, b])
    np.testing.assert_array_equal(y, np.concatenate([a, b], axis=0))
    (y,), _ = execute(lower("transpose3", [t((2, 3, 4))]), [x])
    np.testing.assert_array_equal(y, np.transpose(x, (2, 0, 1)))


def test_masked_scores_select_with_fill() -> None:
    s = rand(4, 4)
    (y,), _ = execute(lower("masked_scores", [t((4, 4))]), [s])
    np.testing.assert_array_equal(y, np.where(np.tril(np.ones((4, 4), bool)), s, np.float32(-1e9)))


def test_bitwise_and_shifts() -> None:
    x = np.array([0x0123456789ABCDEF, -1, 255, 1 << 62], np.int64)
    (y,), _ = execute(lower("low_bits", [t((4,), "i64")]), [x])
    masked = x & 255
    expected = ((masked << 8) | (x >> 56)) ^ (x & 0xFF)
    np.testing.assert_array_equal(y, expected)
    u = np.array([255, 128, 3], np.uint8)
    s = np.array([-128, -1, 5], np.int8)
    (su, ss), _ = execute(lower("logical_shift", [t((3,), "u8"), t((3,), "i8")]), [u, s])
    np.testing.assert_array_equal(su, u >> 1)
    np.testing.assert_array_equal(ss, s >> 1)


def test_cast_of_a_dimension() -> None:
    import ml_dtypes

    x = rand(3).astype(ml_dtypes.bfloat16)
    (y,), _ = execute(lower("scaled", [t((3,), "bf16")]), [x])
    close(y, x.astype(np.float64) * 3)


def test_float_functions() -> None:
    x = rand(4)
    (y,), _ = execute(lower("math", [t((4,))]), [x])
    xd = x.astype(np.float64)
    a = np.abs(xd) + 1
    expected = (
        np.exp(xd)
        - np.log(a)
        + np.sqrt(a) / np.sqrt(a)
        + np.sin(xd) * np.cos(xd)
        + np.tanh(xd)
        + np.minimum(xd, 0.5)
        - np.maximum(xd, -0.5)
    )
    close(y, expected)


def test_slicing_examples() -> None:
    x = rand(2, 6)
    (front, back), _ = execute(lower("front_back", [t((2, 6))]), [x])
    np.testing.assert_array_equal(front, x[:, :3])
    np.testing.assert_array_equal(back, x[:, 3:])
    y3 = rand(2, 3, 6)
    (odd,), _ = execute(lower("odd_lanes", [t((2, 3, 6))]), [y3])
    np.testing.assert_array_equal(odd, y3[..., 1::2])
    v = rand(5)
    (lst,), _ = execute(lower("last", [t((5,))]), [v])
    assert lst == v[4]
    m = rand(3, 5)
    (w,), _ = execute(lower("window", [t((3, 5))]), [m])
    np.testing.assert_array_equal(w, m[:, 1:3])


def test_runtime_indices_gather() -> None:
    fn = lower("row_col", [t((3, 4)), t((), "i64"), t((), "i32")])
    assert kinds(fn).count("gather") == 4
    m = rand(3, 4)
    (row, col, item), _ = execute(fn, [m, np.int64(2), np.int32(1)])
    np.testing.assert_array_equal(row, m[2])
    np.testing.assert_array_equal(col, m[:, 1])
    assert item == m[2, 1]
    x = rand(2, 3, 5)
    (y,), _ = execute(lower("mixed_slice", [t((2, 3, 5)), t((), "i32")]), [x, np.int32(1)])
    np.testing.assert_array_equal(y, x[1, :, 3])


def test_runtime_if_is_an_if_op() -> None:
    fn = lower("choose", [t((3,)), t((), "bool")])
    assert "if" in kinds(fn)
    x = rand(3)
    (a,), _ = execute(fn, [x, np.bool_(True)])
    (b,), _ = execute(fn, [x, np.bool_(False)])
    np.testing.assert_array_equal(a, x * 2)
    np.testing.assert_array_equal(b, x - 1)


def test_compile_time_if_is_resolved() -> None:
    x = rand(3)
    fn = lower("static_choice", [t((3,))])
    assert "if" not in kinds(fn)
    (y,), _ = execute(fn, [x])
    np.testing.assert_array_equal(y, x)
    (y,), _ = execute(lower("static_choice", [t((2,))]), [x[:2]])
    np.testing.assert_array_equal(y, -x[:2])


def test_module_entries_and_tuples() -> None:
    g, tr = rand(2, 3), rand(2, 3)
    (err,), _ = execute(lower("mean_abs_error", [t((2, 3)), t((2, 3))]), [g, tr])
    close(err, np.abs(g.astype(np.float64) - tr).mean())
    x = rand(5)
    (s,), _ = execute(lower("spread", [t((5,))]), [x])
    close(s, float(x.max()) - float(x.min()))
    (p, q), _ = execute(lower("swap", [t(()), t((2,))]), [np.float32(3), x[:2]])
    np.testing.assert_array_equal(p, x[:2])
    assert q == np.float32(3)


def test_while_carries_vars() -> None:
    fn = lower("halve_until", [t((3,)), t(()), t((), "i32")])
    assert kinds(fn).count("while") == 1
    x = np.array([8.0, -2.0, 3.0], np.float32)
    (cur, steps), _ = execute(fn, [x, np.float32(1.5), np.int32(10)])
    ref, n = x.copy(), 0
    going = True
    while going and n < 10:
        ref = ref * np.float32(0.5)
        n += 1
        going = ref.max() > 1.5
    np.testing.assert_array_equal(cur, ref)
    assert steps == n
    (cur, steps), _ = execute(fn, [x, np.float32(0.0), np.int32(2)])
    assert steps == 2


def test_nested_whiles() -> None:
    fn = lower("grid", [t((), "i32")], {"N": 3})
    assert kinds(fn).count("while") == 2
    (row, count), _ = execute(fn, [np.int32(3)])
    np.testing.assert_array_equal(row, np.arange(3) + 6)
    assert count == 3


def test_a_compile_time_var_reassigned_in_a_loop_is_not_carried() -> None:
    fn = lower("stepper", [t((), "i32")], {"N": 1000})
    loop = next(op for op in fn.body.ops if op.kind == "while")
    assert len(loop.operands) == 1
    (i,), _ = execute(fn, [np.int32(2500)])
    assert i == 3000


def test_static_for_over_ranges() -> None:
    x, coeffs = rand(4), rand(3)
    fn = lower("horner", [t((4,)), t((3,))])
    assert "while" not in kinds(fn)
    (y,), _ = execute(fn, [x, coeffs])
    close(y, np.polyval(coeffs[::-1].astype(np.float64), x))
    (total,), _ = execute(lower("counted", [t(())], {"Steps": 4}), [np.float32(0.5)])
    assert total == np.float32(10.5)


def test_optional_arguments_match_statically() -> None:
    x, b = rand(2, 3), rand(3)
    fn = lower("twice", [t((2, 3)), t((3,))])
    assert kinds(fn).count("add") == 1
    (y,), _ = execute(fn, [x, b])
    np.testing.assert_array_equal(y, x + b)


def test_literal_if_branches_adopt_the_result_dtype() -> None:
    fn = lower("literal_branches", [t((), "bool")])
    for flag, expected in ((True, 1.5), (False, 2.0)):
        (y,), _ = execute(fn, [np.bool_(flag)])
        assert y.dtype == np.float32 and y == expected


def test_optional_entry_inputs() -> None:
    x, s = rand(2), rand(2)
    (y,), _ = execute(lower("maybe_shift", [t((2,))]), [x])
    np.testing.assert_array_equal(y, x)
    (y,), _ = execute(lower("maybe_shift", [t((2,)), t((2,))]), [x, s])
    np.testing.assert_array_equal(y, x + s)


def test_runtime_optionals_are_not_supported_yet() -> None:
    with pytest.raises(LinnetError, match="not supported yet"):
        lower("runtime_optional", [t((2,)), t((), "bool")])


def test_scalar_function_applied_elementwise_in_index_notation() -> None:
    fn = lower("elementwise_fn", [t((3,)), t((3,))])
    assert "if" not in kinds(fn) and "select" in kinds(fn)
    x, y = rand(3), rand(3)
    (out,), _ = execute(fn, [x, y])
    np.testing.assert_array_equal(out, np.maximum(x[:, None] + y[None, :], 0))


def test_inputs_that_do_not_fit_are_errors() -> None:
    with pytest.raises(LinnetError, match="input `b`"):
        lower("join_first", [t((1, 3)), t((2, 4))])
    with pytest.raises(LinnetError, match="no function `nope`"):
        lower("nope", [])
