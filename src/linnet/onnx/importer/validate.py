"""A model file checked before the importer reads a node of it: refused by name when broken.

Stage: the importer's first step after reading the protobuf (`api._load`),
before shape inference. In: the `ModelProto` (external data not loaded) and
the path it came from, if any. Out: nothing, or an `ImportRefusedError`
that says what is wrong in the model's own terms.

Why both our checks and onnx's checker: the checker catches what is not a
model at all (a foreign file can decode as a model without an IR version,
graph or opset), an unknown operator version, attributes of the wrong
type; but it reports a cycle as "not topologically sorted" and takes
duplicate graph outputs. Our own checks come first and name the tensor and
the nodes: two nodes writing one tensor, a cycle (the nodes along it), a
graph output listed twice, a node reading a tensor nothing defines (the
main graph; a subgraph may read the names of the graph around it). The
checker then runs on a light copy of the message, its stored tensors over
4 KiB replaced by external references (`light_copy`): a model of any size
(past 2 GB, with external data) is checked without reading or copying a
weight. It refuses, among others, nodes out of topological order. Shape
inference follows in `api._infer`; external data files are opened (and a
missing one named) by `api._attach_external`. An operator unknown to onnx
is left to `refusals.check_mapped`, which names every node the importer
cannot map (the checker stops at the first).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import onnx
import onnx.checker
import onnx.helper

from linnet.sourcegen.refusals import ImportRefusedError

__all__ = ["light_copy", "validate_model"]

_CHECK_PAYLOAD = 4096
"""Stored tensors above this many bytes are left out of the checker's copy."""


def validate_model(proto: onnx.ModelProto, path: Path | None, label: str) -> None:
    """Refuse a model that is empty, malformed or not a graph (see the module docstring)."""
    if path is not None and path.stat().st_size == 0:
        raise ImportRefusedError(f"cannot import {label}: the file is empty (0 bytes)")
    if not proto.HasField("graph") or proto.ir_version == 0:
        raise ImportRefusedError(
            f"cannot import {label}: not an ONNX model (no IR version or no graph)"
        )
    _check_graph(proto.graph, label)
    _run_checker(proto, label)


def _node_label(node: onnx.NodeProto, index: int) -> str:
    return f"`{node.name or f'#{index}'}` ({node.op_type})"


def _check_graph(graph: onnx.GraphProto, label: str) -> None:
    nodes: Sequence[onnx.NodeProto] = graph.node
    defined_by: dict[str, str] = {}
    for value in graph.input:
        defined_by[value.name] = "a graph input"
    for tensor in graph.initializer:
        defined_by.setdefault(tensor.name, "an initializer")
    producer: dict[str, int] = {}
    for index, node in enumerate(nodes):
        for name in node.output:
            if not name:
                continue  # an omitted optional output
            if name in producer:
                first = _node_label(nodes[producer[name]], producer[name])
                raise ImportRefusedError(
                    f"cannot import {label}: tensor `{name}` is written by two nodes, "
                    f"{first} and {_node_label(node, index)} (ONNX graphs assign each "
                    "tensor once)"
                )
            if name in defined_by:
                raise ImportRefusedError(
                    f"cannot import {label}: node {_node_label(node, index)} writes `{name}`, "
                    f"which is already {defined_by[name]}"
                )
            producer[name] = index
    seen: set[str] = set()
    for value in graph.output:
        if value.name in seen:
            raise ImportRefusedError(
                f"cannot import {label}: graph output `{value.name}` is listed twice"
            )
        seen.add(value.name)
    cycle = _find_cycle(nodes, producer)
    if cycle:
        steps = " -> ".join(f"{_node_label(nodes[i], i)} writes `{t}`" for i, t in cycle)
        raise ImportRefusedError(
            f"cannot import {label}: the graph has a cycle: {steps}, which the first node reads"
        )
    known = set(defined_by) | set(producer) | {""}
    for index, node in enumerate(nodes):
        for name in node.input:
            if name not in known:
                raise ImportRefusedError(
                    f"cannot import {label}: node {_node_label(node, index)} reads `{name}`, "
                    "which no graph input, initializer or node defines"
                )
    for value in graph.output:
        if value.name not in known:
            raise ImportRefusedError(
                f"cannot import {label}: graph output `{value.name}` is defined by nothing"
            )


