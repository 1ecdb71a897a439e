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


SHARDED_MLP = """module examples.sharded

use std.nn.parallel::{all_reduce}

pub block ShardedMlp<H: Dim, Inner: Dim, Shards: Dim = 1, T: Float = f32>
where
    Shards > 0,
    Inner % Shards == 0
{
    param up: Tensor[Inner / Shards, H; T]
    param down: Tensor[H, Inner / Shards; T]
    param gain: Tensor[H; T]

    pub entry forward<B: Dim>(x: Tensor[B, H; T]) -> Tensor[B, H; T] {
        let hidden[b, k] = sum[i] x[b, i] * up[k, i] * gain[i]
        let active = max(hidden, 0.0)
        let partial[b, o] = sum[k] active[b, k] * down[o, k]
        return all_reduce(partial)
    }
}
"""


def test_manifest_of_a_shards_model_for_one_and_two_shards() -> None:
    """language-extensions 10 (distributed): the manifest names `/ Shards`; bound for 1 and 2
    shards, each split weight differs from the one-shard shape along one axis, by 2 (7.1)."""
    from linnet.ir.bind import bind
    from linnet.ir.parallel import split_axis
    from linnet.pipeline import check_program

    program = check_program(SHARDED_MLP)
    (block,) = program.manifest(program.graph.roots[0])
    assert block.generics == ["H", "Inner", "Shards", "T"]
    shapes = {e.path: e.shape for e in block.entries}
    assert shapes == {"up": ["Inner / Shards", "H"], "down": ["H", "Inner / Shards"], "gain": ["H"]}
    sizes = {"H": 4, "Inner": 6}
    one, two = bind(program, generics=sizes), bind(program, generics={**sizes, "Shards": 2})
    bound = {p: (one.tensors[p].type.shape, two.tensors[p].type.shape) for p in shapes}
    assert bound == {"up": ((6, 4), (3, 4)), "down": ((4, 6), (4, 3)), "gain": ((4,), (4,))}
    assert {p: split_axis(p, *bound[p], 2) for p in bound} == {"up": 0, "down": 1, "gain": None}


def test_a_weight_split_along_two_axes_is_refused() -> None:
    from linnet.errors import LinnetError
    from linnet.ir.parallel import split_axis

    with pytest.raises(LinnetError, match=r"`w` is \[6, 4\] for one shard and \[3, 2\] for 2"):
        split_axis("w", (6, 4), (3, 2), 2)
    with pytest.raises(LinnetError, match="by the shard count"):
        split_axis("w", (6, 4), (2, 4), 2)
