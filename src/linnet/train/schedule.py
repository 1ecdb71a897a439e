"""Learning-rate schedules whose whole state is plain numbers (checkpoints store it as JSON).

`cosine_schedule(optimizer, warmup, total, floor=0.1)`: the learning rate of
step `s` (counted from 0) is the optimizer's base rate times

- `(s + 1) / warmup` during the `warmup` first steps (never 0: the first step learns);
- then `floor + (1 - floor) * (1 + cos(pi * t)) / 2` with
  `t = (s - warmup) / (total - warmup)`, from 1 down to `floor` at step `total`;
- `floor` after `total`.

`linnet.train.train` steps the schedule after each optimizer step.
"""

from __future__ import annotations

import math

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from linnet.errors import LinnetError


class CosineSchedule(LRScheduler):
    """Linear warmup, then a cosine down to `floor` times the base rate (module docstring)."""

    def __init__(self, optimizer: Optimizer, warmup: int, total: int, floor: float = 0.1) -> None:
        if warmup < 0 or total <= 0 or warmup > total:
            raise LinnetError(
                f"cosine_schedule: needs 0 <= warmup <= total and total > 0, "
                f"got warmup={warmup}, total={total}"
            )
        if not 0.0 <= floor <= 1.0:
            raise LinnetError(f"cosine_schedule: floor must be in [0, 1], got {floor}")
        self.warmup = warmup
        self.total = total
        self.floor = floor
        super().__init__(optimizer)

    def factor(self, step: int) -> float:
        """The multiplier of the base rate at step `step` (from 0)."""
        if step < self.warmup:
            return (step + 1) / self.warmup
        if step >= self.total:
            return self.floor
        span = max(self.total - self.warmup, 1)
        t = (step - self.warmup) / span
        return self.floor + (1.0 - self.floor) * 0.5 * (1.0 + math.cos(math.pi * t))

    def get_lr(self) -> list[float]:  # type: ignore[override]
        return [float(base) * self.factor(self.last_epoch) for base in self.base_lrs]


def cosine_schedule(
    optimizer: Optimizer, warmup: int, total: int, floor: float = 0.1
) -> CosineSchedule:
    """A `CosineSchedule` over `optimizer` (see the module docstring)."""
    return CosineSchedule(optimizer, warmup, total, floor)
