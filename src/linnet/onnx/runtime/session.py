"""One entry on ONNX Runtime: an `InferenceSession` for one set of input types, run by I/O binding.

Stage: the runtime side of `linnet.onnx`; `model.OnnxModel` makes one
`EntrySession` per (entry, input types, generics, argmax, CUDA graph) and
caches it. In: the entry's exported graph (weights left out, as graph inputs)
and its `Contract`, the providers, the weight `OrtValue`s by path and the
model's `StateStore`. Out: results as host arrays or `OrtValue`s; the store
holds the new state.

Binding (field-notes.md "ONNX and ONNX Runtime"): one `IOBinding` lives as
long as the session. Weights are bound once, when the session is made: the
same `OrtValue`s serve every session of the model, so no run copies a weight.
Each run binds its inputs, the state buffers and the output buffers by name
(`contract` decides, per state, between binding one buffer as input and
output, and a swap). Results are written straight into buffers made for them:
host arrays (on the CPU the runtime writes into the array that is returned),
or device tensors for `keep_on_device`.

CUDA graphs need every bound address fixed: a captured session binds
persistent device buffers for its inputs and results once, copies each call's
inputs into them, and is used only when every state the entry writes keeps its
buffer (no swap) and no result is bf16 (`model.OnnxModel.run_entry`).

Sessions on the CPU share one arena (`session.use_env_allocators` with an
allocator registered once per process), so prefill and decode sessions of one
model do not each hold their own peak.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort  # type: ignore[import-untyped]

from linnet.errors import InternalError, LinnetError
from linnet.ir.core import TensorType
from linnet.onnx.runtime.constants import add_memory_files, constant_weights
from linnet.onnx.runtime.contract import Contract, dtypes_in
from linnet.onnx.runtime.prepack import prepacked_weights
from linnet.onnx.runtime.siblings import merge_siblings
from linnet.onnx.runtime.state import StateStore
from linnet.onnx.runtime.values import Buffer, Device, Provider, provider_name

Result = Any
"""A result: a host `np.ndarray`, or an `OrtValue` (onnxruntime has no type stubs)."""

_GRAPH_OPTIONS = {
    "CUDAExecutionProvider": "enable_cuda_graph",
    "TensorrtExecutionProvider": "trt_cuda_graph_enable",
}
"""The provider option that turns on CUDA graph capture, per provider."""

CPU_SPINNING = False
"""Whether the CPU sessions' idle pool threads spin (ONNX Runtime's own default) or sleep.

Batch-1 decoding is a chain of memory-bound matrix-vector products with small
ops between them; spinning threads pick up the next product sooner, but on a
machine shared with other work they take the cores that product needs.
This is the only setting in which our default differs from ONNX Runtime's
(`session_options`); `load_model(session_options=...)` chooses per model.

Chosen by `bench/decode_defaults.py` (both settings alternated round by round,
rotated order, median tokens/s), on 2 cores shared with other work:
- 4-layer H=1024 Llama, load 8.8-9.4, 8 rounds: spinning off 27.7, on 12.7
  (on / off 0.54, range 0.37-0.60, on faster in 0 of 8 rounds);
- TinyLlama shape (22 layers, 4.4 GB f32), load 5.2-8.2, 6 rounds: off 2.13,
  on 1.11 (0.63, range 0.37-1.04, on faster in 1 of 6).
