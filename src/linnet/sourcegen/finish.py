"""The importers' last stages: a recovered importer graph to checked source and weights.

Stage: every importer's back half (architecture.md "Importers"), shared by
`import_onnx` and `linnet.torch.export_linnet`. In: an importer `Graph` in the
ONNX operator vocabulary, the registry of translators. Out: an `ImportResult`.
In order: anonymous stored tensors named, pattern recovery, member layout from
the stored tensors' dotted names, translation, refusals raised as one error,
state restored, identical layers outlined into a `static for`, the module
assembled and formatted, the checker run on the text, and only then the
source, weights and bindings written (atomically). Nothing is written on a
refusal or a check failure.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from linnet.atomic import ensure_folder, write_bytes
from linnet.errors import LinnetError
from linnet.records import field, record
from linnet.sourcegen.graph import Graph, TensorInfo
from linnet.sourcegen.layout import Layout, name_anonymous
from linnet.sourcegen.module import assemble, format_module
from linnet.sourcegen.names import sanitize
from linnet.sourcegen.outline import outline
from linnet.sourcegen.patterns import recover
from linnet.sourcegen.refusals import ImportRefusedError, refusal_error
from linnet.sourcegen.state import restore_state
from linnet.sourcegen.stated_where import StatedClause, state_where
from linnet.sourcegen.translate import (
    Registry,
    Translation,
    Unsupported,
    numpy_dtype_name,
    translate,
)
from linnet.sourcegen.weights import FileRange, StoredTensor, write_safetensors

__all__ = ["BINDINGS_FILE", "WEIGHTS_FILE", "ImportResult", "finish_import"]

WEIGHTS_FILE = "model.safetensors"
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


def finish_import(
    graph: Graph,
    registry: Registry,
    *,
    label: str,
    output: Path,
    entry: str = "forward",
    weights: Path | None = None,
    module_name: str | None = None,
    root_name: str = "Model",
    std_root: str | os.PathLike[str] | None = None,
    ranges: Mapping[str, FileRange] | None = None,
    type_names: Mapping[str, str] | None = None,
    where: Sequence[StatedClause] = (),
) -> ImportResult:
    """`graph` (read by an importer, every node mapped) to source at `output`.

    `label` names the model in errors; `ranges` are the file ranges of stored
    tensors kept in external files (copied, not read); `type_names` maps a
    dotted block path (`model.layers.0`) to the name its block type should
    take (the torch module class); `where` are size constraints the model states
    (`linnet.sourcegen.stated_where`), added to the entry's `where` clause. Raises `ImportRefusedError` naming every
    node that cannot be translated; writes nothing then.
    """
    out_path = output
    ranges = dict(ranges or {})
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
        type_names=type_names,
    )
    try:
        t = translate(graph, registry, layout, lambda t: state_where(t, where, label))
    except Unsupported as exc:
        raise ImportRefusedError(f"cannot import {label}: {exc}") from None
    if t.refusals:
        raise refusal_error(label, t.refusals)
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
    # Both folders exist (or are made) before anything is written: a folder that cannot
    # be made is a LinnetError naming it, and leaves nothing half-written.
    ensure_folder(out_path.parent if str(out_path.parent) else Path("."), what="output folder")
    if weights is not None:
        ensure_folder(weights, what="weights folder")
        result.weights, result.bindings = _write_weights(weights, t, layout, ranges)
    else:
        result.bindings = {p: n for p, n in bindings.items() if not n.startswith("const::")}
    _write_atomic(out_path, text)
    return result


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
    target = folder / WEIGHTS_FILE
    write_safetensors(target, tensors)
    _write_atomic(folder / BINDINGS_FILE, json.dumps(bindings, indent=2, sort_keys=True) + "\n")
    return target, bindings


def _write_atomic(path: Path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))
