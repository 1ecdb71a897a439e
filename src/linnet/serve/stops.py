"""Stop sequences that are never released past: how much of the pending tail is safe.

Stage: shared by the engine (stop sequences of token ids) and the server (stop
strings of text). Tokens or characters arrive one piece at a time; a piece that
could be the start of a stop sequence is held back until the next pieces show
whether the stop follows. `split_stop` works on any sequence type (lists of ids
or `str`), so both layers use one rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

S = TypeVar("S", bound=Sequence[object])


def find(held: Sequence[object], stop: Sequence[object]) -> int:
    """The first index where `stop` occurs in `held`, or -1."""
    if isinstance(held, str) and isinstance(stop, str):
        return held.find(stop)
    n = len(stop)
    for i in range(len(held) - n + 1):
        if held[i : i + n] == stop:
            return i
    return -1


def split_stop(held: S, stops: Sequence[S]) -> tuple[int, bool]:
    """`(n, stopped)`: with `stopped`, `held[:n]` is what precedes the earliest stop
    sequence and nothing after it may be released; otherwise `held[:n]` is safe to
    release and `held[n:]` is a proper prefix of some stop sequence, kept back."""
    found = [i for i in (find(held, s) for s in stops) if i >= 0]
    if found:
        return min(found), True
    keep = 0
    for stop in stops:
        for k in range(min(len(stop) - 1, len(held)), keep, -1):
            if held[len(held) - k :] == stop[:k]:
                keep = k
                break
    return len(held) - keep, False