And on a quiet machine (Intel Xeon, 2 cores, load 1.0-1.5 with the study itself),
TinyLlama shape, 8 rounds: off 6.80, on 7.07 (1.04, range 1.01-1.05, on faster in
8 of 8). Single unalternated runs in the issue had spinning ahead, 1.31x busy and
1.10x on a quieter machine; alternated, spinning gains 4% when the cores are free
and loses 37-46% (up to 2.7x in a round) when they are not. So: off."""

MERGE_SIBLINGS = True
"""Whether CPU sessions merge weight-only products that read the same activation into one
kernel (`siblings`; the same function). A switch for measuring the merge against its absence."""

_shared_arena = False


def session_options(device: Device, base: ort.SessionOptions | None = None) -> ort.SessionOptions:
    """The options of every session: the caller's `base`, or full graph optimisation
    (and pool threads spinning as `CPU_SPINNING` says, on the CPU); on the CPU, the
    process-wide shared arena (one arena for all entries' sessions).

    `base` is used as given (it is the caller's choice of threads, spinning,
    profiling...), with the shared-arena entry added on the CPU.
    """
    global _shared_arena
    options = base
    if options is None:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3  # warnings about unused initialisers are noise here
        if device.kind == "cpu" and not CPU_SPINNING:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if device.kind == "cpu":
        if not _shared_arena:
            info = ort.OrtMemoryInfo(
                "Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT
            )
            ort.create_and_register_allocator(info, ort.OrtArenaCfg(0, -1, -1, -1))
            _shared_arena = True
        if not _has_entry(options, "session.use_env_allocators"):  # once per options object
            options.add_session_config_entry("session.use_env_allocators", "1")
    return options


def _has_entry(options: ort.SessionOptions, key: str) -> bool:
    try:
        return bool(options.get_session_config_entry(key))
    except RuntimeError:  # a missing key
        return False


def graph_providers(providers: Sequence[Provider]) -> list[Provider]:
    """`providers` with CUDA graph capture turned on for the first one."""
    first, *rest = providers
    name = provider_name(first)
    options = dict(first[1]) if isinstance(first, tuple) else {}
    options[_GRAPH_OPTIONS[name]] = "1"
    return [(name, options), *rest]


def can_capture(providers: Sequence[Provider]) -> bool:
    """Whether the first provider can capture CUDA graphs."""
    return bool(providers) and provider_name(providers[0]) in _GRAPH_OPTIONS


def create_session(
    proto: onnx.ModelProto,
    providers: Sequence[Provider],
    device: Device,
    entry: str,
    options: ort.SessionOptions | None = None,
    files: Mapping[str, np.ndarray] | None = None,
) -> ort.InferenceSession:
    """An `InferenceSession` for `proto` (whose in-memory initializer `files` are
    `constants.constant_weights`'); a bf16 graph the providers cannot run is a
    `LinnetError` saying what to do instead."""
    chosen = session_options(device, options)
    add_memory_files(chosen, files or {})
    try:
        return ort.InferenceSession(proto.SerializeToString(), chosen, providers=list(providers))
    except Exception as exc:  # onnxruntime raises its own capi exception classes
        text = str(exc)
        if "NOT_IMPLEMENTED" in text and "bf16" in dtypes_in(proto.graph):
            names = ", ".join(provider_name(p) for p in providers) or "the default provider"
            raise LinnetError(
                f"entry `{entry}` computes in bf16, which ONNX Runtime cannot run on {names}: "
                f"the CPU provider has no bf16 kernels ({text.split(':')[-1].strip()}); "
                "bind the dtype generic to f32 with cast_dtype=True, or run on "
                "providers=['CUDAExecutionProvider']"
            ) from None
        raise InternalError(f"ONNX Runtime rejected the graph of entry `{entry}`: {text}") from exc


class EntrySession:
    """One exported entry for one set of input types (see the module docstring)."""

    def __init__(
        self,
        entry: str,
        proto: onnx.ModelProto,
        contract: Contract,
        providers: Sequence[Provider],
        device: Device,
        weights: Mapping[str, ort.OrtValue],
        *,
        cuda_graph: bool = False,
        options: ort.SessionOptions | None = None,
        prepack: int = 0,
    ) -> None:
        self.entry = entry
        self.proto = proto
        self.contract = contract
        self.device = device
        self.cuda_graph = cuda_graph
        used = graph_providers(providers) if cuda_graph else list(providers)
        constant: dict[str, np.ndarray] = {}
        if device.kind == "cpu":
            if MERGE_SIBLINGS:
                proto = merge_siblings(proto, contract.weights)
            packed = prepacked_weights(proto, contract.weights, weights, prepack)
            proto, constant = constant_weights(proto, contract.weights, weights, packed)
        inputs = {v.name for v in proto.graph.input}
        self.session = create_session(proto, used, device, entry, options, constant)
        # The in-memory initializers' bytes: kept alive with the session.
        self._constant_files = constant
        self.constant_paths = frozenset(
            p for name, p in contract.weights.items() if name not in inputs
        )
        self.binding = self.session.io_binding()
        for name, path in contract.weights.items():
            if name in inputs:
                self.binding.bind_ortvalue_input(name, weights[path])
        self.runs = 0
        self._bound_states: dict[tuple[str, bool], ort.OrtValue] = {}
        self._fixed: dict[str, Buffer] = {}
        self._graph_inputs: list[Buffer | None] = []
        self._graph_results: list[Buffer] = []

    @property
    def providers(self) -> list[str]:
        return list(self.session.get_providers())

    def rebind_weight(self, path: str, value: ort.OrtValue) -> None:
        """Bind `value` as the weight at `path` from the next run on (a session holding
        it as a constant, `constant_paths`, must be remade instead)."""
        if path in self.constant_paths:
            raise InternalError(f"weight `{path}` is a constant of this session; remake it")
        for name, bound in self.contract.weights.items():
            if bound == path:
                self.binding.bind_ortvalue_input(name, value)

    def run(
        self,
        inputs: Sequence[ort.OrtValue],
        input_types: Sequence[TensorType],
        states: StateStore,
        *,
        keep_on_device: bool = False,
        result_types: Sequence[TensorType] | None = None,
    ) -> list[Result]:
        """Run once; `inputs` are device (or host) `OrtValue`s of `input_types`, in entry order.

        `result_types` replaces the contract's for this call (a graph with dynamic sizes).
        """
        if self.cuda_graph:
            return self._replay(inputs, input_types, states, keep_on_device)
        binding = self.binding
        for name, value in zip(self.contract.inputs, inputs, strict=True):
            if name is not None:
                binding.bind_ortvalue_input(name, value)
        for name, path in self.contract.state_inputs.items():
            self._bind_state(name, states.current[path].value, output=False)
        swapped: list[str] = []
        for name, path in self.contract.state_outputs.items():
            if self.contract.update_modes[path] == "swap":
                self._bind_state(name, states.spare(path).value, output=True)
                swapped.append(path)
            else:
                self._bind_state(name, states.current[path].value, output=True)
        where = self.device if keep_on_device else Device()
        types = self.contract.result_types if result_types is None else result_types
        results = [Buffer(t, where) for t in types]
        for name, buffer in zip(self.contract.results, results, strict=True):
            binding.bind_ortvalue_output(name, buffer.value)
        self.session.run_with_iobinding(binding)
        for path in swapped:
            states.swap(path)
        self.runs += 1
        return [b.value if keep_on_device or b.array is None else b.array for b in results]

    def _bind_state(self, name: str, value: ort.OrtValue, *, output: bool) -> None:
        """Bind a state buffer, unless the binding already holds this very `OrtValue`: a
        binding keeps what it was given between runs, and a decode step of a 22-layer Llama
        binds 88 state buffers that change only when a swap moves them."""
        key = (name, output)
        if self._bound_states.get(key) is value:
            return
        self._bound_states[key] = value  # also keeps it alive while bound
        if output:
            self.binding.bind_ortvalue_output(name, value)
        else:
            self.binding.bind_ortvalue_input(name, value)

    # -- CUDA graphs -----------------------------------------------------------------------

    def _replay(
        self,
        inputs: Sequence[ort.OrtValue],
        input_types: Sequence[TensorType],
        states: StateStore,
        keep_on_device: bool,
    ) -> list[Result]:
        """Capture on the first run, replay after: inputs are copied into fixed buffers."""
        if not self._graph_results:
            self._bind_fixed(input_types, states)
        for path, buffer in self._fixed.items():
            states.adopt(path, buffer)
        for slot, value in zip(self._graph_inputs, inputs, strict=True):
            if slot is not None:
                slot.value.update_inplace(value)
        self.session.run_with_iobinding(self.binding)
        self.runs += 1
        out: list[Result] = []
        for buffer in self._graph_results:
            if keep_on_device:
                copy = Buffer(buffer.type, self.device)
                copy.value.update_inplace(buffer.value)
                out.append(copy.value)
            else:
                out.append(buffer.to_numpy())
        return out

    def _bind_fixed(self, input_types: Sequence[TensorType], states: StateStore) -> None:
        binding = self.binding
        for name, t in zip(self.contract.inputs, input_types, strict=True):
            buffer = None if name is None else Buffer(t, self.device)
            if name is not None and buffer is not None:
                binding.bind_ortvalue_input(name, buffer.value)
            self._graph_inputs.append(buffer)
        for name, path in self.contract.state_inputs.items():
            self._fixed[path] = states.current[path]
            binding.bind_ortvalue_input(name, states.current[path].value)
        for name, path in self.contract.state_outputs.items():
            self._fixed[path] = states.current[path]
            binding.bind_ortvalue_output(name, states.current[path].value)
        for name, t in zip(self.contract.results, self.contract.result_types, strict=True):
            buffer = Buffer(t, self.device)
            binding.bind_ortvalue_output(name, buffer.value)
            self._graph_results.append(buffer)
