"""Entry results handed back in the shape of the entry's result type.

Stage: the backends' entry boundary (linnet.torch, linnet.onnx.load_model). A lowered
entry returns its results flat (tuples and struct values flatten depth first, in field
declaration order); a Python caller gets them back nested as the source declared them
(language-extensions 2.3: "a nested struct or tuple field stays nested"). One result
comes back as itself, no result as None.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar

from linnet.check.types import StructType, TupleType, Type

R = TypeVar("R")


def _parts(t: Type) -> list[Type] | None:
    if isinstance(t, TupleType):
        return list(t.elems)
    if isinstance(t, StructType):
        return list(t.info.fields.values())
    return None


def _count(t: Type) -> int:
    parts = _parts(t)
    return 1 if parts is None else sum(_count(p) for p in parts)


def _build(t: Type, values: Iterator[R]) -> object:
    parts = _parts(t)
    if parts is None:
        return next(values)
    return tuple(_build(p, values) for p in parts)


def regroup(results: Sequence[R], declared: Type | None) -> object:
    """`results` nested as `declared` nests; flat as a tuple when the counts differ."""
    if not results:
        return None
    if declared is not None and _count(declared) == len(results):
        return _build(declared, iter(results))
    return results[0] if len(results) == 1 else tuple(results)
