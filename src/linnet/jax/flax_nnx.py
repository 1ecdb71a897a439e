"""`linnet.jax.load_nnx` / `to_nnx`: a Linnet model as Flax NNX modules nested after its blocks.

Stage: an adapter over `load_source` (architecture.md "Backends"), for JAX
users who train with Flax NNX and optax. In: a source, generics and weights
(as `load_source`), or an already loaded `LinnetJaxFunction` / `JaxModel`.
Out: a tree of `nnx.Module`s that mirrors the bound block tree:

- each block instance is an instance of an `nnx.Module` subclass named after
  the Linnet block (one class per block name, subclasses of `LinnetBlock`);
  its attributes are its members: a `param` is an `nnx.Param`, a `buffer` a
  `Buffer` and a `state` member a `StateVar` (both `nnx.Variable`s, so
  `nnx.grad` and `nnx.Optimizer` leave them alone by default); a `sub` is
  the child's module, an array of blocks an `nnx.List` of them. Absent
  optional members and children (12.8) are not there;
- `nnx.state(module)` therefore has the Linnet parameter paths, e.g.
  `model.layers.0.self_attn.q_proj.weight` (`parameter_paths` flattens it);
- the root module's `__call__` runs the default entry (or the one chosen with
  `entry=`), and every entry whose name is free is also a method
  (`module.prefill(tokens, 0)`); `run_entry(name, *inputs)` reaches any.
  A call runs the entry's generated `jax.numpy` source with the module's
  *current* variable values, so `nnx.grad`, `nnx.jit` and `nnx.Optimizer`
  see through it. A stateful entry returns only its result: the next state
  is written into the `StateVar`s (under `nnx.jit` too), as a KV cache in
  Flax is kept; `reset_state()` zeroes them.

Nested modules are containers: entries run from the root, since lowering
works on the whole bound model.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from linnet.errors import LinnetError
from linnet.ir.bind import BlockInstance, BoundModel
from linnet.jax.load import LinnetJaxFunction, Source, WeightsSource, device_array, open_entry
from linnet.jax.model import JaxModel
from linnet.target import DEFAULT_ENTRY


class Buffer(nnx.Variable[Any]):
    """A Linnet `buffer`: loaded with the weights, read by the entries, not trained."""


class StateVar(nnx.Variable[Any]):
    """A Linnet `state` member (language.md 12.6): zeros at first, assigned by entries."""


class LinnetBlock(nnx.Module):
    """A Linnet block instance as an NNX module; its attributes are the block's members."""


class Entries:
    """The root's entry functions (static data of the module graph: compared by identity)."""

    def __init__(self, functions: Mapping[str, LinnetJaxFunction], default: str) -> None:
        self.functions = dict(functions)
        self.default = default


class LinnetRoot(LinnetBlock):
    """The root block: its entries run the model with the module's current variables."""

    _linnet: Entries

    @property
    def entries(self) -> list[str]:
        return list(self._linnet.functions)

    def __call__(
        self, *inputs: Any, generics: Mapping[str, object] | None = None, **named: Any
    ) -> Any:
        return self.run_entry(self._linnet.default, *inputs, generics=generics, **named)

    def run_entry(
        self,
        name: str,
        *inputs: Any,
        generics: Mapping[str, object] | None = None,
        **named: Any,
    ) -> Any:
        """Run entry `name`; a stateful entry writes its next state into the `StateVar`s."""
        fn = self._linnet.functions.get(name)
        if fn is None:
            listed = ", ".join(f"`{n}`" for n in self._linnet.functions) or "none"
            raise LinnetError(f"the model has no entry `{name}` (entries: {listed})")
        variables = flat_variables(self)
        parameters = {p: v[...] for p, v in variables.items() if not isinstance(v, StateVar)}
        missing = sorted(fn.present - set(parameters))
        if missing:
            raise LinnetError(f"the NNX module lacks the variable `{missing[0]}` the model reads")
        prepared = fn.prepare_for(inputs, named, generics)
        if not prepared.stateful:
            return fn.apply(parameters, *inputs, generics=generics, **named)
        state = {p: v[...] for p, v in variables.items() if isinstance(v, StateVar)}
        result, new_state = fn.apply(parameters, *inputs, state=state, generics=generics, **named)
        for path in prepared.function.state_updates:
            variables[path].set_value(new_state[path])
        return result

    def reset_state(self) -> None:
        """Every state member back to zeros (its value before the first call, 12.6)."""
        for variable in flat_variables(self).values():
            if isinstance(variable, StateVar):
                variable.set_value(jnp.zeros_like(variable[...]))

    def parameter_paths(self) -> list[str]:
        """The Linnet paths of every param, buffer and state member (in NNX's sorted order)."""
        return list(flat_variables(self))


