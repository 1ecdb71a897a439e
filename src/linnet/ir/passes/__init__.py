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

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar

from linnet.ir.core import Function, Program
from linnet.ir.passes.cse import eliminate_common_subexpressions
from linnet.ir.passes.dce import eliminate_dead_code
from linnet.ir.passes.fold import fold_constants
from linnet.ir.passes.simplify import simplify
from linnet.records import field, record

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
    """Run every pass until none changes anything (or `max_rounds` rounds).

    Inside `rounds_mirrored` the number of rounds is that of the same call in the
    recorded lowering (see there)."""
    if check:
        from linnet.ir.verify import verify

        verify(fn)
    rounds = _ROUNDS.get()
    call = (fn.name, len(fn.inputs), len(fn.body.ops))
    if rounds is not None and rounds.mirror:
        recorded = rounds.pending.get(call)
        if recorded:
            max_rounds = min(max_rounds, recorded.pop(0))
    changing = 0
    for _ in range(max_rounds):
        any_change = False
        for _name, run in PIPELINE:
            fn, changed = run(fn)
            any_change = any_change or changed
            if check:
                verify(fn)
        if not any_change:
            break
        changing += 1
    if rounds is not None and not rounds.mirror:
        rounds.changed.append((call, changing))
    return fn


@record(eq=False)
class Rounds:
    """The rounds that changed something in each `optimize` call of one lowering, in
    order, with what tells the call (its function's name, inputs and ops); `mirror`:
    capping the calls of another lowering, `pending` the counts left per call."""

    mirror: bool
    changed: list[tuple[tuple[str, int, int], int]]
    pending: dict[tuple[str, int, int], list[int]] = field(default_factory=dict)


_ROUNDS: ContextVar[Rounds | None] = ContextVar("linnet_pass_rounds", default=None)


@contextlib.contextmanager
def rounds_recorded() -> Iterator[Rounds]:
    """Note how many rounds changed something in every `optimize` call inside."""
    rounds = Rounds(False, [])
    token = _ROUNDS.set(rounds)
    try:
        yield rounds
    finally:
        _ROUNDS.reset(token)


@contextlib.contextmanager
def rounds_mirrored(recorded: Rounds) -> Iterator[None]:
    """Run each `optimize` call inside for the rounds that changed something in the same
    call of `recorded`, without the last round that only confirms the fixed point.

    For the check lowering of a dynamic export (`linnet.ir.dynamic_traced`): what it
    must show is that the traced graph, at the check sizes, is what the passes make of
    the check lowering there; a round more that changed nothing in the traced
    lowering would only confirm it. Every round run is a whole round of the passes,
    so what comes out is a valid optimisation of the check lowering whatever the
    count, and the walk that compares it with the traced graph decides. Calls are
    told apart by their function's name, inputs and number of ops, in order; a call
    that `recorded` has no count for runs to its fixed point (a count taken by the
    wrong call only costs a mismatch, and the sampler)."""
    pending: dict[tuple[str, int, int], list[int]] = {}
    for call, count in recorded.changed:
        pending.setdefault(call, []).append(count)
    token = _ROUNDS.set(Rounds(True, [], pending))
    try:
        yield
    finally:
        _ROUNDS.reset(token)


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
    "rounds_mirrored",
    "rounds_recorded",
    "simplify",
    "simplify_ops",
]