def _find_cycle(nodes: Sequence[onnx.NodeProto], producer: dict[str, int]) -> list[tuple[int, str]]:
    """One cycle in data-flow order: (node index, the tensor it writes that the next reads).

    The last node's tensor is read by the first. An iterative depth-first
    search from each node to the producers of its inputs (no recursion: a
    graph may have a hundred thousand nodes).
    """
    reads: list[list[tuple[int, str]]] = []  # node -> (producer of an input, that input)
    for node in nodes:
        reads.append([(producer[name], name) for name in node.input if name in producer])
    state = [0] * len(nodes)  # 0 unvisited, 1 on the path, 2 done
    for root in range(len(nodes)):
        if state[root]:
            continue
        path: list[tuple[int, str]] = []  # the nodes on the path and the tensor each reads
        stack = [(root, 0)]
        state[root] = 1
        path.append((root, ""))
        while stack:
            at, edge = stack[-1]
            if edge < len(reads[at]):
                stack[-1] = (at, edge + 1)
                source, tensor = reads[at][edge]
                if state[source] == 1:  # back to a node on the path: a cycle
                    start = next(i for i, (n, _) in enumerate(path) if n == source)
                    # path[k] writes the tensor path[k - 1] reads: data flows backwards
                    return [(source, tensor), *reversed(path[start + 1 :])]
                if state[source] == 0:
                    state[source] = 1
                    stack.append((source, 0))
                    path.append((source, tensor))
            else:
                state[at] = 2
                stack.pop()
                path.pop()
    return []


def _run_checker(proto: onnx.ModelProto, label: str) -> None:
    light = light_copy(proto, _CHECK_PAYLOAD)
    _stored_as_inputs(light.graph)
    _give_shapes(light.graph)
    try:
        onnx.checker.check_model(light)
    except onnx.checker.ValidationError as exc:
        said = " ".join(str(exc).split()) or type(exc).__name__
        if said.startswith("No Op registered for"):
            return  # `check_mapped` names every operator the importer lacks, not only the first
        raise ImportRefusedError(
            f"cannot import {label}: the ONNX checker refuses it: {said}"
        ) from None


def _stored_as_inputs(graph: onnx.GraphProto) -> None:
    """Each external stored tensor a typed graph input instead (the checker opens external files)."""
    keep, moved = [], []
    for init in graph.initializer:
        if init.data_location == onnx.TensorProto.EXTERNAL:
            moved.append(onnx.helper.make_tensor_value_info(init.name, init.data_type, init.dims))
        else:
            keep.append(init)
    if moved:
        names = {i.name for i in graph.input}
        del graph.initializer[:]
        graph.initializer.extend(keep)
        graph.input.extend(vi for vi in moved if vi.name not in names)


def _give_shapes(graph: onnx.GraphProto) -> None:
    """An empty shape on each tensor type without one (the checker wants the field).

    A value of unknown rank is valid ONNX for ONNX Runtime and the importer;
    the copy is only checked, never inferred, so the stand-in changes nothing.
    """
    for value in (*graph.input, *graph.output, *graph.value_info):
        if value.type.HasField("tensor_type") and not value.type.tensor_type.HasField("shape"):
            value.type.tensor_type.shape.SetInParent()


def light_copy(proto: onnx.ModelProto, threshold: int) -> onnx.ModelProto:
    """A copy of `proto` whose stored tensors over `threshold` bytes are external references.

    The payloads are neither copied nor read: each is taken out of `proto`
    while the copy is made and put back afterwards.
    """
    light = onnx.ModelProto()
    saved = []
    for init in proto.graph.initializer:
        if init.HasField("raw_data") and len(init.raw_data) > threshold:
            saved.append((init, init.raw_data))
            init.ClearField("raw_data")
            init.data_location = onnx.TensorProto.EXTERNAL
            entry = init.external_data.add()
            entry.key, entry.value = "location", "stripped"
    try:
        light.CopyFrom(proto)
    finally:
        for init, raw in saved:
            del init.external_data[:]
            init.data_location = onnx.TensorProto.DEFAULT
            init.raw_data = raw
    return light
