"""Weights: SafeTensors in and out, checkpoints, `bindings.json`, and binding them to a model.

The public API lives here; the pieces have a module each:
- `linnet.weights.bind`: a checkpoint's tensors matched to a model's parameter paths (12.9);
- `linnet.weights.safetensors`: reading (memory-mapped) and writing SafeTensors files;
- `linnet.weights.checkpoint`: files, shard folders and indexes;
- `linnet.weights.bindings`: `bindings.json`.
"""

from linnet.weights.bind import (
    BINDINGS_NAME,
    Bindings,
    BoundWeights,
    Checkpoint,
    SafeTensorsFile,
    StoredTensor,
    TensorSpec,
    bind_model_weights,
    bind_weights,
    load_bindings,
    open_checkpoint,
    read_safetensors,
    require_no_weights,
    save_safetensors,
    specs_from_model,
    weight_problems,
)

__all__ = [
    "BINDINGS_NAME",
    "Bindings",
    "BoundWeights",
    "Checkpoint",
    "SafeTensorsFile",
    "StoredTensor",
    "TensorSpec",
    "bind_model_weights",
    "bind_weights",
    "load_bindings",
    "open_checkpoint",
    "read_safetensors",
    "require_no_weights",
    "save_safetensors",
    "specs_from_model",
    "weight_problems",
]
