"""Core IR: the statically shaped program every backend consumes (architecture.md, "Core IR").

Stage: binding + lowering produce it; passes rewrite it; backends (the NumPy
reference interpreter in `linnet.ir.interp`, PyTorch, ONNX, JAX) run it.
This package stays light: importing it loads no NumPy; `interp`, `passes` and
the lowering are imported explicitly by whoever needs them.
"""

from linnet.ir.core import (
    DTYPES,
    Builder,
    Function,
    Op,
    Program,
    Region,
    TensorType,
    Value,
)

__all__ = [
    "DTYPES",
    "Builder",
    "Function",
    "Op",
    "Program",
    "Region",
    "TensorType",
    "Value",
]
