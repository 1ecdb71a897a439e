"""`LinnetModule`: a bound Linnet model as a `torch.nn.Module`.

Stage: the PyTorch backend's runtime object (architecture.md "Backends").
In: a `BoundModel` (`linnet.ir.bind`), the bound weight arrays by path and
the options of `linnet.torch.load`. Out: an `nn.Module` whose

- params and buffers are registered under their Linnet paths, so
  `state_dict()` keys ARE the parameter paths (`layers.0.attn.q.weight`,
  language.md 12.7): one child module per path segment. Params are
  `nn.Parameter`s when the module is trainable, persistent buffers otherwise;
- state members (12.6) are non-persistent buffers at their paths (zeros at
  first, kept between calls, `reset_state()` zeroes them); checkpoints neither
  contain nor receive them. A state value produced with autograd is stored
  detached, so one call's graph never reaches into the next;
- entries run through a cache keyed by (entry, input types, explicit
  generics): the first call with new shapes lowers the entry (6.7 step 4),
  optimises it, and prepares either the interpreted runner or generated source.

Dtypes: `u16`/`u32`/`u64` tensors are held in wider signed storage (see
`linnet.torch.dtypes`) and come out of entries that way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from linnet.errors import LinnetError
from linnet.ir.bind import BoundModel, EntrySignature, InputSpec, generics_key
from linnet.ir.core import Function, TensorType
from linnet.ir.inputs import (
    check_inputs,
    crossing_dtype,
    declared_dtype,
    host_input,
    input_checks,
    order_inputs,
)
from linnet.ir.results import regroup
from linnet.torch.analysis import walk
from linnet.torch.codegen import CompiledFunction
from linnet.torch.dtypes import INTEGERS, linnet_dtype, storage, to_torch
from linnet.torch.natives_quant import INT8_ACTIVATIONS
from linnet.torch.runner import Runner
from linnet.weights.safetensors import release_mapped

Result = torch.Tensor | tuple[torch.Tensor, ...] | None
Array = np.ndarray[Any, Any]


class _Node(nn.Module):
    """One segment of a parameter path; holds children, params and buffers only."""


def make_runner(
    fn: Function, device: torch.device, *, compile: bool, trainable: bool
) -> Runner | CompiledFunction:
    """The interpreted or generated form of `fn` (weights hoisted unless trainable)."""
    if compile:
        return CompiledFunction(fn, device, hoist_weights=not trainable)
    return Runner(fn, device, hoist_weights=not trainable)


class Prepared:
    """One entry lowered for one set of input types, ready to run.

    `checks` are what `linnet.ir.inputs.check_inputs` refuses before a call runs
    (`model` names the extents in its messages).
    """

    def __init__(
        self, fn: Function, run: Runner | CompiledFunction, model: BoundModel | None = None
    ) -> None:
        self.function = fn
        self.run = run
        self.checks = input_checks(fn, model)
        self.weights = sorted(
            {str(op.attrs["path"]) for op in walk(fn.body) if op.kind in ("param", "buffer")}
        )
        self.state = sorted({str(op.attrs["path"]) for op in walk(fn.body) if op.kind == "state"})
        self.slots: tuple[list[tuple[str, dict[str, Any], str]], ...] | None = None
        """`(path, table, name)` of each weight and state path: the module's parameter or
        buffer table holding it (`LinnetModule._slots`, fixed at construction), so a call
        reads each tensor with one lookup (a decode step reads about 200 at 22 layers)."""

    @property
    def source(self) -> str | None:
        return self.run.source if isinstance(self.run, CompiledFunction) else None


def convert_input(
    value: object,
    spec: InputSpec,
    signature: EntrySignature,
    device: torch.device,
    owner: str,
) -> tuple[torch.Tensor, TensorType, Array | None]:
    """An entry input as a storage tensor of the dtype the entry receives, its IR type,
    and its host values for `check_inputs` (None for a tensor on a GPU, whose values are
    not checked, and for non-integer tensors); LinnetError naming the input."""
    if isinstance(value, torch.Tensor):
        dtype = linnet_dtype(value.dtype)
        if dtype is None:
            raise LinnetError(
                f"{owner}: input `{spec.name}` has dtype {value.dtype}, which Linnet lacks"
            )
        if not same_device(value.device, device):
            raise LinnetError(
                f"{owner}: input `{spec.name}` is on {value.device}, the model on {device}"
            )
        target = crossing_dtype(dtype, declared_dtype(signature, spec))
        on_host = value.device.type == "cpu" and dtype in INTEGERS
        host = value.detach().numpy() if on_host else None
        tensor = value if target == dtype else value.to(storage(target))
        return tensor, TensorType(tuple(value.shape), target), host
    given = host_input(value, spec, signature, owner)
    if given is None:
        raise LinnetError(
            f"{owner}: input `{spec.name}` must be a tensor, got {type(value).__name__}"
        )
    return to_torch(given.array, given.dtype, device), given.type, given.array


def same_device(a: torch.device, b: torch.device) -> bool:
    """`cuda` and `cuda:0` name one device when the index is left out."""
    return a.type == b.type and (a.index is None or b.index is None or a.index == b.index)


class LinnetModule(nn.Module):
    """A Linnet root block as an `nn.Module` (see the module docstring).

    `forward(*inputs)` runs the entry named `forward` (or the only entry);
    `run_entry(name, inputs)` runs any entry; `reset_state()` zeroes the state;
    `generated_source(entry)` shows the Python source of an entry (`compile=True`).
    `int8_activations` (`linnet.torch.load`'s option) holds for every entry call.
    """

    def __init__(
        self,
        model: BoundModel,
        arrays: Mapping[str, np.ndarray],
        *,
        device: torch.device | str = "cpu",
        compile: bool = False,
        trainable: bool = False,
        tensor_parallel: bool = False,
        int8_activations: bool = False,
    ) -> None:
        super().__init__()
        self._bound = model
        self._tensor_parallel = tensor_parallel
        self._int8_activations = int8_activations
        self._device = torch.device(device)
        self._compiled = compile
        self._trainable = trainable
        self._present = frozenset(arrays)
        self._slots: dict[str, tuple[dict[str, Any], str]] = {}
        self._state_paths: list[str] = []
        self._prepared: dict[tuple[object, ...], Prepared] = {}
        self._latest: dict[str, Prepared] = {}
        self._views: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {}
        # Paths bound to one stored tensor (tied weights, 12.9) share one torch tensor.
        shared: dict[int, torch.Tensor] = {}
        for path, t in model.live_tensors(self._present, "param").items():
            tensor = self._initial(path, t, arrays, shared)
            if trainable and not isinstance(tensor, nn.Parameter):
                grad = t.dtype in ("f16", "bf16", "f32", "f64")
                tensor = nn.Parameter(tensor, requires_grad=grad)
                if path in arrays:
                    shared[id(arrays[path])] = tensor
            self._register(path, tensor, "param" if trainable else "buffer")
        for path, t in model.live_tensors(self._present, "buffer").items():
            self._register(path, self._initial(path, t, arrays, shared), "buffer")
        for path, t in model.live_tensors(self._present, "state").items():
            zeros = torch.zeros(t.shape, dtype=storage(t.dtype), device=self._device)
            self._register(path, zeros, "state")
            self._state_paths.append(path)

    # NOTE: the module's own attributes are private (`_bound`, `_device`, ...) because
    # root members become attributes too: transformers' Llama paths start with `model.`.

    @property
    def linnet_model(self) -> BoundModel:
        """The bound model: root block, concrete tensor paths, entry signatures."""
        return self._bound

    @property
    def present_paths(self) -> frozenset[str]:
        """The tensor paths the checkpoint provided (optional ones included when present)."""
        return self._present

    # -- construction ----------------------------------------------------------------------

    def _initial(
        self,
        path: str,
        t: TensorType,
        arrays: Mapping[str, np.ndarray],
        shared: dict[int, torch.Tensor],
    ) -> torch.Tensor:
        if path not in arrays:
            return torch.zeros(t.shape, dtype=storage(t.dtype), device=self._device)
        array = arrays[path]
        found = shared.get(id(array))
        if found is None or found.dtype != storage(t.dtype) or tuple(found.shape) != t.shape:
            found = shared[id(array)] = to_torch(array, t.dtype, self._device)
            # A checkpoint's arrays are views of its file mapping: once copied, drop their
            # pages, so the process never holds the weights twice (mapped and copied)
            release_mapped(array)
        return found

    def _register(self, path: str, tensor: torch.Tensor, kind: str) -> None:
        *parents, leaf = path.split(".")
        node: nn.Module = self
        for segment in parents:
            child = node._modules.get(segment)
            if child is None:
                self._check_name(node, segment, path)
                child = _Node()
                node.add_module(segment, child)
            node = child
        self._check_name(node, leaf, path)
        if isinstance(tensor, nn.Parameter):
            node.register_parameter(leaf, tensor)
            self._slots[path] = (node._parameters, leaf)
        else:
            node.register_buffer(leaf, tensor, persistent=kind != "state")
            self._slots[path] = (node._buffers, leaf)

    @staticmethod
    def _check_name(node: nn.Module, name: str, path: str) -> None:
        if hasattr(node, name) and name not in node._modules:
            raise LinnetError(
                f"the path `{path}` cannot be a torch module attribute: `{name}` is "
                "already an nn.Module attribute; rename that member"
            )

    def _apply(self, fn: Any, recurse: bool = True) -> LinnetModule:
        """`.to()`, `.cuda()`... move every tensor; prepared entries are rebuilt for the device."""
        super()._apply(fn, recurse)  # type: ignore[no-untyped-call]
        for table, name in self._slots.values():
            self._device = table[name].device
            break
        self._prepared.clear()
        self._latest.clear()
        return self

    # -- tensors by path -------------------------------------------------------------------

    def tensor(self, path: str) -> torch.Tensor:
        """The param, buffer or state tensor at a Linnet path."""
        found = self._slots.get(path)
        if found is None:
            raise LinnetError(f"the model has no tensor at `{path}`")
        table, name = found
        value: torch.Tensor = table[name]
        return value

    def reset_state(self) -> None:
        """Zero every state member (its value before the first call, language.md 12.6)."""
        for path in self._state_paths:
            table, name = self._slots[path]
            table[name] = torch.zeros_like(table[name])

    # -- entries ---------------------------------------------------------------------------

    @property
    def entries(self) -> list[str]:
        return list(self._bound.entries)

    def default_entry(self) -> str:
        """`forward`, or the only entry (11.1: backends use `forward` as the default)."""
        if "forward" in self._bound.entries:
            return "forward"
        if len(self._bound.entries) == 1:
            return next(iter(self._bound.entries))
        listed = ", ".join(f"`{n}`" for n in self._bound.entries) or "none"
        raise LinnetError(f"the model has no `forward` entry; use run_entry (entries: {listed})")

    def forward(self, *inputs: object, **named: object) -> Result:
        return self._run(self.default_entry(), inputs, named, None)

    def run_entry(
        self,
        name: str,
        inputs: Sequence[object] | Mapping[str, object] = (),
        generics: Mapping[str, object] | None = None,
    ) -> Result:
        """Run entry `name`; `inputs` in order or by input name; `generics` fixes entry
        generics that no input determines. One result comes back as a tensor, several as
        a tuple, none as None.

        Before anything runs the inputs are checked (`linnet.ir.inputs`): their number,
        Python numbers against the input's dtype, integer inputs used as indices against
        their range (a token id within the vocabulary, a cache position within the cache),
        each a `LinnetError`. Integer tensors of another integer dtype (int64 token ids)
        are converted to the declared one when every value fits. Tensors on a GPU skip
        the value checks (reading them would synchronise the device)."""
        if isinstance(inputs, Mapping):
            return self._run(name, (), inputs, generics)
        return self._run(name, inputs, {}, generics)

    def _run(
        self,
        name: str,
        positional: Sequence[object],
        named: Mapping[str, object],
        generics: Mapping[str, object] | None,
    ) -> Result:
        signature = self._signature(name)
        values = order_inputs(signature, positional, named)
        owner = f"entry `{name}`"
        converted = [
            convert_input(v, spec, signature, self._device, owner)
            for v, spec in zip(values, signature.inputs[: len(values)], strict=True)
        ]
        tensors = [t for t, _, _ in converted]
        prepared = self.prepare(name, [t for _, t, _ in converted], generics)
        check_inputs(prepared.checks, [h for _, _, h in converted], owner)
        slots = prepared.slots
        if slots is None:  # the tables holding each path's tensor, found once per entry
            slots = prepared.slots = (
                [(p, *self._slots[p]) for p in prepared.weights],
                [(p, *self._slots[p]) for p in prepared.state],
            )
        if self._views:
            weights = {p: self._weight(p) for p in prepared.weights}
        else:
            weights = {p: table[leaf] for p, table, leaf in slots[0]}
        state = {p: table[leaf] for p, table, leaf in slots[1]}
        token = INT8_ACTIVATIONS.set(self._int8_activations)
        try:
            results, updates = prepared.run(weights, state, tensors)
        finally:
            INT8_ACTIVATIONS.reset(token)
        for path, value in updates.items():
            table, leaf = self._slots[path]
            # detached only when it carries a graph: a cache written in place comes back as
            # the stored tensor itself, kept as it is (no new alias each step)
            table[leaf] = value.detach() if value.requires_grad else value
        return regroup(results, signature.fn.result)  # type: ignore[return-value]

    def _get(self, path: str) -> torch.Tensor:
        table, name = self._slots[path]
        value: torch.Tensor = table[name]
        return value

    def _weight(self, path: str) -> torch.Tensor:
        view = self._views.get(path)
        return self._get(path) if view is None else view(self._get(path))

    def set_weight_view(
        self, path: str, view: Callable[[torch.Tensor], torch.Tensor] | None
    ) -> None:
        """Entries read the param at `path` as `view(param)` from now on (None: as stored).

        How `linnet.train.lora` attaches adapters: the view runs on every call, so the
        prepared entries (lowered IR, generated source) stay as they are. Only a trainable
        module qualifies, since a frozen one hoists weight-only work out of its calls.
        """
        if path not in self._slots or path in self._state_paths:
            raise LinnetError(f"the model has no param or buffer at `{path}`")
        if not self._trainable:
            raise LinnetError(
                f"a view of `{path}` needs a trainable module: load it with trainable=True"
            )
        if view is None:
            self._views.pop(path, None)
        else:
            self._views[path] = view

    def _signature(self, name: str) -> EntrySignature:
        found = self._bound.entries.get(name)
        if found is None:
            listed = ", ".join(f"`{n}`" for n in self._bound.entries) or "none"
            raise LinnetError(f"the model has no entry `{name}` (entries: {listed})")
        return found

    def prepare(
        self,
        name: str,
        input_types: Sequence[TensorType],
        generics: Mapping[str, object] | None = None,
    ) -> Prepared:
        """The lowered, optimised and prepared entry for these input types (cached)."""
        key = (name, tuple(input_types), generics_key(generics))
        found = self._prepared.get(key)
        if found is None:
            from linnet.ir.lower import lower_entry
            from linnet.ir.passes import optimize

            fn = lower_entry(self._bound, name, input_types, self._present, generics=generics)
            fn = optimize(fn)
            if self._tensor_parallel:
                from linnet.torch.parallel import mark_collectives

                fn = mark_collectives(fn)
            run = make_runner(fn, self._device, compile=self._compiled, trainable=self._trainable)
            found = self._prepared[key] = Prepared(fn, run, self._bound)
        self._latest[name] = found
        return found

    def generated_source(
        self, entry: str | None = None, input_types: Sequence[TensorType] | None = None
    ) -> str:
        """The generated Python source of `entry` for `input_types`, or for its latest call.

        Source exists only for `compile=True` modules; the interpreted path has none.
        """
        name = entry or self.default_entry()
        if not self._compiled:
            raise LinnetError("generated source exists only for modules loaded with compile=True")
        if input_types is not None:
            prepared = self.prepare(name, input_types)
        else:
            latest = self._latest.get(name)
            if latest is None:
                raise LinnetError(f"entry `{name}` has not run yet; call it or pass input_types")
            prepared = latest
        source = prepared.source
        assert source is not None
        return source

    def lowered(self, entry: str | None = None) -> Function:
        """The optimised Core IR function of the latest call of `entry`."""
        name = entry or self.default_entry()
        latest = self._latest.get(name)
        if latest is None:
            raise LinnetError(f"entry `{name}` has not run yet")
        return latest.function

    def extra_repr(self) -> str:
        mode = "generated" if self._compiled else "interpreted"
        return f"root={self._bound.root.info.name}, entries={self.entries}, {mode}"
