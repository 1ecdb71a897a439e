"""ATen graph -> importer graph, in the shared (ONNX) operator vocabulary.

Stage: the torch importer's second step. In: a `Capture` (an exported
program, its weights' paths, its folded values). Out: a
`linnet.sourcegen.graph.Graph` whose nodes are ONNX-vocabulary operators
(`MatMul`, `Reshape`, `Softmax`, ...) and the `linnet` domain nodes pattern
recovery makes (`linear`, `layer_norm`, `rms_norm`, `silu`, `gelu`), so the
shared back half (`linnet.sourcegen`: recovery, naming, layout, translation,
refusals) reads a torch model exactly as it reads an ONNX one. Every ATen
operator maps to one or a few such nodes (`ATEN`); a node with no mapping, a
shape the capture could not fix, or a data-dependent value is collected as an
`Untranslated` entry with the `file.py:line` that made it, and the caller
refuses them all at once.

Values keep the FX node names (`linear_3`); weights are stored tensors named
by their state_dict paths, so the layout lays them out as the module tree
and the original checkpoint binds unchanged. Shapes come from each node's
`meta["val"]`; symbolic extents become the generic names of `capture.dims`.
"""

from __future__ import annotations

import torch
from torch import fx

from linnet.sourcegen.builder import Skip, Untranslated
from linnet.sourcegen.graph import Graph, TensorInfo
from linnet.sourcegen.repeats import merge_repeats
from linnet.torch.dtypes import linnet_dtype
from linnet.torch.importer.builder import (
    Builder,
    args_of,
    aten_key,
    np_dtype,
    numpy_of,
    source_line,
)
from linnet.torch.importer.capture import Capture
from linnet.torch.importer.ops_nn import NN_OPS
from linnet.torch.importer.ops_tensor import TENSOR_OPS, Handler

__all__ = ["ATEN", "Untranslated", "aten_graph"]

ATEN: dict[str, Handler] = {**TENSOR_OPS, **NN_OPS}
"""Every ATen operator the importer maps, keyed without the `aten.` prefix."""

_DROPPED = {
    "aten._assert_tensor_metadata.default",
    "aten._assert_scalar.default",
    "aten.sym_constrain_range_for_size.default",
    "aten._assert_async.msg",
}

# ---------------------------------------------------------------- the walk


def aten_graph(cap: Capture) -> tuple[Graph, list[Untranslated]]:
    """The importer graph of `cap` and the nodes it could not translate."""
    b = Builder(cap)
    g = b.graph
    for path in cap.weights.values():
        g.initializers[path] = numpy_of(cap.tensors[path])
    fx_graph = cap.program.graph_module.graph
    live = _live(fx_graph)
    dead: set[fx.Node] = set()
    for node in fx_graph.nodes:
        if node not in live:
            continue  # computes nothing the results read (a pooled output not returned)
        if node.op == "placeholder":
            if node.name in cap.weights:
                path = cap.weights[node.name]
                b.names[node] = path
                arr = g.initializers[path]
                g.value_info[path] = TensorInfo(
                    path, np_dtype(arr.dtype), tuple(int(s) for s in arr.shape)
                )
            elif node.name in cap.inputs:
                val = node.meta.get("val")
                if not isinstance(val, torch.Tensor):
                    b.untranslated.append(
                        Untranslated(node.name, "input", "inputs must be tensors", "")
                    )
                    continue
                try:
                    info = TensorInfo(node.name, linnet_dtype(val.dtype), b.shape_of(val, True))
                except Skip as exc:
                    b.untranslated.append(Untranslated(node.name, "input", str(exc), ""))
                    continue
                g.inputs.append(info)
                g.value_info[node.name] = info
                b.names[node] = node.name
            continue
        if node.op == "output":
            if not b.untranslated:
                _outputs(b, node)
            continue
        if node.op != "call_function":
            b.untranslated.append(
                Untranslated(node.name, str(node.op), "not an operator call", source_line(node))
            )
            continue
        if node in cap.folded:
            continue  # materialised as a constant where a translated node reads it
        if isinstance(node.meta.get("val"), torch.SymInt):
            # A size (`sym_size`, `s0 - 1`): its value is built from the inputs' shapes
            # where a node reads it as a tensor (`Builder.value`).
            b.names[node] = ("extent", node.name)
            continue
        target = str(node.target)
        if target in _DROPPED:
            continue
        if any(d in dead for d in node.all_input_nodes):
            dead.add(node)  # downstream of a refused node: its cause is reported
            if aten_key(node) not in ATEN and target not in _DROPPED:
                b.untranslated.append(Untranslated(node.name, target,
                                                   "no translation for this operator",
                                                   source_line(node)))  # fmt: skip
            continue
        b.scope = _scope(node)
        b.where = source_line(node)
        fn = ATEN.get(aten_key(node))
        if fn is None:
            dead.add(node)
            b.untranslated.append(
                Untranslated(
                    node.name, target, "no translation for this operator", source_line(node)
                )
            )
            continue
        mark = len(g.nodes)
        try:
            fn(b, node)
        except Skip as exc:
            del g.nodes[mark:]
            dead.add(node)
            b.untranslated.append(Untranslated(node.name, target, str(exc), source_line(node)))
    if not b.untranslated:
        merge_repeats(g)  # one rotary table per model, not one per layer (dynamic shapes)
    return g, b.untranslated


def _live(graph: fx.Graph) -> set[fx.Node]:
    """The nodes the output reads, directly or not, and every placeholder."""
    live: set[fx.Node] = set()
    todo = [n for n in graph.nodes if n.op in ("output", "placeholder")]
    while todo:
        node = todo.pop()
        if node in live:
            continue
        live.add(node)
        todo.extend(node.all_input_nodes)
    return live


def _outputs(b: Builder, node: fx.Node) -> None:
    (results,) = args_of(node)
    flat = list(results) if isinstance(results, list | tuple) else [results]
    user = b.cap.program.graph_signature.user_outputs
    for i, r in enumerate(flat):
        if not isinstance(r, fx.Node):
            b.untranslated.append(Untranslated("output", "output", "a non-tensor result", ""))
            continue
        if i >= len(user):
            b.untranslated.append(
                Untranslated(r.name, "output", "a buffer mutation (state) is not imported", "")
            )
            continue
        try:
            name = b.value(r)
            info = b.info(r)
        except Skip as exc:
            b.untranslated.append(Untranslated(r.name, "output", str(exc), ""))
            continue
        b.graph.outputs.append(TensorInfo(name, info.dtype, info.shape))


def _scope(node: fx.Node) -> str:
    """The path of the innermost module the node ran in (`model.layers.0.mlp`)."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path = list(stack.values())[-1][0]
    return str(path) if isinstance(path, str) else ""