def flat_variables(module: nnx.Module) -> dict[str, nnx.Variable[Any]]:
    """Every variable of `module` by its dotted path (the Linnet parameter path)."""
    found: dict[str, nnx.Variable[Any]] = {}
    for path, node in nnx.iter_graph(module):
        if isinstance(node, nnx.Variable):
            found[".".join(str(part) for part in path)] = node
    return found


def new_root(name: str, methods: Mapping[str, Any], entries: Entries) -> LinnetRoot:
    """An empty root module of a new `LinnetRoot` subclass `name` with `methods`."""
    cls: type[LinnetRoot] = type(name, (LinnetRoot,), {"__module__": __name__, **methods})
    module = cls()
    module._linnet = entries
    return module


def entry_method(name: str) -> Callable[..., Any]:
    def method(
        self: LinnetRoot, *inputs: Any, generics: Mapping[str, object] | None = None, **named: Any
    ) -> Any:
        return self.run_entry(name, *inputs, generics=generics, **named)

    method.__name__ = name
    method.__doc__ = f"Run the Linnet entry `{name}` (see `LinnetRoot.run_entry`)."
    return method


class TreeBuilder:
    """Builds the module tree of one bound model: one class per block name."""

    def __init__(
        self, model: BoundModel, values: Mapping[str, Any], present: frozenset[str]
    ) -> None:
        self.model = model
        self.values = values
        self.present = present
        self.classes: dict[str, type[LinnetBlock]] = {}

    def block_class(self, name: str) -> type[LinnetBlock]:
        found = self.classes.get(name)
        if found is None:
            found = self.classes[name] = type(name, (LinnetBlock,), {"__module__": __name__})
        return found

    def fill(self, module: LinnetBlock, instance: BlockInstance) -> None:
        taken = {n for n in dir(type(module)) if not n.startswith("__")}
        for name, member in instance.info.members.items():
            path = instance.member_path(name)
            if name in taken:
                raise LinnetError(
                    f"member `{name}` of block `{instance.info.name}` (path `{path}`) has the "
                    f"name of an attribute of its NNX module ({type(module).__mro__[1].__name__}"
                    f".{name}); rename it, or use linnet.jax.load_source, whose parameters "
                    "are a dict by path"
                )
            if member.kind == "sub":
                self.fill_sub(module, name, path, instance.subs[name])
                continue
            bound = self.model.tensors[path]
            if not self.model.tensor_live(path, self.present):
                continue
            if bound.kind == "state":
                setattr(module, name, StateVar(self.values[path]))
            elif bound.kind == "buffer":
                setattr(module, name, Buffer(self.values[path]))
            else:
                setattr(module, name, nnx.Param(self.values[path]))

    def fill_sub(
        self, module: LinnetBlock, name: str, path: str, sub: BlockInstance | list[BlockInstance]
    ) -> None:
        if isinstance(sub, list):
            setattr(module, name, nnx.List([self.block(child) for child in sub]))
            return
        if path in self.model.optional_subs and not self.model.sub_present(path, self.present):
            return
        setattr(module, name, self.block(sub))

    def block(self, instance: BlockInstance) -> LinnetBlock:
        module = self.block_class(instance.info.name)()
        self.fill(module, instance)
        return module

    def root(self, entries: Entries) -> LinnetRoot:
        info = self.model.root.info
        reserved = set(dir(LinnetRoot)) | set(info.members)
        methods: dict[str, Any] = {
            name: entry_method(name) for name in entries.functions if name not in reserved
        }
        module = new_root(info.name, methods, entries)
        self.fill(module, self.model.root)
        return module


