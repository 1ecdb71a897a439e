"""Progress bars for the steps that may take over a second: one module, one policy.

Exports, saves, weight conversion, imports of large models and training call
`track` (an iterable) or `Progress` (a counter, of items or bytes, with an
optional status text). A bar is drawn by `tqdm` on stderr when all of these hold: stderr is a terminal, the
environment does not say `LINNET_PROGRESS=0`, and tqdm is installed (the
`progress` extra; the compiler core does not need it). `LINNET_PROGRESS=1`
draws bars even when stderr is not a terminal. A bar appears only once its
step has run for `DELAY` seconds, so quick steps print nothing at all.

>>> total = sum(track(range(3), "counting"))  # silent under doctest: no terminal
>>> total
3
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import Any, TypeVar

T = TypeVar("T")

ENV = "LINNET_PROGRESS"
DELAY = 1.0
"""Seconds a step runs before its bar appears."""


def enabled() -> bool:
    """Whether bars are drawn now (see the module docstring)."""
    setting = os.environ.get(ENV, "").strip()
    if setting == "0":
        return False
    if setting != "1":
        isatty = getattr(sys.stderr, "isatty", None)
        if isatty is None or not isatty():
            return False
    try:
        import tqdm  # type: ignore[import-untyped]  # noqa: F401
    except ImportError:
        return False
    return True


class Progress:
    """A bar over `total` units (None: unknown); `update(n)` advances it.

    `unit="B"` counts bytes (shown scaled: kB, MB, GB). Without a terminal
    (`enabled`) every method does nothing. Use it as a context manager.
    """

    def __init__(self, description: str, total: float | None = None, unit: str = "it") -> None:
        self._bar: Any = None
        if enabled():
            from tqdm import tqdm

            self._bar = tqdm(
                total=total,
                desc=description,
                unit=unit,
                unit_scale=unit == "B",
                unit_divisor=1024 if unit == "B" else 1000,
                delay=DELAY,
                leave=False,
                file=sys.stderr,
                dynamic_ncols=True,
            )

    @property
    def active(self) -> bool:
        return self._bar is not None

    def update(self, n: float = 1) -> None:
        if self._bar is not None:
            self._bar.update(n)

    def describe(self, text: str) -> None:
        """Show `text` after the counts (a training step's loss and rate)."""
        if self._bar is not None:
            self._bar.set_postfix_str(text)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


def track(
    items: Iterable[T], description: str, total: int | None = None, unit: str = "it"
) -> Iterator[T]:
    """`items`, advancing a bar by one per item (`total` defaults to `len(items)`)."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with Progress(description, total, unit) as bar:
        for item in items:
            yield item
            bar.update()
