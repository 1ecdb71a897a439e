"""`import_onnx`: an ONNX model in, Linnet source (+ SafeTensors weights) out.

Stage: the ONNX importer's front door; it runs the importer stages in order
(architecture.md "Importers"):

    read the protobuf (external data memory-mapped, never copied whole)
      -> the model checked (validate: our structural checks, then onnx's checker)
      -> shape inference (onnx.shape_inference)
      -> importer graph (graph.onnx_graph)
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

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from linnet.atomic import ensure_folder, write_bytes
from linnet.errors import LinnetError
from linnet.onnx.importer import ops  # noqa: F401 - registers every operator translator
from linnet.onnx.importer.graph import REGISTRY, onnx_graph
from linnet.onnx.importer.validate import light_copy, validate_model
from linnet.records import field, record
from linnet.sourcegen.graph import Graph, TensorInfo
from linnet.sourcegen.layout import Layout, name_anonymous
from linnet.sourcegen.module import assemble, format_module
from linnet.sourcegen.names import sanitize
from linnet.sourcegen.outline import outline
from linnet.sourcegen.patterns import recover
from linnet.sourcegen.refusals import ImportRefusedError, check_mapped, refusal_error
from linnet.sourcegen.state import restore_state
from linnet.sourcegen.translate import Translation, Unsupported, numpy_dtype_name, translate
from linnet.sourcegen.weights import FileRange, StoredTensor, write_safetensors

__all__ = ["ImportResult", "import_onnx"]

WEIGHTS_FILE = "model.safetensors"
_INFER_PAYLOAD = 4096
"""Stored tensors above this many bytes are decoded from the original, not the inferred copy."""
BINDINGS_FILE = "bindings.json"


@record(eq=False)
class ImportResult:
    """What `import_onnx` produced.

    `source` is the formatted Linnet text (already written to `output`);
    `notes` lists everything the translation dropped or recovered (one line
    each); `parameters` maps each parameter path of the generated root block
    to the stored tensor name it binds; `constants` are the paths of the
    members that hold constants written into the model itself (tensors Linnet
    has no expression for: a rotary table an exporter folded), saved with the
    weights under those paths; `state` the paths of the `state` members
    (a Linnet export's `state<N>` / `next_state<N>`, which are no entry inputs
    or results; checkpoints hold none); `bindings` is the subset whose path
    differs from the name (what `bindings.json` holds); `weights` is the
    SafeTensors file written, if any.
    """

    source: str
    notes: list[str]
    output: Path
    root: str
    entry: str
    parameters: dict[str, str] = field(default_factory=dict)
    constants: list[str] = field(default_factory=list)
    state: list[str] = field(default_factory=list)
    bindings: dict[str, str] = field(default_factory=dict)
    weights: Path | None = None


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
    check_mapped(graph, REGISTRY, _model_label(model))  # before recovery drops unused nodes
    ranges = _attach_external(graph, proto, base_dir)
    entry = _metadata(proto, "linnet.entry") or "forward"
    named, notes = name_anonymous(graph)
    notes += recover(graph)
    write_only = {
        name: path for name, path in graph.next_state.items() if path not in graph.state.values()
    }
    layout = Layout.plan(
        _stored_list(graph, write_only),
        {**named, **graph.paths, **write_only},
        sanitize(root_name, "Model"),
        state={*graph.state, *write_only},
    )
    try:
        t = translate(graph, REGISTRY, layout)
    except Unsupported as exc:
        raise ImportRefusedError(f"cannot import {_model_label(model)}: {exc}") from None
    if t.refusals:
        raise refusal_error(_model_label(model), t.refusals)
    notes += t.notes
    writers, state_notes = restore_state(t, layout)
    notes += state_notes
    name = module_name or sanitize(out_path.stem.replace("-", "_"), "model").lower()
    methods: dict[str, list[Any]] = {}
    for done in outline(t, layout):
        methods.setdefault(done.type_name, []).append(done.method)
        notes.append(f"each element of `{done.type_name}` runs one `forward` method")
    for type_name, fns in writers.items():
        methods.setdefault(type_name, []).extend(fns)
    file = assemble(
        t,
        layout,
        module_name=name,
        entry_name=sanitize(entry, "forward"),
        methods=methods,
        notes=notes,
    )
    text = format_module(file)
    _check(text, out_path, std_root)
    state = sorted(
        path
        for stored, path in layout.paths.items()
        if _is_used(layout, stored) and layout.leaf(stored).kind == "state"
    )
    parameters = {
        path: stored
        for stored, path in layout.paths.items()
        if _is_used(layout, stored)
        and not stored.startswith("const::")
        and layout.leaf(stored).kind == "param"
    }
    constants = [
        path
        for stored, path in layout.paths.items()
        if _is_used(layout, stored) and stored.startswith("const::")
    ]
    if constants:
        notes.append(
            "constants with no expression in Linnet are stored next to the weights: "
            + ", ".join(f"`{c}`" for c in constants)
        )
    bindings = {p: n for p, n in parameters.items() if p != n and n in graph.initializers}
    result = ImportResult(
        source=text,
        notes=notes,
        output=out_path,
        root=layout.root.type_name,
        entry=sanitize(entry, "forward"),
        parameters=parameters,
        constants=constants,
        state=state,
        bindings={},
    )
    ensure_folder(out_path.parent if str(out_path.parent) else Path("."), what="output folder")
    if weights is not None:
        result.weights, result.bindings = _write_weights(Path(weights), t, layout, ranges)
    else:
        result.bindings = {p: n for p, n in bindings.items() if not n.startswith("const::")}
    _write_atomic(out_path, text)
    return result


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


def _stored_list(
    graph: Graph, write_only: dict[str, str]
) -> list[tuple[str, tuple[int, ...], str]]:
    """Stored tensors that become members: weights, not small integer shape constants,
    and state (graph inputs holding a state member; outputs for one only written)."""
    out: list[tuple[str, tuple[int, ...], str]] = []
    for name, arr in graph.initializers.items():
        dtype = numpy_dtype_name(arr.dtype)
        small_int = dtype not in ("f16", "bf16", "f32", "f64") and arr.size <= 64
        if name not in graph.paths and (arr.ndim == 0 or small_int):
            continue  # folded where read; a late member if code reads it at run time
        out.append((name, tuple(int(s) for s in arr.shape), dtype))
    for info in graph.inputs:
        if info.name in graph.paths and info.name not in graph.initializers and info.dtype:
            shape = tuple(d for d in (info.shape or ()) if isinstance(d, int))
            out.append((info.name, shape, info.dtype))
    for info in graph.outputs:
        if info.name in write_only and info.dtype:
            out.append((info.name, _static_shape(info), info.dtype))
    return out


def _static_shape(info: TensorInfo) -> tuple[int, ...]:
    if info.shape is None or not all(isinstance(d, int) and d >= 0 for d in info.shape):
        raise LinnetError(f"state output `{info.name}` needs a known size on every axis")
    return tuple(int(d) for d in info.shape)  # type: ignore[arg-type]


def _is_used(layout: Layout, stored: str) -> bool:
    try:
        return layout.leaf(stored).used
    except KeyError:
        return False


# ---------------------------------------------------------------- errors


def _model_label(model: object) -> str:
    return str(model) if not isinstance(model, onnx.ModelProto) else "the model"


def _check(text: str, out_path: Path, std_root: str | os.PathLike[str] | None) -> None:
    from linnet.pipeline import check_source

    program = check_source(text, str(out_path), None if std_root is None else Path(std_root))
    errors = [d for d in program.diagnostics if d.is_error]
    if errors:
        raise LinnetError(
            "internal error: the generated Linnet source does not check (please report this "
            "with the model); nothing was written",
            errors,
        )


# ---------------------------------------------------------------- writing


def _write_weights(
    folder: Path, t: Translation, layout: Layout, ranges: dict[str, FileRange]
) -> tuple[Path, dict[str, str]]:
    """`folder/model.safetensors` (stored names; constants under their paths) and
    `folder/bindings.json` (every path that differs from its stored name)."""
    tensors: list[StoredTensor] = []
    bindings: dict[str, str] = {}
    for stored, use in t.stored.items():
        if use.array is None:
            continue  # a weight the model takes as an input: no data to save
        path = layout.paths[stored]
        key = path if stored.startswith("const::") else stored
        arr = use.array
        shape = tuple(int(s) for s in arr.shape) or (1,)  # a 0-d tensor binds `Tensor[1]`
        data: np.ndarray | FileRange = ranges.get(stored) or arr.reshape(shape)
        tensors.append(StoredTensor(key, numpy_dtype_name(arr.dtype), shape, data))
        if key != path:
            bindings[path] = key
    ensure_folder(folder, what="weights folder")
    target = folder / WEIGHTS_FILE
    write_safetensors(target, tensors)
    _write_atomic(folder / BINDINGS_FILE, json.dumps(bindings, indent=2, sort_keys=True) + "\n")
    return target, bindings


def _write_atomic(path: Path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def _unused(*_: Any) -> None:
    return None
