"""`linnet.train.Example` and `pack`: the batch layout, never splitting, pairs, errors."""

from __future__ import annotations

import doctest
import itertools

import numpy as np
import pytest

import linnet.train
import linnet.train.data
from linnet.errors import LinnetError
from linnet.train import Example, pack


def test_doctests() -> None:
    for module in (linnet.train, linnet.train.data):
        result = doctest.testmod(module)
        assert result.failed == 0 and result.attempted > 0, module.__name__


def test_layout_of_a_batch() -> None:
    first = Example([10, 11, 12, 13], learned=[False, True, False, True])
    second = Example.prompted([20, 21], [22])
    (batch,) = pack([first, second], 10)
    assert batch.tokens.tolist() == [10, 11, 12, 13, 20, 21, 22, 0, 0, 0]
    assert batch.positions.tolist() == [0, 1, 2, 3, 0, 1, 2, 0, 0, 0]
    assert batch.segments.tolist() == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]
    # position p predicts the next token of its example, weighted by whether it is learned
    assert batch.targets.tolist() == [11, 12, 13, 0, 21, 22, 0, 0, 0, 0]
    assert batch.weights.tolist() == [1, 0, 1, 0, 0, 1, 0, 0, 0, 0]
    assert batch.spans == ((0, 4), (4, 3)) and batch.examples == (0, 1)
    assert batch.learned == 3.0 and batch.used == 7 and batch.size == 10
    assert [str(t.dtype) for t in batch.inputs()] == [
        "torch.int32", "torch.int32", "torch.int32", "torch.int64", "torch.float32",
    ]  # fmt: skip


def test_examples_are_never_split_and_batches_have_exact_size() -> None:
    rng = np.random.default_rng(0)
    data = [Example(rng.integers(0, 50, int(n))) for n in rng.integers(1, 9, 40)]
    batches = list(pack(data, 12))
    assert all(b.size == 12 for b in batches)
    seen = [i for b in batches for i in b.examples]
    assert seen == list(range(40))  # every example once, in order
    for b in batches:
        for (start, length), index in zip(b.spans, b.examples, strict=True):
            assert b.tokens[start : start + length].tolist() == data[index].tokens.tolist()
            assert set(b.segments[start : start + length].tolist()) == {b.examples.index(index)}
    # a batch ends only when the next example would not fit
    for b, following in itertools.pairwise(batches):
        assert b.used + len(data[following.examples[0]]) > 12


def test_together_keeps_groups_in_one_batch() -> None:
    lengths = [3, 2, 4, 4, 2, 2, 5, 1]
    data = [Example(np.arange(n) + 1) for n in lengths]
    batches = list(pack(data, 8, together=2))
    for b in batches:
        assert len(b.examples) % 2 == 0
        assert all(b.examples[i] % 2 == 0 for i in range(0, len(b.examples), 2))
    assert [i for b in batches for i in b.examples] == list(range(8))
    pairs = [Example(np.arange(n) + 1) for n in [3, 2, 2, 4]]
    # alone, the third example fits after the first two; as a pair with the fourth it does not
    assert next(pack(pairs, 8)).examples == (0, 1, 2)
    assert [b.examples for b in pack(pairs, 8, together=2)] == [(0, 1), (2, 3)]


def test_max_length_truncates_and_long_examples_are_errors() -> None:
    data = [Example([1, 2, 3, 4, 5, 6]), Example([7, 8])]
    with pytest.raises(LinnetError, match="example 0 has 6 tokens, more than a batch of 4"):
        list(pack(data, 4))
    batches = list(pack(data, 4, max_length=3))
    assert batches[0].tokens.tolist() == [1, 2, 3, 0] and batches[0].spans == ((0, 3),)
    with pytest.raises(LinnetError, match=r"max_length must be in 1\.\.4"):
        list(pack(data, 4, max_length=5))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Example([]), "tokens is empty"),
        (lambda: Example([1, -2]), "must be >= 0"),
        (lambda: Example([1.5, 2.0]), "sequence of ints"),
        (lambda: Example([1, 2], learned=[True]), "2 bools, one per token"),
        (lambda: list(pack([Example([1])] * 3, 4, together=2)), "the last 1 have no partner"),
        (lambda: list(pack([[1, 2]], 4)), "item 0 is a list, not a linnet.train.Example"),
        (lambda: list(pack([], 0)), "tokens must be positive"),
    ],
)
def test_bad_input_is_a_clear_error(make: object, message: str) -> None:
    with pytest.raises(LinnetError, match=message):
        make()  # type: ignore[operator]
