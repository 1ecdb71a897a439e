"""Weights that ONNX Runtime must see as constants: the weight side of `MatMulNBits`
and of the int8 dequantisation folded at load.

Stage: the runtime, between the exported graph and `session.EntrySession`.
Weights are normally graph inputs, bound once by I/O binding (no copy per
run). ONNX Runtime's weight-only kernel `com.microsoft::MatMulNBits` pre-packs
its `B` only when `B` is an initializer; fed as an input it dequantises the
whole matrix on every call (measured: 2048 x 2048 int4, 39 ms per call
against 0.6 ms pre-packed). So the weights that reach a `MatMulNBits` node's
`B`, `scales` or `zero_points` (directly, or through the integer nodes that
repack them, `linnet.onnx.export.fused_quant`), and those behind an `Identity`
the exporter named with `FOLD_MARK` (an int8 weight's dequantisation), become
initializers whose bytes live in memory we hold: `external_data` pointing at
an in-memory file (`SessionOptions.add_external_initializers_from_files_in_memory`),
so the graph proto stays small. ONNX Runtime then folds those nodes once and
pre-packs `B` when the session is made. On the CPU only (the fused kernels'
provider).

Such a session has those weights baked in: `OnnxModel.update_weights` drops
it, and the next call makes a new one.

The in-memory files are registered on the session's options, and a caller's
`load_model(session_options=...)` object serves every session of the model
(and of other models given it); ONNX Runtime refuses a file name registered
twice on one object. So each promoted weight gets a file name no other
session in the process has (`_file_ids`), and no session can read another's.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Set
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort  # type: ignore[import-untyped]

from linnet.onnx.export.fused_quant import DOMAIN, FOLD_MARK, OP_TYPE, QUANTISED_INPUTS

Array = np.ndarray[Any, Any]

_file_ids = itertools.count()
"""Numbers for in-memory file names, unique in the process (`next` is atomic in CPython)."""


def constant_weights(
    proto: onnx.ModelProto,
    weights: Mapping[str, str],
    values: Mapping[str, ort.OrtValue],
    also: Set[str] = frozenset(),
) -> tuple[onnx.ModelProto, dict[str, Array]]:
    """`proto` with the weights `MatMulNBits` reads, and the graph inputs named in `also`
    (`prepack.prepacked_weights`), turned into in-memory initializers.

    `weights` maps graph input names to weight paths, `values` paths to bound
    values. Returns the new proto (`proto` itself when nothing changes) and the
    in-memory files by name, one per promoted weight (its host bytes).
    """
    graph = proto.graph
    producers = {out: node for node in graph.node for out in node.output}
    chosen: set[str] = {name for name in also if name in weights}
    for node in graph.node:
        if not _reads_constants(node):
            continue
        reached: set[str] = set()
        if _weight_inputs(node, producers, weights, reached):
            chosen |= reached
    if not chosen:
        return proto, {}
    changed = onnx.ModelProto()
    changed.CopyFrom(proto)
    files: dict[str, Array] = {}
    kept = [v for v in changed.graph.input if v.name not in chosen]
    for value in changed.graph.input:
        if value.name not in chosen:
            continue
        host = np.ascontiguousarray(values[weights[value.name]].numpy())
        file = f"linnet-weight-{next(_file_ids)}-{value.name}"
        files[file] = host.reshape(-1).view(np.uint8)
        tensor = onnx.TensorProto()
        tensor.name = value.name
        tensor.data_type = value.type.tensor_type.elem_type
        tensor.dims.extend(host.shape)
        tensor.data_location = onnx.TensorProto.EXTERNAL
        for key, text in (("location", file), ("offset", "0"), ("length", str(host.nbytes))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, text
        changed.graph.initializer.append(tensor)
    del changed.graph.input[:]
    changed.graph.input.extend(kept)
    return changed, files


def _reads_constants(node: onnx.NodeProto) -> bool:
    """A `MatMulNBits` node, or an `Identity` the exporter marked for folding (`FOLD_MARK`)."""
    if node.op_type == OP_TYPE and node.domain == DOMAIN:
        return True
    return node.op_type == "Identity" and node.name.startswith(FOLD_MARK)


def reaches_weights_only(
    node: onnx.NodeProto, producers: Mapping[str, onnx.NodeProto], weights: Mapping[str, str]
) -> bool:
    """Whether `node`'s weight-side inputs are computed from weights alone (and some)."""
    return _weight_inputs(node, producers, weights, set())


def _weight_inputs(
    node: onnx.NodeProto,
    producers: Mapping[str, onnx.NodeProto],
    weights: Mapping[str, str],
    reached: set[str],
) -> bool:
    """Whether every graph input behind `node`'s weight-side inputs is a weight (collected
    in `reached`)."""
    indices = (0,) if node.op_type == "Identity" else QUANTISED_INPUTS
    pending = [node.input[i] for i in indices if i < len(node.input) and node.input[i]]
    seen: set[str] = set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        producer = producers.get(name)
        if producer is not None:
            pending.extend(i for i in producer.input if i)
        elif name in weights:
            reached.add(name)
        else:
            return False
    return bool(reached)


def add_memory_files(options: ort.SessionOptions, files: Mapping[str, Array]) -> None:
    """Register in-memory files for `external_data` locations (kept alive by the caller)."""
    if files:
        names = list(files)
        buffers = [files[n] for n in names]
        options.add_external_initializers_from_files_in_memory(
            names, buffers, [b.nbytes for b in buffers]
        )
