"""`linnet.jax.load` / `load_source`: source + generics + weights -> a JAX callable for one entry.

Stage: the JAX backend's front door; it runs the stages in order
(architecture.md "The pipeline"):

    check (pipeline.check_program)
      -> bind the root block's generics (ir.bind.bind, 6.7 steps 1-3)
      -> bind the weights by path (weights.bind_model_weights, 12.9): which
         optional params and subs are present
      -> `LinnetJaxFunction`: lowering and passes run per input types (and
         explicit entry generics) on first call, then either the generated
         `jax.numpy` source under `jax.jit` (`load_source`, differentiable) or
         the entry's StableHLO text compiled by XLA (`load`, not differentiable)

A source without a block with entries loads a module-level entry (11.7): no
weights, no state. Weights may be a SafeTensors file, a sharded folder or
index, or a mapping of path (or checkpoint name, with `bindings`) to NumPy
or JAX arrays; they are placed on the default device once.

Calling: `f(*inputs)` returns the result (a tuple for a tuple result, nested as declared:
a struct result is the tuple of its fields in declaration order). An
entry that reads or assigns state is called `f(*inputs, state=mapping)`
and returns `(result, new_state)`; `state=None` starts from zeros
(language.md 12.6), `f.initial_state()` gives those zeros. `f.apply(
parameters, *inputs)` runs with caller-owned arrays for any params or
buffers (the loaded ones fill the rest): what `jax.grad` differentiates.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from linnet.check.program import CheckedProgram
from linnet.check.types import ScalarDType, ScalarType
from linnet.collector import collector_paused
from linnet.errors import InternalError, LinnetError
from linnet.ir.bind import BoundModel, EntrySignature, generics_key
from linnet.ir.core import FLOAT_DTYPES, Function, TensorType, dtype_of_numpy, numpy_dtype
from linnet.ir.parallel import warn_unsharded
from linnet.ir.regions import paths_read
from linnet.ir.results import regroup
from linnet.jax.dtypes import WIDE, x64_scope
from linnet.jax.execute import SourceRunner, StableHLORunner, XlaRunner
from linnet.jax.parallel import ShardedRunner, TensorParallel
from linnet.jax.remat import current_layer_remat
from linnet.pipeline import check_program

Source = CheckedProgram | str | os.PathLike[str]
WeightsSource = Mapping[str, Any] | str | os.PathLike[str]
Runner = SourceRunner | StableHLORunner | XlaRunner | ShardedRunner


class Prepared:
    """One entry lowered for one set of input types, ready to run."""

    def __init__(self, fn: Function, run: Runner) -> None:
        self.function = fn
        self.run = run
        self.state = list(dict.fromkeys([*paths_read(fn, "state"), *fn.state_updates]))

    @property
    def stateful(self) -> bool:
        return bool(self.state)


def device_array(array: np.ndarray[Any, Any], dtype: str, sharding: Any = None) -> Any:
    """A NumPy array on JAX's default device (or with `sharding`), keeping 64-bit dtypes."""
    with x64_scope(dtype in WIDE):
        return jax.device_put(np.asarray(array, dtype=numpy_dtype(dtype)), sharding)


def input_type(value: Any, name: str, declared: object, owner: str) -> tuple[Any, TensorType]:
    """An entry input as an array (JAX, NumPy or tracer) and its IR type; LinnetError otherwise."""
    if isinstance(value, bool | int | float):
        if not isinstance(declared, ScalarType) or not isinstance(declared.dtype, ScalarDType):
            raise LinnetError(f"{owner}: input `{name}` needs an array, got a Python number")
        dtype = declared.dtype.name
        kind = "bool" if isinstance(value, bool) else "int" if isinstance(value, int) else "float"
        fits = {"bool": dtype == "bool", "int": dtype != "bool", "float": dtype in FLOAT_DTYPES}
        if not fits[kind]:
            raise LinnetError(f"{owner}: input `{name}` is {dtype}; got a Python {kind}")
        try:
            array = np.asarray(value, dtype=numpy_dtype(dtype))
        except OverflowError:
            raise LinnetError(
                f"{owner}: input `{name}` is {dtype}; {value!r} is out of its range"
            ) from None
        return array, TensorType((), dtype)
    shape, held = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is None or held is None:
        raise LinnetError(f"{owner}: input `{name}` must be an array, got {type(value).__name__}")
    try:
        found = dtype_of_numpy(np.dtype(held))
    except (InternalError, TypeError):
        raise LinnetError(f"{owner}: input `{name}` has dtype {held}, which Linnet lacks") from None
    return value, TensorType(tuple(int(d) for d in shape), found)


