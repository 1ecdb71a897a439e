"""Merging nodes that compute the same value twice (common subexpressions).

Stage: an importer's graph, before pattern recovery. A traced program repeats
work a person writes once: with a dynamic sequence length nothing folds, so
every decoder layer of a transformers model reshapes the same rotary tables
and the mask builder calls `arange(S)` twice. Left apart, each layer reads its
own copy and the layers are no longer copies of one another (`outline` needs
one invariant per table). Here a node that applies the same operator, with
the same attributes, to the same inputs as an earlier node is dropped and its
result read from the earlier one; small constants equal in dtype, shape and
value count as the same input. Nodes with subgraphs or several results stay
as they are, and so does anything random.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from linnet.sourcegen.graph import Graph, TensorInfo

_SMALL = 64
"""Constants of at most this many elements are compared by value."""

_RANDOM = ("Random", "Bernoulli", "Dropout", "Multinomial")


def merge_repeats(graph: Graph) -> int:
    """Drop every node that repeats an earlier one; how many were dropped."""
    renamed: dict[str, str] = {}
    const_keys: dict[str, Any] = {}
    seen: dict[Any, str] = {}
    kept = []
    for node in graph.nodes:
        inputs = tuple(renamed.get(i, i) for i in node.inputs)
        if inputs != node.inputs:
            node.inputs = inputs
        key = _key(graph, node.op, node.domain, inputs, node.attrs, const_keys)
        if key is None or len(node.outputs) != 1 or node.op.startswith(_RANDOM):
            kept.append(node)
            continue
        earlier = seen.get(key)
        out = node.outputs[0]
        if earlier is None or not _same_type(graph, earlier, out):
            seen.setdefault(key, out)
            kept.append(node)
            continue
        renamed[out] = earlier
    if not renamed:
        return 0
    graph.nodes[:] = kept
    graph.outputs[:] = [
        TensorInfo(renamed.get(o.name, o.name), o.dtype, o.shape) for o in graph.outputs
    ]
    for name in renamed:
        graph.value_info.pop(name, None)
    return len(renamed)


def _key(
    graph: Graph,
    op: str,
    domain: str,
    inputs: tuple[str, ...],
    attrs: dict[str, Any],
    const_keys: dict[str, Any],
) -> Any:
    parts: list[Any] = [domain, op]
    for name in inputs:
        arr = graph.constants.get(name)
        if arr is not None and arr.size <= _SMALL:
            key = const_keys.get(name)
            if key is None:
                key = ("const", arr.dtype.str, arr.shape, arr.tobytes())
                const_keys[name] = key
            parts.append(key)
        else:
            parts.append(name)
    for attr, value in sorted(attrs.items()):
        if attr == "_where":
            continue
        if isinstance(value, Graph):
            return None
        if isinstance(value, np.ndarray):
            value = ("array", value.dtype.str, value.shape, value.tobytes())
        elif isinstance(value, list):
            value = ("list", repr(value))
        parts.append((attr, value))
    try:
        hash(tuple(parts))
    except TypeError:
        return None
    return tuple(parts)


def _same_type(graph: Graph, a: str, b: str) -> bool:
    x, y = graph.value_info.get(a), graph.value_info.get(b)
    if x is None or y is None:
        return x is y
    return x.dtype == y.dtype and x.shape == y.shape
