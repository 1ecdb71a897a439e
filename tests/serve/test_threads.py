"""`linnet.serve.threads.ThreadChooser` and the torch engine's thread counts.

The chooser, on a fake clock whose call costs depend on the thread count that
torch is set to during the call: it measures each count, runs the faster, moves to
the other within a few calls when a load makes the chosen one slow, comes back
when the load goes, and leaves the caller's count as it was. On the tiny Llama:
1 and 2 threads give bitwise-equal logits for prefill and decode, and engines
fixed at 1, fixed at 2 and choosing give transformers' greedy tokens; `threads=`
is checked.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import decoder_cases  # noqa: E402

import linnet.torch as lt  # noqa: E402
from linnet.errors import LinnetError  # noqa: E402
from linnet.onnx.runtime.model import load_model  # noqa: E402
from linnet.serve import Engine, Request  # noqa: E402
from linnet.serve.threads import ThreadChooser  # noqa: E402

ROWS, MAX_SEQ = 4, 32


@pytest.fixture
def two_threads() -> Iterator[None]:
    """Two torch threads for the test (the package's conftest sets one)."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


class Costs:
    """A fake clock and a call whose cost depends on torch's thread count during it."""

    def __init__(self, seconds: dict[int, float]) -> None:
        self.now = 0.0
        self.seconds = seconds
        self.used: list[int] = []

    def clock(self) -> float:
        return self.now

    def run(self) -> int:
        threads = torch.get_num_threads()
        self.used.append(threads)
        self.now += self.seconds[threads]
        return threads


def test_the_chooser_runs_the_faster_count_and_follows_a_load(two_threads: None) -> None:
    costs = Costs({1: 0.015, 2: 0.010})  # an idle host: 2 threads are faster
    chooser = ThreadChooser((1, 2), clock=costs.clock)
    for _ in range(300):
        chooser.call("decode", costs.run)
        assert torch.get_num_threads() == 2  # the caller's count, put back
    assert costs.used[:3] == [2, 1, 2]  # untimed first call (lowering), then each timed once
    # retries after 30 calls or more (1.5 times slower: 5% of the time), then ever rarer
    assert costs.used[3:].count(1) <= 5
    assert chooser.summary() == {1: 0, 2: 1}

    costs.seconds = {1: 0.016, 2: 0.300}  # another process takes a core
    costs.used.clear()
    for _ in range(300):
        chooser.call("decode", costs.run)
    assert costs.used[:2] == [2, 1] and chooser.summary() == {1: 1, 2: 0}
    # the call that showed the load, then at most one retry (20 times slower: one call in
    # 375 or more, so retries cost under 5% of the time)
    assert costs.used.count(2) <= 2

    costs.seconds = {1: 0.015, 2: 0.010}  # the load is gone
    costs.used.clear()
    for _ in range(900):
        chooser.call("decode", costs.run)
    assert chooser.summary() == {1: 0, 2: 1}
    assert costs.used[-100:] == [2] * 100

    chooser.call("prefill", costs.run)  # another shape starts over, untimed
    assert chooser.summary() == {1: 0, 2: 2}


def test_a_fixed_count_is_always_used(two_threads: None) -> None:
    costs = Costs({1: 0.001, 2: 0.5})
    chooser = ThreadChooser((2,), clock=costs.clock)
    for _ in range(10):
        chooser.call("decode", costs.run)
    assert costs.used == [2] * 10
    with pytest.raises(LinnetError, match="at least 1"):
        ThreadChooser((0, 2))


def test_thread_counts_give_equal_logits_and_greedy_tokens(two_threads: None) -> None:
    llama = decoder_cases.llama()
    generics = llama.generics(ROWS, MAX_SEQ)
    prompts = decoder_cases.prompts(llama.vocab, [5, 9, 7, 12, 3], seed=6)
    expected = [llama.generate(p, 5) for p in prompts]
    tokens = np.zeros((ROWS, 16), np.int32)
    for row, prompt in enumerate(prompts[:ROWS]):
        tokens[row, : len(prompt)] = prompt
    lengths = np.array([len(p) for p in prompts[:ROWS]], np.int32)
    logits = {}
    for threads in (1, 2):
        engine = Engine(lt.load(llama.source, generics=generics, weights=llama.weights,
                                compile=True), threads=threads)  # fmt: skip
        decoder = engine.decoder
        first = decoder.prefill(tokens, np.arange(ROWS, dtype=np.int32), lengths)
        steps = [first.clone()]
        for members in (1, 2, 4):
            step = decoder.decode_slots(tokens[:members, :1].copy(),
                                        np.arange(members, dtype=np.int32), lengths[:members])  # fmt: skip
            steps.append(step.clone())
        logits[threads] = steps
        engine.reset()
        completions, _ = engine.run([Request(p, max_new_tokens=5, temperature=0) for p in prompts])
        assert [c.tokens for c in completions] == expected
        assert torch.get_num_threads() == 2
    assert all(torch.equal(a, b) for a, b in zip(logits[1], logits[2], strict=True))

    chooser = Engine(lt.load(llama.source, generics=generics, weights=llama.weights))
    assert chooser.decoder.chooser is not None and chooser.decoder.chooser.candidates == (1, 2)
    assert "1 or 2 threads" in chooser.decoder.description
    completions, _ = chooser.run([Request(p, max_new_tokens=5, temperature=0) for p in prompts])
    assert [c.tokens for c in completions] == expected


def test_threads_is_checked() -> None:
    llama = decoder_cases.llama()
    generics = llama.generics(ROWS, MAX_SEQ)
    on_torch = lt.load(llama.source, generics=generics, weights=llama.weights)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(LinnetError, match="threads= must be a count"):
            Engine(on_torch, threads=bad)  # type: ignore[arg-type]
    on_onnx = load_model(llama.source, generics=generics, weights=llama.weights)
    with pytest.raises(LinnetError, match="intra-op thread count"):
        Engine(on_onnx, threads=2)