class LinnetJaxFunction:
    """One Linnet entry on JAX (see the module docstring for calling conventions)."""

    def __init__(
        self,
        program: CheckedProgram,
        signature: EntrySignature,
        *,
        model: BoundModel | None,
        module: str,
        parameters: dict[str, Any],
        stablehlo: bool,
        donate_state: bool = False,
        sharding: Callable[[str | None, TensorType], Any] | None = None,
        tensor_parallel: TensorParallel | None = None,
        rewrite: Callable[[Function], Function] | None = None,
        via_text: bool = True,
    ) -> None:
        self.program = program
        # `stablehlo`: XLA runs the entry (not differentiable); `via_text` (`load`) through
        # its StableHLO text parsed back, else (`load_model`) the same program jitted directly.
        self.via_text = via_text
        # applied to each lowered, optimised function (JaxModel: dequantise once)
        self.rewrite = rewrite
        self.signature = signature
        self.name = signature.name
        self.model = model
        self.module_name = module
        self.stablehlo = stablehlo
        self.donate_state = donate_state
        self.sharding = sharding
        self.present = frozenset(parameters)
        # Split over a mesh (linnet.jax.parallel): `model` is one shard's binding, the arrays
        # and state are the whole model's, placed on the mesh.
        self.tensor_parallel = tensor_parallel
        layout = model if tensor_parallel is None else tensor_parallel.whole
        self.tensor_types = tensor_types(layout, self.present)
        self.parameters = parameters
        self._prepared: dict[tuple[object, ...], Prepared] = {}
        self._latest: Prepared | None = None

    # -- calling ------------------------------------------------------------------------

    def __call__(
        self,
        *inputs: Any,
        state: Mapping[str, Any] | None = None,
        generics: Mapping[str, object] | None = None,
        **named: Any,
    ) -> Any:
        return self.run(self.parameters, inputs, named, state, generics)

    def apply(
        self,
        parameters: Mapping[str, Any],
        *inputs: Any,
        state: Mapping[str, Any] | None = None,
        generics: Mapping[str, object] | None = None,
        **named: Any,
    ) -> Any:
        """Run with `parameters` (path -> array) in place of the loaded params and buffers."""
        unknown = [p for p in parameters if p not in self.parameters]
        if unknown:
            listed = ", ".join(sorted(self.parameters)[:8]) or "none"
            raise LinnetError(
                f"entry `{self.name}`: the model has no param or buffer `{unknown[0]}` "
                f"(paths: {listed}...)"
            )
        return self.run({**self.parameters, **parameters}, inputs, named, state, generics)

    def prepare_for(
        self,
        positional: Sequence[Any],
        named: Mapping[str, Any],
        generics: Mapping[str, object] | None = None,
    ) -> Prepared:
        """The prepared entry for these inputs (what a call would run)."""
        owner = f"entry `{self.name}`"
        values = self._order(positional, named)
        types = [
            input_type(v, spec.name, spec.type, owner)[1]
            for v, spec in zip(values, self.signature.inputs, strict=False)
        ]
        return self.prepare(types, generics)

    def run(
        self,
        weights: Mapping[str, Any],
        positional: Sequence[Any],
        named: Mapping[str, Any],
        state: Mapping[str, Any] | None,
        generics: Mapping[str, object] | None,
    ) -> Any:
        owner = f"entry `{self.name}`"
        values = self._order(positional, named)
        converted = [
            input_type(v, spec.name, spec.type, owner)
            for v, spec in zip(values, self.signature.inputs, strict=False)
        ]
        prepared = self.prepare([t for _, t in converted], generics)
        current = self._state(prepared, state)
        results, updates = prepared.run(weights, current, [v for v, _ in converted])
        # Nested as the entry's result type declares (struct fields in declaration order).
        result: Any = regroup(results, self.signature.fn.result)
        if not prepared.stateful:
            if state is not None:
                raise LinnetError(f"{owner} has no state; do not pass state=")
            return result
        new_state = {**current, **updates}
        return result, new_state

    def _order(self, positional: Sequence[Any], named: Mapping[str, Any]) -> list[Any]:
        values = list(positional)
        remaining = dict(named)
        for spec in self.signature.inputs[len(values) :]:
            if spec.name not in remaining:
                break
            values.append(remaining.pop(spec.name))
        if remaining:
            known = ", ".join(f"`{s.name}`" for s in self.signature.inputs)
            raise LinnetError(
                f"entry `{self.name}` has no input `{next(iter(remaining))}` (inputs: {known})"
            )
        return values

    def _state(self, prepared: Prepared, given: Mapping[str, Any] | None) -> dict[str, Any]:
        if not prepared.stateful:
            return {}
        if given is None:
            return {p: self._zeros(p) for p in prepared.state}
        missing = [p for p in prepared.state if p not in given]
        if missing:
            raise LinnetError(f"entry `{self.name}`: state= lacks the state member `{missing[0]}`")
        return {p: given[p] for p in prepared.state}

    def _zeros(self, path: str) -> Any:
        t = self.tensor_types[path]
        where = None if self.tensor_parallel is None else self.tensor_parallel.placement(path)
        return device_array(np.zeros(t.shape, numpy_dtype(t.dtype)), t.dtype, where)

    def initial_state(self) -> dict[str, Any]:
        """Every state member of the model as zeros (its value before the first call, 12.6)."""
        if self.model is None:
            return {}
        return {path: self._zeros(path) for path in self.model.live_tensors(self.present, "state")}

    # -- preparing ----------------------------------------------------------------------

    def prepare(
        self, input_types: Sequence[TensorType], generics: Mapping[str, object] | None = None
    ) -> Prepared:
        """The lowered, optimised and prepared entry for these input types (cached)."""
        # Per-layer remat (linnet.jax.remat) only changes the generated source.
        remat = None if self.stablehlo or self.tensor_parallel else current_layer_remat()
        key = (tuple(input_types), generics_key(generics), remat)
        found = self._prepared.get(key)
        if found is None:
            # Lowering builds the whole unrolled entry at once: nothing for the collector.
            with collector_paused():
                fn = self.lower(input_types, generics)
                run: Runner = (
                    self.tensor_parallel.runner(fn)
                    if self.tensor_parallel is not None
                    else StableHLORunner(fn, donate_state=self.donate_state, sharding=self.sharding)
                    if self.stablehlo and self.via_text
                    else XlaRunner(fn, donate_state=self.donate_state, sharding=self.sharding)
                    if self.stablehlo
                    else SourceRunner(fn, remat=remat)
                )
            found = self._prepared[key] = Prepared(fn, run)
        self._latest = found
        return found

    def lower(
        self, input_types: Sequence[TensorType], generics: Mapping[str, object] | None = None
    ) -> Function:
        from linnet.pipeline import lower, lower_module_entry

        if self.model is None:
            fn = lower_module_entry(
                self.program, self.module_name, self.name, input_types, generics=generics
            )
        else:
            fn = lower(self.model, self.name, input_types, self.present, generics=generics)
        fn = optimize_static(fn)
        if self.rewrite is None:
            return fn
        from linnet.ir.passes.dce import eliminate_dead_code

        return eliminate_dead_code(self.rewrite(fn))[0]

    def _for(self, input_types: Sequence[TensorType] | None) -> Prepared:
        prepared = self.prepare(input_types) if input_types is not None else self._latest
        if prepared is None:
            raise LinnetError(f"entry `{self.name}` has not run yet; pass input_types")
        return prepared

    def generated_source(self, input_types: Sequence[TensorType] | None = None) -> str:
        """The generated `jax.numpy` source for `input_types`, or for the latest call."""
        run = self._for(input_types).run
        if isinstance(run, (SourceRunner, ShardedRunner)):
            return run.source
        return run.generated.source

    def stablehlo_text(self, input_types: Sequence[TensorType] | None = None) -> str:
        """The StableHLO text XLA runs for `input_types`, or for the latest call (`load`,
        `load_model`)."""
        run = self._for(input_types).run
        if not isinstance(run, StableHLORunner | XlaRunner):
            raise LinnetError("StableHLO text exists for linnet.jax.load; this is load_source")
        return run.text

    def __repr__(self) -> str:
        how = "StableHLO on XLA" if self.stablehlo else "generated jax.numpy source"
        return f"<linnet.jax entry `{self.name}` ({how})>"


