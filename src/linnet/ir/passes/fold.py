"""Constant folding: ops whose operands are all constants become constants.

Input/output: a `Function`. An op is folded when it is region-free, has at
least one operand, every operand is the result of a `const`, and its result has
at most `FOLD_LIMIT` elements (so broadcasting a scalar to a large shape is not
materialised into the program); `sources=True` folds operand-free `iota`s as
well (the JAX backend's static shapes). Values are computed by the reference kernels
(`linnet.ir.kernels`), so folding cannot change what a program computes. An op
whose evaluation fails at run time (an out-of-range constant index) is left in
place for the backend to report. An `if` whose condition is constant is
replaced by the ops of the taken branch. While an entry is sampled for dynamic
generics, each folded comparison, `min`/`max`, division or remainder is noted
(`linnet.ir.size_decisions`): its outcome may depend on a size.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from linnet.errors import LinnetError
from linnet.ir.core import Function, Op
from linnet.ir.kernels import KERNELS, evaluate
from linnet.ir.passes.rewrite import Rewriter
from linnet.ir.size_decisions import note_folded
from linnet.ir.traced import folded_operands, keep_folded

FOLD_LIMIT = 4096


class ConstantFolder(Rewriter):
    def __init__(self, sources: bool = False) -> None:
        super().__init__()
        self.constants: dict[object, npt.NDArray[Any]] = {}
        self.sources = sources

    def visit(self, op: Op) -> list[Op]:
        if op.kind == "const":
            value = op.attrs["value"]
            assert isinstance(value, np.ndarray)
            self.constants[op.results[0]] = value
            return [op]
        if op.kind == "if" and op.operands[0] in self.constants:
            return self.inline_branch(op)
        if not self.foldable(op):
            return [op]
        operands = [self.constants[v] for v in op.operands]
        try:
            value = evaluate(op, operands)
        except LinnetError:
            return [op]
        traces = folded_operands(operands)  # a dynamic export's traced sizes (`ir.traced`)
        note_folded(op.kind, operands, value, traces)
        if traces is not None:
            keep_folded(op.kind, traces, operands, value)
        self.constants[op.results[0]] = value
        self.changed = True
        return [Op("const", (), op.results, {"value": value})]

    def foldable(self, op: Op) -> bool:
        return (
            op.kind in KERNELS
            and not op.regions
            and (bool(op.operands) or (self.sources and op.kind == "iota"))
            and all(v in self.constants for v in op.operands)
            and op.results[0].type.size <= FOLD_LIMIT
        )

    def inline_branch(self, op: Op) -> list[Op]:
        taken = op.regions[0] if bool(self.constants[op.operands[0]]) else op.regions[1]
        for result, value in zip(op.results, taken.results, strict=True):
            self.replace(result, value)
        self.changed = True
        return list(taken.ops)


def fold_constants(fn: Function, *, sources: bool = False) -> tuple[Function, bool]:
    """Fold `fn`; also say whether anything changed.

    `sources` also folds `iota` (an op without operands) and so everything computed
    from iotas and constants alone (rotary frequencies, position tables): for a
    backend whose shapes are all static, where a size never varies per call."""
    folder = ConstantFolder(sources)
    return folder.function(fn), folder.changed
