"""The ONNX backend: export Linnet entries as ONNX models and run them on ONNX Runtime.

Importing `linnet` never imports onnx or onnxruntime; importing `linnet.onnx`
imports onnx (onnxruntime only when a session is made).

- `export_model(source, generics=..., weights=...)` -> `ExportedModel`
  (`.model`, `.inputs`, `.outputs`, `.text()`, `.save(path)`, `.session()`):
  one entry of a block, every generic bound (but those named in
  `dynamic=["B", "S"]`, left as `dim_param`s with shapes computed in the
  graph); weights embedded as initializers, or params left as graph inputs
  `param<N>` bound by name.
- `export_function(source, name, generics=...)` -> `ExportedModel` of a
  module-level entry.
- `export_ir(fn)`: the same from an already lowered Core IR function.
- `save_together({name: exported}, folder)`: several entries of one model
  saved side by side, their shared weights written once to one data file;
  `SavingTogether(folder)` the same entry by entry, the weights written in a
  thread while the next entry is exported.
- `model_to_text` / `model_from_text`: the ONNX text form (`linnet onnx`).
- `check_provider(model, provider)`: the clear error for a bf16 model on
  the CPU provider.
- `load_model` / `OnnxModel` (the runtime, `linnet.onnx.runtime.model`): sessions
  per entry (one for all sizes where the entry allows it) or per shape, weights
  as OrtValues, state kept on the device.
- `ExportedSession(path_or_model)` (`linnet.onnx.runtime.exported`): a saved
  export run with its entry's checks (dynamic sizes bound from the inputs,
  their `where` clauses evaluated).
- `import_onnx(model, output=...)` -> `ImportResult` (`linnet.onnx.importer.api`):
  an ONNX graph back to checked, formatted Linnet source and SafeTensors.
  A model it cannot map raises `UnmappedOperatorsError` (`.refusals`: each
  node's name, domain, operator and reason) or, for anything else Linnet
  cannot express, its base `ImportRefusedError`.

Three rooms, as every backend has them: `export/` (Core IR -> ModelProto, text,
files; the graph contract, names and metadata, in `export.assemble`; which dtype
runs where in `export.dtypes`), `runtime/` (ONNX Runtime sessions) and
`importer/` (ONNX -> Linnet source, on the shared back half in `linnet.sourcegen`).
"""

from __future__ import annotations

from typing import Any

from linnet.onnx.export.api import export_function, export_model
from linnet.onnx.export.assemble import export_ir
from linnet.onnx.export.provider import check_provider
from linnet.onnx.export.result import ExportedModel, GraphIO
from linnet.onnx.export.text import model_from_text, model_to_text
from linnet.onnx.export.together import SavingTogether, save_together

_RUNTIME = ("OnnxModel", "load_model")
_EXPORTED = ("ExportedSession",)
_IMPORTER = ("ImportResult", "import_onnx")
_REFUSALS = ("ImportRefusedError", "UnmappedOperatorsError")


def __getattr__(name: str) -> Any:
    # The runtime and the importer live in their own modules; imported on first use.
    if name in _RUNTIME:
        from linnet.onnx.runtime import model

        return getattr(model, name)
    if name in _EXPORTED:
        from linnet.onnx.runtime import exported

        return getattr(exported, name)
    if name in _IMPORTER:
        from linnet.onnx.importer import api

        return getattr(api, name)
    if name in _REFUSALS:
        from linnet.sourcegen import refusals

        return getattr(refusals, name)
    raise AttributeError(f"module 'linnet.onnx' has no attribute {name!r}")


__all__ = [
    "ExportedModel",
    "ExportedSession",
    "GraphIO",
    "ImportRefusedError",
    "ImportResult",
    "OnnxModel",
    "SavingTogether",
    "UnmappedOperatorsError",
    "check_provider",
    "export_function",
    "export_ir",
    "export_model",
    "import_onnx",
    "load_model",
    "model_from_text",
    "model_to_text",
    "save_together",
]
