"""`import_onnx`: an ONNX model in, Linnet source (+ SafeTensors weights) out.

Stage: the ONNX importer's front door; it runs the importer stages in order
(architecture.md "Importers"):

    read the protobuf (external data memory-mapped, never copied whole)
      -> the model checked (validate: our structural checks, then onnx's checker)
      -> shape inference (onnx.shape_inference)
      -> importer graph (graph.onnx_graph); a dynamic Linnet export's size guards
         dropped (guards.strip_guards), its `linnet.where.<N>` clauses kept for the entry
      -> pattern recovery (sourcegen.patterns.recover): RMS norm, SiLU, softmax,
         GELU, attention, rotary embeddings back to standard-library calls
      -> member layout from the stored tensors' dotted names (sourcegen.layout)
      -> translation, one translator per operator (graph.REGISTRY)
      -> module assembly and the formatter (sourcegen.module)
      -> the checker on the generated source
      -> only then: the source written atomically, weights and bindings.json

Nothing in the model is executed. A node nobody can translate stops the import
with one error that names every such node and its operator, and nothing is
written.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from linnet.errors import LinnetError
from linnet.onnx.importer import ops  # noqa: F401 - registers every operator translator
from linnet.onnx.importer.graph import REGISTRY, onnx_graph
from linnet.onnx.importer.guards import strip_guards, where_data
from linnet.onnx.importer.validate import light_copy, validate_model
from linnet.sourcegen.finish import BINDINGS_FILE, WEIGHTS_FILE, ImportResult, finish_import
from linnet.sourcegen.graph import Graph
from linnet.sourcegen.refusals import check_mapped
from linnet.sourcegen.weights import FileRange

__all__ = ["BINDINGS_FILE", "WEIGHTS_FILE", "ImportResult", "import_onnx"]

_INFER_PAYLOAD = 4096
"""Stored tensors above this many bytes are decoded from the original, not the inferred copy."""


def import_onnx(
    model: onnx.ModelProto | str | os.PathLike[str],
    *,
    output: str | os.PathLike[str],
    weights: str | os.PathLike[str] | None = None,
    module_name: str | None = None,
    root_name: str = "Model",
    std_root: str | os.PathLike[str] | None = None,
) -> ImportResult:
    """Translate an ONNX model into a Linnet source file at `output`.

    `model` is a path (external data is read lazily, memory-mapped) or a
    `ModelProto`. With `weights=DIR`, the stored tensors the source reads are
    saved to `DIR/model.safetensors` under their ONNX names, and
    `DIR/bindings.json` maps every parameter path that differs from its ONNX
    name (a model exported by Linnet comes back under its original paths,
    bound to `param<N>`). The generated source is checked before anything is
    written; a model with operators the importer cannot map raises one
    `LinnetError` naming each such node.
    """
    out_path = Path(output)
    proto, source = _load(model)
    validate_model(proto, source, _model_label(model))
    base_dir = None if source is None else source.parent
    inferred = _infer(proto)
    graph = onnx_graph(inferred)
    strip_guards(graph)  # a dynamic export's size guards: stated as `where` clauses below
    check_mapped(graph, REGISTRY, _model_label(model))  # before recovery drops unused nodes
    ranges = _attach_external(graph, proto, base_dir)
    entry = _metadata(proto, "linnet.entry") or "forward"
    return finish_import(
        graph,
        REGISTRY,
        label=_model_label(model),
        output=out_path,
        entry=entry,
        weights=None if weights is None else Path(weights),
        module_name=module_name,
        root_name=root_name,
        std_root=std_root,
        ranges=ranges,
        where=where_data(proto),
    )


# ---------------------------------------------------------------- reading


def _load(model: onnx.ModelProto | str | os.PathLike[str]) -> tuple[onnx.ModelProto, Path | None]:
    """The message (external data not loaded) and the file it came from, if any."""
    if isinstance(model, onnx.ModelProto):
        return model, None
    path = Path(model)
    if not path.is_file():
        raise LinnetError(f"{path}: no such ONNX file")
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # a broken protobuf: onnx raises DecodeError and others
        raise LinnetError(f"{path}: not a readable ONNX model ({exc})") from None
    return proto, path


def _infer(proto: onnx.ModelProto) -> onnx.ModelProto:
    """Shape inference on a light copy: big or external stored tensors become typed inputs.

    Inference reads a stored tensor's type from its dims, so a large weight
    is as good as a graph input of the same type; small ones keep their data
    so shape computations over them can be propagated.
    """
    light = light_copy(proto, _INFER_PAYLOAD)
    graph = light.graph
    keep = []
    moved = []
    for init in graph.initializer:
        external = init.data_location == onnx.TensorProto.EXTERNAL
        if external or (init.HasField("raw_data") and len(init.raw_data) > _INFER_PAYLOAD):
            moved.append(
                onnx.helper.make_tensor_value_info(init.name, init.data_type, list(init.dims))
            )
        else:
            keep.append(init)
    if moved:
        names = {i.name for i in graph.input}
        del graph.initializer[:]
        graph.initializer.extend(keep)
        graph.input.extend(vi for vi in moved if vi.name not in names)
    try:
        inferred = onnx.shape_inference.infer_shapes(light, strict_mode=False, data_prop=True)
    except Exception:
        inferred = onnx.shape_inference.infer_shapes(light, strict_mode=False, data_prop=False)
    if moved:
        # Back to initializers (placeholders; payloads are attached from the original).
        moved_names = {vi.name for vi in moved}
        kept_inputs = [i for i in inferred.graph.input if i.name not in moved_names]
        del inferred.graph.input[:]
        inferred.graph.input.extend(kept_inputs)
        for vi in moved:
            placeholder = onnx.TensorProto()
            placeholder.name = vi.name
            placeholder.data_type = vi.type.tensor_type.elem_type
            placeholder.dims.extend(d.dim_value for d in vi.type.tensor_type.shape.dim)
            placeholder.data_location = onnx.TensorProto.EXTERNAL
            entry = placeholder.external_data.add()
            entry.key, entry.value = "location", "stripped"
            inferred.graph.initializer.append(placeholder)
    return inferred


def _attach_external(
    graph: Graph, proto: onnx.ModelProto, base_dir: Path | None
) -> dict[str, FileRange]:
    """Stored tensors with payloads: raw data decoded, external data memory-mapped.

    Returns the file range of every tensor kept in external data (what the
    weights writer copies without reading it).
    """
    from linnet.onnx.importer.graph import DTYPES, array_of

    ranges: dict[str, FileRange] = {}
    for init in proto.graph.initializer:
        if init.data_location == onnx.TensorProto.EXTERNAL:
            array, where = _external_array(init, base_dir, DTYPES)
            graph.initializers[init.name] = array
            if where is not None:
                ranges[init.name] = where
        elif init.HasField("raw_data") and len(init.raw_data) > _INFER_PAYLOAD:
            graph.initializers[init.name] = array_of(init)
    return ranges


def _external_array(
    init: onnx.TensorProto, base_dir: Path | None, dtypes: dict[int, str]
) -> tuple[np.ndarray, FileRange | None]:
    from linnet.ir.core import numpy_dtype

    info = {e.key: e.value for e in init.external_data}
    if base_dir is None:
        raise LinnetError(f"tensor `{init.name}` keeps its data in an external file; pass a path")
    location = Path(info.get("location", ""))
    if location.is_absolute() or ".." in location.parts:
        raise LinnetError(
            f"tensor `{init.name}`: external data location {location} is outside the model folder"
        )
    file = base_dir / location
    if init.data_type not in dtypes:
        raise LinnetError(f"tensor `{init.name}` has an element type Linnet lacks")
    dtype = numpy_dtype(dtypes[init.data_type])
    shape = tuple(int(d) for d in init.dims)
    offset = int(info.get("offset", "0"))
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    length = int(info.get("length", str(count * dtype.itemsize)))
    if length != count * dtype.itemsize:
        raise LinnetError(f"tensor `{init.name}`: {length} external bytes for shape {shape}")
    if count == 0:
        return np.zeros(shape, dtype), None
    if not file.is_file() or file.stat().st_size < offset + length:
        raise LinnetError(f"tensor `{init.name}`: external data file {file} is missing or short")
    mapped = np.memmap(file, dtype=dtype, mode="r", offset=offset, shape=(count,))
    return mapped.reshape(shape), FileRange(file, offset, length)


def _metadata(proto: onnx.ModelProto, key: str) -> str | None:
    for p in proto.metadata_props:
        if p.key == key:
            return str(p.value)
    return None


# ---------------------------------------------------------------- errors


def _model_label(model: object) -> str:
    return str(model) if not isinstance(model, onnx.ModelProto) else "the model"


# ---------------------------------------------------------------- writing


def _unused(*_: Any) -> None:
    return None
