"""The graph under construction that the op-by-op importers share.

Stage: the middle of `linnet.torch.export_linnet` (an exported program's ATen
nodes) and `linnet.jax.import_stablehlo` (a StableHLO function's ops). Each
walks its source in order and appends ONNX-vocabulary nodes to a
`linnet.sourcegen.graph.Graph`, the form the shared back half
(`linnet.sourcegen.finish`) reads; what cannot be translated is collected as
`Untranslated` so that one refusal lists every such op. `GraphBuilder` holds
what both do alike (fresh names, integer constants, one node per call); each
importer's subclass adds how its source's values become graph values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from linnet.records import record
from linnet.sourcegen.graph import DimLike, Graph, Node, TensorInfo

OPSET = 18
"""The ONNX opset whose operator forms the emitted nodes take (axes as inputs)."""


@record(eq=False)
class Untranslated:
    """An op the importer cannot translate, with why and where it came from."""

    name: str
    op: str
    reason: str
    where: str


class Skip(Exception):
    """An op a mapping cannot translate (the message says why)."""


class GraphBuilder:
    """Fills a `Graph` with one node per `emit`, in the order the source is walked."""

    separator = "_"
    """Between a fresh name's hint and its number (`add_3`)."""

    def __init__(self) -> None:
        self.graph = Graph(name="model", inputs=[], outputs=[], nodes=[])
        self.graph.opsets = {"": OPSET}
        self.untranslated: list[Untranslated] = []
        self.scope = ""
        self.where = ""
        self._count = 0

    def fresh(self, hint: str) -> str:
        self._count += 1
        return f"{hint}{self.separator}{self._count}"

    def const(self, value: np.ndarray[Any, Any]) -> str:
        """A compile-time constant: a name in `graph.constants`."""
        raise NotImplementedError

    def ints(self, values: Sequence[int]) -> str:
        return self.const(np.array([int(v) for v in values], dtype=np.int64))

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
        """Append one node with one output of type (`dtype`, `shape`); its name."""
        name = out or self.fresh(op.lower())
        self.graph.nodes.append(
            Node(
                op=op,
                domain=domain,
                name=name,
                inputs=tuple(inputs),
                outputs=(name,),
                attrs={**(attrs or {}), **({"_where": self.where} if self.where else {})},
                opset=OPSET if domain == "" else 1,
                scope=self.scope,
            )
        )
        self.graph.value_info[name] = TensorInfo(name, dtype, tuple(shape))
        return name
