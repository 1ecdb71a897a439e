"""`train`: supervised fine-tuning over packed batches, with accumulation, clipping,
a schedule, data parallelism, checkpoints and exact resume.

One step reads `accumulate` batches (per rank), and its loss is

    sum over those batches (and ranks) of loss_packed(batch) / learned

where `learned` is the sum of the weights of all of them: every learned token
of the step counts once, however the tokens fall into batches, micro-batches
or ranks. So `accumulate=2` over half batches, two ranks over half the data,
and one batch holding everything give the same loss and gradient (to
rounding). Each micro-batch's part is back-propagated as soon as it is
computed, so only one micro-batch's activations live at a time. Then the
gradients are summed over the ranks (`linnet.train.distributed`), clipped to
a global norm of `clip` (`None` or 0: not clipped), the optimizer steps, and
the schedule steps.

Checkpoints (`linnet.train.checkpoint`): with `checkpoint=FOLDER` a run first
restores the latest complete step saved there, skips the batches that step
had consumed (so pass the same batch stream from its start), and saves every
`checkpoint_every` steps and after the last one. A resumed run continues
exactly where the saved one stopped: the same parameters, optimizer state,
schedule, random state and data position, so its losses and parameters equal
an uninterrupted run's bit for bit. `steps` counts from the start of the run,
resumed or not.

The progress bar (`linnet.progress`, on rank 0) shows the loss, tokens per
second (positions processed, padding included) and the learning rate.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field

import torch
from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from linnet.errors import LinnetError
from linnet.progress import Progress
from linnet.train import checkpoint as checkpoints
from linnet.train.data import Batch
from linnet.train.distributed import all_sum, is_sharded, sync_gradients, world
from linnet.train.entries import model_device, packed_loss


@dataclass(frozen=True)
class Step:
    """One optimizer step: its number (from 1), loss, learned positions and positions
    (all ranks), the learning rate it used, the gradient norm before clipping
    (None when not clipped) and its wall time."""

    step: int
    loss: float
    learned: float
    tokens: int
    lr: float
    grad_norm: float | None
    seconds: float


@dataclass
class History:
    """The steps of a run (a resumed run includes the steps before its checkpoint)."""

    steps: list[Step] = field(default_factory=list)

    @property
    def losses(self) -> list[float]:
        return [s.loss for s in self.steps]

    def __len__(self) -> int:
        return len(self.steps)


def train(
    model: nn.Module,
    batches: Iterable[Batch],
    *,
    optimizer: Optimizer,
    steps: int | None = None,
    accumulate: int = 1,
    clip: float | None = 1.0,
    schedule: LRScheduler | None = None,
    checkpoint: str | os.PathLike[str] | None = None,
    checkpoint_every: int | None = None,
    on_step: Callable[[Step], None] | None = None,
) -> History:
    """Train `model` on `batches` (see the module docstring); the `History` of the run.

    `model` is a `LinnetModule` with a `loss_packed` entry (or a module with a
    `loss_packed` method); `batches` come from `linnet.train.pack`. The run ends
    after `steps` steps or when the batches run out. `on_step` is called with
    each `Step` after it (on every rank).
    """
    check_options(steps, accumulate, clip, checkpoint, checkpoint_every)
    rank, size = world()
    parameters = [p for p in model.parameters() if p.requires_grad]
    if not parameters:
        raise LinnetError("train: the model has no trainable parameters (load it trainable=True)")
    sharded = any(is_sharded(p) for p in parameters)
    device = model_device(model)
    history = History()
    done, consumed = 0, 0
    if checkpoint is not None:
        found = checkpoints.latest(checkpoint)
        if found is not None:
            progress = checkpoints.restore(found, model, optimizer, schedule)
            done, consumed = progress.step, progress.batches
            history = History([Step(**s) for s in progress.history])
    stream = skip_consumed(iter(batches), consumed)
    saved = done
    with Progress("training", total=steps if rank == 0 else None) as bar:
        bar.update(done)
        while steps is None or done < steps:
            group = list(itertools.islice(stream, accumulate))
            learned, tokens, idle = all_sum(
                [sum(b.learned for b in group), sum(b.size for b in group), float(not group)],
                device,
            )
            if idle:
                break
            started = time.perf_counter()
            # FSDP2 averages the ranks' gradients: back-propagate `size` times the loss
            scale = float(size) if sharded else 1.0
            loss, norm = _step(model, group, parameters, optimizer, learned, scale, clip, device)
            lr = float(optimizer.param_groups[0]["lr"])
            if schedule is not None:
                schedule.step()
            done += 1
            consumed += len(group)
            record = Step(done, loss, learned, int(tokens), lr, norm, time.perf_counter() - started)
            history.steps.append(record)
            bar.update()
            bar.describe(
                f"loss {loss:.4f}, {tokens / max(record.seconds, 1e-9):,.0f} tok/s, lr {lr:.3g}"
            )
            if checkpoint is not None and checkpoint_every and done % checkpoint_every == 0:
                _save(
                    checkpoint, model, optimizer, schedule, done, consumed, size, sharded, history
                )
                saved = done
            if on_step is not None:
                on_step(record)
    if checkpoint is not None and saved != done:
        _save(checkpoint, model, optimizer, schedule, done, consumed, size, sharded, history)
    return history


def _step(
    model: nn.Module,
    group: list[Batch],
    parameters: list[nn.Parameter],
    optimizer: Optimizer,
    learned: float,
    scale: float,
    clip: float | None,
    device: torch.device,
) -> tuple[float, float | None]:
    """One optimizer step over this rank's micro-batches; the step's loss (all ranks)
    and the gradient norm before clipping. The gradients are those of `scale` times
    the loss until the ranks' gradients are combined."""
    optimizer.zero_grad(set_to_none=True)
    divisor = learned if learned > 0 else 1.0
    total = torch.zeros((), dtype=torch.float64, device=device)
    for batch in group:
        part = packed_loss(model, batch) / divisor
        (part * scale if scale != 1.0 else part).backward()  # type: ignore[no-untyped-call]
        total += part.detach()
    sync_gradients(parameters)
    (loss,) = all_sum([float(total)], device)
    norm = None
    if clip:
        found = torch.nn.utils.clip_grad_norm_(parameters, clip)
        norm = float(found.full_tensor() if is_sharded(found) else found)  # type: ignore[attr-defined]
    optimizer.step()
    return loss, norm


