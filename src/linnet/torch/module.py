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

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from linnet.check.types import ScalarDType, ScalarType
from linnet.errors import InternalError, LinnetError
from linnet.ir.bind import BoundModel, EntrySignature, generics_key
from linnet.ir.core import Function, TensorType, dtype_of_numpy, numpy_dtype
from linnet.torch.analysis import walk
from linnet.torch.codegen import CompiledFunction
from linnet.torch.dtypes import FLOATS, linnet_dtype, storage, to_torch
from linnet.torch.runner import Runner

Result = torch.Tensor | tuple[torch.Tensor, ...] | None


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
    """One entry lowered for one set of input types, ready to run."""

    def __init__(self, fn: Function, run: Runner | CompiledFunction) -> None:
        self.function = fn
        self.run = run
        self.weights = sorted(
            {str(op.attrs["path"]) for op in walk(fn.body) if op.kind in ("param", "buffer")}
        )
        self.state = sorted({str(op.attrs["path"]) for op in walk(fn.body) if op.kind == "state"})

    @property
    def source(self) -> str | None:
        return self.run.source if isinstance(self.run, CompiledFunction) else None


def convert_input(
    value: object, name: str, declared: object, device: torch.device, owner: str
) -> tuple[torch.Tensor, TensorType]:
    """An entry input as a storage tensor and its IR type; LinnetError naming the input."""
    if isinstance(value, torch.Tensor):
        dtype = linnet_dtype(value.dtype)
        if dtype is None:
            raise LinnetError(
                f"{owner}: input `{name}` has dtype {value.dtype}, which Linnet lacks"
            )
        if not same_device(value.device, device):
            raise LinnetError(
                f"{owner}: input `{name}` is on {value.device}, the model on {device}"
            )
        return value, TensorType(tuple(value.shape), dtype)
    if isinstance(value, np.ndarray):
        try:
            dtype = dtype_of_numpy(value.dtype)
        except InternalError:
            raise LinnetError(
                f"{owner}: input `{name}` has NumPy dtype {value.dtype}, which Linnet lacks"
            ) from None
        return to_torch(value, dtype, device), TensorType(tuple(value.shape), dtype)
    if isinstance(value, bool | int | float):
        if not isinstance(declared, ScalarType):
            raise LinnetError(f"{owner}: input `{name}` needs a tensor, got a Python number")
        if not isinstance(declared.dtype, ScalarDType):
            raise LinnetError(
                f"{owner}: input `{name}` has a generic dtype; pass a rank-0 tensor instead"
            )
        dtype = declared.dtype.name
        return _scalar(value, dtype, device, f"{owner}: input `{name}`"), TensorType((), dtype)
    raise LinnetError(f"{owner}: input `{name}` must be a tensor, got {type(value).__name__}")


def same_device(a: torch.device, b: torch.device) -> bool:
    """`cuda` and `cuda:0` name one device when the index is left out."""
    return a.type == b.type and (a.index is None or b.index is None or a.index == b.index)


def _scalar(value: bool | float, dtype: str, device: torch.device, what: str) -> torch.Tensor:
    """A Python number as a rank-0 tensor of `dtype`, refusing silent conversions."""
    kind = "bool" if isinstance(value, bool) else "int" if isinstance(value, int) else "float"
    fits = {"bool": dtype == "bool", "int": dtype != "bool", "float": dtype in FLOATS}[kind]
    if not fits:
        raise LinnetError(f"{what} is {dtype}; got a Python {kind} ({value!r})")
    try:
        return to_torch(np.asarray(value, dtype=numpy_dtype(dtype)), dtype, device)
    except OverflowError:
        raise LinnetError(f"{what} is {dtype}; {value!r} is out of its range") from None


class LinnetModule(nn.Module):
    """A Linnet root block as an `nn.Module` (see the module docstring).

    `forward(*inputs)` runs the entry named `forward` (or the only entry);
    `run_entry(name, inputs)` runs any entry; `reset_state()` zeroes the state;
    `generated_source(entry)` shows the Python source of an entry (`compile=True`).
    """

    def __init__(
        self,
        model: BoundModel,
        arrays: Mapping[str, np.ndarray],
        *,
        device: torch.device | str = "cpu",
        compile: bool = False,
        trainable: bool = False,
    ) -> None:
        super().__init__()
        self._bound = model
        self._device = torch.device(device)
        self._compiled = compile
        self._trainable = trainable
        self._present = frozenset(arrays)
        self._slots: dict[str, tuple[dict[str, Any], str]] = {}
        self._state_paths: list[str] = []
        self._prepared: dict[tuple[object, ...], Prepared] = {}
        self._latest: dict[str, Prepared] = {}
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
        a tuple, none as None."""
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
        values = self._order(signature, positional, named)
        owner = f"entry `{name}`"
        converted = [
            convert_input(v, spec.name, spec.type, self._device, owner)
            for v, spec in zip(values, signature.inputs, strict=False)
        ]
        tensors = [t for t, _ in converted]
        prepared = self.prepare(name, [t for _, t in converted], generics)
        weights = {p: self._get(p) for p in prepared.weights}
        state = {p: self._get(p) for p in prepared.state}
        results, updates = prepared.run(weights, state, tensors)
        for path, value in updates.items():
            table, leaf = self._slots[path]
            table[leaf] = value.detach()
        if not results:
            return None
        return results[0] if len(results) == 1 else tuple(results)

    def _get(self, path: str) -> torch.Tensor:
        table, name = self._slots[path]
        value: torch.Tensor = table[name]
        return value

    def _signature(self, name: str) -> EntrySignature:
        found = self._bound.entries.get(name)
        if found is None:
            listed = ", ".join(f"`{n}`" for n in self._bound.entries) or "none"
            raise LinnetError(f"the model has no entry `{name}` (entries: {listed})")
        return found

    @staticmethod
    def _order(
        signature: EntrySignature, positional: Sequence[object], named: Mapping[str, object]
    ) -> list[object]:
        by_name = dict(named)
        ordered = list(positional)
        specs = signature.inputs
        for spec in specs[len(ordered) :]:
            if spec.name in by_name:
                ordered.append(by_name.pop(spec.name))
            else:
                break
        if by_name:
            known = ", ".join(f"`{s.name}`" for s in specs)
            raise LinnetError(
                f"entry `{signature.name}` has no input `{next(iter(by_name))}` (inputs: {known})"
            )
        return ordered

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
            run = make_runner(fn, self._device, compile=self._compiled, trainable=self._trainable)
            found = self._prepared[key] = Prepared(fn, run)
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
