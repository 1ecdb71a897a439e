"""`std.quant` linears on JAX: the weight dequantised once at load, then a plain linear.

Stage: a rewrite of lowered, optimised functions for `linnet.jax.load_model`
(`JaxModel`). Left alone, the std bodies decode the packed weight on every
call inside XLA (the weights are arguments, never constants), so a batch-1
decode step pays the unpacking of every weight. Here each call of
`std.quant::linear_int8`, `linear_int4_groups`, `linear_fp8` or
`linear_mxfp4` whose packed weight, scale (and zero points) are params read
directly becomes the body's own inner `std.nn.linear::linear` call on a
derived param `<weight path>.dequantized` (`[Out, In]` in `T`), and the model
computes that array once (`Derived.compute`) with `linnet.gguf.quantised.
dequantized`: the body's arithmetic (`f32(q) * scale`, `(f32(q) - f32(zero))
* f32(scale)`, the exact E4M3 / E2M1 / E8M0 decoders), then cast to `T`, so
the rewritten function computes what the std body computes, bit for bit
before the matmul. A weight whose operands are not direct params (sliced,
computed) keeps its body.

The cost is memory: the model holds the dequantised weights beside the packed
ones (as `linnet.torch` does); the gain is that each step reads them as floats.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from linnet.ir.core import Function, Op, Region, TensorType, Value, numpy_dtype
from linnet.records import record

Array = np.ndarray[Any, Any]
SUFFIX = ".dequantized"
LINEARS = {
    "std.quant::linear_int8": ("int8", 2),
    "std.quant::linear_int4_groups": ("int4_groups", 3),
    "std.quant::linear_fp8": ("fp8", 2),
    "std.quant::linear_mxfp4": ("mxfp4", 2),
}
"""Callee -> (kind of `dequantized`, how many operands after `x` are the packed weight)."""
LINEAR = "std.nn.linear::linear"


@record(frozen=True)
class Derived:
    """One dequantised weight: its kind, the param paths it is made from (weight, scale,
    zero point when there is one) and its type."""

    kind: str
    sources: tuple[str, ...]
    type: TensorType

    def compute(self, arrays: Mapping[str, Any]) -> Array:
        """The `[Out, In]` weight in `T` from the current `arrays` (NumPy or device arrays)."""
        from linnet.gguf.quantised import dequantized

        parts = [np.asarray(arrays[p]) for p in self.sources]
        zero = parts[2] if self.kind == "int4_groups" else None
        weight = dequantized(self.kind, parts[0], parts[1], zero, None)
        return weight.astype(numpy_dtype(self.type.dtype))


def dequantize_once(fn: Function, taken: frozenset[str]) -> tuple[Function, dict[str, Derived]]:
    """`fn` with its quantised linear calls reading dequantised params (see the module
    docstring), and the derived params by path. `taken` are the model's own paths, which a
    derived path must not shadow (a call that would is left as it is)."""
    params = {op.result: str(op.attrs["path"]) for op in _walk(fn.body) if op.kind == "param"}
    derived: dict[str, Derived] = {}
    _rewrite(fn.body, params, taken, derived)
    return fn, derived


def _rewrite(
    region: Region, params: Mapping[Value, str], taken: frozenset[str], derived: dict[str, Derived]
) -> None:
    ops: list[Op] = []
    for op in region.ops:
        for inner in op.regions:
            if not inner.settled:
                _rewrite(inner, params, taken, derived)
        replaced = _replacement(op, params, taken, derived)
        ops.extend(replaced if replaced is not None else [op])
    region.ops[:] = ops


def _replacement(
    op: Op, params: Mapping[Value, str], taken: frozenset[str], derived: dict[str, Derived]
) -> list[Op] | None:
    """[the derived param's op, the inner linear call] replacing `op`, or None."""
    found = LINEARS.get(str(op.attrs.get("callee"))) if op.kind == "call" else None
    if found is None:
        return None
    kind, count = found
    packed = op.operands[1 : 1 + count]
    paths = tuple(params.get(v) for v in packed)
    linear = next(
        (o for o in op.regions[0].ops if o.kind == "call" and o.attrs.get("callee") == LINEAR),
        None,
    )
    if any(p is None for p in paths) or linear is None:
        return None
    sources = tuple(str(p) for p in paths)
    path = sources[0] + SUFFIX
    if path in taken:
        return None
    body = op.regions[0]
    outer = dict(zip(body.args, op.operands, strict=True))
    weight_value = linear.operands[1]
    if weight_value in outer or len(linear.results) != 1 or len(op.results) != 1:
        return None
    weight_type = weight_value.type
    entry = Derived(kind, sources, weight_type)
    if derived.get(path, entry) != entry or linear.results[0].type != op.results[0].type:
        return None
    read = Op("param", (), (Value(weight_type, path),), {"path": path})
    operands = []
    for value in linear.operands:
        if value is weight_value:
            operands.append(read.result)
        elif value in outer:
            operands.append(outer[value])
        else:  # the inner linear reads something the body computed besides the weight
            return None
    derived[path] = entry
    call = Op("call", tuple(operands), op.results, dict(linear.attrs), linear.regions)
    return [read, call]


def _walk(region: Region) -> list[Op]:
    from linnet.ir.regions import walk

    return list(walk(region))
