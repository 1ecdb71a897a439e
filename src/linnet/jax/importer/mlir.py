"""Reading a StableHLO module with the MLIR bindings jaxlib ships: functions, types, attributes.

Stage: the StableHLO importer's first step. In: MLIR text (what
`jax.export.Exported.mlir_module()` and `linnet stablehlo` print). Out: the
parsed `ir.Module` and small readers the op mappings share: a value's Linnet
dtype and static shape, integer-array and dense-constant attributes, and an
op's source location as `file.py:line` plus the JAX primitive that made it
(`jit(f)/erfc` -> `erfc`). Nothing here builds the importer graph.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from jax._src.interpreters import mlir as jax_mlir
from jaxlib.mlir import ir

from linnet.errors import LinnetError

__all__ = [
    "DYNAMIC",
    "dense_array",
    "elements",
    "functions",
    "int_array",
    "location",
    "parse_module",
    "primitive",
    "tensor_type",
]

DYNAMIC = -1
"""How `tensor_type` marks an extent the module leaves dynamic (`?`)."""

_DTYPES = {
    "f16": "f16",
    "bf16": "bf16",
    "f32": "f32",
    "f64": "f64",
    "i1": "bool",
    "i8": "i8",
    "i16": "i16",
    "i32": "i32",
    "i64": "i64",
    "ui8": "u8",
    "ui16": "u16",
    "ui32": "u32",
    "ui64": "u64",
}
"""MLIR element types with a Linnet dtype (others: None, refused where read)."""

_NUMPY = {
    "f16": np.float16,
    "f32": np.float32,
    "f64": np.float64,
    "bool": np.bool_,
    "i8": np.int8,
    "i16": np.int16,
    "i32": np.int32,
    "i64": np.int64,
    "u8": np.uint8,
    "u16": np.uint16,
    "u32": np.uint32,
    "u64": np.uint64,
}


def parse_module(text: str) -> ir.Module:
    """`text` parsed in a context with every dialect JAX emits; a LinnetError if it does not."""
    try:
        return ir.Module.parse(text, jax_mlir.make_ir_context())
    except Exception as exc:  # MLIR raises its own error types with the diagnostics
        raise LinnetError(f"not a StableHLO module: {str(exc).strip()}") from None


def functions(module: ir.Module) -> dict[str, Any]:
    """The `func.func` ops of `module` by symbol name."""
    out: dict[str, Any] = {}
    for op in module.body.operations:
        if op.operation.name == "func.func":
            out[ir.StringAttr(op.attributes["sym_name"]).value] = op
    return out


def tensor_type(t: ir.Type) -> tuple[str | None, tuple[int, ...]] | None:
    """(Linnet dtype or None, shape with `DYNAMIC` for `?`) of a ranked tensor type; None
    for anything else (a token, a tuple, an unranked tensor)."""
    if not isinstance(t.maybe_downcast(), ir.RankedTensorType):
        return None
    rt = ir.RankedTensorType(t)
    shape = tuple(DYNAMIC if rt.is_dynamic_dim(i) else int(rt.shape[i]) for i in range(rt.rank))
    return _DTYPES.get(str(rt.element_type)), shape


def numpy_type(dtype: str) -> Any:
    """The NumPy scalar type of a Linnet dtype (bf16 via ml_dtypes)."""
    if dtype == "bf16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return _NUMPY[dtype]


def int_array(attr: ir.Attribute) -> list[int]:
    """An `array<i64: ...>` or a dense integer attribute as a list."""
    if isinstance(attr.maybe_downcast(), ir.DenseI64ArrayAttr):
        return [int(v) for v in ir.DenseI64ArrayAttr(attr)]
    if isinstance(attr.maybe_downcast(), ir.DenseIntElementsAttr):
        return [int(v) for v in np.array(ir.DenseIntElementsAttr(attr)).reshape(-1)]
    raise LinnetError(f"expected an integer array attribute, got {attr}")


def dense_array(attr: ir.Attribute) -> np.ndarray:
    """A dense integer attribute of any rank (a pad's `[[lo, hi], ...]`) as an array."""
    return np.array(ir.DenseIntElementsAttr(attr))


def elements(attr: ir.Attribute, dtype: str) -> tuple[np.ndarray, bool]:
    """A `dense<...>` constant: (the array, whether it is a splat). A splat comes back
    0-d (one value, however large the tensor it fills)."""
    e = ir.DenseElementsAttr(attr)
    np_type = numpy_type(dtype)
    if e.is_splat:
        value = e.get_splat_value()
        if isinstance(value.maybe_downcast(), ir.BoolAttr):
            scalar: Any = ir.BoolAttr(value).value
        elif isinstance(value.maybe_downcast(), ir.IntegerAttr):
            scalar = ir.IntegerAttr(value).value
            if dtype == "bool":
                scalar = bool(scalar)
        elif isinstance(value.maybe_downcast(), ir.FloatAttr):
            scalar = ir.FloatAttr(value).value
        else:
            raise LinnetError(f"a constant of an unsupported element type: {value}")
        return np.array(scalar, dtype=np_type), True
    shape = tuple(int(s) for s in ir.RankedTensorType(e.type).shape)
    if dtype == "bool":
        # i1 buffers are bit-packed; the text form is the reliable reader for them.
        flat = re.findall(r"true|false", str(attr).split(":")[0])
        return np.array([v == "true" for v in flat], dtype=np.bool_).reshape(shape), False
    return np.array(e).astype(np_type).reshape(shape), False


_FILE_LINE = re.compile(r'"([^"]+)":(\d+):')
_NAME = re.compile(r'^loc\("([^"]*)"')


def location(op: Any) -> str:
    """`file.py:line` of the innermost frame in the op's location, or ``""``."""
    match = _FILE_LINE.search(str(op.location))
    if match is None:
        return ""
    if match.group(1) == "-":  # text without locations: MLIR's own, in the text itself
        return f"line {match.group(2)} of the text"
    return f"{match.group(1).rsplit('/', 1)[-1]}:{match.group(2)}"


def primitive(op: Any) -> str:
    """The name JAX gave the op's location (`jit(f)/erfc`), or ``""``."""
    match = _NAME.match(str(op.location))
    return match.group(1) if match else ""
