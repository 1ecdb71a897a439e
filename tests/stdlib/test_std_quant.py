"""`std.quant` (stdlib.md 20) against NumPy: nibble order, dequantisation, and quantised linears.

4-bit packing: byte k of a row holds element 2k in its low nibble and 2k + 1
in its high nibble. The references unpack with NumPy bit operations and
compute the linears as dequantise-then-matmul in f64.
"""

from __future__ import annotations

import numpy as np
import pytest
from stdlib_support import BF16, StdBlock, StdCases, f64, normal

SOURCE = """module cases

use std.quant::{
    dequantize_int4,
    dequantize_int4_groups,
    dequantize_int8,
    linear_int4_groups,
    linear_int8,
    take_inputs,
    unpack_int4,
    unpack_uint4,
}

pub entry int8<*S: Shape, N: Dim, T: Float>(
    q: Tensor[*S, N; i8],
    scale: Tensor[*S; f32],
) -> Tensor[*S, N; T] {
    return dequantize_int8<S, N, T>(q, scale)
}

pub entry int8_linear<*S: Shape, In: Dim, Out: Dim>(
    x: Tensor[*S, In; f32],
    weight: Tensor[Out, In; i8],
    scale: Tensor[Out; f32],
    bias: Tensor[Out; f32],
) -> (Tensor[*S, Out; f32], Tensor[*S, Out; f32]) {
    return (linear_int8(x, weight, scale, none), linear_int8(x, weight, scale, some(bias)))
}

pub entry nibbles<R: Dim, H: Dim>(
    signed: Tensor[R, H; i8],
    unsigned: Tensor[R, H; u8],
) -> (Tensor[R, 2 * H; i8], Tensor[R, 2 * H; u8]) {
    return (unpack_int4(signed), unpack_uint4(unsigned))
}

pub entry int4<R: Dim, H: Dim, T: Float>(
    packed: Tensor[R, H; i8],
    scale: Tensor[R; f32],
) -> Tensor[R, 2 * H; T] {
    return dequantize_int4<R, H, T>(packed, scale)
}

pub entry groups<Out: Dim, G: Dim, Half: Dim, T: Float>(
    packed: Tensor[Out, G, Half; u8],
    scale: Tensor[Out, G; T],
    zero: Tensor[Out, G; u8],
) -> Tensor[Out, G * (2 * Half); T] {
    return dequantize_int4_groups(packed, scale, zero)
}

pub entry group_linear<*S: Shape, Out: Dim, G: Dim, Half: Dim, T: Float>(
    x: Tensor[*S, G * (2 * Half); T],
    packed: Tensor[Out, G, Half; u8],
    scale: Tensor[Out, G; T],
    zero: Tensor[Out, G; u8],
    bias: Tensor[Out; T],
) -> (Tensor[*S, Out; T], Tensor[*S, Out; T]) {
    return (
        linear_int4_groups(x, packed, scale, zero, none),
        linear_int4_groups(x, packed, scale, zero, some(bias)),
    )
}

pub entry take<*S: Shape, N: Dim, T: Float>(
    x: Tensor[*S, N; T],
    order: Tensor[N; i32],
) -> Tensor[*S, N; T] {
    return take_inputs(x, order)
}
"""

BLOCKS = """module cases

use std.quant::{Int4GroupLinear, Int4Linear, Int8Linear}

pub block Model<In: Dim, Out: Dim>
where In % 8 == 0 {
    sub eight: Int8Linear<In, Out, f32>
    sub four: Int4Linear<In, Out, f32>
    sub grouped: Int4GroupLinear<In, Out, 8, f32>

    pub entry forward<*S: Shape>(
        x: Tensor[*S, In; f32],
    ) -> (Tensor[*S, Out; f32], Tensor[*S, Out; f32], Tensor[*S, Out; f32]) {
        return (eight.forward(x), four.forward(x), grouped.forward(x))
    }
}
"""


