"""`linnet triton`: a Linnet model as one model of a Triton Inference Server repository.

`linnet triton SOURCE OUTPUT --weights W [--bind G=V]... [--backend onnx|python]`
calls `linnet.triton.export` and prints what it wrote: the model folder, the
backend, the batch limit and each tensor Triton sees. Generics come from
`--generics FILE.json` and/or `--bind G=V` (as for `linnet serve`); the other
options are `export`'s keywords. onnx (and torch, for the Python backend's
weights) are imported only when the command runs.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def run_triton(
    source: Path,
    output: Path,
    *,
    generics: Mapping[str, object],
    weights: Path | None,
    options: Mapping[str, Any],
) -> int:
    """Export, then print a summary on stdout; errors are `LinnetError`s."""
    from linnet.triton import export

    repo = export(source, output, generics=generics, weights=weights, **options)
    out = sys.stdout
    out.write(f"wrote {repo.model_folder} (version {repo.version}, backend {repo.backend})\n")
    out.write(f"  max_batch_size: {repo.max_batch_size}\n")
    if repo.sequence is not None:
        s = repo.sequence
        out.write(f"  sequence batching: {s.corrid}, {s.start}, {s.end}\n")
    for kind, tensors in (("input", repo.inputs), ("output", repo.outputs)):
        for t in tensors:
            dims = ", ".join(str(d) for d in t.dims)
            out.write(f"  {kind} {t.name}: {t.data_type} [{dims}]\n")
    return 0
