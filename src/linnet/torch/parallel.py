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

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from linnet.errors import LinnetError
from linnet.ir.bind import BoundModel
from linnet.ir.core import Function, Op, Region

COLLECTIVES = ("std.nn.parallel::all_reduce", "std.nn.parallel::all_gather")
SHARED = "std.nn.parallel::shared"
MARK = "tensor_parallel"
SHARDS = "Shards"


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
    if SHARDS not in model_generics:
        raise LinnetError(
            "tensor_parallel=True needs a root block with a `Shards: Dim` generic "
            "(language-extensions 7.1)"
        )
    given = generics.get(SHARDS)
    if given is not None and int(given) != world:  # type: ignore[call-overload]
        raise LinnetError(
            f"generic `Shards` is {given} but the process group has {world} ranks; "
            "leave `Shards` out and it is bound to the world size"
        )
    return {**generics, SHARDS: world}


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
        if full == mine:
            out[path] = array
            continue
        axes = [a for a, (f, m) in enumerate(zip(full, mine, strict=True)) if f != m]
        if len(axes) != 1 or full[axes[0]] != mine[axes[0]] * world:
            raise LinnetError(
                f"`{path}` is {list(full)} for one shard and {list(mine)} for {world}: "
                "a split weight must differ along one axis, by the shard count (7.1)"
            )
        axis = axes[0]
        n = mine[axis]
        index = [slice(None)] * array.ndim
        index[axis] = slice(rank * n, (rank + 1) * n)
        out[path] = np.ascontiguousarray(array[tuple(index)])
    return out


def warn_unsharded(generics: Mapping[str, object], tensor_parallel: bool) -> None:
    """7.3: `Shards > 1` without a process group runs the one-shard bodies."""
    shards = generics.get(SHARDS)
    if not tensor_parallel and isinstance(shards, int) and shards > 1:
        warnings.warn(
            f"the model is bound with Shards = {shards} but runs in one process: "
            "std.nn.parallel ops run their one-shard bodies (load with tensor_parallel=True "
            "under torchrun to split it)",
            stacklevel=3,
        )


def mark_collectives(fn: Function) -> Function:
    """Mark `fn`'s `std.nn.parallel` calls to run as collectives (nested regions too)."""

    def visit(region: Region) -> None:
        for op in region.ops:
            if op.kind == "call" and op.attrs.get("callee") in (*COLLECTIVES, SHARED):
                op.attrs[MARK] = True
            for inner in op.regions:
                visit(inner)

    visit(fn.body)
    return fn


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
