"""Triton Inference Server repositories: a Linnet model served by NVIDIA's Triton (issue 19).

`export(source, output, generics=..., weights=..., backend="onnx" | "python")`
-> `Repository` writes `<output>/<name>/config.pbtxt` and the version folder:

- `backend="onnx"`: `model.onnx` for Triton's ONNX Runtime backend (platform
  `onnxruntime_onnx`), a stateless entry with its weights inside; generics in
  `dynamic` become -1 axes, a dynamic batch axis `max_batch_size`.
- `backend="python"`: `model.py` (`linnet.triton.python_model`), the source
  and the weights, for Triton's Python backend; a decoder keeps each
  sequence's KV cache row between requests through the sequence batcher.

`linnet triton` is the same on the command line. Importing `linnet.triton`
imports neither onnx nor torch; `export` imports onnx (it exports the entry
to learn its tensors).
"""

from __future__ import annotations

from linnet.triton.config import TRITON_DTYPES, SequenceControls, TritonTensor
from linnet.triton.repository import Repository, export

__all__ = ["TRITON_DTYPES", "Repository", "SequenceControls", "TritonTensor", "export"]
