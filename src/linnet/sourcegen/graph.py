"""The importer graph: a framework-neutral dataflow graph that importers fill in.

Stage: the first stage of every importer (architecture.md "Importers"). An
importer (ONNX's `linnet.onnx.importer.graph`, later torch.export and jaxpr)
reads its framework's model into a `Graph`; pattern recovery
(`linnet.sourcegen.patterns`) rewrites it; translation
(`linnet.sourcegen.translate`) turns it into a Linnet syntax tree.

Nothing here knows a framework: operator names are plain strings keyed by
`(domain, op)`, tensors are NumPy arrays, dtypes are Linnet dtype names
(`f32`, `i64`, `bool`; None for a dtype Linnet lacks), and shapes list
integers, symbolic names (`"batch"`) or None for an extent nobody knows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from linnet.records import field, record

DimLike = int | str | None
"""One extent: a size, a symbolic name (an ONNX `dim_param`), or unknown."""


@record(eq=False)
class TensorInfo:
    """The declared or inferred type of a named tensor."""

    name: str
    dtype: str | None
    shape: tuple[DimLike, ...] | None = None


@record(eq=False)
class Node:
    """One operator application.

    `inputs` name the tensors read, with `""` for an omitted optional input;
    `attrs` hold plain Python values (int, float, str, lists of those), NumPy
    arrays for tensor attributes, and `Graph`s for subgraph attributes.
    `opset` is the version of the node's domain that the model imports.
    `scope` is the module path the exporter recorded for the node
    (`model.layers.0.self_attn.q_proj`), or `""`.
    """

    op: str
    domain: str
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    opset: int = 0
    scope: str = ""

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)

    @property
    def label(self) -> str:
        """How error messages name the node: its name, or its first output."""
        return self.name or (self.outputs[0] if self.outputs else self.op)

    @property
    def qualified_op(self) -> str:
        return f"{self.domain}::{self.op}" if self.domain else self.op


@record(eq=False)
class Graph:
    """A model: inputs, outputs, nodes in topological order, and stored tensors.

    `initializers` are stored tensors (weights: future `param` members);
    `constants` are values written into the model itself (ONNX `Constant`
    nodes), known at import time and materialised only where code reads them.
    `paths` maps the names of stored tensors (or graph inputs that carry
    weights) to the Linnet parameter path they had when a Linnet model was
    exported; `value_info` holds inferred types of intermediate values.
    `state` maps graph inputs that carry the value of a `state` member before
    the call to its path (they are in `paths` too), `next_state` maps graph
    outputs that carry its value after the call to its path (a Linnet
    export's `state<N>` / `next_state<N>`, a mutated torch buffer).
    """

    name: str
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    nodes: list[Node]
    initializers: dict[str, np.ndarray] = field(default_factory=dict)
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    value_info: dict[str, TensorInfo] = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)
    state: dict[str, str] = field(default_factory=dict)
    next_state: dict[str, str] = field(default_factory=dict)
    opsets: dict[str, int] = field(default_factory=dict)

    def producers(self) -> dict[str, Node]:
        """The node that makes each value."""
        return {out: node for node in self.nodes for out in node.outputs if out}

    def consumers(self) -> dict[str, list[Node]]:
        """The nodes that read each value, in graph order."""
        users: dict[str, list[Node]] = {}
        for node in self.nodes:
            for name in node.inputs:
                if name:
                    users.setdefault(name, []).append(node)
        return users
