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

One session per entry instead (`dynamic`): on an entry's first call, its own
`Dim` generics that size an input axis (`B`, `S`) are tried as dynamic
generics (`linnet.ir.dynamic`); when the graph is the same at every size the
entry gets one session for all sizes, its `where` clauses checked per call
by binding the entry (a LinnetError naming the clause) and its result shapes
evaluated from the bound sizes; a call at sizes outside the entry's size
guards (`linnet.ir.size_decisions`: a size comparison folded when the graph
was made) gets a session of its own. Entries that write a cache in place, calls
with explicit `generics`, `argmax` or `cuda_graph`, entries whose graph
depends on a size, and every entry of a model loaded with `dynamic=False`
keep one session per input shape.

Why weights stay out of the graphs: a model past protobuf's 2 GB limit cannot
be serialised whole (field-notes.md), every entry and shape would otherwise
carry its own copy, and an exported graph of a few hundred kilobytes builds a
session in milliseconds. Weights are bound by I/O binding instead, the same
`OrtValue`s to every session (`session`). The exceptions are session
constants: the weights of ONNX Runtime's weight-only kernels (`constants`),
and those a call asks to have pre-packed (`run_entry(prepack=...)`, `prepack`),
which that session holds packed, a copy of its own.

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
from linnet.errors import InternalError, LinnetError
from linnet.ir.bind import BoundModel, EntrySignature, InputSpec, generics_key
from linnet.ir.core import Function, TensorType, dtype_of_numpy, numpy_dtype
from linnet.ir.dynamic import DynamicShapes, lower_entry_dynamic
from linnet.ir.inputs import (
    HostInput,
    InputChecks,
    check_inputs,
    host_input,
    input_checks,
    order_inputs,
)
from linnet.ir.results import regroup
from linnet.onnx.runtime.contract import Contract, read_contract, with_argmax
from linnet.onnx.runtime.graph import collapse_reshapes
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
    int8_activations: bool = False,
    dynamic: bool = True,
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
    shared-arena entry added. `int8_activations` lets the weight-only
    kernels of `std.quant`'s linears (`MatMulNBits`, on the CPU) round their
    activations to int8 per block (the int4 group; `linnet.native.activations.INT8_BLOCKS`
    for int8 rows), as llama.cpp's Q4_0 and Q8_0 do per 32: several times
    faster, but not the std bodies' f32 function (about 1% relative error
    added per product); off by default.
    `dynamic=False` makes one session per input shape
    for every entry, never one for all sizes (see `OnnxModel`).

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
    # Decision 21: ONNX Runtime is one process; `Shards > 1` runs the one-shard bodies.
    from linnet.ir.parallel import warn_unsharded

    warn_unsharded(dict(generics or {}), "split it with linnet.torch or linnet.jax", stacklevel=2)
    model = bind(program, root=root, generics=generics)
    arrays = bind_weights(model, weights, bindings=bindings, cast_dtype=cast_dtype)
    return OnnxModel(
        model,
        arrays,
        providers=providers,
        session_options=session_options,
        int8_activations=int8_activations,
        dynamic=dynamic,
    )


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
        int8_activations: bool = False,
        dynamic: bool = True,
    ) -> None:
        self.model = model
        self.session_options = session_options
        self.int8_activations = int8_activations
        self.allow_dynamic = dynamic
        self.providers: list[Provider] = list(providers or ["CPUExecutionProvider"])
        self.device = device_for(self.providers)
        self.present = frozenset(arrays)
        self.kinds = {path: t.kind for path, t in model.tensors.items()}
        self.weights: dict[str, ort.OrtValue] = {}
        # Paths whose CPU buffer is our own copy (made by `update_weights`): only those
        # are overwritten in place; the others still alias the caller's arrays.
        self._own_buffers: set[str] = set()
        for kind in ("param", "buffer"):
            for path, t in model.live_tensors(self.present, kind).items():
                if path in arrays:
                    self.weights[path] = self._weight(arrays[path], t)
        self._states = StateStore(model.live_tensors(self.present, "state"), self.device)
        self._exported: dict[tuple[object, ...], tuple[onnx.ModelProto, Contract]] = {}
        self._sessions: dict[tuple[object, ...], EntrySession] = {}
        self._dynamic: dict[str, tuple[EntrySession, DynamicShapes] | None] = {}
        self._checks: dict[tuple[object, ...], InputChecks] = {}

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

    @property
    def weight_bytes(self) -> int:
        """The bytes of every bound weight (the size of the one copy the sessions share)."""
        return sum(_nbytes(self.model.tensors[path].type) for path in self.weights)

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

    def update_weights(self, arrays: Mapping[str, np.ndarray[Any, Any]]) -> None:
        """Copy new values into the bound weights by path, every session seeing them at once.

        Each array must have the weight's shape; it is converted to its dtype. A
        weight on a device is overwritten in place. On the CPU the bound weights are the
        caller's own arrays (no copy at load), which an update must never write into:
        the first update of a path binds a private copy into every session made so far
        (and those made later), and later updates overwrite that copy in place.
        """
        for path, array in arrays.items():
            value = self.weights.get(path)
            t = self.model.tensors.get(path)
            if value is None or t is None:
                raise LinnetError(f"update_weights: the model has no bound weight at `{path}`")
            host = host_array(np.asarray(array), t.type.dtype)
            if host.shape != t.type.shape:
                raise LinnetError(
                    f"update_weights: `{path}` has shape {t.type.shape}, got {host.shape}"
                )
            self._drop_sessions_holding(path)
            if self.device.kind != "cpu":
                value.update_inplace(host)
                continue
            backing = getattr(value, "_numpy_obj", None)
            if path in self._own_buffers and isinstance(backing, np.ndarray):
                np.copyto(backing, host.view(backing.dtype))
                continue
            fresh = ortvalue(host.copy(), t.type.dtype, self.device)
            self.weights[path] = fresh
            self._own_buffers.add(path)
            for session in self.sessions:  # the dynamic ones too
                session.rebind_weight(path, fresh)

    def _drop_sessions_holding(self, path: str) -> None:
        """Forget the sessions that hold the weight at `path` as a constant
        (`runtime.constants`); the next call makes them again."""
        for key in [k for k, s in self._sessions.items() if path in s.constant_paths]:
            del self._sessions[key]
        for name, found in list(self._dynamic.items()):
            if found is not None and path in found[0].constant_paths:
                del self._dynamic[name]

    def place(self, array: object, dtype: str | None = None) -> ort.OrtValue:
        """`array` as an `OrtValue` on the model's device, converted to the Linnet `dtype`
        (default: its own), for inputs passed to many calls without a copy each."""
        value = np.asarray(array)
        name = dtype if dtype is not None else _dtype_of(value, "place")
        return placed(value, name, self.device)

    @property
    def sessions(self) -> list[EntrySession]:
        """Every session made so far (one per entry, input types, generics and variant;
        one per entry for all sizes where the entry is dynamic)."""
        dynamic = [found[0] for found in self._dynamic.values() if found is not None]
        return [*self._sessions.values(), *dynamic]

    @property
    def dynamic_entries(self) -> list[str]:
        """The entries called so far that one session serves for every size."""
        return [name for name, found in self._dynamic.items() if found is not None]

    def run_entry(
        self,
        name: str,
        inputs: Sequence[object] | Mapping[str, object] = (),
        *,
        generics: Mapping[str, object] | None = None,
        argmax: bool = False,
        cuda_graph: bool = False,
        keep_on_device: bool = False,
        prepack: int = 0,
    ) -> Output:
        """Run entry `name` on `inputs` (in order, or by input name): NumPy arrays, Python
        numbers for scalar inputs, or `OrtValue`s (from `place` or `keep_on_device`).

        `generics` fixes entry generics no input determines. `argmax` returns the index
        of the largest element of the first result's last axis (i32), computed in the
        graph. `cuda_graph` captures the entry on the first call and replays it after,
        where the provider can (CUDA, TensorRT), every state it writes is updated in
        place and no result is bf16; otherwise it runs as usual. `keep_on_device`
        returns `OrtValue`s on the model's device instead of host arrays. One result
        comes back as is, several as a tuple, none as None. `prepack` (bytes, on the
        CPU) makes the call's session one of its own that binds the weights its float
        matrix products read, in graph order and up to that many bytes, as initializers
        ONNX Runtime packs once (`runtime.prepack`): faster products at several rows,
        for a second copy of those weights held by that session.

        Before anything runs the inputs are checked (`linnet.ir.inputs`), alike on every
        backend: their number, Python numbers against the input's dtype, integer inputs
        used as indices against their range (a token id within the vocabulary, a cache
        position within the cache), each a `LinnetError`. Integer arrays of another
        integer dtype (int64 token ids) are converted to the declared one when every
        value fits. `OrtValue`s skip the value checks (they live on the device) and must
        have the declared dtype.
        """
        signature = self._signature(name)
        owner = f"entry `{name}`"
        if isinstance(inputs, Mapping):
            values = order_inputs(signature, (), inputs)
        else:
            values = order_inputs(signature, inputs, {})
        given = [
            self._input(v, spec, signature, owner)
            for v, spec in zip(values, signature.inputs[: len(values)], strict=True)
        ]
        types = [type_of_ortvalue(v) if isinstance(v, ort.OrtValue) else v.type for v in given]
        hosts = [None if isinstance(v, ort.OrtValue) else v.array for v in given]
        dynamic = (
            None
            if generics or argmax or cuda_graph or prepack or not self.allow_dynamic
            else self.dynamic_session(name, types)
        )
        if dynamic is not None and not _guards_hold(signature, types, dynamic[1]):
            dynamic = None  # a size the dynamic graph was not made for: a session of its own
        result_types = None
        if dynamic is not None:
            session, dims = dynamic
            result_types = _result_types(signature, types, dims, session.contract)
            # The session serves every size; the index ranges are those of these sizes.
            check_inputs(self._checks_at(name, types), hosts, owner)
        else:
            session = self.prepare(
                name, types, generics, argmax=argmax, cuda_graph=cuda_graph, prepack=prepack
            )
            check_inputs(session.contract.checks, hosts, owner)
        results = session.run(
            [self._on_device(v) for v in given],
            types,
            self._states,
            keep_on_device=keep_on_device,
            result_types=result_types,
        )
        return regroup(results, None if argmax else signature.fn.result)

    def prepare(
        self,
        name: str,
        input_types: Sequence[TensorType],
        generics: Mapping[str, object] | None = None,
        *,
        argmax: bool = False,
        cuda_graph: bool = False,
        prepack: int = 0,
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
                    read_contract(proto, fn, self.kinds, self.model),
                )
            exported = self._exported[key] = with_argmax(*base) if argmax else base
        proto, contract = exported
        capture = cuda_graph and self.captures(contract)
        packed = prepack if self.device.kind == "cpu" else 0
        session = self._sessions.get((*key, capture, packed))
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
                prepack=packed,
            )
            self._sessions[(*key, capture, packed)] = session
        return session

    def dynamic_session(
        self, name: str, input_types: Sequence[TensorType]
    ) -> tuple[EntrySession, DynamicShapes] | None:
        """The one session of entry `name` for every size, or None (see the module docstring).

        Decided on the first call (`input_types`): an entry that writes a cache in
        place is known from one lowering, before any sampling.
        """
        if name in self._dynamic:
            return self._dynamic[name]
        signature = self._signature(name)
        names = sized_generics(signature)
        found = None
        if names and find_writes(self.lowered(name, input_types)):
            names = []
        if names:
            try:
                fn, dims = lower_entry_dynamic(
                    signature, names, {}, lambda types, given: self.lowered(name, types, given)
                )
            except LinnetError:
                fn = None
            if fn is not None and not find_writes(fn):
                found = (self._dynamic_entry(name, fn, dims), dims)
        self._dynamic[name] = found
        return found

    def _dynamic_entry(self, name: str, fn: Function, dims: DynamicShapes) -> EntrySession:
        from linnet.onnx.export.assemble import export_ir
        from linnet.onnx.export.provider import check_provider

        provider = "cpu" if self.device.kind == "cpu" else "cuda"
        exported = export_ir(
            fn,
            provider=provider,
            fused=provider == "cpu",
            dynamic=dims,
            int8_activations=self.int8_activations,
        )
        proto = exported.model
        collapse_reshapes(proto.graph)
        check_provider(proto, provider)
        contract = read_contract(proto, fn, self.kinds)
        return EntrySession(
            name,
            proto,
            contract,
            self.providers,
            self.device,
            self.weights,
            options=self.session_options,
        )

    def captures(self, contract: Contract) -> bool:
        """Whether `cuda_graph=True` captures an entry with this contract (see run_entry)."""
        return (
            can_capture(self.providers)
            and contract.fixed_addresses
            and all(t.dtype != "bf16" for t in contract.result_types)
        )

    def _checks_at(self, name: str, input_types: Sequence[TensorType]) -> InputChecks:
        """The input checks of entry `name` at these input types (cached per types)."""
        key = (name, tuple(input_types))
        found = self._checks.get(key)
        if found is None:
            found = self._checks[key] = input_checks(self.lowered(name, input_types), self.model)
        return found

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
        exported = export_ir(
            with_probes(fn, writes),
            provider=provider,
            fused=fused,
            int8_activations=self.int8_activations,
        )
        proto = exported.model
        if writes:
            state = {io.path: io.name for io in exported.inputs if io.role == "state"}
            new = {io.path: io.name for io in exported.outputs if io.role == "next_state"}
            names = {w.path: (state[w.path], new[w.path]) for w in writes}
            rewrite(proto, len(fn.results), writes, names)
        collapse_reshapes(proto.graph)
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
        self, value: object, spec: InputSpec, signature: EntrySignature, owner: str
    ) -> ort.OrtValue | HostInput:
        """An entry input as given on the device, or on the host (`linnet.ir.inputs`)."""
        if isinstance(value, ort.OrtValue):
            return value
        given = host_input(value, spec, signature, owner)
        if given is None:
            raise LinnetError(
                f"{owner}: input `{spec.name}` must be a NumPy array or an OrtValue, "
                f"got {type(value).__name__}"
            )
        return given

    def _on_device(self, value: ort.OrtValue | HostInput) -> ort.OrtValue:
        """A checked input as an `OrtValue` of the dtype the entry receives."""
        if isinstance(value, ort.OrtValue):
            return value
        host = host_array(value.array, value.dtype)
        if self.device.kind == "cpu":
            return ortvalue(host, value.dtype, self.device)
        return placed(host, value.dtype, self.device)


