"""IR -> ONNX: one lowered Core IR function as a complete `ModelProto` (opset 20).

Stage: the ONNX backend's exporter (architecture.md "Backends"). In: a
lowered, optimised `Function` (`linnet.pipeline`: check -> bind -> weights
-> lower -> optimize) and, optionally, the weight arrays by path. Out: an
`ExportedModel`. The graph contract (the runtime helper and users rely on it):

- the graph is named `main`;
- inputs: the entry's inputs under their Linnet names, then each param and
  buffer the entry reads as `param<N>` (in order of first read), then each
  state member it reads as `state<N>`; with weights, the params are
  initializers of the same names instead of inputs;
- outputs: the results as `output<N>` (a tuple result is one output per
  element), then the new value of each state member it assigns as
  `next_state<N>`; `state<N>` and `next_state<N>` with the same N are the
  same member;
- `metadata_props`: `linnet.entry` (the entry's name), `linnet.provider`,
  and `linnet.path.param<N>`, `linnet.state.state<N>`,
  `linnet.next_state.next_state<N>` mapping each of those names to its path;
- with dynamic generics (`linnet.ir.dynamic`): every input and output axis
  whose size varies is a `dim_param` written as its polynomial (`B`, `S`,
  `B*S`), shapes are computed in the graph from the input axes that carry the
  generics, `linnet.dynamic` lists the generics (`B,S`) and each entry `where`
  clause involving them is `linnet.where.<N>` (JSON: text, lhs, rel, rhs), for
  the runtime wrappers to check (`linnet.onnx.runtime.exported`), and so is
  each size guard (`linnet.ir.size_decisions`), which the graph also checks
  before any output (`guards`).

Ops are lowered by the table `RULES` (one rule per IR op kind, in the
`export_*` modules); `while` becomes `Loop` and `if` becomes `If`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper

from linnet import __version__
from linnet.errors import LinnetError
from linnet.ir.core import Function, Op, Region, TensorType, numpy_dtype
from linnet.ir.dynamic import DynamicShapes
from linnet.ir.ops import OP_KINDS
from linnet.onnx.export.control import RULES as CONTROL_RULES
from linnet.onnx.export.elementwise import RULES as ELEMENTWISE_RULES
from linnet.onnx.export.graph import Emitter, Rule, describe_tensor, little_endian, value_info
from linnet.onnx.export.guards import guard_zero, through_guards
from linnet.onnx.export.limits import check_extents
from linnet.onnx.export.payload import INLINE_LIMIT
from linnet.onnx.export.reduce import RULES as REDUCE_RULES
from linnet.onnx.export.result import ExportedModel, GraphIO, Role
from linnet.onnx.export.shapes import RULES as SHAPE_RULES
from linnet.progress import track

OPSET = 20
IR_VERSION = 10  # the IR version of opset 20 (ONNX 1.15), read by every current runtime

RULES: dict[str, Rule] = {
    **ELEMENTWISE_RULES,
    **SHAPE_RULES,
    **REDUCE_RULES,
    **CONTROL_RULES,
}
assert set(RULES) == OP_KINDS, sorted(OP_KINDS ^ set(RULES))

# Names the exporter gives: contract names and fresh node outputs (`t12`, `v3`, ...).
_GENERATED = re.compile(r"(param|state|output|next_state|t|i|c|v|loop|then|else)\d+")


def _walk(region: Region) -> Iterator[Op]:
    for op in region.ops:
        yield op
        for inner in op.regions:
            yield from _walk(inner)


def _sources(fn: Function) -> tuple[list[tuple[str, TensorType]], list[tuple[str, TensorType]]]:
    """(params and buffers read, state read), each as (path, type) in order of first read."""
    params: dict[str, TensorType] = {}
    state: dict[str, TensorType] = {}
    for op in _walk(fn.body):
        if op.kind in ("param", "buffer"):
            params.setdefault(str(op.attrs["path"]), op.results[0].type)
        elif op.kind == "state":
            state.setdefault(str(op.attrs["path"]), op.results[0].type)
    return list(params.items()), list(state.items())


def _input_name(name: str, index: int, taken: set[str]) -> str:
    """The Linnet input name, unless it is empty, generated-looking or already used."""
    candidate = name or f"input{index}"
    while _GENERATED.fullmatch(candidate) or candidate in taken:
        candidate += "_"
    taken.add(candidate)
    return candidate


def export_ir(
    fn: Function,
    *,
    weights: Mapping[str, Any] | None = None,
    provider: str = "cpu",
    fused: bool = False,
    natives: bool = True,
    gradients: Sequence[str] | None = None,
    dynamic: DynamicShapes | None = None,
    int8_activations: bool = False,
) -> ExportedModel:
    """The ONNX model of a lowered function (see the module docstring).

    `weights` maps param/buffer paths to arrays of exactly the declared types
    (what `linnet.weights.bind_model_weights` returns) to embed as
    initializers; without it params are graph inputs.
    `provider` (`cpu`, `cuda`) selects the dtype and kernel choices of
    `dtypes` and `fused`; `fused` allows ONNX Runtime's contrib
    kernels, `natives` standard-operator kernels for known standard-library ops.
    `gradients` marks `fn` as a differentiated entry (`linnet.ir.grad`): its first result
    is the output `loss`, the others `grad<N>` of the named paths or inputs, recorded
    as `linnet.gradient.grad<N>` in the metadata (language-extensions 6.2).
    `dynamic` (from `linnet.ir.dynamic.lower_dynamic`) leaves its generics symbolic.
    `int8_activations` lets the fused weight-only kernels round activations to int8
    (`fused_quant`; not the std bodies' f32 function).
    """
    check_extents(fn, _walk(fn.body))
    params, state = _sources(fn)
    updates = [(path, value) for path, value in fn.state_updates.items()]
    state_paths = [p for p, _ in state] + [p for p, _ in updates if p not in dict(state)]
    state_index = {path: i for i, path in enumerate(state_paths)}

    taken: set[str] = set()
    inputs = [
        GraphIO(_input_name(name, i, taken), "input", value.type)
        for i, (name, value) in enumerate(fn.inputs)
    ]
    param_io = [GraphIO(f"param{i}", "param", t, path) for i, (path, t) in enumerate(params)]
    state_io = [GraphIO(f"state{state_index[p]}", "state", t, p) for p, t in state]
    sources = {("param", io.path or ""): io.name for io in param_io}
    sources.update({("state", io.path or ""): io.name for io in state_io})

    em = Emitter(
        RULES,
        provider=provider,
        fused=fused,
        natives=natives,
        sources=sources,
        dynamic=dynamic,
        int8_activations=int8_activations,
    )
    symbolic: dict[str, tuple[object, ...]] = {}
    for io, (_, value) in zip(inputs, fn.inputs, strict=True):
        em.bind(value, io.name)
        if dynamic is not None:
            symbolic[io.name] = dynamic.shape(value)
    if dynamic is not None:
        em.dim_inputs = {
            name: (inputs[index].name, axis) for name, (index, axis) in dynamic.sources.items()
        }
    em.emit_ops(track(fn.body.ops, f"exporting `{fn.name}`"))
    zero = guard_zero(em, dynamic.guards) if dynamic is not None else None

    outputs: list[GraphIO] = []
    for i, value in enumerate(fn.results):
        name, path = f"output{i}", None
        if gradients is not None:
            name, path = ("loss", None) if i == 0 else (f"grad{i - 1}", gradients[i - 1])
        source = through_guards(em, em.name(value), zero)
        outputs.append(_output(em, name, "output", value.type, source, path))
        if dynamic is not None:
            symbolic[outputs[-1].name] = dynamic.shape(value)
    for path, value in updates:
        name = f"next_state{state_index[path]}"
        source = through_guards(em, em.name(value), zero)
        outputs.append(_output(em, name, "next_state", value.type, source, path))

    def info(io: GraphIO) -> onnx.ValueInfoProto:
        dims = symbolic.get(io.name)
        return value_info(io.name, io.type, dims)  # type: ignore[arg-type]

    graph_inputs = [*inputs, *state_io] if weights is not None else [*inputs, *param_io, *state_io]
    graph = helper.make_graph(
        em.scope.nodes, "main", [info(io) for io in graph_inputs], [info(io) for io in outputs]
    )
    opsets = [helper.make_opsetid("", OPSET)]
    opsets += [helper.make_opsetid(d, v) for d, v in sorted(em.domains.items())]
    model = helper.make_model(
        graph, opset_imports=opsets, producer_name="linnet", producer_version=__version__
    )
    model.ir_version = IR_VERSION
    payload = _add_initializers(model.graph, param_io, weights) if weights is not None else {}
    props = _metadata(fn.name, provider, param_io, state_io, outputs)
    if dynamic is not None:
        props.update(_dynamic_metadata(dynamic))
    helper.set_model_props(model, props)
    return ExportedModel(
        model,
        (*inputs, *param_io, *state_io),
        tuple(outputs),
        fn,
        provider,
        weights is not None,
        payload,
    )


def _output(
    em: Emitter, name: str, role: Role, t: TensorType, source: str, path: str | None
) -> GraphIO:
    em.scope.nodes.append(helper.make_node("Identity", [source], [name]))
    return GraphIO(name, role, t, path)


def _add_initializers(
    graph: onnx.GraphProto, param_io: Sequence[GraphIO], weights: Mapping[str, Any]
) -> dict[str, np.ndarray[Any, Any]]:
    """The weights as initializers: declared in place, their data returned by name.

    Only weights under `INLINE_LIMIT` bytes are embedded here; the others
    stay in their arrays (no copy: a memory-mapped checkpoint stays mapped)
    until `ExportedModel.model` or `.save` needs them (`payload`).
    In-place fields, because `make_graph(initializer=...)` and `CopyFrom`
    copy a message by serialising it, which fails past 2 GB.
    """
    missing = [io.path for io in param_io if io.path not in weights]
    if missing:
        shown = ", ".join(f"`{p}`" for p in missing[:8])
        more = f" and {len(missing) - 8} more" if len(missing) > 8 else ""
        raise LinnetError(f"the weights lack {shown}{more}, which the entry reads")
    payload: dict[str, np.ndarray[Any, Any]] = {}
    for io in param_io:
        array = np.asarray(weights[io.path or ""])
        if array.shape != io.type.shape or array.dtype != numpy_dtype(io.type.dtype):
            shown = f"{array.dtype}{list(array.shape)}"
            raise LinnetError(f"weight `{io.path}` is {shown}, the model declares {io.type}")
        value = little_endian(array, io.type.dtype)
        tensor = graph.initializer.add()
        describe_tensor(tensor, io.name, value, io.type.dtype)
        if value.nbytes < INLINE_LIMIT:
            tensor.raw_data = value.tobytes()
        else:
            payload[io.name] = value
    return payload


def _metadata(
    entry: str,
    provider: str,
    param_io: Sequence[GraphIO],
    state_io: Sequence[GraphIO],
    outputs: Sequence[GraphIO],
) -> dict[str, str]:
    props = {"linnet.entry": entry, "linnet.provider": provider}
    props.update({f"linnet.path.{io.name}": io.path or "" for io in param_io})
    props.update({f"linnet.state.{io.name}": io.path or "" for io in state_io})
    props.update(
        {f"linnet.next_state.{io.name}": io.path or "" for io in outputs if io.role == "next_state"}
    )
    props.update(
        {
            f"linnet.gradient.{io.name}": io.path
            for io in outputs
            if io.role == "output" and io.path is not None
        }
    )
    return props


def _dynamic_metadata(dynamic: DynamicShapes) -> dict[str, str]:
    props = {"linnet.dynamic": ",".join(dynamic.names)}
    for i, clause in enumerate(dynamic.runtime_where):
        data = {"text": clause.text, "lhs": clause.lhs, "rel": clause.rel, "rhs": clause.rhs}
        props[f"linnet.where.{i}"] = json.dumps(data)
    return props
