"""Which weights a session pre-packs: the `B` of its float matrix products, up to a byte budget.

Stage: the runtime, between the exported graph and `session.EntrySession`
(CPU only), feeding `constants.constant_weights`. In: an exported graph, which
graph inputs are weights, their bound values and a budget in bytes. Out: the
names of the weight inputs to bind as initializers instead of graph inputs.

Why: weights are graph inputs bound by I/O binding, one copy shared by every
session of a model (`model`). ONNX Runtime's CPU `Gemm`/`MatMul` (MLAS) then
packs its `B` into its panel layout on every call, a pass over the whole
weight. At one row that pass is hidden in the memory-bound product; at
several rows it is most of the time. A weight that is an initializer is
packed once, when the session is made, into a buffer the session owns: a
second copy of that weight, per session (the Python API has no shared
pre-packed container). Measured (`Gemm(transB=1)`, 2 threads, load 3.6-4.4,
medians of 5 rounds): `[5632, 2048]` 22.7 ms as an input against 13.8 ms
pre-packed at 8 rows, 8.9 against 9.1 ms at one row; `[2048, 2048]` 6.8
against 3.3 ms at 8 rows; `[32000, 2048]` 100.6 against 56.2 ms. So one
session, the one that decodes many rows at once, gets the packed copies, and
only as many as the budget allows: their bytes are the memory this costs.

The weights are taken in graph order (a decoder's first layers first) until
the next would pass the budget; a weight read by several products counts once.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
import onnxruntime as ort  # type: ignore[import-untyped]

_PRODUCTS = {"Gemm": 1, "MatMul": 1, "FusedMatMul": 1}
"""The float matrix products MLAS packs, and the input position of their `B`."""

_FLOAT_TYPES = {onnx.TensorProto.FLOAT}
"""The element types whose products pack `B` (MLAS's SGEMM)."""


def prepacked_weights(
    proto: onnx.ModelProto,
    weights: Mapping[str, str],
    values: Mapping[str, ort.OrtValue],
    budget: int,
) -> frozenset[str]:
    """The weight inputs of `proto` read as a product's `B`, in graph order, whose bytes
    together stay within `budget` (see the module docstring)."""
    if budget <= 0:
        return frozenset()
    inputs = {v.name: v for v in proto.graph.input}
    chosen: list[str] = []
    used = 0
    for node in proto.graph.node:
        slot = _PRODUCTS.get(node.op_type)
        if slot is None or node.domain not in ("", "com.microsoft") or len(node.input) <= slot:
            continue
        name = node.input[slot]
        value = inputs.get(name)
        if value is None or name not in weights or name in chosen:
            continue
        if value.type.tensor_type.elem_type not in _FLOAT_TYPES:
            continue
        size = _nbytes(values[weights[name]])
        if used + size > budget:
            break
        chosen.append(name)
        used += size
    return frozenset(chosen)


def _nbytes(value: ort.OrtValue) -> int:
    shape = [int(d) for d in value.shape()]
    return int(np.prod(shape, dtype=np.int64)) * 4
