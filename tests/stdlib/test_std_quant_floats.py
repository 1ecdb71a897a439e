"""std.quant's FP8 (E4M3FN) and MXFP4 items against the libraries that define the formats.

References: PyTorch's `torch.float8_e4m3fn` for every one of the 256 bytes
(its NaN bytes read +-480 in the std body, as stdlib.md says), and
transformers' own gpt-oss MXFP4 dequantiser (`convert_moe_packed_tensors`,
which returns the weights `[E, In, Out]`); the linears and the expert ops
against NumPy f64 on those weights. Every backend (NumPy reference
interpreter, linnet.torch interpreted and compiled) must agree.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from stdlib_support import StdBlock, StdCases, f64, normal

torch = pytest.importorskip("torch")

Array = np.ndarray[Any, Any]

SOURCE = """module cases

use std.quant::{decode_e2m1, decode_e8m0, decode_fp8, dequantize_fp8, dequantize_mxfp4, linear_fp8, linear_mxfp4, mxfp4_combine_experts, mxfp4_experts, mxfp4_experts_shared, mxfp4_linear_experts_shared}

pub entry fp8<*S: Shape>(bits: Tensor[*S; u8]) -> Tensor[*S; f32] {
    return decode_fp8(bits)
}

pub entry e2m1<*S: Shape>(nibbles: Tensor[*S; u8]) -> Tensor[*S; f32] {
    return decode_e2m1(nibbles)
}

pub entry e8m0<*S: Shape>(scales: Tensor[*S; u8]) -> Tensor[*S; f32] {
    return decode_e8m0(scales)
}

pub entry fp8_rows<Out: Dim, In: Dim, T: Float>(
    q: Tensor[Out, In; u8],
    scale: Tensor[Out, 1; f32],
    x: Tensor[3, In; T],
    bias: Tensor[Out; T],
) -> (Tensor[Out, In; T], Tensor[3, Out; T]) {
    return (dequantize_fp8<[Out], In, T>(q, scale), linear_fp8(x, q, scale, some(bias)))
}

pub entry mxfp4<E: Dim, Rows: Dim, G: Dim, T: Float>(
    blocks: Tensor[E, Rows, G, 16; u8],
    scales: Tensor[E, Rows, G; u8],
    probe: Tensor[1; T],
) -> Tensor[E, Rows, G * 32; T] {
    return dequantize_mxfp4<E, Rows, G, T>(blocks, scales)
}

pub entry mx_linear<Out: Dim, G: Dim, T: Float>(
    x: Tensor[2, 3, G * 32; T],
    blocks: Tensor[Out, G, 16; u8],
    scales: Tensor[Out, G; u8],
) -> Tensor[2, 3, Out; T] {
    return linear_mxfp4(x, blocks, scales, none)
}

pub entry experts<R: Dim, K: Dim, E: Dim, Out: Dim, G: Dim, T: Float>(
    x: Tensor[R, K, G * 32; T],
    row: Tensor[R, G * 32; T],
    blocks: Tensor[E, Out, G, 16; u8],
    scales: Tensor[E, Out, G; u8],
    chosen: Tensor[R, K; i64],
    gates: Tensor[R, K; T],
) -> (Tensor[R, K, Out; T], Tensor[R, K, Out; T], Tensor[R, K, Out; T], Tensor[R, Out; T]) {
    return (
        mxfp4_experts(x, blocks, scales, chosen),
        mxfp4_experts_shared(reshape(row, [R, 1, G * 32]), blocks, scales, chosen),
        mxfp4_linear_experts_shared(row, blocks, scales, chosen),
        mxfp4_combine_experts(x, blocks, scales, chosen, gates),
    )
}
"""

BLOCKS = """module cases

use std.quant::{Fp8Linear, Mxfp4Linear}

pub block Model<In: Dim, Out: Dim>
where In % 32 == 0 {
    sub eight: Fp8Linear<In, Out, f32>
    sub four: Mxfp4Linear<In, Out, f32>

    pub entry forward<*S: Shape>(x: Tensor[*S, In; f32]) -> (Tensor[*S, Out; f32], Tensor[*S, Out; f32]) {
        return (eight.forward(x), four.forward(x))
    }
}
"""


@pytest.fixture(scope="module")
def std() -> StdCases:
    return StdCases(SOURCE)


def torch_fp8(bits: Array) -> Array:
    """PyTorch's E4M3FN value of each byte, its NaN bytes (0x7F, 0xFF) read as +-480."""
    values = torch.from_numpy(bits).view(torch.float8_e4m3fn).float().numpy()
    return np.where(np.isnan(values), np.where(bits >> 7 == 1, -480.0, 480.0), values)


