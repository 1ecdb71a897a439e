"""Extents the ONNX exporter can index: refused by name before a node is emitted.

Stage: the first step of `assemble.export_ir`. In: the lowered function and
its ops. Out: nothing, or a `LinnetError` naming the entry, the value (a
param's path, an entry input's name, or the op that makes it), its type and
the limit.

Why: the exported graph computes positions and index ranges in `i32` (an
`iota` is a `Range` over `i32` scalars, gathers and cache writes take `i32`
indices), so an extent past 2**31 - 1 cannot be written into it. Without
this check such a model (`--bind H=1099511627776`) failed deep in the
emitter with NumPy's `OverflowError` ("internal error"); a model that big
could not be run anyway.
"""

from __future__ import annotations

from collections.abc import Iterable

from linnet.errors import LinnetError
from linnet.ir.core import Function, Op, TensorType

__all__ = ["I32_MAX", "check_extents"]

I32_MAX = 2**31 - 1


def check_extents(fn: Function, ops: Iterable[Op]) -> None:
    """Refuse `fn` if an input or an op result has an extent past `I32_MAX`."""
    for name, value in fn.inputs:
        _check(fn, f"input `{name}`", value.type)
    for op in ops:
        for value in op.results:
            if op.kind in ("param", "buffer", "state"):
                what = f"{op.kind} `{op.attrs['path']}`"
            else:
                what = f"the result of `{op.kind}`"
            _check(fn, what, value.type)


def _check(fn: Function, what: str, t: object) -> None:
    if not isinstance(t, TensorType):
        return
    for axis, extent in enumerate(t.shape):
        if extent > I32_MAX:
            raise LinnetError(
                f"cannot export entry `{fn.name}` to ONNX: {what} has extent {extent} "
                f"(axis {axis} of {t}), past the i32 range (at most {I32_MAX}) the exported "
                "graph indexes in"
            )
