"""The importer graph under construction from StableHLO, and what every op mapping shares.

Stage: the StableHLO importer's second step (`walk` visits the ops of `@main`
and, inlined, of the functions it calls; `ops` maps each op). A `Builder`
fills a `linnet.sourcegen.graph.Graph` with ONNX-vocabulary nodes so the
shared back half reads a JAX model exactly as it reads an ONNX one.

StableHLO spells broadcasting out (`broadcast_in_dim` before every
elementwise op, splat constants of the full shape); ONNX operators broadcast
implicitly, and the recovery patterns are written for that spelling. So a
broadcast is kept *lazy* (`Lazy`: a value that NumPy-broadcasts to the
wanted shape) and elementwise ops read its source directly; only an op that
needs the full tensor materialises it (`Expand`). Reductions whose result is
broadcast back with the reduced axes kept become `keepdims` reductions, and a
sum divided by the number of elements it summed becomes `ReduceMean`: the
spellings `softmax`, `layer_norm` and `rms_norm` recovery know.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from linnet.records import record
from linnet.sourcegen.builder import GraphBuilder
from linnet.sourcegen.graph import DimLike, Node, TensorInfo

Shape = tuple[int, ...]


@record(eq=False)
class Lazy:
    """A broadcast not materialised: `source` NumPy-broadcasts to `shape`."""

    source: str
    shape: Shape
    dtype: str | None


@record(eq=False)
class Reduction:
    """What a `Reduce*` node the builder emitted reduces (for keepdims and mean rewrites)."""

    op: str
    x: str
    axes: tuple[int, ...]
    keepdims: bool


Ref = str | Lazy
"""What a StableHLO value maps to: a graph value, or a lazy broadcast of one."""


@record(eq=False)
class RowWrite:
    """A dynamic update that set row `index` (a runtime value) of `buffer` to `update`
    (shape `[1, *rest]`): how `lax.scan` stacks its outputs, one row per step."""

    buffer: str
    update: str
    index: Ref


class Builder(GraphBuilder):
    """Fills a `Graph` while walking a StableHLO function's ops in order."""

    def __init__(self) -> None:
        super().__init__()
        self.env: dict[Any, Ref] = {}
        self.reductions: dict[str, Reduction] = {}
        self.producers: dict[str, Node] = {}
        self.row_writes: dict[str, RowWrite] = {}
        self.notes: list[str] = []
        self._materialised: dict[int, str] = {}

    # ---------------------------------------------------------------- values

    def const(self, arr: np.ndarray) -> str:
        """A compile-time constant: a name in `graph.constants`."""
        from linnet.sourcegen.translate import numpy_dtype_name

        name = self.fresh("c")
        self.graph.constants[name] = arr
        self.graph.value_info[name] = TensorInfo(
            name, numpy_dtype_name(arr.dtype), tuple(int(s) for s in arr.shape)
        )
        return name

    def info(self, name: str) -> TensorInfo:
        return self.graph.value_info[name]

    def shape(self, ref: Ref) -> Shape:
        if isinstance(ref, Lazy):
            return ref.shape
        return tuple(d for d in self.info(ref).shape or () if isinstance(d, int))

    def dtype(self, ref: Ref) -> str | None:
        return ref.dtype if isinstance(ref, Lazy) else self.info(ref).dtype

    def full(self, ref: Ref) -> str:
        """The value as a tensor of its whole shape (a lazy broadcast is `Expand`ed, once)."""
        if not isinstance(ref, Lazy):
            return ref
        done = self._materialised.get(id(ref))
        if done is None:
            # Only unit axes added: the same elements, reshaped; otherwise a broadcast.
            same = math.prod(self.shape(ref.source)) == math.prod(ref.shape)
            op = "Reshape" if same else "Expand"
            done = self.emit(op, [ref.source, self.ints(ref.shape)], ref.dtype, ref.shape)
            self._materialised[id(ref)] = done
        return done

    def broadcastable(self, ref: Ref) -> str:
        """A value that NumPy-broadcasts to `ref`'s shape (its source when lazy)."""
        return ref.source if isinstance(ref, Lazy) else ref

    def constant_of(self, ref: Ref) -> np.ndarray | None:
        """The constant a value holds (a lazy splat's one value), if it is one."""
        name = self.broadcastable(ref)
        return self.graph.constants.get(name)

    # ---------------------------------------------------------------- nodes

    def emit(
        self,
        op: str,
        inputs: Sequence[str],
        dtype: str | None,
        shape: Sequence[DimLike],
        attrs: dict[str, Any] | None = None,
        domain: str = "",
        out: str | None = None,
    ) -> str:
        """Append one node (see `GraphBuilder.emit`), remembered as its output's producer."""
        name = super().emit(op, inputs, dtype, shape, attrs, domain, out)
        self.producers[name] = self.graph.nodes[-1]
        return name

    def reduce(self, op: str, x: str, axes: Sequence[int], keepdims: bool) -> str:
        """`op` (`ReduceSum`, ...) of `x` over `axes`, recorded for later rewrites."""
        shape = self.shape(x)
        out = tuple(1 if i in axes else d for i, d in enumerate(shape) if keepdims or i not in axes)
        name = self.emit(op, [x, self.ints(axes)], self.dtype(x), out, {"keepdims": int(keepdims)})
        self.reductions[name] = Reduction(op, x, tuple(axes), keepdims)
        return name


def broadcast_shape(a: Shape, b: Shape) -> Shape | None:
    """NumPy's broadcast of two shapes, None when they do not broadcast."""
    try:
        return tuple(int(d) for d in np.broadcast_shapes(a, b))
    except ValueError:
        return None
