"""`linnet.jax.load_model`: every entry of a root block on XLA over one copy of the weights.

Stage: the JAX backend's runtime object for serving (architecture.md
"Backends"), the counterpart of `linnet.torch.LinnetModule` and
`linnet.onnx.OnnxModel`. In: a source, generics and weights, as for
`linnet.jax.load`. Out: a `JaxModel`:

- the weights are placed on the device once and shared by every entry;
- each entry's lean generated program (the one `linnet stablehlo` prints) is
  jitted and compiled by XLA once per input types, as a hand-written JAX model
  is, without the StableHLO text round trip of `load`
  (`linnet.jax.execute.XlaRunner`; `stablehlo_text` exports it on demand);
- the state members (language.md 12.6) live on the device between calls,
  zeros at first; each call passes the current state in and keeps the next
  state. The state an entry assigns is *donated* to XLA (`donate_argnums`),
  so XLA writes the new value into the old buffer: a KV cache is updated in
  place, not copied per token. The previous state arrays are consumed by the
  call (read `model.state` again after a call, do not keep old references);
- `run_entry(name, inputs)`, `model(*inputs)` for the default entry,
  `state` (path -> device array), `reset_state()`;
- `std.quant` linears read their weights dequantised once at load
  (`linnet.jax.dequantize`; `dequantize=False` decodes them on every call);
- `mesh=` shards the weights and caches over several devices and lets XLA's
  partitioner split each entry (`mesh_sharding`); `tensor_parallel=mesh` splits a
  model with a `Shards` generic under `jax.shard_map` instead (`linnet.jax.parallel`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from linnet.errors import LinnetError
from linnet.ir.bind import BoundModel
from linnet.ir.core import Function, TensorType, numpy_dtype
from linnet.jax.dequantize import Derived, dequantize_once
from linnet.jax.dtypes import WIDE, x64_scope
from linnet.jax.load import (
    LinnetJaxFunction,
    Source,
    WeightsSource,
    bind_weights,
    device_array,
    device_parameters,
)
from linnet.jax.parallel import TensorParallel
from linnet.pipeline import check_program
from linnet.target import DEFAULT_ENTRY


class JaxModel:
    """A bound Linnet model on XLA (see the module docstring)."""

    def __init__(
        self,
        model: BoundModel,
        arrays: Mapping[str, np.ndarray[Any, Any]],
        mesh: Any = None,
        tensor_parallel: TensorParallel | None = None,
        *,
        dequantize: bool = True,
    ) -> None:
        self.model = model
        self.present = frozenset(arrays)
        self.mesh = mesh
        self.tensor_parallel = tensor_parallel
        # Split over a mesh axis (linnet.jax.parallel): `model` is one shard's binding; the
        # arrays and the state are the whole model's, placed split on the mesh.
        self.layout = model if tensor_parallel is None else tensor_parallel.whole
        self.sharding = (
            tensor_parallel.placement
            if tensor_parallel is not None
            else None
            if mesh is None
            else mesh_sharding(mesh, model, self.present)
        )
        self.parameters = device_parameters(self.layout, arrays, self.sharding)
        # std.quant weights dequantised once (linnet.jax.dequantize), by derived path
        self.derived: dict[str, Derived] = {}
        module = model.program.graph.roots[0]
        self._entries = {
            name: LinnetJaxFunction(
                model.program,
                signature,
                model=model,
                module=module,
                parameters=self.parameters,
                stablehlo=tensor_parallel is None,
                via_text=False,
                donate_state=True,
                sharding=self.sharding,
                tensor_parallel=tensor_parallel,
                rewrite=self._dequantize_once if dequantize and tensor_parallel is None else None,
            )
            for name, signature in model.entries.items()
        }
        self._state: dict[str, Any] = {}
        self.reset_state()

    def _dequantize_once(self, fn: Function) -> Function:
        """`fn` reading std.quant weights dequantised (computed here the first time)."""
        fn, derived = dequantize_once(fn, frozenset(self.layout.tensors))
        for path, item in derived.items():
            if path not in self.derived:
                self.derived[path] = item
                self._place_derived(path)
        return fn

    def _place_derived(self, path: str) -> None:
        item = self.derived[path]
        where = None if self.sharding is None else self.sharding(None, item.type)
        self.parameters[path] = device_array(item.compute(self.parameters), item.type.dtype, where)

    @property
    def entries(self) -> list[str]:
        return list(self._entries)

    @property
    def state(self) -> dict[str, Any]:
        """The current state by path (device arrays; a call consumes the ones it assigns)."""
        return dict(self._state)

    def reset_state(self) -> None:
        """Every state member back to zeros (its value before the first call, 12.6)."""
        self._state = {
            path: device_array(
                np.zeros(t.shape, numpy_dtype(t.dtype)),
                t.dtype,
                None if self.sharding is None else self.sharding(path, t),
            )
            for path, t in self.layout.live_tensors(self.present, "state").items()
        }

    def update_weights(self, arrays: Mapping[str, Any]) -> None:
        """Replace weights by path with new values (NumPy or JAX arrays, or anything
        `np.asarray` takes), every entry reading them from its next call on.

        Each value must have the weight's shape; it is converted to the weight's dtype
        and placed as the loaded one (its sharding on a mesh) as a fresh device array,
        so a caller that later donates or deletes its own array (a training step) never
        takes the model's. Paths that shared one array (a tied head) share the new one.
        """
        import jax.numpy as jnp

        placed: dict[str, Any] = {}
        for path, value in arrays.items():
            t = self.layout.tensors.get(path)
            if t is None or path not in self.parameters:
                raise LinnetError(f"update_weights: the model has no weight at `{path}`")
            shape = tuple(getattr(value, "shape", np.shape(value)))
            if shape != tuple(t.type.shape):
                raise LinnetError(
                    f"update_weights: `{path}` has shape {list(t.type.shape)}, got {list(shape)}"
                )
            where = None if self.sharding is None else self.sharding(path, t.type)
            if isinstance(value, jax.Array):
                with x64_scope(t.type.dtype in WIDE):
                    copy = jnp.array(value, dtype=numpy_dtype(t.type.dtype), copy=True)
                    placed[path] = copy if where is None else jax.device_put(copy, where)
            else:
                placed[path] = device_array(np.asarray(value), t.type.dtype, where)
        for path, value in placed.items():
            old = self.parameters[path]
            for other, current in list(self.parameters.items()):
                if current is old and other not in placed:
                    self.parameters[other] = value
            self.parameters[path] = value
        for derived, item in self.derived.items():  # dequantised again from the new values
            if any(source in placed for source in item.sources):
                self._place_derived(derived)

    def default_entry(self) -> str:
        """`forward`, or the only entry (11.1)."""
        if DEFAULT_ENTRY in self._entries:
            return DEFAULT_ENTRY
        if len(self._entries) == 1:
            return next(iter(self._entries))
        listed = ", ".join(f"`{n}`" for n in self._entries) or "none"
        raise LinnetError(f"the model has no `forward` entry; use run_entry (entries: {listed})")

    def entry(self, name: str) -> LinnetJaxFunction:
        found = self._entries.get(name)
        if found is None:
            listed = ", ".join(f"`{n}`" for n in self._entries) or "none"
            raise LinnetError(f"the model has no entry `{name}` (entries: {listed})")
        return found

    def __call__(self, *inputs: Any, **named: Any) -> Any:
        return self.run_entry(self.default_entry(), named or inputs)

    def run_entry(
        self,
        name: str,
        inputs: Sequence[Any] | Mapping[str, Any] = (),
        generics: Mapping[str, object] | None = None,
    ) -> Any:
        """Run entry `name` on `inputs` (in order or by name), keeping its next state."""
        fn = self.entry(name)
        positional: Sequence[Any] = () if isinstance(inputs, Mapping) else inputs
        named: Mapping[str, Any] = inputs if isinstance(inputs, Mapping) else {}
        prepared = fn.prepare_for(positional, named, generics)
        if not prepared.stateful:
            return fn.run(self.parameters, positional, named, None, generics)
        result, new_state = fn.run(self.parameters, positional, named, self._state, generics)
        self._state.update(new_state)
        return result

    def stablehlo_text(self, name: str | None = None) -> str:
        """The StableHLO text of the latest call of entry `name` (default entry)."""
        return self.entry(name or self.default_entry()).stablehlo_text()


def mesh_sharding(
    mesh: Any, model: BoundModel, present: frozenset[str]
) -> Callable[[str | None, TensorType], Any]:
    """Where each argument lives on `mesh` (its first axis shards, XLA partitions the rest).

    - params and buffers of rank 2 or more whose first axis the mesh axis
      divides are split along it (rows of a `[Out, In]` weight, as Megatron's
      column-parallel layers split them); the others are replicated;
    - state of rank 4 whose axis 1 it divides (the key/value heads of a
      `[Batch, KvHeads, MaxSeq, D]` cache) is split along that axis;
    - entry inputs and results are replicated.
    """
    from jax.sharding import NamedSharding, PartitionSpec

    axis = mesh.axis_names[0]
    size = int(mesh.shape[axis])
    kinds = {path: t.kind for path, t in model.tensors.items()}

    spec: Any = PartitionSpec  # untyped in jax's stubs
    heads, rows, replicated = spec(None, axis), spec(axis), spec()

    def sharding(path: str | None, t: TensorType) -> Any:
        kind = kinds.get(path) if path is not None else None
        if kind == "state" and t.rank == 4 and t.shape[1] % size == 0:
            return NamedSharding(mesh, heads)
        if kind in ("param", "buffer") and t.rank >= 2 and t.shape[0] % size == 0:
            return NamedSharding(mesh, rows)
        return NamedSharding(mesh, replicated)

    return sharding


def load_model(
    source: Source,
    *,
    generics: Mapping[str, object] | None = None,
    weights: WeightsSource | None = None,
    root: str | None = None,
    bindings: Any = None,
    std_root: str | os.PathLike[str] | None = None,
    cast_dtype: bool = False,
    mesh: Any = None,
    tensor_parallel: Any = None,
    dequantize: bool = True,
) -> JaxModel:
    """Every entry of the root block on XLA, over one copy of the weights (see `JaxModel`).

    `source` may also be a model card folder (`linnet.card`): its source,
    generics, weights, root and bindings fill what the caller leaves out.

    `mesh` (a `jax.sharding.Mesh`) shards the weights and the state over its
    devices (`mesh_sharding` says how) and compiles each entry partitioned
    over them by XLA; by default everything lives on JAX's default device.
    `tensor_parallel=mesh` instead splits a model with a `Shards` generic over the
    one-axis mesh, each entry's generated source under `jax.shard_map`
    (`linnet.jax.parallel`; `weights` is the whole one-shard checkpoint).
    `dequantize` (default) holds each `std.quant` linear's weight dequantised
    once, beside the packed one (`linnet.jax.dequantize`); `dequantize=False`
    keeps only the packed weights and decodes them on every call (the std bodies).
    """
    from linnet.card import loader_arguments
    from linnet.ir.bind import bind
    from linnet.ir.parallel import warn_unsharded
    from linnet.jax.load import UNSHARDED_HOW

    source, generics, weights, root, bindings = loader_arguments(
        source, generics, weights, root, bindings
    )
    program = check_program(source, std_root)
    if tensor_parallel is not None:
        from linnet.jax.parallel import tensor_parallel_for

        if mesh is not None:
            raise LinnetError(
                "pass mesh= (XLA partitions each entry) or tensor_parallel= (a Shards model "
                "under jax.shard_map), not both"
            )
        tp = tensor_parallel_for(tensor_parallel, program, root, dict(generics or {}))
        arrays = bind_weights(tp.whole, weights, bindings=bindings, cast_dtype=cast_dtype)
        return JaxModel(tp.sharded, arrays, tensor_parallel=tp)
    warn_unsharded(dict(generics or {}), UNSHARDED_HOW, stacklevel=2)
    model = bind(program, root=root, generics=generics)
    arrays = bind_weights(model, weights, bindings=bindings, cast_dtype=cast_dtype)
    return JaxModel(model, arrays, mesh, dequantize=dequantize)
