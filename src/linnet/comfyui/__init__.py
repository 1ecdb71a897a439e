"""linnet-comfyui: Linnet models as ComfyUI nodes.

Importing `linnet` never imports this package; importing it imports torch
(ComfyUI's Python always has it). ComfyUI finds the nodes through the small
folder `integrations/comfyui/linnet_comfyui`, copied or linked into
`ComfyUI/custom_nodes`, whose `__init__.py` re-exports the two tables below;
the code lives here so that it is typed, tested and versioned with linnet-lang.

- `NODE_CLASS_MAPPINGS`: node type name -> class, what ComfyUI's loader reads;
- `NODE_DISPLAY_NAME_MAPPINGS`: node type name -> the title the UI shows.

The nodes: Load Linnet model and Load card (`model_nodes`; a `LINNET_MODEL` on
torch or ONNX Runtime), Run entry (tensors in and out, checked against the
entry's declaration first, `signature`), Model info, Reset state, Generate text
(over `linnet.serve.Engine`), Image to tensor and Tensor to image (`images`),
Argmax and Tensor from values (`tensor_nodes`). Errors reach the UI as the
`LinnetError`'s message (`contract.reported`).
"""

from __future__ import annotations

from linnet.comfyui.model_nodes import (
    GenerateText,
    LoadCard,
    LoadModel,
    ModelInfo,
    ResetState,
    RunEntry,
)
from linnet.comfyui.tensor_nodes import Argmax, ImageToTensor, TensorFromValues, TensorToImage

_NODES: dict[str, tuple[type, str]] = {
    "LinnetLoadModel": (LoadModel, "Load Linnet model"),
    "LinnetLoadCard": (LoadCard, "Load Linnet card"),
    "LinnetRunEntry": (RunEntry, "Run Linnet entry"),
    "LinnetModelInfo": (ModelInfo, "Linnet model info"),
    "LinnetResetState": (ResetState, "Reset Linnet state"),
    "LinnetGenerateText": (GenerateText, "Generate text (Linnet)"),
    "LinnetImageToTensor": (ImageToTensor, "Image to Linnet tensor"),
    "LinnetTensorToImage": (TensorToImage, "Linnet tensor to image"),
    "LinnetArgmax": (Argmax, "Linnet argmax"),
    "LinnetTensorFromValues": (TensorFromValues, "Linnet tensor from values"),
}

NODE_CLASS_MAPPINGS: dict[str, type] = {name: cls for name, (cls, _) in _NODES.items()}
NODE_DISPLAY_NAME_MAPPINGS: dict[str, str] = {name: title for name, (_, title) in _NODES.items()}

__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS"]