@pytest.fixture(scope="module")
def std() -> StdCases:
    return StdCases(SOURCE)


def split_nibbles(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) nibbles of every byte, each 0..15."""
    raw = packed.view(np.uint8).astype(np.int64)
    return raw & 0x0F, raw >> 4


def interleave(low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Element 2k from `low[..., k]`, element 2k + 1 from `high[..., k]`."""
    out = np.empty((*low.shape[:-1], 2 * low.shape[-1]), np.int64)
    out[..., 0::2], out[..., 1::2] = low, high
    return out


def unpack_signed(packed: np.ndarray) -> np.ndarray:
    low, high = split_nibbles(packed)
    return interleave(*(np.where(n >= 8, n - 16, n) for n in (low, high)))


def dequantize_groups(packed: np.ndarray, scale: np.ndarray, zero: np.ndarray) -> np.ndarray:
    """[Out, G, Half] bytes -> [Out, G * 2Half] weights: (q - zero) * scale per group."""
    q = interleave(*split_nibbles(packed))  # [Out, G, 2Half]
    w = (q - zero[..., None].astype(np.int64)) * f64(scale)[..., None]
    return w.reshape(packed.shape[0], -1)


def test_unpack_nibble_order(std: StdCases) -> None:
    """0x8F: low nibble 15 (-1 signed) first, high nibble 8 (-8 signed) second."""
    rng = np.random.default_rng(210)
    raw = rng.integers(0, 256, (3, 5)).astype(np.uint8)
    raw[0, 0] = 0x8F
    raw[0, 1] = 0x70
    signed = raw.view(np.int8)
    expected_signed = unpack_signed(signed)
    assert expected_signed[0, :4].tolist() == [-1, -8, 0, 7]
    expected_unsigned = interleave(*split_nibbles(raw))
    assert expected_unsigned[0, :4].tolist() == [15, 8, 0, 7]
    runs = std.expect("nibbles", [signed, raw], [expected_signed, expected_unsigned])
    assert all((r[0].dtype, r[1].dtype) == (np.int8, np.uint8) for r in runs.values())


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_dequantize_int8_and_int4(std: StdCases, dtype: str) -> None:
    """`f32(q) * scale` in f32, cast to `T` (the generic no input fixes)."""
    rng = np.random.default_rng(211)
    q = rng.integers(-128, 128, (2, 3, 6)).astype(np.int8)
    scale = rng.uniform(0.001, 0.1, (2, 3)).astype(np.float32)
    rtol = 1e-6 if dtype == "f32" else 2.0**-8
    generics = {"T": dtype}
    expected = f64(q) * f64(scale)[..., None]
    runs = std.expect("int8", [q, scale], [expected], generics=generics, rtol=rtol, atol=0)
    assert all(r[0].dtype == (np.float32 if dtype == "f32" else BF16) for r in runs.values())
    std.expect(
        "int8", [q[0, 0], scale[0, 0]], [expected[0, 0]], generics=generics, rtol=rtol, atol=0
    )
    packed = rng.integers(-128, 128, (4, 3)).astype(np.int8)
    row_scale = rng.uniform(0.01, 1.0, 4).astype(np.float32)
    expected = unpack_signed(packed) * f64(row_scale)[:, None]
    std.expect("int4", [packed, row_scale], [expected], generics=generics, rtol=rtol, atol=0)


def test_linear_int8_is_dequantise_then_matmul(std: StdCases) -> None:
    rng = np.random.default_rng(218)
    x = normal(rng, [2, 3, 16])
    weight = rng.integers(-127, 128, (5, 16)).astype(np.int8)
    scale = rng.uniform(0.001, 0.05, 5).astype(np.float32)
    bias = normal(rng, [5])
    plain = f64(x) @ (f64(weight) * f64(scale)[:, None]).T
    std.expect("int8_linear", [x, weight, scale, bias], [plain, plain + f64(bias)], atol=1e-5)


