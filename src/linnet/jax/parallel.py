"""Tensor parallelism on JAX: a `Shards` model split over a mesh axis under `jax.shard_map`.

Stage: backend (language-extensions section 7). `linnet.jax.load_source(...,
tensor_parallel=mesh)` loads a model whose root block declares `Shards: Dim`:

- `Shards` is bound to the size of the mesh's one axis (`tensor_parallel_for`);
- the checkpoint is the whole (one-shard) model's; each weight that the shard count
  splits (7.1, `linnet.ir.parallel.split_axis`) is placed on the mesh split along that
  axis, so device `p` holds its `p`-th slice; every other weight is replicated. State
  members are placed the same way (a KV cache split by heads), zeros at first;
- each entry is lowered for one shard (the local shapes), its `std.nn.parallel` calls
  marked with the axis name, and its generated source (`linnet.jax.codegen`) runs
  under `jax.jit(jax.shard_map(...))` (`ShardedRunner`): the calls become the
  collectives of `linnet.jax.collectives` (psum, all_gather, shared).

Results are replicated (`out_specs=P()`): every shard holds the same value after the
model's `all_reduce`/`all_gather`. The boundary keeps `jax.grad` of the sharded entry
equal to the gradient of the one-shard model: `shard_map` (without replication
checking) hands each shard `1/s` of a replicated result's cotangent and sums the
shards' cotangents of a replicated input, whereas the collectives' gradients (7.3,
as on linnet.torch) expect every shard to receive the whole cotangent and give every
shard the whole gradient of a replicated input. `cotangent_scale` multiplies the
former by `s` and divides the latter by `s`. Only `load_source` runs sharded: StableHLO
export (`load`) has no collectives.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from linnet.errors import LinnetError
from linnet.ir import parallel as shards
from linnet.ir.bind import BoundModel
from linnet.ir.core import Function
from linnet.jax.codegen import Generated, generate
from linnet.jax.collectives import cotangent_scale
from linnet.jax.dtypes import x64_scope

Outputs = tuple[list[Any], dict[str, Any]]
Spec: Any = PartitionSpec  # untyped in jax's stubs


class TensorParallel:
    """A model split over one mesh axis: the whole and one-shard bindings, each tensor's spec."""

    def __init__(self, mesh: Any, whole: BoundModel, sharded: BoundModel) -> None:
        self.mesh = mesh
        self.axis = str(mesh.axis_names[0])
        self.size = int(mesh.shape[self.axis])
        self.whole = whole
        self.sharded = sharded
        self.split: dict[str, int | None] = {}
        for path, info in whole.tensors.items():
            mine = sharded.tensors[path].type.shape
            self.split[path] = shards.split_axis(path, info.type.shape, mine, self.size)

    def spec(self, path: str) -> Any:
        """The PartitionSpec of a param, buffer or state member (replicated unless split)."""
        axis = self.split.get(path)
        if axis is None:
            return Spec()
        return Spec(*([None] * axis), self.axis)

    def placement(self, path: str | None, t: object = None) -> Any:
        """Where the whole array of `path` lives on the mesh (inputs: replicated)."""
        spec = Spec() if path is None else self.spec(path)
        return NamedSharding(self.mesh, spec)

    def runner(self, fn: Function) -> ShardedRunner:
        return ShardedRunner(shards.mark_collectives(fn, self.axis), self)


def tensor_parallel_for(
    mesh: Any, program: Any, root: str | None, generics: Mapping[str, object]
) -> TensorParallel:
    """Bind the model whole (`Shards = 1`) and for one shard of `mesh`'s axis."""
    from linnet.ir.bind import bind, find_root

    names = getattr(mesh, "axis_names", None)
    if not names or len(names) != 1:
        raise LinnetError(
            "tensor_parallel= takes a one-axis jax.sharding.Mesh (its axis splits the model), "
            f"got {names if names else type(mesh).__name__}"
        )
    axis = str(names[0])
    size = int(mesh.shape[axis])
    model_generics = [g.name for g in find_root(program, root).generics]
    bound = shards.shard_generics(
        model_generics,
        generics,
        size,
        option="tensor_parallel=mesh",
        counted=f"mesh axis `{axis}` has {size} devices",
    )
    whole = bind(program, root=root, generics={**bound, shards.SHARDS: 1})
    sharded = bind(program, root=root, generics=bound)
    return TensorParallel(mesh, whole, sharded)


def _is_float(x: Any) -> bool:
    return bool(jnp.issubdtype(jnp.asarray(x).dtype, jnp.floating))


class ShardedRunner:
    """One shard's generated source under `jax.jit(jax.shard_map(...))` over the mesh axis."""

    def __init__(self, fn: Function, tp: TensorParallel) -> None:
        self.function = fn
        self.tp = tp
        self.generated: Generated = generate(fn)
        self._compiled: dict[tuple[tuple[str, ...], tuple[str, ...], int], Any] = {}

    @property
    def source(self) -> str:
        return self.generated.source

    def _sharded(self, weights: Sequence[str], state: Sequence[str], inputs: int) -> Any:
        key = (tuple(weights), tuple(state), inputs)
        found = self._compiled.get(key)
        if found is not None:
            return found
        tp, entry = self.tp, self.generated.entry
        replicated = Spec()
        updates = list(self.function.state_updates)
        down, up = 1.0 / tp.size, float(tp.size)

        def incoming(path: str | None, x: Any) -> Any:
            whole = path is None or tp.split.get(path) is None
            return cotangent_scale(x, down) if whole and _is_float(x) else x

        def outgoing(path: str | None, x: Any) -> Any:
            whole = path is None or tp.split.get(path) is None
            return cotangent_scale(x, up) if whole and _is_float(x) else x

        def body(w: dict[str, Any], s: dict[str, Any], *xs: Any) -> Outputs:
            w = {p: incoming(p, v) for p, v in w.items()}
            s = {p: incoming(p, v) for p, v in s.items()}
            results, new_state = entry(w, s, *(incoming(None, x) for x in xs))
            return (
                [outgoing(None, r) for r in results],
                {p: outgoing(p, v) for p, v in new_state.items()},
            )

        in_specs = (
            {p: tp.spec(p) for p in weights},
            {p: tp.spec(p) for p in state},
            *([replicated] * inputs),
        )
        out_specs = (
            [replicated] * len(self.function.results),
            {p: tp.spec(p) for p in updates},
        )
        mapped = jax.shard_map(
            body, mesh=tp.mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False
        )
        found = self._compiled[key] = jax.jit(mapped)
        return found

    def __call__(
        self, weights: Mapping[str, Any], state: Mapping[str, Any], inputs: Sequence[Any]
    ) -> Outputs:
        run = self._sharded(sorted(weights), sorted(state), len(inputs))
        with x64_scope(self.generated.x64):
            results, updates = run(
                {p: weights[p] for p in sorted(weights)},
                {p: state[p] for p in sorted(state)},
                *inputs,
            )
        return list(results), dict(updates)


def zeros_on_mesh(tp: TensorParallel, path: str, shape: Sequence[int], dtype: Any) -> Any:
    """A state member's zeros, placed on the mesh as the member is split."""
    return jax.device_put(np.zeros(tuple(shape), dtype), tp.placement(path))
