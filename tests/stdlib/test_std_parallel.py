"""`std.nn.parallel` (stdlib.md 17): the one-shard bodies on every backend StdCases runs.

The multi-process meaning (collectives over torchrun ranks) is tested in
tests/torch/test_torch_parallel.py; here the bodies: identity for `all_reduce` and
`shared`, and `all_gather` repeating its block `Shards` times along the last axis.
"""

from __future__ import annotations

import numpy as np
import pytest
from stdlib_support import StdCases, normal

SOURCE = """module cases

use std.nn.parallel::{all_gather, all_reduce, shared}

pub entry reduce<*S: Shape, T: Float>(x: Tensor[*S; T]) -> Tensor[*S; T] {
    return all_reduce(shared(x))
}

pub entry gathered<R: Dim, N: Dim, T: Float>(x: Tensor[R, N; T]) -> Tensor[R, 3 * N; T] {
    return all_gather<R, N, 3, T>(x)
}
"""


@pytest.fixture(scope="module")
def std() -> StdCases:
    return StdCases(SOURCE)


@pytest.mark.parametrize("shape", [(5,), (2, 3, 4)])
def test_one_shard_reduce_and_shared_are_the_identity(
    std: StdCases, shape: tuple[int, ...]
) -> None:
    x = normal(np.random.default_rng(70), shape)
    std.expect("reduce", [x], [x.astype(np.float64)])


def test_one_process_gather_repeats_the_block(std: StdCases) -> None:
    x = normal(np.random.default_rng(71), (4, 2))
    std.expect("gathered", [x], [np.concatenate([x, x, x], axis=-1).astype(np.float64)])
