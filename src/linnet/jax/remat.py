"""Per-layer rematerialisation of generated `jax.numpy` source: where a model's layers are.

Stage: an option of the JAX code generator (`linnet.jax.codegen.generate`),
used by `linnet.jax.train.train(..., remat="layers")`. Lowering unrolls a
`static for` over a `sub` array and inlines each `layer.forward`, so the Core
IR of an entry has no op that is "layer 3"; what still says which layer an
op belongs to is the path of the weights it computes with
(`model.layers.3.mlp...`; the `param` reads themselves are hoisted to the
top, so an op counts for the weights among its operands or read in its
regions).

`layer_segments` cuts the entry's top-level ops into contiguous runs, one per
element of the layer array: layer `n`'s run starts at the first op that
computes with a weight under `PREFIX.n.` and ends where layer `n + 1`'s
starts (the last layer's at its last such op). The code generator emits each run as a nested
function taking the values it reads from before it and returning those read
after it, called through `jax.checkpoint` (with the `policy`). Any contiguous
run of a pure straight-line program may be wrapped so, whatever the cut, so
the results and gradients are the unwrapped function's; the weight paths only
choose where the cuts fall.

`PREFIX` is `LayerRemat.prefix`, or by default the `sub` array (a path
`A.<index>.rest`) whose elements the entry reads the most of.

`remat_layers(spec)` is a context manager: entries of `linnet.jax.load_source`
prepared (traced) inside it generate their source with `spec`, so a training
step traced inside it rematerialises per layer with no change to how the
entry is called.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from linnet.errors import LinnetError
from linnet.ir.core import Op, Region, Value
from linnet.ir.regions import free_values, walk

_ELEMENT = re.compile(r"^(.+?)\.(\d+)\.")


@dataclass(frozen=True)
class LayerRemat:
    """Wrap each layer in `jax.checkpoint(policy=policy)`; `prefix` names the layer array
    (`"model.layers"`; None: the array the entry reads the most elements of)."""

    policy: Callable[..., Any] | None = None
    prefix: str | None = None


@dataclass(frozen=True)
class Segment:
    """Top-level ops `[start, stop)` of the entry: layer `index` of the array."""

    index: int
    start: int
    stop: int


_CURRENT: ContextVar[LayerRemat | None] = ContextVar("linnet_jax_layer_remat", default=None)


@contextmanager
def remat_layers(spec: LayerRemat | None) -> Iterator[None]:
    """Entries prepared inside generate their source with per-layer remat `spec`."""
    token = _CURRENT.set(spec)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def current_layer_remat() -> LayerRemat | None:
    """The `LayerRemat` of the enclosing `remat_layers`, or None."""
    return _CURRENT.get()


def _element(op: Op) -> tuple[str, int] | None:
    """(array prefix, index) of a `param` / `buffer` op reading an element's weight."""
    if op.kind not in ("param", "buffer"):
        return None
    match = _ELEMENT.match(str(op.attrs["path"]))
    return None if match is None else (match.group(1), int(match.group(2)))


def _layers_read(ops: Sequence[Op]) -> list[dict[str, set[int]]]:
    """For each op: array prefix -> indices of the elements whose weights it computes with
    (weights read by its own regions, or its operands that are weights read before)."""
    weights: dict[Value, tuple[str, int]] = {}
    for op in walk(Region((), list(ops), ())):
        element = _element(op)
        if element is not None:
            weights[op.results[0]] = element
    found: list[dict[str, set[int]]] = []
    for op in ops:
        read: dict[str, set[int]] = {}
        if _element(op) is None:
            for value in free_values(op) | {r for inner in op.regions for r in _defined(inner)}:
                element = weights.get(value)
                if element is not None:
                    read.setdefault(element[0], set()).add(element[1])
        found.append(read)
    return found


def _defined(region: Region) -> set[Value]:
    """Values defined inside `region` (at any depth)."""
    return {v for op in walk(region) for v in op.results}


def layer_segments(ops: Sequence[Op], spec: LayerRemat) -> list[Segment]:
    """The runs of `ops` that make up each layer (module docstring); LinnetError when the
    entry reads no element of the array `spec.prefix`."""
    reads = _layers_read(ops)
    prefix = spec.prefix
    if prefix is None:
        counts: dict[str, set[int]] = {}
        for read in reads:
            for name, indices in read.items():
                counts.setdefault(name, set()).update(indices)
        if not counts:
            raise LinnetError(
                'remat="layers": the entry reads no weights of a layer array (paths '
                '`NAME.<index>.…`); use remat="loss" to rematerialise the whole loss'
            )
        prefix = max(sorted(counts), key=lambda name: len(counts[name]))
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for position, read in enumerate(reads):
        for index in read.get(prefix, ()):
            first.setdefault(index, position)
            last[index] = position
    if not first:
        raise LinnetError(f'remat="layers": the entry reads no weights under `{prefix}.<index>.`')
    starts = sorted((start, index) for index, start in first.items())
    segments = []
    for (start, index), following in zip(starts, [*starts[1:], None], strict=True):
        stop = following[0] if following is not None else last[index] + 1
        segments.append(Segment(index, start, stop))
    return segments
