"""Linnet dtypes on PyTorch: storage dtypes and conversions to and from NumPy.

Stage: shared by every part of the PyTorch backend (op table, runner, codegen,
module). Most Linnet dtypes map one to one onto a torch dtype. The exceptions
are `u16`, `u32` and `u64`: torch 2.x declares them but implements almost no
arithmetic for them on CPU ("add_stub not implemented for 'UInt32'"). The
backend therefore *stores* them in a wider or same-width signed dtype:

| Linnet | stored as | invariant |
| --- | --- | --- |
| `u16` | `torch.int32` | value in `[0, 2^16)`; results masked with `0xFFFF` |
| `u32` | `torch.int64` | value in `[0, 2^32)`; results masked with `0xFFFFFFFF` |
| `u64` | `torch.int64` | the same 64 bits (two's complement reinterpretation) |

The op table (`linnet.torch.ops`) keeps these invariants; tensors leave the
backend (results, `state_dict` entries) in their storage dtype, and
`to_numpy` turns them back into the exact NumPy values. bf16 goes through
ml_dtypes on the NumPy side (architecture.md, "weights.py").
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from linnet.errors import InternalError
from linnet.ir.core import FLOAT_DTYPES, INTEGER_DTYPES, numpy_dtype

STORAGE: dict[str, torch.dtype] = {
    "bool": torch.bool,
    "i8": torch.int8,
    "i16": torch.int16,
    "i32": torch.int32,
    "i64": torch.int64,
    "u8": torch.uint8,
    "u16": torch.int32,
    "u32": torch.int64,
    "u64": torch.int64,
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "f32": torch.float32,
    "f64": torch.float64,
}
"""The torch dtype that holds each Linnet dtype (see the module docstring)."""

MASKED = {"u16": 0xFFFF, "u32": 0xFFFFFFFF}
"""Unsigned dtypes kept in a wider signed dtype: results are masked to their width."""

EMULATED = frozenset({"u16", "u32", "u64"})
"""Dtypes whose torch storage differs from their meaning."""

FLOATS = FLOAT_DTYPES
INTEGERS = INTEGER_DTYPES

_LINNET_OF_TORCH: dict[torch.dtype, str] = {
    torch.bool: "bool",
    torch.int8: "i8",
    torch.int16: "i16",
    torch.int32: "i32",
    torch.int64: "i64",
    torch.uint8: "u8",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.float32: "f32",
    torch.float64: "f64",
}


def storage(dtype: str) -> torch.dtype:
    """The torch dtype that stores the Linnet `dtype`."""
    try:
        return STORAGE[dtype]
    except KeyError:
        raise InternalError(f"unknown dtype {dtype!r}") from None


def linnet_dtype(dtype: torch.dtype) -> str | None:
    """The Linnet dtype a torch dtype holds natively, or None (uint16/32/64, complex...)."""
    return _LINNET_OF_TORCH.get(dtype)


def lowest(dtype: str) -> float | int | bool:
    """The smallest value of `dtype` (the empty `max` reduction, language.md 8.6)."""
    if dtype == "bool":
        return False
    if dtype in FLOATS:
        return float("-inf")
    if dtype == "u64":
        return 0
    info = np.iinfo(numpy_dtype(dtype))
    return int(info.min)


def highest(dtype: str) -> float | int | bool:
    """The largest value of `dtype` in its storage (u64's all-ones is -1 as int64)."""
    if dtype == "bool":
        return True
    if dtype in FLOATS:
        return float("inf")
    if dtype == "u64":
        return -1
    info = np.iinfo(numpy_dtype(dtype))
    return int(info.max)


def to_torch(array: Any, dtype: str, device: torch.device | str = "cpu") -> torch.Tensor:
    """A NumPy array (or array-like) of Linnet `dtype` as a storage tensor on `device`."""
    values = np.asarray(array, dtype=numpy_dtype(dtype))
    if dtype == "bf16":
        # torch cannot read ml_dtypes arrays: move the raw bits through int16.
        bits = torch.from_numpy(np.ascontiguousarray(values).view(np.int16).copy())
        return bits.view(torch.bfloat16).to(device)
    if dtype == "u64":
        held = values.view(np.int64)
    elif dtype in MASKED:
        held = values.astype(np.int64 if dtype == "u32" else np.int32)
    else:
        held = values
    return torch.from_numpy(np.array(held, copy=True)).to(device)


def to_numpy(tensor: torch.Tensor, dtype: str) -> np.ndarray[Any, Any]:
    """A storage tensor of Linnet `dtype` as a NumPy array of that dtype (exact)."""
    held = tensor.detach().to("cpu").contiguous()
    if dtype == "bf16":
        return held.view(torch.int16).numpy().view(numpy_dtype("bf16")).copy()
    array = held.numpy()
    if dtype == "u64":
        return array.astype(np.int64, copy=False).view(np.uint64).copy()
    if dtype in MASKED:
        return (array.astype(np.int64) & MASKED[dtype]).astype(numpy_dtype(dtype))
    return np.array(array, dtype=numpy_dtype(dtype), copy=True)
