"""What an exported entry graph binds, and how each state can be updated.

Stage: between the exporter (`linnet.onnx.export.api`) and the runtime
(`linnet.onnx.runtime.model`). In: the `ModelProto` of one entry exported without
weights, the Core IR `Function` it came from, and the model's tensor kinds by
path. Out: a `Contract` naming every graph input and output by role, and the
graph variants the runtime needs (`with_argmax`).

The graph contract (what the exporter promises):

- graph inputs are the entry's inputs in order, then `param<N>` for every
  param or buffer read, then `state<N>` for every state read; graph outputs
  are `output<N>` (the results in order), then `next_state<N>` (the new value
  of every state the entry assigns);
- the model's `metadata_props` map `linnet.path.param<N>`,
  `linnet.state.state<N>` and `linnet.next_state.next_state<N>` to the Linnet
  path of each param or buffer, state input and state output. Where a state
  name has no such entry, its path is taken from the Function instead: the
  N-th `next_state` is the N-th `state_updates` key, the N-th `state` input the
  N-th state path read (walk order).

In-place updates (`Contract.update_modes`). ONNX Runtime does not alias graph
inputs with outputs by itself, but with I/O binding the same `OrtValue` can be
bound as a state input and as its next-state output. That is safe exactly when
no node reads the old value after the new one starts being written, which this
module proves from the graph: the `next_state` output is made by a
`ScatterND` or `ScatterElements` that reads the state input as its data
operand, and every other node reading the state input (subgraphs of
`Loop`/`If`/`Scan` included, since they may read outer names) is an ancestor
of that scatter, so it has finished before the scatter runs. Those kernels
copy their data operand to their output only when the two buffers differ
(onnxruntime's scatter_nd.cc / scatter_elements.cc check), so an aliased
update writes just the scattered rows: no cache bytes are copied. Measured on
this machine (ONNX Runtime 1.32, CPU, a 64 MB cache): 0.04 ms per aliased
step against 22 ms when the output is a second buffer.

- `in_place`: bind the state buffer as input and output;
- `overwrite`: the entry assigns the state without reading it, so its output
  goes straight into the state buffer;
- `swap`: any other graph (say the select-over-all-positions body of
  `std.nn.cache`): the output goes to a second buffer of the same type and the
  two are swapped after the run. No allocation and no copy outside the graph,
  but the graph itself writes every byte of the state once per call.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal

import onnx
from onnx import TensorProto, helper

from linnet.errors import InternalError, LinnetError
from linnet.ir.bind import BoundModel
from linnet.ir.core import Function, TensorType
from linnet.ir.inputs import InputChecks, input_checks
from linnet.ir.regions import paths_read
from linnet.onnx.runtime.graph import GraphIndex, rename_uses, replace_nodes, subgraphs
from linnet.onnx.runtime.values import ONNX_ELEMENT_TYPES
from linnet.records import record

UpdateMode = Literal["in_place", "overwrite", "swap"]

PATH_PREFIXES = ("linnet.path.", "linnet.state.", "linnet.next_state.")
"""`metadata_props` keys that map a graph input or output name to its Linnet path."""
SCATTERS = frozenset({"ScatterND", "ScatterElements"})
"""Kernels that skip copying their data operand when the output aliases it."""

_DTYPES_OF_ELEMENT = {v: k for k, v in ONNX_ELEMENT_TYPES.items()}


@record(eq=False)
class Contract:
    """The roles of one exported entry graph's inputs and outputs (see the module docstring).

    `inputs` are the graph input names of the entry inputs, in order (None for an
    entry input the graph does not take); `weights` and `state_inputs` map graph
    input names to paths; `results` are the result output names in order;
    `state_outputs` maps graph output names to state paths; `update_modes` says
    how each assigned state path is bound; `checks` are what the entry's inputs are
    checked against before a run (`linnet.ir.inputs`).
    """

    inputs: tuple[str | None, ...]
    weights: dict[str, str]
    state_inputs: dict[str, str]
    results: tuple[str, ...]
    result_types: tuple[TensorType, ...]
    state_outputs: dict[str, str]
    update_modes: dict[str, UpdateMode]
    checks: InputChecks

    @property
    def fixed_addresses(self) -> bool:
        """Whether every state the entry writes keeps its buffer (no `swap`)."""
        return all(mode != "swap" for mode in self.update_modes.values())


def read_contract(
    proto: onnx.ModelProto,
    fn: Function,
    kinds: Mapping[str, str],
    model: BoundModel | None = None,
) -> Contract:
    """The `Contract` of `proto`, exported from `fn`; `kinds` maps paths to param/buffer/state;
    `model` (when given) names the extents in the messages of the input checks.

    `proto` is ours to change: `fold_output_identities` runs on its state outputs.
    """
    graph = proto.graph
    meta = {
        p.key[len(prefix) :]: p.value
        for p in proto.metadata_props
        for prefix in PATH_PREFIXES
        if p.key.startswith(prefix)
    }
    state_read = paths_read(fn, "state")
    updated = list(fn.state_updates)
    weights: dict[str, str] = {}
    state_inputs: dict[str, str] = {}
    plain: list[str] = []
    for value in graph.input:
        path = meta.get(value.name) or _fallback(value.name, "state", state_read)
        if path is None:
            plain.append(value.name)
            continue
        kind = kinds.get(path)
        if kind is None:
            raise InternalError(
                f"graph input `{value.name}` names `{path}`, no tensor of the model"
            )
        (state_inputs if kind == "state" else weights)[value.name] = path
    state_outputs: dict[str, str] = {}
    results: list[str] = []
    for value in graph.output:
        path = meta.get(value.name) or _fallback(value.name, "next_state", updated)
        if path is None:
            results.append(value.name)
        else:
            state_outputs[value.name] = path
    if len(results) != len(fn.results):
        raise InternalError(
            f"entry `{fn.name}` has {len(fn.results)} results, its graph {len(results)} outputs"
        )
    if sorted(state_outputs.values()) != sorted(updated):
        raise InternalError(f"entry `{fn.name}`: the graph's next_state outputs miss a state")
    inputs = _match_inputs(fn, plain)
    fold_output_identities(proto, list(state_outputs))
    source = {path: name for name, path in state_inputs.items()}
    by_output = update_modes(graph, {n: source.get(p) for n, p in state_outputs.items()})
    modes = {path: by_output[name] for name, path in state_outputs.items()}
    return Contract(
        inputs,
        weights,
        state_inputs,
        tuple(results),
        tuple(v.type for v in fn.results),
        state_outputs,
        modes,
        input_checks(fn, model),
    )


def _fallback(name: str, prefix: str, paths: list[str]) -> str | None:
    """The N-th path for a `<prefix>N` name without metadata (see the module docstring)."""
    match = re.fullmatch(rf"{prefix}(\d+)", name)
    if match is None:
        return None
    index = int(match.group(1))
    if index >= len(paths):
        raise InternalError(f"graph value `{name}` has no path: the function has {len(paths)}")
    return paths[index]


def _match_inputs(fn: Function, plain: list[str]) -> tuple[str | None, ...]:
    """Entry inputs to graph inputs: by name where the graph kept the names, else in order."""
    names = [name for name, _ in fn.inputs]
    if set(plain) <= set(names):
        return tuple(name if name in plain else None for name in names)
    if len(plain) != len(names):
        raise InternalError(
            f"entry `{fn.name}` has inputs {names}, its graph {plain}: cannot match them"
        )
    return tuple(plain)


def consumers(graph: onnx.GraphProto, name: str) -> list[tuple[int, bool]]:
    """The index of every node reading `name`, with whether it reads it only as its
    first input (a node whose subgraphs read the name reads it too)."""
    return GraphIndex(graph).readers.get(name, [])


def update_modes(
    graph: onnx.GraphProto, outputs: Mapping[str, str | None]
) -> dict[str, UpdateMode]:
    """The mode of each state output name -> its state input name (None: not read)."""
    index = GraphIndex(graph)
    return {out: _mode(index, out, source) for out, source in outputs.items()}


def update_mode(graph: onnx.GraphProto, output: str, source: str | None) -> UpdateMode:
    """How the state written to `output` and read from input `source` (None: not read) is
    updated (see the module docstring)."""
    return _mode(GraphIndex(graph), output, source)


def _mode(index: GraphIndex, output: str, source: str | None) -> UpdateMode:
    if source is None:
        return "overwrite"
    writer = index.producer.get(output)
    if source in index.outputs or writer is None:
        return "swap"
    node = index.nodes[writer]
    standard = node.domain in ("", "ai.onnx")
    if node.op_type not in SCATTERS or not standard or list(node.output) != [output]:
        return "swap"
    before = index.ancestors(writer)
    for reader, as_data in index.readers.get(source, []):
        if reader == writer:
            if not as_data:
                return "swap"
        elif reader not in before:
            return "swap"
    return "in_place"


def fold_output_identities(proto: onnx.ModelProto, outputs: list[str]) -> None:
    """Let the producers of `outputs` write them directly, in place in `proto`.

    An exporter may give a graph output its name through an `Identity` node;
    ONNX Runtime then computes the value into a buffer of its own and copies it
    into the bound output, which would turn an in-place scatter into a full copy.
    Renaming the Identity's input to the output name everywhere (subgraphs
    included: they read outer names) and dropping the node computes the same
    graph. Skipped where the input is a graph input, an initializer or another
    output, or is not made by a node of the main graph.
    """
    graph = proto.graph
    index = GraphIndex(graph)
    mapping: dict[str, str] = {}
    dropped: set[int] = set()
    for output in outputs:
        made_by = index.producer.get(output)
        if made_by is None:
            continue
        node = index.nodes[made_by]
        if node.op_type != "Identity" or node.domain not in ("", "ai.onnx"):
            continue
        source = node.input[0]
        taken = source in index.inputs or source in index.outputs or source in mapping
        if taken or source not in index.producer:
            continue
        mapping[source] = output
        dropped.add(made_by)
    if not mapping:
        return
    kept = [n for i, n in enumerate(index.nodes) if i not in dropped]
    for node in kept:
        for i, name in enumerate(node.output):
            if name in mapping:
                node.output[i] = mapping[name]
    replace_nodes(graph, kept)
    rename_uses(graph, mapping)
    for info in graph.value_info:
        if info.name in mapping:
            info.name = mapping[info.name]


def with_argmax(proto: onnx.ModelProto, contract: Contract) -> tuple[onnx.ModelProto, Contract]:
    """A copy of the graph whose first result is the argmax of the old one over its last axis.

    The indices come out as i32 (the token dtype of Linnet's language models), so a
    decode loop can feed them straight back as the next input without a host trip;
    ties go to the first index (ArgMax's `select_last_index=0`), as NumPy's argmax.
    """
    if not contract.results:
        raise LinnetError("argmax=True needs an entry with a result")
    first = contract.result_types[0]
    if first.rank == 0:
        raise LinnetError(f"argmax=True needs a first result with an axis, not {first}")
    if first.shape[-1] == 0:
        raise LinnetError(f"argmax=True needs a non-empty last axis, not {first}")
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    graph = out.graph
    old = contract.results[0]
    position = next(i for i, v in enumerate(graph.output) if v.name == old)
    indices, token = f"{old}_argmax_i64", f"{old}_argmax"
    graph.node.extend(
        [
            helper.make_node("ArgMax", [old], [indices], axis=-1, keepdims=0),
            helper.make_node("Cast", [indices], [token], to=TensorProto.INT32),
        ]
    )
    shape = first.shape[:-1]
    graph.output[position].CopyFrom(helper.make_tensor_value_info(token, TensorProto.INT32, shape))
    results = (token, *contract.results[1:])
    types = (TensorType(shape, "i32"), *contract.result_types[1:])
    variant = Contract(
        contract.inputs,
        contract.weights,
        contract.state_inputs,
        results,
        types,
        contract.state_outputs,
        contract.update_modes,
        contract.checks,
    )
    return out, variant


def dtypes_in(graph: onnx.GraphProto) -> set[str]:
    """The Linnet dtypes of the graph's inputs, outputs and declared values (bf16 detection)."""
    found: set[str] = set()
    for value in [*graph.input, *graph.output, *graph.value_info]:
        elem = value.type.tensor_type.elem_type
        if elem in _DTYPES_OF_ELEMENT:
            found.add(_DTYPES_OF_ELEMENT[elem])
    for init in graph.initializer:
        if init.data_type in _DTYPES_OF_ELEMENT:
            found.add(_DTYPES_OF_ELEMENT[init.data_type])
    for node in graph.node:
        for attr in node.attribute:
            if attr.name == "to" and attr.i in _DTYPES_OF_ELEMENT:
                found.add(_DTYPES_OF_ELEMENT[attr.i])
            if attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type in _DTYPES_OF_ELEMENT:
                found.add(_DTYPES_OF_ELEMENT[attr.t.data_type])
        for sub in subgraphs(node):
            found |= dtypes_in(sub)
    return found
