"""Rewriting a checkpoint linear by linear: the streamed writer every importer shares.

Stage: below `linnet.quant.compressed` and `linnet.quant.hf`. In: an open
checkpoint, and per converted linear (by its prefix) the source tensors it
consumes, the `(name, dtype, shape)` tensors it produces, and a function that
computes them. Out: one SafeTensors file with every produced tensor, and every
tensor no linear consumed copied unchanged.

Checked before anything is written (a `LinnetError` naming the checkpoint): a
produced name that the checkpoint already holds and no linear consumes, and a
copied tensor of a dtype Linnet cannot store. The file is written atomically
by `save_safetensors_streamed`; each linear is converted when its first output
is due and its outputs are held only until written.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from linnet.errors import LinnetError
from linnet.weights.checkpoint import Checkpoint
from linnet.weights.safetensors import save_safetensors_streamed

Array = np.ndarray[Any, Any]
Declared = tuple[str, str, tuple[int, ...]]
"""`(name, linnet dtype, shape)` of one output tensor."""


@dataclass(frozen=True)
class Conversion:
    """One linear: the source tensors it replaces and the tensors it writes."""

    consumed: Sequence[str]
    produced: Sequence[Declared]


def rewrite_checkpoint(
    source: Checkpoint,
    output: str | os.PathLike[str],
    conversions: Mapping[str, Conversion],
    convert: Callable[[str], Mapping[str, Array]],
    metadata: Mapping[str, str],
) -> None:
    """Write `output`: `convert(prefix)` gives the produced tensors of `conversions[prefix]`
    by name; every tensor that no conversion consumes is copied."""
    consumed = {name for c in conversions.values() for name in c.consumed}
    owner: dict[str, str] = {}
    layout: list[Declared] = []
    for prefix, conversion in conversions.items():
        for name, kind, shape in conversion.produced:
            if name in owner or (name in source.tensors and name not in consumed):
                raise LinnetError(
                    f"{source.label}: converting `{prefix}` writes `{name}`, which the "
                    "checkpoint already has"
                )
            owner[name] = prefix
            layout.append((name, kind, shape))
    for name, stored in source.tensors.items():
        if name in consumed:
            continue
        if stored.linnet_dtype is None:
            raise LinnetError(
                f"{source.label}: tensor `{name}` has dtype {stored.dtype}, which Linnet "
                "cannot copy; leave it out of the checkpoint"
            )
        layout.append((name, stored.linnet_dtype, stored.shape))
    pending: dict[str, Array] = {}

    def load(name: str) -> Array:
        prefix = owner.get(name)
        if prefix is None:
            return source.load(name)
        if name not in pending:
            pending.update(convert(prefix))
        return pending.pop(name)

    save_safetensors_streamed(Path(output), layout, load, metadata)
