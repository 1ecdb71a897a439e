"""`std.nn.norm` (stdlib.md 6) against NumPy f64 and F.layer_norm / batch_norm / group_norm.

rms_norm and layer_norm normalise in f32, cast to `T`, then apply the affine
in `T` (HF Llama's order); the half-precision checks reproduce that order with
ml_dtypes rounding, so a weight applied before the cast would fail them.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from stdlib_support import BF16, StdBlock, StdCases, f64, normal

SOURCE = """module cases

use std.nn.norm::{batch_norm, group_norm, layer_norm, rms_norm}

pub entry rms<*S: Shape, H: Dim, T: Float>(
    x: Tensor[*S, H; T],
    w: Tensor[H; T],
) -> (Tensor[*S, H; T], Tensor[*S, H; T]) {
    return (rms_norm(x, w), rms_norm(x, w, 1e-2))
}

pub entry layer<*S: Shape, H: Dim, T: Float>(
    x: Tensor[*S, H; T],
    w: Tensor[H; T],
    b: Tensor[H; T],
) -> (Tensor[*S, H; T], Tensor[*S, H; T], Tensor[*S, H; T]) {
    return (layer_norm(x, w), layer_norm(x, w, some(b)), layer_norm(x, w, some(b), 0.5))
}

pub entry batch<B: Dim, C: Dim, H: Dim, W: Dim, T: Float>(
    x: Tensor[B, C, H, W; T],
    mean: Tensor[C; T],
    variance: Tensor[C; T],
    w: Tensor[C; T],
    b: Tensor[C; T],
) -> (Tensor[B, C, H, W; T], Tensor[B, C, H, W; T]) {
    return (batch_norm(x, mean, variance, w, b), batch_norm(x, mean, variance, w, b, 0.25))
}

pub entry groups<B: Dim, C: Dim, H: Dim, W: Dim, G: Dim, T: Float>(
    x: Tensor[B, C, H, W; T],
    w: Tensor[C; T],
    b: Tensor[C; T],
) -> (Tensor[B, C, H, W; T], Tensor[B, C, H, W; T])
where
    G > 0,
    C % G == 0
{
    return (group_norm<B, C, H, W, G, T>(x, w, b), group_norm<B, C, H, W, G, T>(x, w, b, 0.3))
}
"""

BLOCK = """module cases

use std.nn.norm::{RmsNorm}

