"""`EngineWorker` gathers the requests that arrive at an idle engine within its window
before the first step, so they are prefilled together (`linnet.serve.worker`)."""

from __future__ import annotations

import threading
import time

from linnet.serve import Request
from linnet.serve.worker import EngineWorker


class CountingEngine:
    """The part of `Engine` the worker drives: each step records how many requests it
    found waiting, then finishes them all."""

    def __init__(self, prefill_seconds: float) -> None:
        self.prefill_seconds = prefill_seconds
        self.waiting: list[Request] = []
        self.steps: list[int] = []
        self.stepped = threading.Event()

    @property
    def busy(self) -> bool:
        return bool(self.waiting)

    def submit(self, request: Request) -> int:
        self.waiting.append(request)
        return len(self.steps)

    def cancel(self, request_id: int) -> bool:
        return False

    def step(self) -> list[object]:
        self.steps.append(len(self.waiting))
        self.waiting.clear()
        self.stepped.set()
        return []


def run(engine: CountingEngine, gap: float, wait_for_step: bool) -> list[int]:
    worker = EngineWorker(engine, gather=1.0, max_gather=0.5)  # type: ignore[arg-type]
    worker.start()
    try:
        worker.submit(Request([1], max_new_tokens=1), lambda error: None)
        if wait_for_step:
            assert engine.stepped.wait(5)
        time.sleep(gap)
        worker.submit(Request([2], max_new_tokens=1), lambda error: None)
        deadline = time.monotonic() + 5
        while sum(engine.steps) < 2 and time.monotonic() < deadline:
            time.sleep(0.005)
    finally:
        worker.stop()
    return engine.steps


def test_requests_arriving_within_the_window_share_the_first_step() -> None:
    # window: min(0.5 s, 1.0 x the last prefill's 1 s); the second request comes 20 ms on
    assert run(CountingEngine(prefill_seconds=1.0), 0.02, wait_for_step=False) == [2]


def test_no_window_before_any_prefill_was_timed() -> None:
    # a window of 0: the first request is stepped before the second is submitted
    assert run(CountingEngine(prefill_seconds=0.0), 0.0, wait_for_step=True) == [1, 1]
