"""Which parameters train, in which dtype, and where they live on a mesh.

Stage: `linnet.jax.train`'s parameter bookkeeping, between the model
(`linnet.jax.train.model.Trainable`) and the jitted step.

- `select`: the trained paths. `trainable=True` is every floating `param`
  (buffers never train; for a `LoraModel`, the adapters only); a glob or a
  list of globs (`fnmatch`, `*` crosses dots) picks params by path; `False`
  trains nothing, an error. A tied path trains as its group's first path.
- `Split`: the trained arrays in the master dtype (`master="f32"`: floats
  narrower than f32 are kept in f32, so small updates are not rounded away)
  and the rest frozen; `full(trained)` rebuilds every path in its compute
  dtype (the loaded one), the ties filled from their owner, as each step's
  forward pass reads them (`full(trained, frozen)`).
- `fsdp_sharding`: on a mesh, each array split along its largest axis the
  size of the mesh's first axis divides (replicated when none does); optimizer moments get
  the rule of their parameter since it depends on the shape alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

import jax
import jax.numpy as jnp

from linnet.errors import LinnetError
from linnet.jax.train.model import Trainable

MASTERS = {"f32": jnp.float32}
Globs = bool | str | Sequence[str]


def select(model: Trainable, trainable: Globs, parameters: Mapping[str, Any]) -> list[str]:
    """The trained paths in path order (module docstring); ties map to their owner."""
    floats = [
        p
        for p in sorted(parameters)
        if model.kinds.get(p, "param") == "param"
        and p not in model.ties
        and jnp.issubdtype(parameters[p].dtype, jnp.floating)
    ]
    if trainable is True:
        chosen = [p for p in floats if p in model.adapters] if model.adapters else floats
    elif trainable is False:
        chosen = []
    else:
        globs = [trainable] if isinstance(trainable, str) else list(trainable)
        owners = {p: model.ties.get(p, p) for p in parameters}
        matched = {owners[p] for p in parameters if any(fnmatchcase(p, g) for g in globs)}
        chosen = [p for p in floats if p in matched]
        if not chosen:
            listed = ", ".join(floats[:12]) + (", ..." if len(floats) > 12 else "")
            raise LinnetError(
                f"train: trainable={trainable!r} matches no floating param; the paths are: "
                f"{listed or 'none'}"
            )
    if not chosen:
        raise LinnetError("train: nothing to train (trainable=False, or the model has no params)")
    return chosen


@dataclass(frozen=True)
class Split:
    """The trained paths, their compute dtypes, the frozen arrays and the ties."""

    trained: tuple[str, ...]
    compute: dict[str, Any]
    frozen: dict[str, Any]
    ties: dict[str, str]

    def full(self, trained: Mapping[str, Any], frozen: Mapping[str, Any]) -> dict[str, Any]:
        """Every parameter path from the trained and frozen arrays: trained ones cast to
        their compute dtype, ties filled from their owner."""
        out = dict(frozen)
        for path in self.trained:
            out[path] = trained[path].astype(self.compute[path])
        for path, owner in self.ties.items():
            if owner in trained:
                out[path] = out[owner]
        return out


def split(
    model: Trainable, parameters: Mapping[str, Any], chosen: Sequence[str], master: str | None
) -> tuple[Split, dict[str, Any]]:
    """The `Split` and the trained arrays in the master dtype (fresh copies, so donating
    them to the step never deletes the model's own arrays)."""
    if master is not None and master not in MASTERS:
        raise LinnetError(f"train: master must be 'f32' or None, got {master!r}")
    trained: dict[str, Any] = {}
    compute: dict[str, Any] = {}
    for path in chosen:
        array = parameters[path]
        compute[path] = array.dtype
        wide = master is not None and jnp.dtype(array.dtype).itemsize < 4
        dtype = MASTERS[master] if wide and master is not None else array.dtype
        trained[path] = jnp.array(array, dtype=dtype, copy=True)
    ties = {p: o for p, o in model.ties.items() if p in parameters}
    frozen = {p: a for p, a in parameters.items() if p not in compute and p not in ties}
    frozen.update({p: parameters[p] for p, o in ties.items() if o not in compute})
    return Split(tuple(chosen), compute, frozen, ties), trained


def largest_divisible_axis(shape: Sequence[int], devices: int) -> int | None:
    """The largest axis `devices` divides (the first of equals); None when none does."""
    best: int | None = None
    for axis, size in enumerate(shape):
        if size % devices == 0 and size >= devices and (best is None or size > shape[best]):
            best = axis
    return best


def fsdp_sharding(mesh: Any, shape: Sequence[int]) -> Any:
    """The `NamedSharding` of an array of `shape`: split along its largest divisible axis."""
    from jax.sharding import NamedSharding, PartitionSpec

    axis_name = mesh.axis_names[0]
    axis = largest_divisible_axis(shape, int(mesh.shape[axis_name]))
    spec: Any = PartitionSpec  # untyped in jax's stubs
    if axis is None:
        return NamedSharding(mesh, spec())
    return NamedSharding(mesh, spec(*([None] * axis), axis_name))


def shard_tree(tree: Any, mesh: Any) -> Any:
    """Every array leaf of `tree` placed by `fsdp_sharding`."""
    return jax.tree.map(lambda a: jax.device_put(a, fsdp_sharding(mesh, a.shape)), tree)


def constrain_tree(tree: Any, mesh: Any) -> Any:
    """`with_sharding_constraint` of every leaf to its `fsdp_sharding` (inside a jit)."""
    constrain: Any = jax.lax.with_sharding_constraint  # untyped in jax's stubs
    return jax.tree.map(lambda a: constrain(a, fsdp_sharding(mesh, a.shape)), tree)


def device_bytes(tree: Any, device: Any) -> int:
    """The bytes of `tree`'s arrays held on `device` (its shards of sharded arrays)."""
    total = 0
    for leaf in jax.tree.leaves(tree):
        for shard in leaf.addressable_shards:
            if shard.device == device:
                total += int(shard.data.nbytes)
    return total


def gathered(tree: Any, mesh: Any) -> Any:
    """Every leaf of `tree` constrained to be whole on each device of `mesh` (inside a jit)."""
    from jax.sharding import NamedSharding, PartitionSpec

    spec: Any = PartitionSpec  # untyped in jax's stubs
    whole = NamedSharding(mesh, spec())
    constrain: Any = jax.lax.with_sharding_constraint
    return jax.tree.map(lambda a: constrain(a, whole), tree)
