"""`linnet.serve.sampling` and `linnet.serve.stops` on their own.

The sampler's draws follow `softmax(logits / temperature)` restricted to top-k
and top-p (empirical frequencies over 4000 seeds, within 4 standard errors);
torch and NumPy pick the same tokens from the same noise; the noise depends only
on `(seed, step)`. `split_stop` holds back a possible stop start and cuts at a stop.
"""

from __future__ import annotations

import numpy as np
import pytest

from linnet.serve.sampling import Choice, choose_numpy, gumbel_noise, top_indices
from linnet.serve.stops import split_stop

LOGITS = np.array([2.0, 1.5, 0.3, -0.2, 0.9], np.float32)
DRAWS = 4000


def frequencies(temperature: float, top_k: int = 0, top_p: float = 1.0) -> np.ndarray:
    choices = [
        Choice(temperature, top_k, top_p, gumbel_noise(seed, 0, LOGITS.size), None)
        for seed in range(DRAWS)
    ]
    picked = choose_numpy(np.tile(LOGITS, (DRAWS, 1)), choices)
    counts = np.bincount([t for t, _ in picked], minlength=LOGITS.size)
    return counts / DRAWS


def expected(temperature: float, keep: list[int]) -> np.ndarray:
    weights = np.zeros(LOGITS.size)
    weights[keep] = np.exp(LOGITS[keep] / temperature)
    return weights / weights.sum()


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p", "keep"),
    [
        (1.0, 0, 1.0, [0, 1, 2, 3, 4]),
        (0.5, 0, 1.0, [0, 1, 2, 3, 4]),
        (1.3, 2, 1.0, [0, 1]),
        (1.0, 0, 0.6, [0, 1]),  # p(0) = 0.40 < 0.6, with token 1: 0.64 >= 0.6
        (1.0, 3, 0.99, [0, 1, 4]),
    ],
)
def test_draws_follow_the_filtered_softmax(
    temperature: float, top_k: int, top_p: float, keep: list[int]
) -> None:
    want = expected(temperature, keep)
    got = frequencies(temperature, top_k, top_p)
    tolerance = 4 * np.sqrt(want * (1 - want) / DRAWS) + 1e-9
    assert (np.abs(got - want) <= tolerance).all(), (got, want)


def test_greedy_and_top_k_one_take_the_argmax() -> None:
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((6, 50)).astype(np.float32)
    greedy = choose_numpy(logits, [Choice(0.0, 0, 1.0, None, None)] * 6)
    top1 = choose_numpy(
        logits, [Choice(1.0, 1, 1.0, gumbel_noise(i, 0, 50), None) for i in range(6)]
    )
    assert [t for t, _ in greedy] == [t for t, _ in top1] == logits.argmax(1).tolist()


def test_torch_and_numpy_pick_the_same_tokens() -> None:
    torch = pytest.importorskip("torch")
    from linnet.serve.sampling import choose_torch

    rng = np.random.default_rng(1)
    logits = (2 * rng.standard_normal((24, 40))).astype(np.float32)
    choices = [
        Choice(
            [0.0, 0.7, 1.0, 1.5][i % 4],
            [0, 5, 1, 12][i % 4],
            [1.0, 0.9, 0.5][i % 3],
            gumbel_noise(i, 3, 40),
            [None, 0, 4][i % 3],
        )
        for i in range(24)
    ]
    a = choose_numpy(logits, choices)
    b = choose_torch(torch.from_numpy(logits), choices)
    assert [t for t, _ in a] == [t for t, _ in b]
    for (_, x), (_, y) in zip(a, b, strict=True):
        assert (x is None) == (y is None)
        if x is not None and y is not None:
            assert abs(x.logprob - y.logprob) < 1e-5
            assert [t for t, _ in x.top] == [t for t, _ in y.top]


def test_top_indices_equal_a_stable_descending_sort() -> None:
    """The partition finds what a full stable sort finds, ties (by index) included."""
    rng = np.random.default_rng(5)
    values = rng.integers(-3, 4, (7, 30)).astype(np.float32)  # many ties
    for count in (0, 1, 3, 10, 30):
        want = np.argsort(-values, axis=1, kind="stable")[:, :count]
        np.testing.assert_array_equal(top_indices(values, count), want)


def test_log_probs_of_a_row_do_not_depend_on_the_others_asking() -> None:
    """Rows that ask for log-probs get the log-softmax of their own logits and the top
    alternatives, whether or not the other rows ask."""
    rng = np.random.default_rng(6)
    logits = (3 * rng.standard_normal((5, 64))).astype(np.float32)
    asking = [Choice(0.0, 0, 1.0, None, 3)] * 5
    mixed = [Choice(0.0, 0, 1.0, None, 3 if i % 2 else None) for i in range(5)]
    every = choose_numpy(logits, asking)
    some = choose_numpy(logits, mixed)
    shifted = logits.astype(np.float64) - logits.max(1, keepdims=True)
    reference = shifted - np.log(np.exp(shifted).sum(1, keepdims=True))
    for i, ((token, a), (same, b)) in enumerate(zip(every, some, strict=True)):
        assert token == same == int(logits[i].argmax())
        assert a is not None and abs(a.logprob - reference[i, token]) < 1e-5
        assert [t for t, _ in a.top] == np.argsort(-reference[i])[:3].tolist()
        assert (b is None) == (i % 2 == 0)
        if b is not None:
            assert b == a


def test_noise_depends_on_seed_and_step_only() -> None:
    a = gumbel_noise(42, 3, 100)
    assert np.array_equal(a, gumbel_noise(42, 3, 100))
    assert not np.array_equal(a, gumbel_noise(42, 4, 100))
    assert not np.array_equal(a, gumbel_noise(43, 3, 100))
    assert np.isfinite(a).all()
    assert np.array_equal(gumbel_noise(-1, 0, 10), gumbel_noise(2**64 - 1, 0, 10))


def test_split_stop_holds_back_possible_starts() -> None:
    assert split_stop("Hello wor", ["world"]) == (6, False)  # "wor" may start "world"
    assert split_stop("Hello world!", ["world"]) == (6, True)
    assert split_stop("abc", ["x", "yz"]) == (3, False)
    assert split_stop("ab", ["xb", "bq"]) == (1, False)
    assert split_stop([1, 2, 3], [[3, 4]]) == (2, False)
    assert split_stop([1, 2, 3, 4, 5], [[3, 4], [2]]) == (1, True)
    assert split_stop([1, 2], []) == (2, False)
