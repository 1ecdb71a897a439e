"""The `Shards` convention and `std.nn.parallel` calls, shared by the tensor-parallel backends.

Stage: between lowering and a backend (language-extensions section 7). A model that can
be split declares a root generic `Shards: Dim` and sizes its split weights by `/ Shards`;
with `Shards = s`, shard `p` holds the `p`-th of `s` equal slices of every weight whose
shape differs from the one-shard shape, along the one axis that differs (7.1), and the
whole of every other weight. What this module gives the backends (linnet.torch.parallel
over a process group, linnet.jax.parallel over a mesh axis):

- `shard_generics`: the caller's generics with `Shards` bound to the shard count;
- `split_axis`: the axis along which one weight (or state member) is split, or None;
- `mark_collectives`: marks a lowered function's `std.nn.parallel` calls, which the
  backend then runs as collectives instead of their one-shard bodies;
- `warn_unsharded`: decision 21, the load-time warning for `Shards > 1` in one process.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence

from linnet.errors import LinnetError
from linnet.ir.core import Function, Region

COLLECTIVES = ("std.nn.parallel::all_reduce", "std.nn.parallel::all_gather")
SHARED = "std.nn.parallel::shared"
# The call attr a backend reads: True (torch, the default process group) or a mesh axis name.
MARK = "tensor_parallel"
SHARDS = "Shards"


def shard_generics(
    model_generics: Sequence[str],
    generics: Mapping[str, object],
    shards: int,
    *,
    option: str,
    counted: str,
) -> dict[str, object]:
    """`generics` with `Shards` bound to `shards` (the root must declare it).

    `option` names the loader option in messages, `counted` what gave the count
    ("the process group has 2 ranks").
    """
    if SHARDS not in model_generics:
        raise LinnetError(
            f"{option} needs a root block with a `Shards: Dim` generic (language-extensions 7.1)"
        )
    given = generics.get(SHARDS)
    if given is not None and int(given) != shards:  # type: ignore[call-overload]
        raise LinnetError(
            f"generic `Shards` is {given} but {counted}; "
            "leave `Shards` out and it is bound to the shard count"
        )
    return {**generics, SHARDS: shards}


def split_axis(path: str, whole: Sequence[int], mine: Sequence[int], shards: int) -> int | None:
    """The axis along which `path` is split (None when every shard holds all of it)."""
    if tuple(whole) == tuple(mine):
        return None
    axes = [a for a, (f, m) in enumerate(zip(whole, mine, strict=True)) if f != m]
    if len(axes) != 1 or whole[axes[0]] != mine[axes[0]] * shards:
        raise LinnetError(
            f"`{path}` is {list(whole)} for one shard and {list(mine)} for {shards}: "
            "a split weight must differ along one axis, by the shard count (7.1)"
        )
    return axes[0]


def mark_collectives(fn: Function, mark: object = True) -> Function:
    """Mark `fn`'s `std.nn.parallel` calls (nested regions too) to run as collectives."""

    def visit(region: Region) -> None:
        for op in region.ops:
            if op.kind == "call" and op.attrs.get("callee") in (*COLLECTIVES, SHARED):
                op.attrs[MARK] = mark
            for inner in op.regions:
                visit(inner)

    visit(fn.body)
    return fn


def warn_unsharded(generics: Mapping[str, object], how: str, *, stacklevel: int = 3) -> None:
    """Decision 21 (7.3): `Shards > 1` bound in one process runs the one-shard bodies.

    `how` says how this backend splits a model for real.
    """
    shards = generics.get(SHARDS)
    if isinstance(shards, int) and shards > 1:
        warnings.warn(
            f"the model is bound with Shards = {shards} but runs in one process: "
            f"std.nn.parallel ops run their one-shard bodies ({how})",
            stacklevel=stacklevel + 1,
        )
