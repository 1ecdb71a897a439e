"""What every StableHLO op mapping shares: the handler type, an op's result type and
operands, ONNX dtype codes and scalar constants.

Stage: the StableHLO importer's second step (the op families `elementwise_ops`,
`shape_ops`, `reduction_ops`, `sort_scatter`, merged in `ops.OPS`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from linnet.jax.importer.builder import Builder, Ref, Shape
from linnet.jax.importer.mlir import DYNAMIC, tensor_type
from linnet.sourcegen.builder import Skip

Handler = Callable[[Builder, Any], list[Ref]]


def result_type(op: Any, i: int = 0) -> tuple[str | None, Shape]:
    t = tensor_type(op.results[i].type)
    if t is None:
        raise Skip("a result that is not a ranked tensor")
    dtype, shape = t
    if DYNAMIC in shape:
        raise Skip("a dynamic shape")
    if dtype is None:
        raise Skip(f"an element type Linnet lacks ({op.results[i].type})")
    return dtype, shape


def arg(b: Builder, op: Any, i: int) -> Ref:
    return b.env[op.operands[i]]


def onnx_dtype(dtype: str) -> int:
    from linnet.onnx.importer.graph import DTYPES

    for code, name in DTYPES.items():
        if name == dtype:
            return int(code)
    raise Skip(f"no element type for {dtype}")


def scalar(b: Builder, value: float, dtype: str) -> str:
    from linnet.jax.importer.mlir import numpy_type

    return b.const(np.array(value, dtype=numpy_type(dtype)))