def test_dequantize_int4_groups(std: StdCases) -> None:
    rng = np.random.default_rng(212)
    packed = rng.integers(0, 256, (3, 2, 4)).astype(np.uint8)
    scale = rng.uniform(0.01, 0.2, (3, 2)).astype(np.float32)
    zero = rng.integers(0, 16, (3, 2)).astype(np.uint8)
    std.expect("groups", [packed, scale, zero], [dequantize_groups(packed, scale, zero)], atol=0)
    # the scale has dtype T: bf16 here, the result rounds once to bf16
    half = scale.astype(BF16)
    expected = dequantize_groups(packed, half, zero)
    std.expect("groups", [packed, half, zero], [expected], rtol=2.0**-8, atol=0)


@pytest.mark.parametrize("shape", [(16,), (3, 16), (2, 2, 16)])
def test_linear_int4_groups_is_dequantise_then_matmul(
    std: StdCases, shape: tuple[int, ...]
) -> None:
    rng = np.random.default_rng(213 + len(shape))
    out, groups, half = 5, 2, 4
    x = normal(rng, shape)
    packed = rng.integers(0, 256, (out, groups, half)).astype(np.uint8)
    scale = rng.uniform(0.01, 0.2, (out, groups)).astype(np.float32)
    zero = rng.integers(0, 16, (out, groups)).astype(np.uint8)
    bias = normal(rng, [out])
    w = dequantize_groups(packed, scale, zero)
    plain = f64(x) @ w.T
    std.expect(
        "group_linear", [x, packed, scale, zero, bias], [plain, plain + f64(bias)], atol=1e-5
    )


def test_take_inputs(std: StdCases) -> None:
    rng = np.random.default_rng(216)
    x = normal(rng, [2, 3, 6])
    order = rng.permutation(6).astype(np.int32)
    std.expect("take", [x, order], [f64(x)[..., order]], rtol=0, atol=0)


def test_quantised_linear_blocks() -> None:
    """Int8Linear, Int4Linear and Int4GroupLinear (with and without `order`, with a bias)."""
    model = StdBlock(BLOCKS, "Model")
    rng = np.random.default_rng(217)
    n_in, n_out = 16, 5
    x = normal(rng, [2, 3, n_in])
    weights = {
        "eight.weight": rng.integers(-128, 128, (n_out, n_in)).astype(np.int8),
        "eight.scale": rng.uniform(0.001, 0.05, n_out).astype(np.float32),
        "four.weight": rng.integers(-128, 128, (n_out, n_in // 2)).astype(np.int8),
        "four.scale": rng.uniform(0.01, 0.5, n_out).astype(np.float32),
        "four.bias": normal(rng, [n_out]),
        "grouped.weight": rng.integers(0, 256, (n_out, n_in // 8, 4)).astype(np.uint8),
        "grouped.scale": rng.uniform(0.01, 0.2, (n_out, n_in // 8)).astype(np.float32),
        "grouped.zero": rng.integers(0, 16, (n_out, n_in // 8)).astype(np.uint8),
    }
    xf = f64(x)
    eight = xf @ (f64(weights["eight.weight"]) * f64(weights["eight.scale"])[:, None]).T
    four_w = unpack_signed(weights["four.weight"]) * f64(weights["four.scale"])[:, None]
    four = xf @ four_w.T + f64(weights["four.bias"])
    grouped_w = dequantize_groups(
        weights["grouped.weight"], weights["grouped.scale"], weights["grouped.zero"]
    )
    generics = {"In": n_in, "Out": n_out}
    model.expect(generics, weights, [x], [eight, four, xf @ grouped_w.T], atol=1e-5)
    # GPTQ act-order: packed element k of a row belongs to input order[k]
    order = rng.permutation(n_in).astype(np.int32)
    ordered = {**weights, "grouped.order": order}
    model.expect(generics, ordered, [x], [eight, four, xf[..., order] @ grouped_w.T], atol=1e-5)
