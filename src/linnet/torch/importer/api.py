"""`export_linnet`: a `torch.nn.Module` in, Linnet source (+ SafeTensors weights) out.

Stage: the torch importer's front door; it runs the importer stages in order
(architecture.md "Importers"):

    torch.export.export (ATen, not decomposed) and constant folding (capture)
      -> importer graph in the shared operator vocabulary (aten.aten_graph)
      -> every unmapped node refused at once, with its `file.py:line`
      -> the shared back half (sourcegen.finish): pattern recovery, layout
         from the state_dict paths (block types named after module classes),
         translation, outlining, module assembly, formatting, the checker
      -> only then: the source written atomically, weights and bindings.json

Parameters and persistent buffers are stored under their state_dict paths,
so the module's own checkpoint binds the imported source unchanged.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from linnet.onnx.importer import ops  # noqa: F401 - registers every operator translator
from linnet.onnx.importer.graph import REGISTRY
from linnet.sourcegen.finish import ImportResult, finish_import
from linnet.sourcegen.graph import Node
from linnet.sourcegen.refusals import refusal_error
from linnet.sourcegen.stated_where import StatedClause
from linnet.sourcegen.translate import Refusal
from linnet.torch.importer.aten import Untranslated, aten_graph
from linnet.torch.importer.capture import capture

__all__ = ["ImportResult", "export_linnet"]


def export_linnet(
    module: torch.nn.Module,
    example_inputs: Sequence[Any],
    *,
    output: str | os.PathLike[str],
    weights: str | os.PathLike[str] | None = None,
    module_name: str | None = None,
    root_name: str = "Model",
    dynamic: Any = None,
    std_root: str | os.PathLike[str] | None = None,
) -> ImportResult:
    """Capture `module` on `example_inputs` with `torch.export` and write Linnet source.

    `dynamic` is torch.export's `dynamic_shapes`, or per example input a
    mapping of axis to a dim name (`[{0: "batch", 1: "seq"}]`); those dims
    become generics. With `weights=DIR`, the parameters and persistent
    buffers the source reads go to `DIR/model.safetensors` under their
    state_dict paths (and `DIR/bindings.json`). Operators with no translation,
    data-dependent shapes and custom ops raise one `ImportRefusedError` naming
    every such node with its `file.py:line`; nothing is written then.
    """
    label = type(module).__name__
    cap = capture(module, example_inputs, dynamic)
    type_names = {path: type(sub).__name__ for path, sub in module.named_modules() if path}
    # NOTE: torch.export leaves a large object graph (the program, fake tensors,
    # sympy expressions); each full cyclic collection during translation rescans
    # all of it (measured: a third of a TinyLlama import's translation time).
    # Translation makes little cyclic garbage; it is collected when this returns.
    collecting = gc.isenabled()
    gc.disable()
    try:
        graph, untranslated = aten_graph(cap)
        if untranslated:
            raise refusal_error(label, [_refusal(u) for u in untranslated])
        return finish_import(
            graph,
            REGISTRY,
            label=label,
            output=Path(output),
            weights=None if weights is None else Path(weights),
            module_name=module_name,
            root_name=root_name,
            std_root=std_root,
            type_names=type_names,
            where=_stated_bounds(cap.bounds, cap.dims),
        )
    finally:
        if collecting:
            gc.enable()


def _stated_bounds(
    bounds: dict[str, tuple[int, int | None]], dims: dict[str, str]
) -> list[StatedClause]:
    """`S >= 4` and `S <= 64` for `Dim("S", min=4, max=64)` (a lower bound of 0 or 1
    says nothing: extents are positive)."""
    clauses: list[StatedClause] = []
    for name in sorted(set(dims.values())):
        low, high = bounds.get(name, (0, None))
        if low > 1:
            clauses.append(([[1, [name]]], ">=", [[low, []]], f"{name} >= {low}"))
        if high is not None:
            clauses.append(([[1, [name]]], "<=", [[high, []]], f"{name} <= {high}"))
    return clauses


def _refusal(u: Untranslated) -> Refusal:
    node = Node(op=u.op.removeprefix("aten."), domain="aten", name=u.name, inputs=(),
                outputs=(u.name,), attrs={"_where": u.where} if u.where else {})  # fmt: skip
    return Refusal(node, u.reason)
