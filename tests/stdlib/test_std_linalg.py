"""`std.linalg` (stdlib.md 18) against NumPy f64, on float and integer tensors."""

from __future__ import annotations

import numpy as np
import pytest
from stdlib_support import StdCases, f64, normal

SOURCE = """module cases

use std.linalg::{batched_matmul, dot, matmul, outer, transpose}

pub entry run_dot<N: Dim, T: Numeric>(a: Tensor[N; T], b: Tensor[N; T]) -> T {
    return dot(a, b)
}

pub entry run_outer<M: Dim, N: Dim, T: Numeric>(
    a: Tensor[M; T],
    b: Tensor[N; T],
) -> Tensor[M, N; T] {
    return outer(a, b)
}

pub entry run_matmul<M: Dim, K: Dim, N: Dim, T: Numeric>(
    a: Tensor[M, K; T],
    b: Tensor[K, N; T],
) -> Tensor[M, N; T] {
    return matmul(a, b)
}

pub entry run_batched<*B: Shape, M: Dim, K: Dim, N: Dim, T: Numeric>(
    a: Tensor[*B, M, K; T],
    b: Tensor[*B, K, N; T],
) -> Tensor[*B, M, N; T] {
    return batched_matmul(a, b)
}

pub entry run_transpose<M: Dim, N: Dim, T: DType>(x: Tensor[M, N; T]) -> Tensor[N, M; T] {
    return transpose(x)
}
"""


@pytest.fixture(scope="module")
def std() -> StdCases:
    return StdCases(SOURCE)


def test_float_products(std: StdCases) -> None:
    rng = np.random.default_rng(10)
    a, b = normal(rng, [13]), normal(rng, [13])
    std.expect("run_dot", [a, b], [f64(a) @ f64(b)], atol=1e-5)
    c = normal(rng, [5])
    std.expect("run_outer", [a, c], [np.outer(f64(a), f64(c))])
    x, y = normal(rng, [4, 9]), normal(rng, [9, 3])
    std.expect("run_matmul", [x, y], [f64(x) @ f64(y)], atol=1e-5)
    x, y = normal(rng, [2, 3, 4, 6]), normal(rng, [2, 3, 6, 5])
    std.expect("run_batched", [x, y], [f64(x) @ f64(y)], atol=1e-5)
    # no batch axes at all: *B binds to the empty shape
    x, y = normal(rng, [3, 4]), normal(rng, [4, 2])
    std.expect("run_batched", [x, y], [f64(x) @ f64(y)], atol=1e-5)


def test_integer_products_are_exact(std: StdCases) -> None:
    rng = np.random.default_rng(11)
    a = rng.integers(-50, 50, 17).astype(np.int32)
    b = rng.integers(-50, 50, 17).astype(np.int32)
    std.expect("run_dot", [a, b], [np.int64(a) @ np.int64(b)])
    x = rng.integers(-9, 9, (4, 7)).astype(np.int64)
    y = rng.integers(-9, 9, (7, 3)).astype(np.int64)
    std.expect("run_matmul", [x, y], [x @ y])
    std.expect("run_outer", [x[0], y[:, 1]], [np.outer(x[0], y[:, 1])])
    x = rng.integers(-9, 9, (3, 2, 5)).astype(np.int32)
    y = rng.integers(-9, 9, (3, 5, 4)).astype(np.int32)
    std.expect("run_batched", [x, y], [np.int64(x) @ np.int64(y)])


def test_transpose_any_dtype(std: StdCases) -> None:
    rng = np.random.default_rng(12)
    x = normal(rng, [3, 5])
    std.expect("run_transpose", [x], [f64(x).T], rtol=0, atol=0)
    flags = rng.random((2, 4)) < 0.5
    std.expect("run_transpose", [flags], [flags.T])
    ints = rng.integers(0, 255, (4, 6)).astype(np.uint8)
    std.expect("run_transpose", [ints], [ints.T])
