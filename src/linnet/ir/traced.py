"""Traced sizes: an `int` that carries its polynomial in the dynamic generics.

Why: a dynamic export (`linnet.ir.dynamic`) needs every size-dependent integer
of the lowered entry (axes of result types, `reshape`/`broadcast`/`slice`
attributes, generics of a `call`, small integral constants) as a polynomial in
the dynamic generics. Fitting them across lowerings at many sample sizes costs a
lowering (and an optimisation) per sample; instead the entry is lowered once with
each dynamic generic bound to a `Traced` int (its value at the sample, and the
polynomial `B` or `S`), as torch's SymInt does. Lowering reads plain ints
everywhere, so a `Traced` is one: every consumer sees the sample value, while its
arithmetic (`+`, `-`, `*`, `**`, exact `//` and `%`) returns `Traced` ints with the
combined polynomial, through the checker's `Dim.evaluate` and every size the
lowering computes in Python.

What the trace cannot follow is noted or caught, never trusted:

- an operation whose result is no polynomial (`/`, bitwise ops, a division by a
  size, `float()`, `int()`) returns a plain value and marks the trace `lost`
  (`Tracing.lost` names the first such operation);
- a floor division or remainder by a constant that is not exact for every size
  (`S // 4`, `S % 8`) or of a constant by a size (`8 // S`) holds between two
  thresholds: the plain value for `//`, the polynomial `S - 8 * q` for `%`; a
  decision `linnet.ir.size_decisions` notes
  on it becomes the guard that says so (`settle`); one noted nowhere counts as
  lost (`Tracing.first_loss`);
- comparisons, `min`/`max` and `bool` are the int's own: the decisions that matter
  for a graph are noted by `linnet.ir.size_decisions` where the lowering folds them;
- NumPy, `range()`, `operator.index` and string formatting drop the trace without
  a hook. `Builder.const` keeps the trace of integers it turns into an array
  (`Tracing.consts`), and the constant folder the trace of a scalar it computes
  from traced scalars (`folded_operands`, `keep_folded`); everything else shows up as a size the graph has as a plain
  int, which `linnet.ir.dynamic` catches by lowering once more at other sizes and
  comparing (a plain int must stay the same, a traced one must be its polynomial
  there).

Outside `tracing()` nothing records; a `Traced` made there still computes its
polynomials.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from typing import Any

import numpy as np

from linnet.ir.symbolic import Dim, Poly
from linnet.records import field, record


@record(eq=False)
class Tracing:
    """What one traced lowering noted: the first operation that lost a trace, and the
    traced elements of the constants `Builder.const` made (by the array's identity,
    which the passes and the reuse caches keep: they copy an op's attributes, not its
    arrays)."""

    lost: str | None = None
    consts: dict[int, tuple[np.ndarray[Any, Any], tuple[Dim, ...]]] = field(default_factory=dict)
    pending: dict[tuple[object, ...], str] = field(default_factory=dict)

    def lose(self, what: str) -> None:
        if self.lost is None:
            self.lost = what

    def first_loss(self) -> str | None:
        """What lost a trace first: an operation, or a floor division or remainder that
        no noted decision guards (`size_decisions.note` settles those it records)."""
        if self.lost is not None:
            return self.lost
        return next(iter(self.pending.values()), None)

    def const_dims(self, array: np.ndarray[Any, Any]) -> tuple[Dim, ...] | None:
        """The traced elements of a constant made from traced ints (None: not one)."""
        found = self.consts.get(id(array))
        return None if found is None or found[0] is not array else found[1]


_ACTIVE: ContextVar[Tracing | None] = ContextVar("linnet_tracing", default=None)


@contextlib.contextmanager
def tracing() -> Iterator[Tracing]:
    """Record what the lowering inside loses of its traces (see the module docstring)."""
    state = Tracing()
    token = _ACTIVE.set(state)
    try:
        yield state
    finally:
        _ACTIVE.reset(token)


def tracing_now() -> bool:
    """Whether a traced lowering is running (the reuse caches then key on traces too)."""
    return _ACTIVE.get() is not None


def _lose(what: str) -> None:
    state = _ACTIVE.get()
    if state is not None:
        state.lose(what)


def _inexact(kind: str, left: Traced, right: int, result: int, what: str) -> None:
    """A floor division or remainder of a size by a constant that no polynomial gives:
    its value holds between two thresholds, which a noted decision turns into a guard
    (`settle`); left unnoted, the trace is lost."""
    state = _ACTIVE.get()
    if state is not None:
        state.pending.setdefault((kind, left.poly, right, result), what)


def settle(kind: str, left: object, right: object, result: object) -> None:
    """A floor division or remainder noted as a decision (`size_decisions.note`): every
    computation of the same value is guarded by it."""
    state = _ACTIVE.get()
    if state is None or not state.pending:
        return
    if type(left) is Traced:
        state.pending.pop((kind, left.poly, right, result), None)
    elif type(right) is Traced and kind == "floor":  # `8 / N`
        state.pending.pop(("rfloor", right.poly, left, result), None)


def dim_of(x: object) -> Dim:
    """The polynomial of a traced int, or the plain int itself."""
    if type(x) is Traced:
        return x.poly
    assert isinstance(x, int)
    return int(x) if type(x) is not int else x


def has_trace(x: object) -> bool:
    return type(x) is Traced


def make(value: int, poly: Dim) -> int:
    """`value` traced by `poly` (a plain int when `poly` is a constant)."""
    if isinstance(poly, Poly):
        return Traced(value, poly)
    return int(value)


def note_const(array: np.ndarray[Any, Any], value: object) -> None:
    """Keep the traces of the integers a constant was made of (`Builder.const`)."""
    state = _ACTIVE.get()
    if state is None:
        return
    flat = _flat(value)
    if flat is None or not any(type(x) is Traced for x in flat):
        return
    if len(flat) != array.size:
        state.lose("a constant made of traced sizes in another shape")
        return
    state.consts[id(array)] = (array, tuple(dim_of(x) for x in flat))


def untraced(value: object) -> object:
    """`value` with its traced ints plain (what NumPy is given: it would call `int()`)."""
    if type(value) is Traced:
        return int.__int__(value)
    if isinstance(value, list | tuple) and _ACTIVE.get() is not None:
        return [untraced(v) for v in value]
    return value


def folded_operands(operands: Sequence[np.ndarray[Any, Any]]) -> list[int | None] | None:
    """The traced value of each scalar constant operand of an op the constant folder is
    about to evaluate (None where there is none; None altogether when nothing is traced)."""
    state = _ACTIVE.get()
    if state is None:
        return None
    found: list[int | None] = []
    for array in operands:
        dims = state.const_dims(array)
        if dims is not None and len(dims) == 1 and isinstance(dims[0], Poly):
            found.append(Traced(int(array.reshape(-1)[0].item()), dims[0]))
        else:
            found.append(None)
    return found if any(t is not None for t in found) else None


_FOLDED_ARITHMETIC: dict[str, Callable[..., Any]] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "min": min,  # the side taken is a decision, noted with these operands
    "max": max,
    "neg": lambda a: -a,
    "cast": lambda a: a,
}


def keep_folded(
    kind: str,
    traces: Sequence[int | None],
    operands: Sequence[np.ndarray[Any, Any]],
    result: np.ndarray[Any, Any],
) -> None:
    """Keep the trace of a scalar the folder computed from traced scalars by ring
    arithmetic, a cast or `min`/`max` (`N - 1` of a runtime `cast<i32>(N)`)."""
    state = _ACTIVE.get()
    rule = _FOLDED_ARITHMETIC.get(kind)
    if state is None or rule is None or result.size != 1 or len(traces) != len(operands):
        return
    values: list[int] = []
    for trace, array in zip(traces, operands, strict=True):
        if trace is not None:
            values.append(trace)
            continue
        if array.size != 1:
            return
        item = array.reshape(-1)[0].item()
        if not isinstance(item, int) or isinstance(item, bool):
            return
        values.append(item)
    made = rule(*values)
    if type(made) is Traced and made == result.reshape(-1)[0].item():
        state.consts[id(result)] = (result, (made.poly,))


def _flat(value: object) -> list[object] | None:
    if isinstance(value, int):
        return [value]
    if isinstance(value, list | tuple):
        out: list[object] = []
        for item in value:
            inner = _flat(item)
            if inner is None:
                return None
            out.extend(inner)
        return out
    return None


def _poly(other: object) -> Dim | None:
    if type(other) is Traced:
        return other.poly
    if isinstance(other, int) and not isinstance(other, bool):
        return int(other)
    return None


class Traced(int):
    """A size and its polynomial in the dynamic generics (see the module docstring)."""

    poly: Poly

    def __new__(cls, value: int, poly: Poly) -> Traced:
        made = super().__new__(cls, value)
        made.poly = poly
        return made

    def __repr__(self) -> str:
        return int.__repr__(self)

    def __reduce__(self) -> tuple[Any, ...]:  # a copy or a pickle is the plain value
        return (int, (int(self),))

    # -- ring operations: polynomials -------------------------------------------------------

    def __add__(self, other: object) -> Any:
        p = _poly(other)
        if p is None:
            return int.__add__(self, other)  # type: ignore[operator]
        return make(int.__add__(self, other), self.poly + p)  # type: ignore[operator]

    __radd__ = __add__

    def __sub__(self, other: object) -> Any:
        p = _poly(other)
        if p is None:
            return int.__sub__(self, other)  # type: ignore[operator]
        return make(int.__sub__(self, other), self.poly - p)  # type: ignore[operator]

    def __rsub__(self, other: object) -> Any:
        p = _poly(other)
        if p is None:
            return int.__rsub__(self, other)  # type: ignore[operator]
        return make(int.__rsub__(self, other), p - self.poly)  # type: ignore[operator]

    def __mul__(self, other: object) -> Any:
        p = _poly(other)
        if p is None:
            return int.__mul__(self, other)  # type: ignore[operator]
        return make(int.__mul__(self, other), self.poly * p)  # type: ignore[operator]

    __rmul__ = __mul__

    def __neg__(self) -> Any:
        return make(-int(self.real), -self.poly)

    def __pos__(self) -> Any:
        return self

    def __pow__(self, other: object, modulo: object = None) -> Any:
        value = int.__pow__(self, other, modulo)  # type: ignore[call-overload]
        if modulo is None and type(other) is int and 0 <= other <= 8:
            poly: Dim = 1
            for _ in range(other):
                poly = self.poly * poly
            return make(value, poly)
        _lose(f"`{self} ** {other}`")
        return value

    # -- division: exact for every size, or the trace is lost ---------------------------------

    def __floordiv__(self, other: object) -> Any:
        value = int.__floordiv__(self, other)  # type: ignore[operator]
        if type(other) is int and other > 0:
            if _divides(other, self.poly):
                return make(value, _divided(self.poly, other))
            _inexact("floor", self, other, value, f"`{self} // {other}`")
            return _plain(value)
        _lose(f"`{self} // {other}`")
        return _plain(value)

    def __rfloordiv__(self, other: object) -> Any:
        value = int.__rfloordiv__(self, other)  # type: ignore[operator]
        if type(other) is int and other >= 0 and int.__int__(self) > 0:
            # `8 // S` holds between two thresholds too: guarded where noted
            _inexact("rfloor", self, other, value, f"`{other} // {self}`")
            return _plain(value)
        _lose(f"`{other} // {self}`")
        return _plain(value)

    def __mod__(self, other: object) -> Any:
        value = int.__mod__(self, other)  # type: ignore[operator]
        if type(other) is int and other > 0:
            if _divides(other, self.poly - value):
                return _plain(value)  # the same remainder at every size
            _inexact("mod", self, other, value, f"`{self} % {other}`")
            # between the thresholds its guard states (`S // 8` fixed), `S % 8` is
            # `S - 8 * (S // 8)`: a polynomial there
            return make(value, self.poly - other * int.__floordiv__(self, other))
        _lose(f"`{self} % {other}`")
        return _plain(value)

    def __rmod__(self, other: object) -> Any:
        _lose(f"`{other} % {self}`")
        return _plain(int.__rmod__(self, other))  # type: ignore[operator]

    def __divmod__(self, other: object) -> Any:
        return (self // other, self % other)

    def __rdivmod__(self, other: object) -> Any:
        _lose(f"`divmod({other}, {self})`")
        return int.__rdivmod__(self, other)  # type: ignore[operator]

    # -- what no polynomial describes: plain values, the trace noted lost ---------------------

    def __truediv__(self, other: object) -> Any:
        _lose(f"`{self} / {other}`")
        return int.__truediv__(self, other)  # type: ignore[operator]

    def __rtruediv__(self, other: object) -> Any:
        _lose(f"`{other} / {self}`")
        return int.__rtruediv__(self, other)  # type: ignore[operator]

    def __float__(self) -> float:
        _lose(f"`float({self})`")
        return int.__float__(self)

    def __int__(self) -> int:
        _lose(f"`int({self})`")
        return int.__int__(self)

    def __abs__(self) -> Any:
        if all(c >= 0 for _, c in self.poly.terms):
            return self  # never negative: sizes are not
        _lose(f"`abs({self})`")
        return _plain(int.__abs__(self))

    def __and__(self, other: object) -> Any:
        _lose(f"`{self} & {other}`")
        return _plain(int.__and__(self, other))  # type: ignore[operator]

    def __or__(self, other: object) -> Any:
        _lose(f"`{self} | {other}`")
        return _plain(int.__or__(self, other))  # type: ignore[operator]

    def __xor__(self, other: object) -> Any:
        _lose(f"`{self} ^ {other}`")
        return _plain(int.__xor__(self, other))  # type: ignore[operator]

    def __lshift__(self, other: object) -> Any:
        _lose(f"`{self} << {other}`")
        return _plain(int.__lshift__(self, other))  # type: ignore[operator]

    def __rshift__(self, other: object) -> Any:
        _lose(f"`{self} >> {other}`")
        return _plain(int.__rshift__(self, other))  # type: ignore[operator]

    __rand__ = __and__
    __ror__ = __or__
    __rxor__ = __xor__

    def __invert__(self) -> Any:
        _lose(f"`~{self}`")
        return _plain(int.__invert__(self))


def _plain(value: object) -> object:
    return int.__int__(value) if isinstance(value, int) and type(value) is not bool else value


def _divides(divisor: int, poly: Dim) -> bool:
    """Whether every coefficient of `poly` is an integer multiple of `divisor`."""
    if not isinstance(poly, Poly):
        return int(poly) % divisor == 0
    return all(c.denominator == 1 and c.numerator % divisor == 0 for _, c in poly.terms)


def _divided(poly: Poly, divisor: int) -> Dim:
    return Poly.make(poly.names, {e: c / divisor for e, c in poly.terms})
