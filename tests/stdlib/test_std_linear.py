"""`std.nn.linear` and `std.nn.embedding` (stdlib.md 2-3) against F.linear / NumPy gathers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from stdlib_support import BF16, StdBlock, StdCases, f64, normal

SOURCE = """module cases

use std.nn.embedding::{embedding}
use std.nn.linear::{linear}

pub entry plain<*S: Shape, I: Dim, O: Dim, T: Float>(
    x: Tensor[*S, I; T],
    w: Tensor[O, I; T],
) -> Tensor[*S, O; T] {
    return linear(x, w)
}

pub entry biased<*S: Shape, I: Dim, O: Dim, T: Float>(
    x: Tensor[*S, I; T],
    w: Tensor[O, I; T],
    b: Tensor[O; T],
) -> Tensor[*S, O; T] {
    return linear(x, w, some(b))
}

pub entry lookup<*S: Shape, V: Dim, H: Dim, T: Float>(
    ids: Tensor[*S; i32],
    table: Tensor[V, H; T],
) -> Tensor[*S, H; T] {
    return embedding(ids, table)
}
"""

BLOCKS = """module cases

use std.nn.embedding::{Embedding}
use std.nn.linear::{Linear}

pub block Model<V: Dim, H: Dim, O: Dim, T: Float> {
    sub embed: Embedding<V, H, T>
    sub proj: Linear<H, O, T>

    pub entry forward<*S: Shape>(ids: Tensor[*S; i32]) -> (Tensor[*S, H; T], Tensor[*S, O; T]) {
        let hidden = embed.forward(ids)
        return (hidden, proj.forward(hidden))
    }
}
"""


@pytest.fixture(scope="module")
def std() -> StdCases:
    return StdCases(SOURCE)


def torch_linear(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    bias = None if b is None else torch.from_numpy(f64(b))
    return F.linear(torch.from_numpy(f64(x)), torch.from_numpy(f64(w)), bias).numpy()


@pytest.mark.parametrize("shape", [(8,), (5, 8), (2, 3, 8)])
def test_linear_f32(std: StdCases, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(40 + len(shape))
    x, w, b = normal(rng, shape), normal(rng, [6, 8]), normal(rng, [6])
    std.expect("plain", [x, w], [torch_linear(x, w)], atol=1e-5)
    std.expect("biased", [x, w, b], [torch_linear(x, w, b)], atol=1e-5)


def test_linear_bf16_sums_in_t(std: StdCases) -> None:
    """A plain sum in bf16 (the native F.linear accumulates wider): within In bf16 steps of sum |x w|."""
    rng = np.random.default_rng(44)
    x, w, b = normal(rng, [3, 16], BF16), normal(rng, [5, 16], BF16), normal(rng, [5], BF16)
    exact = torch_linear(x, w, b)
    bound = 16 * 2.0**-8 * (np.abs(f64(x)) @ np.abs(f64(w)).T + np.abs(f64(b)))
    for backend, (got,) in std.run("biased", [x, w, b]).items():
        assert got.dtype == BF16
        assert np.all(np.abs(f64(got) - exact) <= bound), backend


@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["f32", "bf16"])
def test_embedding_gathers_rows_exactly(std: StdCases, dtype: np.dtype) -> None:
    rng = np.random.default_rng(45)
    table = normal(rng, [10, 4], dtype)
    ids = rng.integers(0, 10, (2, 5)).astype(np.int32)
    ids[0, 0], ids[1, 4] = 0, 9  # both ends of the table
    std.expect("lookup", [ids, table], [f64(table)[ids]], rtol=0, atol=0)
    std.expect("lookup", [ids[1, 2], table], [f64(table)[ids[1, 2]]], rtol=0, atol=0)


def test_embedding_and_linear_blocks_bind_by_path() -> None:
    """`embed.weight`, `proj.weight` and the optional `proj.bias` (stdlib.md 2-3)."""
    model = StdBlock(BLOCKS, "Model")
    rng = np.random.default_rng(46)
    table, w, b = normal(rng, [12, 8]), normal(rng, [5, 8]), normal(rng, [5])
    ids = rng.integers(0, 12, (3, 4)).astype(np.int32)
    generics = {"V": 12, "H": 8, "O": 5, "T": "f32"}
    hidden = f64(table)[ids]
    without = {"embed.weight": table, "proj.weight": w}
    model.expect(generics, without, [ids], [hidden, torch_linear(hidden, w)], atol=1e-5)
    with_bias = {**without, "proj.bias": b}
    model.expect(generics, with_bias, [ids], [hidden, torch_linear(hidden, w, b)], atol=1e-5)
