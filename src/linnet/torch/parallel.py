"""Tensor parallelism on PyTorch: `std.nn.parallel` as collectives, weights sliced per rank.

Stage: backend (language-extensions section 7, stdlib.md section 17). A model that
can be split declares a root generic `Shards: Dim` and sizes its split weights by
`/ Shards`. `linnet.torch.load(..., tensor_parallel=True)` under an initialised
`torch.distributed` process group (torchrun, `init_process_group`):

- binds `Shards` to the world size;
- reads the checkpoint of the whole (one-shard) model and gives rank `p` the
  `p`-th of `Shards` equal slices of every weight whose shape differs from the
  one-shard shape, along the one axis that differs (7.1), and the whole of
  every other weight (`shard_weights`);
- marks the entry's `std.nn.parallel` calls (`mark_collectives`), which then run
  as collectives over the default process group, with the conjugate gradients
  of 7.3: `all_reduce` sums over the ranks (gradient: the identity), `shared` is
  the identity (gradient: summed over the ranks), `all_gather` puts the ranks'
  `[R, N]` blocks side by side (gradient: each rank's own slice).

Without `tensor_parallel` the calls run their bodies, the one-shard meaning, even
under torchrun: a data-parallel job must not sum activations across its ranks.
A model bound with `Shards > 1` and no process group runs the bodies too, which
7.3 says a loader warns about (`warn_unsharded`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from linnet.errors import LinnetError
from linnet.ir import parallel as shards
from linnet.ir.bind import BoundModel
from linnet.ir.core import Op
from linnet.ir.parallel import COLLECTIVES, MARK, SHARDS, SHARED, mark_collectives

__all__ = [
    "COLLECTIVES",
    "MARK",
    "SHARDS",
    "SHARED",
    "all_gather",
    "all_reduce",
    "find_collective",
    "mark_collectives",
    "process_group",
    "shard_generics",
    "shard_weights",
    "shared",
    "warn_unsharded",
]


def process_group() -> tuple[int, int]:
    """`(rank, world size)` of the default process group; a LinnetError without one."""
    if not (dist.is_available() and dist.is_initialized()):
        raise LinnetError(
            "tensor_parallel=True needs torch.distributed initialised "
            "(run under torchrun, or call torch.distributed.init_process_group first)"
        )
    return dist.get_rank(), dist.get_world_size()


def shard_generics(
    model_generics: Sequence[str], generics: Mapping[str, object], world: int
) -> dict[str, object]:
    """`generics` with `Shards` bound to the world size (the root must declare it)."""
    return shards.shard_generics(
        model_generics,
        generics,
        world,
        option="tensor_parallel=True",
        counted=f"the process group has {world} ranks",
    )


def shard_weights(
    whole: BoundModel,
    sharded: BoundModel,
    arrays: Mapping[str, np.ndarray[Any, Any]],
    rank: int,
    world: int,
) -> dict[str, np.ndarray[Any, Any]]:
    """Rank `rank`'s weights: the `rank`-th slice of each weight the shard count splits."""
    out: dict[str, np.ndarray[Any, Any]] = {}
    for path, array in arrays.items():
        full = whole.tensors[path].type.shape
        mine = sharded.tensors[path].type.shape
        axis = shards.split_axis(path, full, mine, world)
        if axis is None:
            out[path] = array
            continue
        n = mine[axis]
        index = [slice(None)] * array.ndim
        index[axis] = slice(rank * n, (rank + 1) * n)
        out[path] = np.ascontiguousarray(array[tuple(index)])
    return out


def warn_unsharded(generics: Mapping[str, object], tensor_parallel: bool) -> None:
    """7.3: `Shards > 1` without a process group runs the one-shard bodies."""
    if not tensor_parallel:
        shards.warn_unsharded(
            generics, "load with tensor_parallel=True under torchrun to split it", stacklevel=3
        )


# -- the collectives, with the conjugate gradients of 7.3 --------------------------------------


class _AllReduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        dist.all_reduce(y)
        return y

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g


class _Shared(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        total = g.clone()
        dist.all_reduce(total)
        return total


class _AllGather(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        rank, world = dist.get_rank(), dist.get_world_size()
        block = x.contiguous()
        parts = [torch.empty_like(block) for _ in range(world)]
        dist.all_gather(parts, block)
        ctx.rank, ctx.n = rank, x.shape[-1]
        return torch.cat(parts, dim=-1)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g[..., ctx.rank * ctx.n : (ctx.rank + 1) * ctx.n].contiguous()


def all_reduce(x: torch.Tensor) -> torch.Tensor:
    """The sum of `x` over the ranks, on every rank."""
    result: torch.Tensor = _AllReduce.apply(x)  # type: ignore[no-untyped-call]
    return result


def shared(x: torch.Tensor) -> torch.Tensor:
    """`x`; its gradient is summed over the ranks."""
    result: torch.Tensor = _Shared.apply(x)  # type: ignore[no-untyped-call]
    return result


def all_gather(x: torch.Tensor, shards: int) -> torch.Tensor:
    """The ranks' `[R, N]` blocks side by side: `[R, Shards * N]`, in rank order."""
    world = dist.get_world_size()
    if world != shards:
        raise LinnetError(f"all_gather is bound for {shards} shards but {world} ranks run it")
    result: torch.Tensor = _AllGather.apply(x)  # type: ignore[no-untyped-call]
    return result


def find_collective(op: Op) -> tuple[Any, str] | None:
    """The kernel and the generated-source spelling of a marked collective call, if any."""
    if not op.attrs.get(MARK):
        return None
    callee = op.attrs["callee"]
    if callee == "std.nn.parallel::all_reduce":
        return all_reduce, "natives.tp_all_reduce({0})"
    if callee == SHARED:
        return shared, "natives.tp_shared({0})"
    if callee == "std.nn.parallel::all_gather":
        shards = int(op.results[0].type.shape[-1] // op.operands[0].type.shape[-1])
        return (
            lambda x: all_gather(x, shards),
            f"natives.tp_all_gather({{0}}, {shards})",
        )
    return None
