"""Spelling distance and did-you-mean, for every stage that reports an unknown name.

Used by the checker (names, members, modules: `check.suggest`) and by weight
binding (a checkpoint key one edit away from a parameter path). No imports
from the rest of linnet, so any layer may use it.

A candidate is suggested when its edit distance (optimal string alignment:
insertions, deletions, substitutions and swaps of two neighbours, as rustc's
`edit_distance`) is at most a third of the longer name (at least 1, and less
than the name's length), or when both spell the same letters ignoring case
and underscores (`LayerNorm` for `layer_norm`). Ties go to the candidate that
comes first.

>>> closest("sotfmax", ["silu", "softmax"])
'softmax'
>>> edit_distance("fc1.wieght", "fc1.weight")
1
"""

from __future__ import annotations

from collections.abc import Iterable


def edit_distance(a: str, b: str) -> int:
    """Optimal string alignment distance (a swap of two neighbours counts once)."""
    if a == b:
        return 0
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cost = 0 if ca == cb else 1
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                current[j] = min(current[j], previous2[j - 2] + 1)
        previous2, previous = previous, current
    return previous[-1]


def _folded(name: str) -> str:
    return name.replace("_", "").lower()


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate `name` most likely misspells, or None when none is close."""
    folded = _folded(name)
    best: str | None = None
    best_key = (max(1, max(len(name), 3) // 3) + 1, 0)
    for candidate in candidates:
        if candidate == name:
            continue
        if _folded(candidate) == folded:
            return candidate
        if abs(len(candidate) - len(name)) > best_key[0]:
            continue
        distance = edit_distance(name, candidate)
        if distance >= len(name) or distance > max(1, max(len(name), len(candidate)) // 3):
            continue
        # Between equally distant names, a longer one wins: a dropped letter is
        # the likelier typo (`ES` means `EPS` sooner than `S`).
        key = (distance, 0 if len(candidate) > len(name) else 1)
        if key < best_key:
            best, best_key = candidate, key
    return best


def did_you_mean(name: str, candidates: Iterable[str], what: str = "") -> tuple[str, ...]:
    """`("did you mean `x`?",)` or `()`; `what` names the kind (`the method `x``)."""
    found = closest(name, candidates)
    if found is None:
        return ()
    return (f"did you mean {what + ' ' if what else ''}`{found}`?",)