def sized_generics(signature: EntrySignature) -> list[str]:
    """The entry's own `Dim` generics that are the size of an input axis, in declaration order."""
    from linnet.check.dims import Dim
    from linnet.check.types import TensorType as CheckedTensor

    axes = set()
    for spec in signature.inputs:
        if isinstance(spec.type, CheckedTensor):
            axes |= {item.as_symbol() for item in spec.type.shape if isinstance(item, Dim)}
    return [
        g.name for g in signature.fn.generics if g.kind == "Dim" and not g.is_pack and g.key in axes
    ]


def _result_types(
    signature: EntrySignature,
    types: Sequence[TensorType],
    dims: DynamicShapes,
    contract: Contract,
) -> list[TensorType]:
    """The result types of a dynamic entry for these inputs; binding the entry checks its
    `where` clauses and the inputs' agreement (LinnetErrors naming them)."""
    from linnet.ir.bind import bind_entry_generics
    from linnet.ir.symbolic import evaluate

    bound = bind_entry_generics(signature, types)
    sizes = {n: v for n in dims.names if isinstance(v := bound.values[n], int)}
    shapes = [dims.shapes.get(v) for v in dims.results]
    return [
        t if shape is None else TensorType(tuple(evaluate(d, sizes) for d in shape), t.dtype)
        for t, shape in zip(contract.result_types, shapes, strict=True)
    ]


def _guards_hold(
    signature: EntrySignature, types: Sequence[TensorType], dims: DynamicShapes
) -> bool:
    """Whether the size guards of a dynamic entry (`linnet.ir.size_decisions`) hold here."""
    if not dims.guards:
        return True
    from linnet.ir.bind import bind_entry_generics
    from linnet.ir.size_decisions import guard_holds

    bound = bind_entry_generics(signature, types)
    sizes = {n: v for n in dims.names if isinstance(v := bound.values[n], int)}
    return all(guard_holds(g, sizes) for g in dims.guards)


def _nbytes(t: TensorType) -> int:
    return t.size * numpy_dtype(t.dtype).itemsize


def _dtype_of(array: np.ndarray[Any, Any], what: str) -> str:
    try:
        return dtype_of_numpy(array.dtype)
    except InternalError:
        raise LinnetError(f"{what} has NumPy dtype {array.dtype}, which Linnet lacks") from None