def optimize_static(fn: Function) -> Function:
    """The passes of `linnet.pipeline.optimize`, then what is computed from `iota`s and
    constants alone folded too (static shapes: rotary frequencies and position tables
    become constants, so XLA is not given their f64 arithmetic and the trace needs no
    64-bit mode for them)."""
    from linnet.ir.passes.dce import eliminate_dead_code
    from linnet.ir.passes.fold import fold_constants
    from linnet.pipeline import optimize

    fn = optimize(fn)
    folded, changed = fold_constants(fn, sources=True)
    # Only the now dead arithmetic goes (the shared passes ran to their fixed point already).
    return eliminate_dead_code(folded)[0] if changed else fn


def tensor_types(model: BoundModel | None, present: frozenset[str]) -> dict[str, TensorType]:
    """Every live param, buffer and state path of the model with its type."""
    types: dict[str, TensorType] = {}
    if model is not None:
        for kind in ("param", "buffer", "state"):
            types.update(model.live_tensors(present, kind))
    return types


def device_parameters(
    model: BoundModel,
    arrays: Mapping[str, np.ndarray[Any, Any]],
    sharding: Callable[[str | None, TensorType], Any] | None = None,
) -> dict[str, Any]:
    """The bound arrays on JAX's default device, one device array per stored array (ties share)."""
    types = tensor_types(model, frozenset(arrays))
    placed: dict[tuple[object, ...], Any] = {}
    out: dict[str, Any] = {}
    for path, array in arrays.items():
        t = types[path]
        where = None if sharding is None else sharding(path, t)
        key = (id(array), t.dtype, where)
        if key not in placed:
            placed[key] = device_array(array, t.dtype, where)
        out[path] = placed[key]
    return out


