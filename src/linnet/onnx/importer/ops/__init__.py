"""ONNX operator translators, one module per operator family.

Stage: ONNX import, translation. Importing this package registers every
translator in `linnet.onnx.importer.graph.REGISTRY` (keyed by `(domain, op_type)`,
never by opset version: a translator reads `ctx.node.opset` where versions
differ, so a new version of a known operator is still translated, and an
attribute combination a translator does not handle refuses the node with a
reason instead of importing it wrong). `OPERATORS` lists what the table covers.

Families: `binary` (arithmetic, comparisons, logic, Where, Pow, Mod),
`unary` (math functions, rounding, Erf, trigonometry), `activations`,
`basic` (Identity, Cast, Clip, Dropout, Constant), `shapes` (Shape, Reshape,
Transpose, Concat, Split, Expand, Tile, Range), `slicing` (Slice, Pad,
DepthToSpace, Trilu, EyeLike), `gather` (Gather*, Scatter*, OneHot),
`reduce` (Reduce*, ArgMax, Softmax family, CumSum), `linalg` (MatMul, Gemm,
Einsum), `conv`, `pool`, `norm`, `resize`, `attention` (Attention,
RotaryEmbedding), `loss`, `quant`, `misc`.
"""

from __future__ import annotations

from linnet.onnx.importer.graph import REGISTRY
from linnet.onnx.importer.ops import (
    activations,
    attention,
    basic,
    binary,
    control,
    conv,
    gather,
    grid,
    linalg,
    loss,
    misc,
    norm,
    pool,
    quant,
    reduce,
    resize,
    rnn,
    sequence,
    shapes,
    slicing,
    spectral,
    training,
    unary,
)

__all__ = [
    "OPERATORS",
    "activations",
    "attention",
    "basic",
    "binary",
    "control",
    "conv",
    "gather",
    "grid",
    "linalg",
    "loss",
    "misc",
    "norm",
    "pool",
    "quant",
    "reduce",
    "resize",
    "rnn",
    "sequence",
    "shapes",
    "slicing",
    "spectral",
    "training",
    "unary",
]

OPERATORS: list[tuple[str, str]] = REGISTRY.operators()
"""Every `(domain, op_type)` with a translator, sorted."""
