"""Core IR passes: constant folding, CSE, DCE and trivial-op simplification.

Stage: between lowering and the backends (architecture.md "The pipeline").
Each pass takes a `Function` and returns a new one that shares the ops it did
not change, so the input stays valid. `optimize` runs them to a fixed point;
with `check=True` it runs the verifier after every pass (what the tests do).

Example:
    >>> from linnet.ir.core import Builder, TensorType
    >>> b = Builder.for_function([("x", TensorType((2,), "f32"))])
    >>> two = b.binary("add", b.const(1.0, "f32"), b.const(1.0, "f32"))
    >>> fn = b.finish_function("f", [b.binary("mul", b.args[0], two)])
    >>> len(fn.body.ops), len(optimize(fn).body.ops)
    (4, 2)
"""

from __future__ import annotations

from collections.abc import Callable

from linnet.ir.core import Function, Program
from linnet.ir.passes.cse import eliminate_common_subexpressions
from linnet.ir.passes.dce import eliminate_dead_code
from linnet.ir.passes.fold import fold_constants
from linnet.ir.passes.simplify import simplify

Pass = Callable[[Function], tuple[Function, bool]]

PIPELINE: tuple[tuple[str, Pass], ...] = (
    ("simplify", simplify),
    ("fold", fold_constants),
    ("cse", eliminate_common_subexpressions),
    ("dce", eliminate_dead_code),
)


def fold(fn: Function) -> Function:
    """Constant folding only."""
    return fold_constants(fn)[0]


def cse(fn: Function) -> Function:
    """Common subexpression elimination only."""
    return eliminate_common_subexpressions(fn)[0]


def dce(fn: Function) -> Function:
    """Dead code elimination only."""
    return eliminate_dead_code(fn)[0]


def simplify_ops(fn: Function) -> Function:
    """Trivial-op simplification only (follow with `dce` to drop what it bypassed)."""
    return simplify(fn)[0]


def optimize(fn: Function, *, check: bool = False, max_rounds: int = 32) -> Function:
    """Run every pass until none changes anything (or `max_rounds` rounds)."""
    if check:
        from linnet.ir.verify import verify

        verify(fn)
    for _ in range(max_rounds):
        any_change = False
        for _name, run in PIPELINE:
            fn, changed = run(fn)
            any_change = any_change or changed
            if check:
                verify(fn)
        if not any_change:
            break
    return fn


def optimize_program(program: Program, *, check: bool = False) -> Program:
    """`optimize` every entry; declarations are unchanged."""
    entries = {name: optimize(fn, check=check) for name, fn in program.entries.items()}
    if check:
        from linnet.ir.verify import verify

        for fn in entries.values():
            verify(fn, program)
    return Program(
        dict(program.params),
        dict(program.buffers),
        dict(program.state),
        entries,
        dict(program.generics),
    )


__all__ = [
    "PIPELINE",
    "cse",
    "dce",
    "eliminate_common_subexpressions",
    "eliminate_dead_code",
    "fold",
    "fold_constants",
    "optimize",
    "optimize_program",
    "simplify",
    "simplify_ops",
]
