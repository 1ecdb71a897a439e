"""`write_slots` into a state runs in place on ONNX Runtime (`onnx.runtime.inplace`).

A block whose entry writes `value [M, H, N, D]` into cache rows `slots` at
positions `at..at + N`: the cache after each call equals a NumPy rendering of
stdlib.md's `write_slots` (listed rows get the span; slots outside `[0, B)`
write nowhere; other rows unchanged; `at` is checked into `0..S - N` on input), and no call
writes a second buffer (`swaps` stays 0, the state keeps its address).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from linnet.onnx.runtime.model import load_model

Array = np.ndarray[Any, Any]
B, H, S, D = 4, 2, 8, 3

SOURCE = """
module slots_case

use std.nn.cache::{write_slots}

pub block Cache<B: Dim, H: Dim, S: Dim, D: Dim> {
    state cache: Tensor[B, H, S, D; f32]

    pub entry put<M: Dim, N: Dim>(
        value: Tensor[M, H, N, D; f32],
        slots: Tensor[M; i32],
        at: i32,
    ) -> Tensor[M; f32]
    where
        M > 0,
        N > 0,
        N <= S
    {
        cache = write_slots(cache, value, slots, at)
        let total[m] = sum[h, n, d] value[m, h, n, d]
        return total
    }
}
"""


def written(cache: Array, value: Array, slots: Array, at: int) -> Array:
    """stdlib.md `write_slots`, one row and position at a time."""
    out = cache.copy()
    for m, slot in enumerate(slots):
        if not 0 <= slot < cache.shape[0]:
            continue
        out[slot, :, at : at + value.shape[2]] = value[m]
    return out


CALLS = [
    ([2, 0], 3, 0),  # two rows, a span from 0
    ([1, -1, 3], 2, 5),  # a padding member (-1 is no row)
    ([3, 4, 0], 4, 4),  # a slot past the rows; the span ends at the cache end
    ([0, 2, 1, 3], 1, 7),  # every row, the last position
    ([2, 3], 8, 0),  # whole rows, as decode_slots writes them
]


def test_write_slots_updates_the_state_in_place() -> None:
    model = load_model(SOURCE, generics={"B": B, "H": H, "S": S, "D": D})
    rng = np.random.default_rng(0)
    path = "cache"
    expected = np.zeros((B, H, S, D), np.float32)
    address = None
    for slots, span, at in CALLS:
        value = rng.standard_normal((len(slots), H, span, D)).astype(np.float32)
        model.run_entry("put", [value, np.array(slots, np.int32), np.int32(at)])
        expected = written(expected, value, np.array(slots), at)
        np.testing.assert_array_equal(model.state[path], expected)
        address = address or model.state_address(path)
        assert model.state_address(path) == address
    assert model.swaps == 0
    assert (expected != 0).sum() > 0
