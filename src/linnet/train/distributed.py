"""Data parallelism for `linnet.train`: the ranks, sums over them, gradients made whole.

Under `torchrun` (an initialised default process group) every rank trains on
its own batches. A step's loss is divided by the learned positions of all
ranks together (`all_sum`), so the gradients the ranks compute add up to the
gradient of the whole step: `sync_gradients` sums them, one all-reduce per
dtype over the flattened gradients. Parameters that FSDP2 (`fully_shard`)
shards are `DTensor`s whose gradients FSDP reduce-scatters itself during the
backward pass, averaging them; `sync_gradients` leaves them alone, and `train`
back-propagates the world size times the loss so that the average is the sum.
(FSDP's own `set_gradient_divide_factor(1.0)` needs a pre-multiplied sum,
which gloo lacks.) Without a process group, or with one
rank, nothing here communicates.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch import nn


def world() -> tuple[int, int]:
    """`(rank, world size)`; `(0, 1)` without an initialised process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def is_sharded(tensor: torch.Tensor) -> bool:
    """Whether `tensor` is a `DTensor` (a parameter or state sharded by FSDP2)."""
    from torch.distributed.tensor import DTensor

    return isinstance(tensor, DTensor)


def local(tensor: torch.Tensor) -> torch.Tensor:
    """This rank's part of a `DTensor`; any other tensor itself."""
    from torch.distributed.tensor import DTensor

    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def all_sum(values: Sequence[float], device: torch.device) -> list[float]:
    """`values` summed over the ranks (one all-reduce in f64)."""
    if world()[1] == 1:
        return [float(v) for v in values]
    tensor = torch.tensor(list(values), dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return [float(v) for v in tensor.tolist()]


def sync_gradients(parameters: Sequence[nn.Parameter]) -> None:
    """Sum the gradients of the unsharded `parameters` over the ranks.

    A rank whose step had no batch still takes part, with zero gradients.
    """
    if world()[1] == 1:
        return
    by_dtype: dict[tuple[torch.dtype, torch.device], list[nn.Parameter]] = {}
    for p in parameters:
        if is_sharded(p):
            continue
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        by_dtype.setdefault((p.grad.dtype, p.grad.device), []).append(p)
    for group in by_dtype.values():
        grads = [p.grad for p in group if p.grad is not None]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        offset = 0
        for g in grads:
            g.copy_(flat[offset : offset + g.numel()].view_as(g))
            offset += g.numel()