def bind_weights(
    model: BoundModel,
    weights: WeightsSource | None,
    *,
    bindings: Any = None,
    cast_dtype: bool = False,
    strict: bool = True,
) -> dict[str, np.ndarray[Any, Any]]:
    """The bound arrays by path; `weights=None` only for a model without mandatory weights."""
    from linnet.weights import bind_model_weights, require_no_weights

    if weights is None:
        require_no_weights(model)
        return {}
    source: Any = weights
    if isinstance(weights, Mapping):
        source = {name: np.asarray(value) for name, value in weights.items()}
    bound = bind_model_weights(
        model, source, bindings=bindings, cast_dtype=cast_dtype, strict=strict
    )
    return dict(bound.arrays)


def open_entry(
    source: Source,
    *,
    generics: Mapping[str, object] | None,
    weights: WeightsSource | None,
    root: str | None,
    entry: str | None,
    bindings: Any,
    std_root: str | os.PathLike[str] | None,
    cast_dtype: bool,
    stablehlo: bool,
    tensor_parallel: Any = None,
) -> LinnetJaxFunction:
    """What `load` and `load_source` share: check, bind, pick the entry, bind the weights.
    A model card folder (`linnet.card`) fills what the caller leaves out."""
    from linnet.card import loader_arguments
    from linnet.ir.bind import bind, module_entry
    from linnet.target import block_entry, module_entry_info, root_block

    source, generics, weights, root, bindings = loader_arguments(
        source, generics, weights, root, bindings
    )
    program = check_program(source, std_root)
    module = program.graph.roots[0]
    if tensor_parallel is not None:
        if stablehlo:
            raise LinnetError(
                "tensor_parallel= runs the generated source under jax.shard_map; "
                "use linnet.jax.load_source (StableHLO export has no collectives)"
            )
        return _open_sharded(
            program, module, tensor_parallel, generics, weights, root, entry, bindings, cast_dtype
        )
    warn_unsharded(dict(generics or {}), UNSHARDED_HOW)
    if weights is None and root is None and root_block(program, None) is None:
        info = module_entry_info(program, entry)
        signature = module_entry(program, module, info.name)
        return LinnetJaxFunction(
            program, signature, model=None, module=module, parameters={}, stablehlo=stablehlo
        )
    model = bind(program, root=root, generics=generics)
    name = block_entry(model.root.info, entry).name
    arrays = bind_weights(model, weights, bindings=bindings, cast_dtype=cast_dtype)
    return LinnetJaxFunction(
        program,
        model.entries[name],
        model=model,
        module=module,
        parameters=device_parameters(model, arrays),
        stablehlo=stablehlo,
    )


