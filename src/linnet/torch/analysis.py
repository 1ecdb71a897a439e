"""What the PyTorch backend learns from a Function before running it: hoisting.

Stage: backend preparation, shared by the interpreted runner and the code
generator. Input: a lowered, optimised `Function`. Output: `Hoisting`, the
top-level ops whose values depend only on constants, shapes and (optionally)
weights, so they can be computed once and cached (rotary tables, masks,
position grids), plus the values that the rest of the function reads from them.

Weights are hoisted only when the caller allows it: a trainable module must
recompute anything derived from a parameter on every call so that autograd
sees it, and a cache keyed on parameter versions would be stale after an
optimiser step anyway.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from linnet.ir.core import Function, Op, Value
from linnet.ir.regions import free_values, region_free_values, walk
from linnet.records import record

SOURCES = frozenset({"const", "iota"})
WEIGHT_READS = frozenset({"param", "buffer"})

__all__ = ["Hoisting", "free_values", "hoist", "region_free_values", "walk", "weights_key"]


@record
class Hoisting:
    """The once-per-weights part of a function.

    - `ops`: top-level ops (in order) computed by the prologue; sources that
      cost nothing (`const`, `iota`, `param`, `buffer`) are not listed.
    - `static`: every top-level value known before the inputs arrive.
    - `frontier`: prologue results read by the rest of the function (or
      returned by it); these are what the cache keeps.
    - `weights`: param/buffer paths the prologue reads (the cache key).
    """

    ops: list[Op]
    static: frozenset[Value]
    frontier: tuple[Value, ...]
    weights: tuple[str, ...]


def hoist(fn: Function, *, weights: bool) -> Hoisting:
    """Split `fn.body` into a prologue (static values) and the rest."""
    sources = SOURCES | WEIGHT_READS if weights else SOURCES
    varying = frozenset({"state"}) if weights else frozenset({"state"}) | WEIGHT_READS
    static: set[Value] = set()
    prologue: list[Op] = []
    for op in fn.body.ops:
        if op.kind in sources:
            static.update(op.results)
        elif (
            op.kind not in varying
            and free_values(op) <= static
            and not any(inner.kind in varying for region in op.regions for inner in walk(region))
        ):
            static.update(op.results)
            prologue.append(op)
    in_prologue = {id(op) for op in prologue}
    needed: set[Value] = set(fn.results) | set(fn.state_updates.values())
    read_by_prologue: set[Value] = set()
    for op in fn.body.ops:
        if id(op) in in_prologue:
            read_by_prologue |= free_values(op)
        else:
            needed |= free_values(op)
    frontier = tuple(v for op in prologue for v in op.results if v in needed)
    paths = {
        str(op.attrs["path"])
        for op in fn.body.ops
        if op.kind in WEIGHT_READS and op.results[0] in read_by_prologue
    }
    paths |= {
        str(inner.attrs["path"])
        for op in prologue
        for region in op.regions
        for inner in walk(region)
        if inner.kind in WEIGHT_READS
    }
    return Hoisting(prologue, frozenset(static), frontier, tuple(sorted(paths)))


def weights_key(weights: Mapping[str, torch.Tensor], paths: Sequence[str]) -> tuple[object, ...]:
    """What the cached prologue depends on: each weight's identity and in-place write count.

    `load_state_dict` and optimiser steps write in place (bumping `_version`);
    `.to()` replaces tensors (new identity). Inference-mode tensors keep no
    version counter; they cannot be written outside inference mode, so their
    identity stands in.
    """
    key: list[object] = []
    for path in paths:
        tensor = weights[path]
        try:
            version = tensor._version
        except RuntimeError:
            version = -1
        key.append((id(tensor), version))
    return tuple(key)