def default_entry(names: list[str], chosen: str | None) -> str:
    if chosen is not None:
        return chosen
    if DEFAULT_ENTRY in names or len(names) != 1:
        return DEFAULT_ENTRY
    return names[0]


def build(
    model: BoundModel,
    parameters: Mapping[str, Any],
    state: Mapping[str, Any] | None,
    default: str | None,
    given: LinnetJaxFunction | None = None,
) -> LinnetRoot:
    """The module tree over `parameters` (path -> device array), state zeros unless given.

    The entry functions built here always run with the module's values, so
    they hold only the shapes of the loaded arrays: once an optimizer has
    replaced the `Param`s, the first values are not kept alive twice.
    """
    present = frozenset(parameters)
    shape_of: Any = jax.ShapeDtypeStruct  # untyped in jax's stubs
    shapes = {path: shape_of(a.shape, a.dtype) for path, a in parameters.items()}
    module_name = model.program.graph.roots[0]
    functions: dict[str, LinnetJaxFunction] = {}
    for name, signature in model.entries.items():
        if given is not None and not given.stablehlo and given.name == name:
            functions[name] = given
            continue
        functions[name] = LinnetJaxFunction(
            model.program,
            signature,
            model=model,
            module=module_name,
            parameters=shapes,
            stablehlo=False,
        )
    chosen = default_entry(list(functions), default)
    if chosen not in functions:
        listed = ", ".join(f"`{n}`" for n in functions) or "none"
        raise LinnetError(f"the model has no entry `{chosen}` (entries: {listed})")
    values: dict[str, Any] = dict(parameters)
    for path, t in model.live_tensors(present, "state").items():
        if state is not None and path in state:
            values[path] = jnp.array(state[path], copy=True)
        else:
            values[path] = device_array(np.zeros(t.shape), t.dtype)
    return TreeBuilder(model, values, present).root(Entries(functions, chosen))


def entry_only(fn: LinnetJaxFunction) -> LinnetRoot:
    """A module-level entry (11.7): no block, no variables; calling it runs the entry."""
    if fn.stablehlo:
        fn = LinnetJaxFunction(
            fn.program,
            fn.signature,
            model=None,
            module=fn.module_name,
            parameters={},
            stablehlo=False,
        )
    return new_root("LinnetEntry", {}, Entries({fn.name: fn}, fn.name))


def to_nnx(fn_or_model: LinnetJaxFunction | JaxModel) -> LinnetRoot:
    """A loaded function or model as NNX modules over the same device arrays.

    From a `LinnetJaxFunction` (`load_source` or `load`), its entry becomes
    `__call__`; from a `JaxModel`, the default entry, with its current state
    copied into the `StateVar`s. Every entry runs as generated `jax.numpy`
    source (differentiable), whichever way the input ran.
    """
    if isinstance(fn_or_model, JaxModel):
        return build(fn_or_model.model, fn_or_model.parameters, fn_or_model.state, None)
    if not isinstance(fn_or_model, LinnetJaxFunction):
        raise LinnetError(
            "to_nnx takes what linnet.jax.load_source, load or load_model returned, "
            f"not {type(fn_or_model).__name__}"
        )
    if fn_or_model.model is None:
        return entry_only(fn_or_model)
    return build(fn_or_model.model, fn_or_model.parameters, None, fn_or_model.name, fn_or_model)


def load_nnx(
    source: Source,
    *,
    generics: Mapping[str, object] | None = None,
    weights: WeightsSource | None = None,
    root: str | None = None,
    entry: str | None = None,
    bindings: Any = None,
    std_root: str | os.PathLike[str] | None = None,
    cast_dtype: bool = False,
) -> LinnetRoot:
    """The model as Flax NNX modules (see the module docstring); arguments as `load_source`.

    `entry` picks the entry `__call__` runs (default `forward`, or the only one).
    """
    fn = open_entry(
        source,
        generics=generics,
        weights=weights,
        root=root,
        entry=entry,
        bindings=bindings,
        std_root=std_root,
        cast_dtype=cast_dtype,
        stablehlo=False,
    )
    return to_nnx(fn)