def transformers_mxfp4(blocks: Array, scales: Array) -> Array:
    """transformers' gpt-oss dequantiser, back in the checkpoint's `[E, Rows, In]` order."""
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    weights = convert_moe_packed_tensors(
        torch.from_numpy(blocks), torch.from_numpy(scales), dtype=torch.float32
    )
    out: Array = weights.transpose(1, 2).numpy()
    return out


def test_decode_fp8_is_torch_float8_e4m3fn(std: StdCases) -> None:
    every = np.arange(256, dtype=np.uint8)
    expected = torch_fp8(every)
    assert expected[0x7E] == 448 and expected[0x01] == 2.0**-9
    std.expect("fp8", [every.reshape(16, 16)], [expected.reshape(16, 16)], rtol=0, atol=0)


def test_decoders_of_e2m1_and_e8m0(std: StdCases) -> None:
    magnitudes = [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    std.expect("e2m1", [np.arange(16, dtype=np.uint8)], [magnitudes + [-m for m in magnitudes]])
    scales = np.array([0, 1, 64, 100, 115, 126, 127, 128, 136, 189, 190, 254, 255], np.uint8)
    powers = np.ldexp(1.0, np.clip(scales.astype(np.int64) - 127, -62, 62))
    std.expect("e8m0", [scales], [powers], rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_dequantize_mxfp4_is_transformers_gpt_oss(std: StdCases, dtype: Any) -> None:
    rng = np.random.default_rng(31)
    blocks = rng.integers(0, 256, (3, 5, 2, 16)).astype(np.uint8)
    scales = rng.integers(115, 137, (3, 5, 2)).astype(np.uint8)  # real gpt-oss range
    expected = transformers_mxfp4(blocks, scales)
    assert np.abs(expected).max() > 0
    probe = np.zeros(1, dtype)
    std.expect("mxfp4", [blocks, scales, probe], [expected], rtol=0, atol=0)


def test_fp8_rows_and_linear(std: StdCases) -> None:
    rng = np.random.default_rng(32)
    q = rng.integers(0, 256, (6, 40)).astype(np.uint8)
    q[(q & 0x7F) == 0x7F] = 0x42  # NaN bytes do not appear in checkpoints
    scale = rng.uniform(0.001, 0.01, (6, 1)).astype(np.float32)
    x, bias = normal(rng, [3, 40]), normal(rng, [6])
    weight = torch_fp8(q) * f64(scale)
    std.expect("fp8_rows", [q, scale, x, bias], [weight, f64(x) @ weight.T + bias], atol=1e-5)


def test_mxfp4_linear_and_experts(std: StdCases) -> None:
    rng = np.random.default_rng(33)
    blocks = rng.integers(0, 256, (4, 6, 2, 16)).astype(np.uint8)
    scales = rng.integers(120, 130, (4, 6, 2)).astype(np.uint8)
    w = f64(transformers_mxfp4(blocks, scales))  # [E, Out, In]
    x = normal(rng, [2, 3, 64])
    std.expect("mx_linear", [x, blocks[1], scales[1]], [f64(x) @ w[1].T], atol=1e-4)
    r, k = 5, 2
    xs, row = normal(rng, [r, k, 64]), normal(rng, [r, 64])
    chosen = rng.integers(0, 4, (r, k)).astype(np.int64)
    gates = rng.uniform(0, 1, (r, k)).astype(np.float32)
    per_slot = np.einsum("rki,rkoi->rko", f64(xs), w[chosen])
    shared = np.einsum("ri,rkoi->rko", f64(row), w[chosen])
    combined = np.einsum("rk,rko->ro", f64(gates), per_slot)
    std.expect(
        "experts", [xs, row, blocks, scales, chosen, gates], [per_slot, shared, shared, combined],
        atol=1e-4,
    )  # fmt: skip


def test_fp8_and_mxfp4_linear_blocks() -> None:
    from linnet.quant.minifloat import fp8_rows, mxfp4_blocks

    model = StdBlock(BLOCKS, "Model")
    rng = np.random.default_rng(34)
    weight = normal(rng, [5, 64]) * 0.1
    q, scale = fp8_rows(weight)
    blocks, scales = mxfp4_blocks(weight)
    weights = {"eight.weight": q, "eight.scale": scale, "four.weight": blocks,
               "four.scale": scales, "four.bias": normal(rng, [5])}  # fmt: skip
    x = normal(rng, [2, 64])
    eight = f64(x) @ (torch_fp8(q) * f64(scale)).T
    four_w = transformers_mxfp4(blocks[None], scales[None])[0]
    four = f64(x) @ f64(four_w).T + f64(weights["four.bias"])
    model.expect({"In": 64, "Out": 5}, weights, [x], [eight, four], atol=1e-5)
