"""`ThreadChooser`: how many intra-op threads each CPU call of a torch engine gets, by measuring.

Stage: inside `TorchDecoder` (issue 14), around every entry call on the CPU.

PyTorch's CPU kernels (oneDNN's linear among them) split an op statically over
the process's OpenMP threads and wait at a barrier for the last one. When another
process takes a core, the thread sharing that core is preempted for a scheduler
slice at every such op, and a decode step of some thirty products waits that long
thirty times: on 2 cores with one busy process, the 4-layer H=512 Llama of
`bench/serve.py` fell from about 75 to 3-11 tokens/s with 2 threads, where 1
thread kept 61-76 (its lm_head alone: 8.3-8.8 ms with 2 threads, 4.7-5.3 with 1).
With no other process busy, 2 threads are faster (that step: 10-13 ms against 15-18
ms; a 32-row step 41-63 against 60-84). A serving process cannot know which host it
gets, and the load changes while it runs, so the engine measures instead: with a
busy loop on one of the 2 cores, `Engine.run` of one 64-token request went from
3.2-3.5 tokens/s (2 threads, as before) to 32-39 (chosen).

For each call shape (the entry and its inputs' shapes) the chooser times every
candidate count (1 and the thread's count when the engine was made) once, after
an untimed first call (which lowers the entry), and then runs the faster. It
retries the other after a number of calls of that shape that starts at
`first_retry` and doubles, up to `max_retry`, each time the retry loses, and is
never so short that retries would cost more than `retry_share` of the time (a
retry of a count 20 times slower waits 400 calls at the default 5%); and it
retries at once when the chosen count's recent time (a moving average) exceeds
the other's latest by half (`EARLY_RETRY`), which is how a load that appears is
followed within a few calls.

The count does not change the results on these kernels: oneDNN's products split
their output columns, not their sums, and the step's other ops are too small to
split (the Llama example's entries give bitwise-equal logits with 1 and 2 threads,
`tests/serve/test_threads.py`). Each call sets the count (`torch.set_num_threads`,
OpenMP's count for the calling thread) and puts the previous one back afterwards, so
a caller's own setting is left as it was.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from linnet.errors import LinnetError

Result = TypeVar("Result")
FIRST_RETRY = 8
MAX_RETRY = 512
RETRY_SHARE = 0.05
SMOOTHING = 0.25
"""The weight of the latest call in the chosen count's moving average."""
EARLY_RETRY = 1.5
"""Retry the other count at once when the chosen one's average exceeds its latest time by
this factor (a load that appeared), not on every slow call (noise)."""


@dataclass
class _Shape:
    """What the chooser knows about one call shape."""

    chosen: int
    seconds: dict[int, float] = field(default_factory=dict)
    """The chosen count's moving average; another count's latest time."""
    calls: int = 0
    retry_at: int = 0
    interval: int = FIRST_RETRY


class ThreadChooser:
    """Picks each call's thread count among `candidates` (see the module docstring);
    one candidate: every call runs with it, untimed."""

    def __init__(
        self,
        candidates: Sequence[int],
        *,
        first_retry: int = FIRST_RETRY,
        max_retry: int = MAX_RETRY,
        retry_share: float = RETRY_SHARE,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        counts = sorted(set(candidates))
        if not counts or counts[0] < 1:
            raise LinnetError(f"threads: the candidate counts must be at least 1, got {candidates}")
        self.candidates = tuple(counts)
        self.first_retry = first_retry
        self.max_retry = max_retry
        self.retry_share = retry_share
        self.clock = clock
        self.shapes: dict[Hashable, _Shape] = {}

    def choose(self, key: Hashable) -> int | None:
        """The count for the next call of shape `key`; None for an untimed call (the
        shape's first, which lowers the entry; it runs with the most threads)."""
        shape = self.shapes.get(key)
        if shape is None:
            self.shapes[key] = _Shape(chosen=self.candidates[-1])
            return None
        for count in self.candidates:
            if count not in shape.seconds:
                return count
        if len(self.candidates) == 1:
            return shape.chosen
        other = min((c for c in self.candidates if c != shape.chosen),
                    key=lambda c: shape.seconds[c])  # fmt: skip
        slower = shape.seconds[shape.chosen] > EARLY_RETRY * shape.seconds[other]
        return other if slower or shape.calls >= shape.retry_at else shape.chosen

    def record(self, key: Hashable, threads: int, seconds: float) -> None:
        """Note that a call of shape `key` with `threads` threads took `seconds`."""
        shape = self.shapes[key]
        shape.calls += 1
        measuring = len(shape.seconds) < len(self.candidates)
        previous = shape.seconds.get(threads)
        if threads == shape.chosen and previous is not None:
            shape.seconds[threads] = previous + SMOOTHING * (seconds - previous)
            return
        shape.seconds[threads] = seconds
        if measuring:
            if len(shape.seconds) == len(self.candidates):  # each count timed once
                shape.chosen = min(self.candidates, key=lambda c: shape.seconds[c])
                self._schedule(shape)
            return
        if seconds < shape.seconds[shape.chosen]:  # a retry that won
            shape.chosen = threads
            shape.interval = self.first_retry
        else:
            shape.interval = min(2 * shape.interval, self.max_retry)
        self._schedule(shape)

    def _schedule(self, shape: _Shape) -> None:
        """Set when the other counts are retried (see the module docstring)."""
        chosen = shape.seconds[shape.chosen]
        slowest = max(shape.seconds.values())
        affordable = slowest / max(chosen, 1e-9) / self.retry_share
        shape.retry_at = shape.calls + max(shape.interval, min(int(affordable), 100_000))

    def call(self, key: Hashable, run: Callable[[], Result]) -> Result:
        """`run()` with the thread count chosen for shape `key`, timed."""
        import torch

        threads = self.choose(key)
        previous = torch.get_num_threads()
        wanted = self.candidates[-1] if threads is None else threads
        if wanted != previous:
            torch.set_num_threads(wanted)
        try:
            start = self.clock()
            result = run()
            elapsed = self.clock() - start
        finally:
            if wanted != previous:
                torch.set_num_threads(previous)
        if threads is not None:
            self.record(key, threads, elapsed)
        return result

    def summary(self) -> dict[int, int]:
        """How many call shapes run with each count now."""
        counts = dict.fromkeys(self.candidates, 0)
        for shape in self.shapes.values():
            counts[shape.chosen] += 1
        return counts