def load_source(
    source: Source,
    *,
    generics: Mapping[str, object] | None = None,
    weights: WeightsSource | None = None,
    root: str | None = None,
    entry: str | None = None,
    bindings: Any = None,
    std_root: str | os.PathLike[str] | None = None,
    cast_dtype: bool = False,
    tensor_parallel: Any = None,
) -> LinnetJaxFunction:
    """One entry as generated `jax.numpy` source under `jax.jit` (differentiable).

    `generics` binds the root block's generics; `entry` picks the entry
    (default `forward`, or the only one); `bindings` maps paths to checkpoint
    names; `cast_dtype` converts stored dtypes to the declared ones.
    `tensor_parallel=mesh` (a `jax.sharding.Mesh`) splits a model with a `Shards`
    generic over a one-axis mesh under `jax.shard_map` (`linnet.jax.parallel`):
    `Shards` is the axis size, `weights` the whole (one-shard) checkpoint.

    >>> import numpy as np
    >>> f = load_source('''module doc
    ... pub block Scale<H: Dim> {
    ...     param gain: Tensor[H; f32]
    ...     pub entry forward<B: Dim>(x: Tensor[B, H; f32]) -> Tensor[B, H; f32] {
    ...         return x * gain
    ...     }
    ... }''', generics={"H": 2}, weights={"gain": np.array([2.0, 3.0], np.float32)})
    >>> np.asarray(f(np.ones((1, 2), np.float32)))
    array([[2., 3.]], dtype=float32)
    """
    return open_entry(
        source,
        generics=generics,
        weights=weights,
        root=root,
        entry=entry,
        bindings=bindings,
        std_root=std_root,
        cast_dtype=cast_dtype,
        stablehlo=False,
        tensor_parallel=tensor_parallel,
    )


def load(
    source: Source,
    *,
    generics: Mapping[str, object] | None = None,
    weights: WeightsSource | None = None,
    root: str | None = None,
    entry: str | None = None,
    bindings: Any = None,
    std_root: str | os.PathLike[str] | None = None,
    cast_dtype: bool = False,
    tensor_parallel: Any = None,
) -> LinnetJaxFunction:
    """One entry as its StableHLO text, compiled by XLA once per input types (not differentiable).

    Same arguments and calling conventions as `load_source`; `jax.grad`
    through it raises a `LinnetError` that points to `load_source`, and so does
    `tensor_parallel=` (the exported StableHLO has no collectives).
    """
    return open_entry(
        source,
        generics=generics,
        weights=weights,
        root=root,
        entry=entry,
        bindings=bindings,
        std_root=std_root,
        cast_dtype=cast_dtype,
        stablehlo=True,
        tensor_parallel=tensor_parallel,
    )


UNSHARDED_HOW = "load with linnet.jax.load_source(..., tensor_parallel=mesh) to split it"


def _open_sharded(
    program: CheckedProgram,
    module: str,
    mesh: Any,
    generics: Mapping[str, object] | None,
    weights: WeightsSource | None,
    root: str | None,
    entry: str | None,
    bindings: Any,
    cast_dtype: bool,
) -> LinnetJaxFunction:
    """One entry of a model split over `mesh` (`linnet.jax.parallel`)."""
    from linnet.jax.parallel import tensor_parallel_for
    from linnet.target import block_entry, root_block

    if root is None and root_block(program, None) is None:
        raise LinnetError(
            "tensor_parallel=mesh needs a root block with a `Shards: Dim` generic "
            "(language-extensions 7.1)"
        )
    tp = tensor_parallel_for(mesh, program, root, dict(generics or {}))
    name = block_entry(tp.sharded.root.info, entry).name
    arrays = bind_weights(tp.whole, weights, bindings=bindings, cast_dtype=cast_dtype)
    return LinnetJaxFunction(
        program,
        tp.sharded.entries[name],
        model=tp.sharded,
        module=module,
        parameters=device_parameters(tp.whole, arrays, tp.placement),
        stablehlo=False,
        tensor_parallel=tp,
    )
