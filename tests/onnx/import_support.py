"""Helpers for the importer's model tests: random weights, running imported source, comparing.

The references are independent of the importer: ONNX Runtime on the original
model, and PyTorch. The imported source runs on `linnet.torch`, with the
weights `import_onnx` wrote (SafeTensors under the ONNX names plus
`bindings.json`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx

from linnet.onnx.importer import ImportResult, import_onnx

ROOT = Path(__file__).resolve().parents[2]
STDLIB = ROOT / "stdlib"
EXAMPLES_DIR = ROOT / "examples"


def imported(model: onnx.ModelProto | Path, folder: Path, name: str = "model") -> ImportResult:
    """`import_onnx` into `folder/name.linnet` with weights in `folder/weights`."""
    return import_onnx(model, output=folder / f"{name}.linnet", weights=folder / "weights")


def run_imported(result: ImportResult, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The imported entry on `linnet.torch`, bound to the weights the import wrote."""
    import torch

    import linnet.torch as lt

    assert result.weights is not None
    module = lt.load(
        result.output,
        weights=result.weights,
        bindings=result.weights.parent / "bindings.json",
        std_root=STDLIB,
    )
    with torch.no_grad():
        out = module.run_entry(
            result.entry, [torch.from_numpy(np.ascontiguousarray(x)) for x in inputs]
        )
    outs = out if isinstance(out, tuple) else (out,)
    return [o.detach().numpy() if hasattr(o, "detach") else np.asarray(o) for o in outs]


def run_onnxruntime(model: onnx.ModelProto | Path, feeds: dict[str, np.ndarray]) -> list[Any]:
    import onnxruntime as ort

    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return list(session.run(None, feeds))


def close(actual: np.ndarray, expected: np.ndarray, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    if actual.dtype.kind in "biu":
        np.testing.assert_array_equal(actual, expected)
    else:
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)
