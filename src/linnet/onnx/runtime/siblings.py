"""Weight-only products that read the same activation, merged into one kernel.

Stage: the runtime's step between the exported graph and the session
(`session.EntrySession`, CPU only), before `constants.constant_weights`. In:
an exported graph and which graph inputs are weights. Out: the same graph with
each group of sibling `MatMulNBits` nodes (a Llama layer's q/k/v projections,
its gate/up projections) replaced by one `MatMulNBits` on the weights
concatenated along the output axis, whose result a `Split` cuts back into the
original outputs.

Why: batch-1 decoding runs seven weight-only products per layer, each one
parallel section of ONNX Runtime's pool (a wake-up of the pool's sleeping
threads, `session.CPU_SPINNING`) and one quantisation of its activation
(`int8_activations`). Merged, a layer runs four, each with more rows to share
between the threads.

Same function: every output column of `MatMulNBits` is computed from `A`
and its own row of `B`, `scales`, `zero_points` (and `bias`) alone, and the
activation is quantised per block of `A`, the same blocks for every sibling;
the merged kernel computes each column as the sibling that owned it did.
The row-major layouts make the concatenation along axis 0 a concatenation of
rows: `B [N, k_blocks, block/2]`, the flat `scales [N * k_blocks]` and the
flat packed `zero_points [N * ceil(k_blocks / 2)]` (each row padded to whole
bytes), `bias [N]`.

A group is nodes of the default `MatMulNBits` domain with the same `A`, the
same attributes but `N`, the same optional inputs present (no `g_idx`), and
weight-side inputs computed from weights alone: the `Concat` nodes read only
weights, so ONNX Runtime folds them once at load and pre-packs the merged `B`
(`constants`). The nodes are then put back in a topological order (a
sibling's weight-side nodes may come after the first sibling's readers).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from linnet.errors import InternalError
from linnet.onnx.export.fused_quant import DOMAIN, OP_TYPE
from linnet.onnx.runtime.constants import reaches_weights_only
from linnet.onnx.runtime.graph import GraphIndex, replace_nodes

_PREFIX = "linnet_siblings"
_G_IDX = 4
"""`MatMulNBits` inputs: A, B, scales, zero_points, g_idx, bias."""


def merge_siblings(proto: onnx.ModelProto, weights: Mapping[str, str]) -> onnx.ModelProto:
    """`proto` with sibling weight-only products merged (`proto` itself when none are);
    `weights` maps the graph inputs that are weights to their paths."""
    graph = proto.graph
    producers = {out: node for node in graph.node for out in node.output if out}
    groups: dict[tuple[object, ...], list[int]] = {}
    for index, node in enumerate(graph.node):
        key = _group_key(node, producers, weights)
        if key is not None:
            groups.setdefault(key, []).append(index)
    merged = [members for members in groups.values() if len(members) > 1]
    if not merged:
        return proto
    changed = onnx.ModelProto()
    changed.CopyFrom(proto)
    nodes = list(changed.graph.node)
    replaced: set[int] = set()
    # (position, new node): a merged group's nodes take its first member's position
    placed: list[tuple[int, onnx.NodeProto]] = []
    for number, members in enumerate(merged):
        replaced.update(members)
        new = _merged_nodes(f"{_PREFIX}{number}", [nodes[i] for i in members])
        placed.extend((members[0], node) for node in new)
    order = [(i, n) for i, n in enumerate(nodes) if i not in replaced] + placed
    order.sort(key=lambda pair: pair[0])
    replace_nodes(changed.graph, _topological([n for _, n in order]))
    return changed


def _group_key(
    node: onnx.NodeProto,
    producers: Mapping[str, onnx.NodeProto],
    weights: Mapping[str, str],
) -> tuple[object, ...] | None:
    """What siblings share (A, attributes but N, optional inputs present), or None when
    `node` cannot be merged."""
    if node.op_type != OP_TYPE or node.domain != DOMAIN:
        return None
    inputs = list(node.input) + [""] * (6 - len(node.input))
    if inputs[_G_IDX] or not inputs[0] or not reaches_weights_only(node, producers, weights):
        return None
    attrs = tuple(sorted((a.name, a.SerializeToString()) for a in node.attribute if a.name != "N"))
    return (inputs[0], attrs, tuple(bool(name) for name in inputs))


def _merged_nodes(prefix: str, members: list[onnx.NodeProto]) -> list[onnx.NodeProto]:
    """`Concat`s of the members' weight-side inputs, one `MatMulNBits`, and a `Split` whose
    outputs are the members' outputs."""
    first = members[0]
    rows = [next(a.i for a in node.attribute if a.name == "N") for node in members]
    nodes: list[onnx.NodeProto] = []
    inputs = [first.input[0]]
    for slot in range(1, len(first.input)):
        if not first.input[slot]:
            inputs.append("")
            continue
        joined = f"{prefix}_in{slot}"
        parts = [node.input[slot] for node in members]
        nodes.append(helper.make_node("Concat", parts, [joined], name=joined, axis=0))
        inputs.append(joined)
    product = f"{prefix}_out"
    attrs = {a.name: helper.get_attribute_value(a) for a in first.attribute}
    attrs["N"] = sum(rows)
    nodes.append(helper.make_node(OP_TYPE, inputs, [product], name=product, domain=DOMAIN, **attrs))
    sizes = f"{prefix}_sizes"
    value = numpy_helper.from_array(np.array(rows, np.int64), sizes)
    nodes.append(helper.make_node("Constant", [], [sizes], name=sizes, value=value))
    outputs = [node.output[0] for node in members]
    nodes.append(helper.make_node("Split", [product, sizes], outputs, name=f"{prefix}_split",
                                  axis=-1))  # fmt: skip
    return nodes


def _topological(nodes: list[onnx.NodeProto]) -> list[onnx.NodeProto]:
    """`nodes` in an order where every name is made before it is read, as close to the given
    order as that allows (Kahn's algorithm, the earliest ready node first)."""
    graph = onnx.GraphProto()
    graph.node.extend(nodes)
    index = GraphIndex(graph)
    waiting = [0] * len(nodes)
    readers: dict[int, list[int]] = {}
    for i, reads in enumerate(index.reads):
        makers = {index.producer[name] for name in reads if name in index.producer}
        makers.discard(i)
        waiting[i] = len(makers)
        for maker in makers:
            readers.setdefault(maker, []).append(i)
    ready = [i for i, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    order: list[onnx.NodeProto] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(nodes[i])
        for reader in readers.get(i, ()):
            waiting[reader] -= 1
            if waiting[reader] == 0:
                heapq.heappush(ready, reader)
    if len(order) != len(nodes):  # a cycle: impossible for siblings (weight-side inputs)
        raise InternalError("merging sibling weight-only products made a cycle")
    return order
