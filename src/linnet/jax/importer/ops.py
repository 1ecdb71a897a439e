"""Each StableHLO op as ONNX-vocabulary nodes of the importer graph.

Stage: the StableHLO importer's second step (`walk` calls `OPS[name](b, op)`
per op; each handler returns what the op's results map to). The handlers live
in one module per op family: `elementwise_ops`, `shape_ops` (indexing too),
`reduction_ops` (contractions too) and `sort_scatter`; this module merges
their tables and keeps the names other modules import. Elementwise ops
read lazy broadcasts' sources (see `builder`); `dot_general` becomes
`MatMul` in NumPy's layout and an `Einsum` otherwise (index notation);
`reduce` with one monoid body becomes `ReduceSum` / `ReduceMax` /
`ReduceMin` / `ReduceProd`; a gather of whole slices along one axis becomes
`Gather` (a lookup); `reduce_window` that is a running sum becomes `CumSum`.
A handler that cannot translate its op raises `Skip` with the reason.
"""

from __future__ import annotations

from linnet.jax.importer.elementwise_ops import ELEMENTWISE, elementwise
from linnet.jax.importer.op_support import Handler, arg, onnx_dtype, result_type
from linnet.jax.importer.reduction_ops import REDUCTIONS
from linnet.jax.importer.shape_ops import SHAPES
from linnet.jax.importer.sort_scatter import SORT_SCATTER

__all__ = ["OPS", "Handler", "arg", "elementwise", "onnx_dtype", "result_type"]

OPS: dict[str, Handler] = {**ELEMENTWISE, **SHAPES, **REDUCTIONS, **SORT_SCATTER}
"""Every StableHLO op the importer maps (`func.call` is inlined by the walk)."""
