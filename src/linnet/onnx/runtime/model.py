"""`load_model` and `OnnxModel`: every entry of a Linnet model, run on ONNX Runtime.

Stage: the ONNX Runtime backend's front door (architecture.md "Backends").
It runs the stages in order:

    check (pipeline.check_source / check_paths)
      -> bind the root block's generics (ir.bind.bind)
      -> bind the weights by path (weights.bind_model_weights): arrays, memory-mapped
         from SafeTensors where they come from files
      -> weights to the device once, as OrtValues (on the CPU: the arrays themselves)
      -> per call with new input types: lower the entry, optimise it, export it WITHOUT
         weights (linnet.onnx.export.api: params stay graph inputs), one InferenceSession

Why weights stay out of the graphs: a model past protobuf's 2 GB limit cannot
be serialised whole (field-notes.md), every entry and shape would otherwise
carry its own copy, and an exported graph of a few hundred kilobytes builds a
session in milliseconds. Weights are bound by I/O binding instead, the same
`OrtValue`s to every session (`session`).

State (language.md 12.6) lives on the device in `_state.StateStore`, zero
before the first call; each call binds the current buffers as the graph's
`state<N>` inputs and its `next_state<N>` outputs become the state. A state
whose update is a scatter into the old value (the KV-cache writes of
`std.nn.cache`, which `inplace` turns into `ScatterElements`) is bound as
input and output at once and updated in place: no cache bytes are copied per
step (`contract` explains why that is safe and when it is not, and measures it).

Dtypes: bf16 crosses through ml_dtypes; ONNX Runtime's CPU provider has no
bf16 arithmetic kernels, so a model computing in bf16 on it is a LinnetError
that says so (load with `generics={"T": "f32"}, cast_dtype=True`, or use CUDA).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort  # type: ignore[import-untyped]

from linnet.check.program import CheckedProgram
from linnet.check.types import ScalarDType, ScalarType
from linnet.errors import InternalError, LinnetError
from linnet.ir.bind import BoundModel, EntrySignature, generics_key
from linnet.ir.core import Function, TensorType, dtype_of_numpy
from linnet.onnx.runtime.contract import Contract, read_contract, with_argmax
from linnet.onnx.runtime.inplace import find_writes, rewrite, with_probes
from linnet.onnx.runtime.session import EntrySession, can_capture
from linnet.onnx.runtime.state import StateStore
from linnet.onnx.runtime.values import (
    Provider,
    device_for,
    host_array,
    ortvalue,
    placed,
    type_of_ortvalue,
)
from linnet.pipeline import check_program

Source = CheckedProgram | str | os.PathLike[str]
WeightsSource = Mapping[str, Any] | str | os.PathLike[str]
Output = Any
"""What `run_entry` returns: one result, a tuple of them, or None."""


def bind_weights(
    model: BoundModel,
    weights: WeightsSource | None,
    *,
    bindings: Any = None,
    cast_dtype: bool = False,
) -> dict[str, np.ndarray[Any, Any]]:
    """The bound arrays by path; `weights=None` only for a model without mandatory weights."""
    from linnet.weights import bind_model_weights, require_no_weights

    if weights is None:
        require_no_weights(model)
        return {}
    source: Any = weights
    if isinstance(weights, Mapping):
        source = {name: np.asarray(value) for name, value in weights.items()}
    bound = bind_model_weights(model, source, bindings=bindings, cast_dtype=cast_dtype)
    return dict(bound.arrays)


def load_model(
    source: Source,
    *,
    generics: Mapping[str, object] | None = None,
    weights: WeightsSource | None = None,
    root: str | None = None,
    bindings: Any = None,
    std_root: str | os.PathLike[str] | None = None,
    cast_dtype: bool = False,
    providers: Sequence[Provider] | None = None,
    session_options: Any = None,
) -> OnnxModel:
    """Load a Linnet model to run on ONNX Runtime (see `OnnxModel`).

    `source` is source text, a `.linnet` file or package folder, a checked
    program, or a model card folder (`linnet.card`: its source, generics,
    weights, root and bindings fill what the caller leaves out); `generics` binds the root block's generics; `weights` is a
    SafeTensors file, a sharded folder or index, or arrays by path (or by
    checkpoint name, with `bindings`); `cast_dtype` converts stored dtypes to
    the declared ones; `providers` goes to every `InferenceSession` unchanged
    (names or `(name, options)` pairs, TensorRT's included; default: the CPU);
    `session_options` (an `onnxruntime.SessionOptions`) is every session's
    options, used as given (threads, spinning, profiling), with the CPU's
    shared-arena entry added.

    >>> import numpy as np
    >>> m = load_model('''module doc
    ... pub block Scale<H: Dim> {
    ...     param gain: Tensor[H; f32]
    ...     pub entry forward<B: Dim>(x: Tensor[B, H; f32]) -> Tensor[B, H; f32] {
    ...         return x * gain
    ...     }
    ... }''', generics={"H": 2}, weights={"gain": np.array([2.0, 3.0], np.float32)})
    >>> m.run_entry("forward", [np.ones((1, 2), np.float32)])
    array([[2., 3.]], dtype=float32)
    """
    from linnet.card import loader_arguments
    from linnet.ir.bind import bind

    source, generics, weights, root, bindings = loader_arguments(
        source, generics, weights, root, bindings
    )

    program = check_program(source, std_root)
    model = bind(program, root=root, generics=generics)
    arrays = bind_weights(model, weights, bindings=bindings, cast_dtype=cast_dtype)
    return OnnxModel(model, arrays, providers=providers, session_options=session_options)


class OnnxModel:
    """A bound Linnet model on ONNX Runtime.

    `run_entry(name, inputs)` runs any entry; `entries` lists them; `state` copies
    the state to the host by path; `reset_state()` zeroes it; `place(array, dtype)`
    puts an input on the device once; `prepare(...)` is the session a call uses.
    """

    def __init__(
        self,
        model: BoundModel,
        arrays: Mapping[str, np.ndarray[Any, Any]],
        *,
        providers: Sequence[Provider] | None = None,
        session_options: Any = None,
    ) -> None:
        self.model = model
        self.session_options = session_options
        self.providers: list[Provider] = list(providers or ["CPUExecutionProvider"])
        self.device = device_for(self.providers)
        self.present = frozenset(arrays)
        self.kinds = {path: t.kind for path, t in model.tensors.items()}
        self.weights: dict[str, ort.OrtValue] = {}
        for kind in ("param", "buffer"):
            for path, t in model.live_tensors(self.present, kind).items():
                if path in arrays:
                    self.weights[path] = self._weight(arrays[path], t)
        self._states = StateStore(model.live_tensors(self.present, "state"), self.device)
        self._exported: dict[tuple[object, ...], tuple[onnx.ModelProto, Contract]] = {}
        self._sessions: dict[tuple[object, ...], EntrySession] = {}

    def _weight(self, array: np.ndarray[Any, Any], t: TensorType) -> ort.OrtValue:
        host = host_array(array, t.dtype)
        if host.shape != t.shape:
            raise InternalError(f"a bound weight of shape {host.shape} for {t}")
        if self.device.kind == "cpu":
            return ortvalue(host, t.dtype, self.device)
        return placed(host, t.dtype, self.device)

    # -- the public surface ----------------------------------------------------------------

    @property
    def entries(self) -> list[str]:
        return list(self.model.entries)

    @property
    def state(self) -> dict[str, np.ndarray[Any, Any]]:
        """Host copies of every state member by path."""
        return self._states.snapshot()

    def state_address(self, path: str) -> int:
        """The device address of a state's buffer now (fixed while updates run in place)."""
        return self._states.buffer(path).address

    @property
    def swaps(self) -> int:
        """How many state updates so far wrote a second buffer (each writes the whole
        state once); zero while every update runs in place."""
        return self._states.swaps

    def reset_state(self) -> None:
        """Zero every state member where it lives (language.md 12.6)."""
        self._states.reset()

    def place(self, array: object, dtype: str | None = None) -> ort.OrtValue:
        """`array` as an `OrtValue` on the model's device, converted to the Linnet `dtype`
        (default: its own), for inputs passed to many calls without a copy each."""
        value = np.asarray(array)
        name = dtype if dtype is not None else _dtype_of(value, "place")
        return placed(value, name, self.device)

    @property
    def sessions(self) -> list[EntrySession]:
        """Every session made so far (one per entry, input types, generics and variant)."""
        return list(self._sessions.values())

    def run_entry(
        self,
        name: str,
        inputs: Sequence[object] | Mapping[str, object] = (),
        *,
        generics: Mapping[str, object] | None = None,
        argmax: bool = False,
        cuda_graph: bool = False,
        keep_on_device: bool = False,
    ) -> Output:
        """Run entry `name` on `inputs` (in order, or by input name): NumPy arrays, Python
        numbers for scalar inputs, or `OrtValue`s (from `place` or `keep_on_device`).

        `generics` fixes entry generics no input determines. `argmax` returns the index
        of the largest element of the first result's last axis (i32), computed in the
        graph. `cuda_graph` captures the entry on the first call and replays it after,
        where the provider can (CUDA, TensorRT), every state it writes is updated in
        place and no result is bf16; otherwise it runs as usual. `keep_on_device`
        returns `OrtValue`s on the model's device instead of host arrays. One result
        comes back as is, several as a tuple, none as None.
        """
        signature = self._signature(name)
        values = _order(signature, inputs)
        owner = f"entry `{name}`"
        converted = [
            self._input(v, spec.name, spec.type, owner)
            for v, spec in zip(values, signature.inputs, strict=False)
        ]
        types = [t for _, t in converted]
        session = self.prepare(name, types, generics, argmax=argmax, cuda_graph=cuda_graph)
        results = session.run(
            [v for v, _ in converted], types, self._states, keep_on_device=keep_on_device
        )
        if not results:
            return None
        return results[0] if len(results) == 1 else tuple(results)

    def prepare(
        self,
        name: str,
        input_types: Sequence[TensorType],
        generics: Mapping[str, object] | None = None,
        *,
        argmax: bool = False,
        cuda_graph: bool = False,
    ) -> EntrySession:
        """The session for these input types (made on first use, then cached)."""
        key: tuple[object, ...] = (
            name,
            tuple(input_types),
            generics_key(generics),
            argmax,
        )
        exported = self._exported.get(key)
        if exported is None:
            base = self._exported.get((*key[:-1], False))
            if base is None:
                proto, fn = self.export(name, input_types, generics)
                base = self._exported[(*key[:-1], False)] = (
                    proto,
                    read_contract(proto, fn, self.kinds),
                )
            exported = self._exported[key] = with_argmax(*base) if argmax else base
        proto, contract = exported
        capture = cuda_graph and self.captures(contract)
        session = self._sessions.get((*key, capture))
        if session is None:
            session = EntrySession(
                name,
                proto,
                contract,
                self.providers,
                self.device,
                self.weights,
                cuda_graph=capture,
                options=self.session_options,
            )
            self._sessions[(*key, capture)] = session
        return session

    def captures(self, contract: Contract) -> bool:
        """Whether `cuda_graph=True` captures an entry with this contract (see run_entry)."""
        return (
            can_capture(self.providers)
            and contract.fixed_addresses
            and all(t.dtype != "bf16" for t in contract.result_types)
        )

    def lowered(
        self,
        name: str,
        input_types: Sequence[TensorType],
        generics: Mapping[str, object] | None = None,
    ) -> Function:
        """The optimised Core IR function of an entry for these input types."""
        from linnet.ir.lower import lower_entry
        from linnet.ir.passes import optimize

        fn = lower_entry(self.model, name, input_types, self.present, generics=generics)
        return optimize(fn)

    def export(
        self,
        name: str,
        input_types: Sequence[TensorType],
        generics: Mapping[str, object] | None = None,
    ) -> tuple[onnx.ModelProto, Function]:
        """The entry's graph without weights (params as graph inputs), and its function.

        Cache writes into state become in-place scatters (`inplace`).
        """
        from linnet.onnx.export.assemble import export_ir
        from linnet.onnx.export.provider import check_provider

        fn = self.lowered(name, input_types, generics)
        provider = "cpu" if self.device.kind == "cpu" else "cuda"
        writes = find_writes(fn)
        # ONNX Runtime's fused kernels (fused) are verified on the CPU provider only.
        fused = provider == "cpu"
        exported = export_ir(with_probes(fn, writes), provider=provider, fused=fused)
        proto = exported.model
        if writes:
            state = {io.path: io.name for io in exported.inputs if io.role == "state"}
            new = {io.path: io.name for io in exported.outputs if io.role == "next_state"}
            names = {w.path: (state[w.path], new[w.path]) for w in writes}
            rewrite(proto, len(fn.results), writes, names)
        check_provider(proto, provider)
        return proto, fn

    # -- helpers ---------------------------------------------------------------------------

    def _signature(self, name: str) -> EntrySignature:
        found = self.model.entries.get(name)
        if found is None:
            listed = ", ".join(f"`{n}`" for n in self.model.entries) or "none"
            raise LinnetError(f"the model has no entry `{name}` (entries: {listed})")
        return found

    def _input(
        self, value: object, name: str, declared: object, owner: str
    ) -> tuple[ort.OrtValue, TensorType]:
        """An entry input as an `OrtValue` and its IR type; LinnetError naming the input."""
        if isinstance(value, ort.OrtValue):
            return value, type_of_ortvalue(value)
        if isinstance(value, bool | int | float) and not isinstance(value, np.generic):
            if not isinstance(declared, ScalarType):
                raise LinnetError(f"{owner}: input `{name}` needs a tensor, got a Python number")
            if not isinstance(declared.dtype, ScalarDType):
                raise LinnetError(
                    f"{owner}: input `{name}` has a generic dtype; pass a rank-0 array instead"
                )
            dtype = declared.dtype.name
            array = np.asarray(value)
        elif isinstance(value, np.ndarray | np.generic):
            array = np.asarray(value)
            dtype = _dtype_of(array, f"{owner}: input `{name}`")
        else:
            raise LinnetError(
                f"{owner}: input `{name}` must be a NumPy array or an OrtValue, "
                f"got {type(value).__name__}"
            )
        host = host_array(array, dtype)
        t = TensorType(tuple(host.shape), dtype)
        if self.device.kind == "cpu":
            return ortvalue(host, dtype, self.device), t
        return placed(host, dtype, self.device), t


def _dtype_of(array: np.ndarray[Any, Any], what: str) -> str:
    try:
        return dtype_of_numpy(array.dtype)
    except InternalError:
        raise LinnetError(f"{what} has NumPy dtype {array.dtype}, which Linnet lacks") from None


def _order(
    signature: EntrySignature, inputs: Sequence[object] | Mapping[str, object]
) -> list[object]:
    """The inputs in declaration order (a mapping is matched by input name)."""
    if not isinstance(inputs, Mapping):
        return list(inputs)
    by_name = dict(inputs)
    ordered: list[object] = []
    for spec in signature.inputs:
        if spec.name not in by_name:
            break
        ordered.append(by_name.pop(spec.name))
    if by_name:
        known = ", ".join(f"`{s.name}`" for s in signature.inputs)
        raise LinnetError(
            f"entry `{signature.name}` has no input `{next(iter(by_name))}` (inputs: {known})"
        )
    return ordered