def skip_consumed(stream: Iterator[Batch], count: int) -> Iterator[Batch]:
    """`stream` after its first `count` batches (those a restored checkpoint consumed)."""
    for index in range(count):
        if next(stream, None) is None:
            raise LinnetError(
                f"train: the checkpoint had consumed {count} batches, but the batches end "
                f"after {index}; resume with the same batches from their start"
            )
    return stream


def _save(
    root: str | os.PathLike[str],
    model: nn.Module,
    optimizer: Optimizer,
    schedule: LRScheduler | None,
    step: int,
    consumed: int,
    size: int,
    sharded: bool,
    history: History,
) -> None:
    progress = checkpoints.Progress(
        step=step,
        batches=consumed,
        world=size,
        sharded=sharded,
        history=[asdict(s) for s in history.steps],
    )
    checkpoints.save(root, model, optimizer, schedule, progress)


def check_options(
    steps: int | None,
    accumulate: int,
    clip: float | None,
    checkpoint: object,
    checkpoint_every: int | None,
) -> None:
    if steps is not None and steps < 0:
        raise LinnetError(f"train: steps must be >= 0, got {steps}")
    if accumulate < 1:
        raise LinnetError(f"train: accumulate must be >= 1, got {accumulate}")
    if clip is not None and clip < 0:
        raise LinnetError(f"train: clip must be >= 0 (or None), got {clip}")
    if checkpoint_every is not None:
        if checkpoint is None:
            raise LinnetError("train: checkpoint_every needs a checkpoint folder")
        if checkpoint_every < 1:
            raise LinnetError(f"train: checkpoint_every must be >= 1, got {checkpoint_every}")