pub block Model<H: Dim, T: Float> {
    sub norm: RmsNorm<H, T>

    pub entry forward<*S: Shape>(x: Tensor[*S, H; T]) -> Tensor[*S, H; T] {
        return norm.forward(x)
    }
}
"""


@pytest.fixture(scope="module")
def std() -> StdCases:
    return StdCases(SOURCE)


def rms_reference(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    xf = f64(x)
    return xf / np.sqrt(np.mean(xf * xf, axis=-1, keepdims=True) + eps) * f64(w)


def rms_half(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """HF order in `T`: normalise in f32, round to `T`, then multiply by the weight in `T`."""
    xf = f64(x)
    n = (xf / np.sqrt(np.mean(xf * xf, axis=-1, keepdims=True) + eps)).astype(x.dtype)
    return f64((f64(n) * f64(w)).astype(x.dtype))


@pytest.mark.parametrize("shape", [(16,), (3, 16), (2, 3, 16)])
def test_rms_norm_f32(std: StdCases, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(50 + len(shape))
    x, w = normal(rng, shape) * 3, normal(rng, [16])
    std.expect("rms", [x, w], [rms_reference(x, w, 1e-5), rms_reference(x, w, 1e-2)])


def test_rms_norm_bf16_weight_after_cast(std: StdCases) -> None:
    rng = np.random.default_rng(54)
    x, w = normal(rng, [4, 32], BF16), normal(rng, [32], BF16)
    step = 2.0**-7
    expected = [rms_half(x, w, 1e-5), rms_half(x, w, 1e-2)]
    # the f32 normalisation may round to the neighbouring bf16 value: one step, twice
    runs = std.expect("rms", [x, w], expected, rtol=2 * step, atol=0)
    # the order is observable: multiplying before the cast changes about a third of
    # these values, while the f32-vs-f64 normalisation almost never does
    for backend, results in runs.items():
        for got, want in zip(results, expected, strict=True):
            assert np.mean(f64(got) == want) >= 0.95, backend


def test_layer_norm_f32_against_torch(std: StdCases) -> None:
    rng = np.random.default_rng(55)
    x, w, b = normal(rng, [2, 3, 12]) * 2 + 1, normal(rng, [12]), normal(rng, [12])
    t = [torch.from_numpy(f64(a)) for a in (x, w, b)]
    expected = [
        F.layer_norm(t[0], (12,), t[1], None, 1e-5).numpy(),
        F.layer_norm(t[0], (12,), t[1], t[2], 1e-5).numpy(),
        F.layer_norm(t[0], (12,), t[1], t[2], 0.5).numpy(),
    ]
    std.expect("layer", [x, w, b], expected, atol=1e-5)
    std.expect("layer", [x[0, 0], w, b], [e[0, 0] for e in expected], atol=1e-5)


def test_layer_norm_bf16_affine_after_cast(std: StdCases) -> None:
    rng = np.random.default_rng(56)
    x, w, b = normal(rng, [5, 24], BF16), normal(rng, [24], BF16), normal(rng, [24], BF16)
    xf = f64(x)
    centred = xf - xf.mean(-1, keepdims=True)
    n = (centred / np.sqrt((centred**2).mean(-1, keepdims=True) + 1e-5)).astype(BF16)
    scaled = (f64(n) * f64(w)).astype(BF16)
    shifted = (f64(scaled) + f64(b)).astype(BF16)
    step = 2.0**-7
    runs = std.run("layer", [x, w, b])
    for backend, (plain, biased, _) in runs.items():
        np.testing.assert_allclose(f64(plain), f64(scaled), rtol=2 * step, atol=0, err_msg=backend)
        # the bias add after rounding can cancel: allow a step of the larger addend
        bound = 3 * step * (np.abs(f64(scaled)) + np.abs(f64(b)))
        assert np.all(np.abs(f64(biased) - f64(shifted)) <= bound), backend


def test_batch_norm_against_torch(std: StdCases) -> None:
    rng = np.random.default_rng(57)
    x = normal(rng, [2, 3, 4, 5]) * 2
    mean, w, b = normal(rng, [3]), normal(rng, [3]), normal(rng, [3])
    variance = rng.uniform(0.2, 3.0, 3).astype(np.float32)
    t = [torch.from_numpy(f64(a)) for a in (x, mean, variance, w, b)]
    expected = [
        F.batch_norm(t[0], t[1], t[2], t[3], t[4], training=False, eps=eps).numpy()
        for eps in (1e-5, 0.25)
    ]
    std.expect("batch", [x, mean, variance, w, b], expected, atol=1e-5)


@pytest.mark.parametrize("groups", [1, 2, 3, 6])
def test_group_norm_against_torch(std: StdCases, groups: int) -> None:
    rng = np.random.default_rng(58 + groups)
    x = normal(rng, [2, 6, 3, 4]) * 2 + 0.5
    w, b = normal(rng, [6]), normal(rng, [6])
    t = [torch.from_numpy(f64(a)) for a in (x, w, b)]
    expected = [F.group_norm(t[0], groups, t[1], t[2], eps).numpy() for eps in (1e-5, 0.3)]
    std.expect("groups", [x, w, b], expected, generics={"G": groups}, atol=1e-5)


def test_batch_and_group_norm_bf16_order(std: StdCases) -> None:
    """batch_norm: all in f32, one cast at the end. group_norm: f32 statistics, cast, affine in T."""
    rng = np.random.default_rng(63)
    x = (normal(rng, [2, 4, 3, 3]) * 2 + 1).astype(BF16)
    mean, w, b = (normal(rng, [4], BF16) for _ in range(3))
    variance = rng.uniform(0.2, 3.0, 4).astype(BF16)
    step = 2.0**-7
    shape = (1, 4, 1, 1)
    xf = f64(x)
    batch = (xf - f64(mean).reshape(shape)) / np.sqrt(f64(variance).reshape(shape) + 1e-5)
    batch = batch * f64(w).reshape(shape) + f64(b).reshape(shape)
    for backend, (got, _) in std.run("batch", [x, mean, variance, w, b]).items():
        assert got.dtype == BF16
        # one rounding of the f32 result: half a step (plus f32 noise near zero)
        np.testing.assert_allclose(
            f64(got), batch, rtol=step / 2 + 1e-5, atol=1e-5, err_msg=backend
        )
    grouped = xf.reshape(2, 2, 2 * 9)
    centred = grouped - grouped.mean(-1, keepdims=True)
    n = (centred / np.sqrt((centred**2).mean(-1, keepdims=True) + 1e-5)).reshape(x.shape)
    scaled = (f64(n.astype(BF16)) * f64(w).reshape(shape)).astype(BF16)
    shifted = f64((f64(scaled) + f64(b).reshape(shape)).astype(BF16))
    for backend, (got, _) in std.run("groups", [x, w, b], generics={"G": 2}).items():
        assert got.dtype == BF16
        bound = 3 * step * (np.abs(f64(scaled)) + np.abs(f64(b)).reshape(shape))
        assert np.all(np.abs(f64(got) - shifted) <= bound), backend
        assert np.mean(f64(got) == shifted) >= 0.9, backend


@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["f32", "bf16"])
def test_rms_norm_block_default_eps(dtype: np.dtype) -> None:
    """`RmsNorm` binds `<name>.weight` and uses eps 1e-5."""
    model = StdBlock(BLOCK, "Model")
    rng = np.random.default_rng(62)
    x, w = normal(rng, [2, 3, 16], dtype) * 2, normal(rng, [16], dtype)
    name = "f32" if dtype == np.float32 else "bf16"
    if dtype == np.float32:
        model.expect({"H": 16, "T": name}, {"norm.weight": w}, [x], [rms_reference(x, w, 1e-5)])
    else:
        expected = [rms_half(x, w, 1e-5)]
        model.expect({"H": 16, "T": name}, {"norm.weight": w}, [x], expected, rtol=2**-6, atol=0)
