"""Compile-time decisions on sizes, recorded while an entry is lowered for dynamic generics.

Why: `linnet.ir.dynamic` lowers an entry at a few sample sizes and generalises
what varies. A comparison of compile-time integers (`if N > 4`, `select(N > 4,
...)`), a `min`/`max` of them, a floor division or remainder (`N / 4`,
`N % 8`) and the clamp of a slice bound (`x[0:8]`) are folded while lowering:
the graph keeps only the outcome at the sample sizes, and would silently
compute the other branch's numbers on the other side of the threshold. The
lowering notes each such decision here (`note`), with its operands and
outcome; the sampler (`checked_guards`) then

- refuses, naming the operator and the sizes, when the outcome differs between
  samples (no single graph serves both sides);
- otherwise turns each decision into a guard on the dynamic generics (`N > 4`,
  `N <= 8`, `4 <= N < 8`): the sizes for which the folded outcome is the one
  every sample took. The guards are checked at run time (`ExportedSession`
  refuses with a LinnetError naming the operator, the ONNX graph itself fails
  in a `linnet guard` node) so that no size outside them computes silently.

The constant-folding pass notes the same kinds of IR op when it folds them
(`note_folded`: `cast<i32>(N) > 4` is a runtime comparison until its operand
is folded to a constant); a folded decision on tensors, or on non-integral
values, cannot be guarded and is refused when its operands vary.

A decision whose operands do not depend on the dynamic generics is the same at
every size and yields no guard. Outside `recording()` `note` does nothing. The
lowering's reuse caches (`linnet.ir.lower.reuse`) keep the decisions a body
noted and `replay` them when they clone it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from linnet.errors import LinnetError
from linnet.ir.symbolic import Dim, Poly
from linnet.ir.traced import settle
from linnet.records import record

if TYPE_CHECKING:
    from linnet.check.dims import Dim as CheckDim
    from linnet.check.dims import Symbol
    from linnet.source import Span

COMPARISONS = ("<", "<=", ">", ">=", "==", "!=")
NEGATED = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}


@record(frozen=True)
class Decision:
    """One folded decision: `kind` is a comparison, `min`, `max`, `floor` or `mod` of
    `left` and `right` with `result`; `operator` is what the source wrote (`>`,
    `min`, `/`, `slice`) or the folded IR op, `where` where (a file position or the
    size expression). Kind `opaque` is a decision no guard can describe (fractions,
    tensors, bitwise ops): `opaque` holds its operands, compared between samples."""

    kind: str
    operator: str
    left: int
    right: int
    result: int
    where: str
    opaque: bytes = b""


@record(frozen=True)
class SizeGuard:
    """`lhs rel 0`, or `lhs % modulus == 0` when `modulus` is set: integer coefficients."""

    lhs: Dim
    rel: str
    modulus: Dim | None
    text: str


_LOG: ContextVar[list[Decision] | None] = ContextVar("linnet_size_decisions", default=None)


@contextlib.contextmanager
def recording() -> Iterator[list[Decision]]:
    """Collect the decisions `note`d while the block runs (nested lowerings keep their own)."""
    log: list[Decision] = []
    token = _LOG.set(log)
    try:
        yield log
    finally:
        _LOG.reset(token)


def mark() -> int:
    """Where the log is now (-1 when nothing records): `since(mark())` is what comes after."""
    log = _LOG.get()
    return -1 if log is None else len(log)


def since(start: int) -> tuple[Decision, ...]:
    """The decisions noted after `start` (a lowering kept for reuse keeps them too)."""
    log = _LOG.get()
    return () if log is None or start < 0 else tuple(log[start:])


def replay(decisions: Sequence[Decision]) -> None:
    """Note again what a reused lowering noted when it was made (so every sample's log
    holds the same decisions, whichever calls its caches served)."""
    log = _LOG.get()
    if log is not None:
        log.extend(decisions)


def note(kind: str, operator: str, left: object, right: object, result: object, where: str) -> None:
    """Record a decision on two compile-time numbers (bools are no sizes). A comparison of
    float literals (`N * 0.5 > 2.0`) is kept opaque: refused if it depends on a size."""
    log = _LOG.get()
    if log is None or isinstance(left, bool) or isinstance(right, bool):
        return
    if isinstance(left, int) and isinstance(right, int):  # plain, or traced (`ir.traced`)
        assert isinstance(result, int)
        folded = int(result) if isinstance(result, bool) else result
        log.append(Decision(kind, operator, left, right, folded, where))
        if kind in ("floor", "mod"):
            settle(kind, left, right, folded)  # its guard covers the traced `//` or `%`
    elif kind in COMPARISONS and isinstance(left, int | float) and isinstance(right, int | float):
        opaque = repr((left, right)).encode()
        log.append(Decision("opaque", operator, 0, 0, 0, where, opaque))


FOLDED = {
    "lt": "<",
    "le": "<=",
    "gt": ">",
    "ge": ">=",
    "eq": "==",
    "ne": "!=",
    "min": "min",
    "max": "max",
    "div": "floor",
    "rem": "mod",
    "abs": "max",
    "shr": "floor",
    "shl": "opaque",
    "and": "opaque",
    "or": "opaque",
    "xor": "opaque",
    "cast": "opaque",
}
"""IR ops whose folding decides on its operands' values, and the decision kind (`opaque`:
no guard can be fitted; refused when the operands vary with the size)."""


def note_folded(
    kind: str,
    operands: Sequence[np.ndarray[Any, Any]],
    result: object,
    traces: Sequence[int | None] | None = None,
) -> None:
    """Record an IR op the constant folder evaluated, if it is a decision (`FOLDED`);
    `traces` are the traced values of its scalar operands (`linnet.ir.traced`), if any."""
    log = _LOG.get()
    if log is None or kind not in FOLDED:
        return
    where = f"the folded op `{kind}`"
    if kind == "cast":  # float to integer rounds; anything else is exact or stays a float
        source = operands[0]
        if (
            source.dtype.kind != "f"
            or np.asarray(result).dtype.kind not in "iub"
            or bool(np.all(np.isfinite(source) & (source == np.round(source))))
        ):
            return  # exact: no value is rounded
    first = traces[0] if traces else None
    if kind == "abs":
        operands = [operands[0], -operands[0]]
        traces = None if first is None else [first, -first]
    left, right = (_integral(a) for a in operands) if len(operands) == 2 else (None, None)
    if traces is not None and len(traces) == 2:
        left = traces[0] if traces[0] is not None else left
        if kind != "shr":  # `a >> k` decides as a floor division by 2^k
            right = traces[1] if traces[1] is not None else right
    if kind == "shr" and right is not None:
        right = 1 << right if 0 <= right < 63 else None  # a >> k is a floor division by 2^k
    folded = _integral(np.asarray(result), bools=True)
    if FOLDED[kind] != "opaque" and left is not None and right is not None and folded is not None:
        if kind in ("div", "rem", "shr"):  # truncating: the floor forms when both are >= 0
            log.append(Decision(">=", kind, left, 0, int(left >= 0), where))
        log.append(Decision(FOLDED[kind], kind, left, right, folded, where))
        return
    opaque = b"".join(
        f"{a.dtype}{a.shape}".encode() + np.ascontiguousarray(a).tobytes() for a in operands
    )
    log.append(Decision("opaque", kind, 0, 0, 0, where, opaque))


def _integral(array: np.ndarray[Any, Any], bools: bool = False) -> int | None:
    """The integral value of a scalar, or of a tensor that repeats one (bools are no sizes,
    but the outcome of a comparison)."""
    if not array.size or array.dtype.kind not in ("iufb" if bools else "iuf"):
        return None
    flat = array.reshape(-1)
    if flat.size > 1 and not bool(np.all(flat == flat[0])):
        return None
    value = flat[0].item()
    if isinstance(value, float) and not value.is_integer():
        return None
    return int(value)


def at(span: Span) -> str:
    """A source position for messages: `file:line:column` and the text there."""
    line, column = span.file.line_col(span.start)
    return f"`{span.text}` at {span.file.path}:{line}:{column}"


def note_dim_ops(
    d: CheckDim,
    values: Mapping[Symbol, int],
    packs: Mapping[Symbol, Sequence[int]] | None,
) -> None:
    """Note every `min`/`max`/floor/mod atom of a checker dimension evaluated under `values`."""
    if _LOG.get() is None:
        return
    from linnet.check.dims import FLOOR, MAX, MIN
    from linnet.check.dims import Op as CheckOp

    for mono, _ in d.terms:
        for atom in mono:
            if not isinstance(atom, CheckOp):
                continue
            note_dim_ops(atom.a, values, packs)
            note_dim_ops(atom.b, values, packs)
            a = atom.a.evaluate(values, packs)
            b = atom.b.evaluate(values, packs)
            if b == 0 and atom.kind not in (MIN, MAX):
                continue  # the evaluation itself reports the zero divisor
            # a `min`/`max` (a slice's clamp, `min(N, 8)`) computes only itself: its
            # bound never divides a traced size (`8 // N`, `8 % N` would lose the trace
            # and hand the export to the sampler). A floor or remainder of sizes computes
            # both, as it always did: in a type (`(N + 1) / 2`) the remainder's lost trace
            # leaves it to the sampler, which fits it or refuses it as no polynomial,
            # rather than a guard that holds for two sizes.
            if atom.kind == MIN:
                kind, result = "min", min(a, b)
            elif atom.kind == MAX:
                kind, result = "max", max(a, b)
            else:
                quotient, remainder = a // b, a % b
                kind, result = ("floor", quotient) if atom.kind == FLOOR else ("mod", remainder)
            operator = {"floor": "/", "mod": "%"}.get(kind, kind)
            note(kind, operator, a, b, result, f"the size `{d}`")


# -- from the samples' decisions to guards ---------------------------------------------------


Fit = Callable[[list[int], str], Dim]
"""Fit one integer per sample to a polynomial in the dynamic generics (LinnetError if none)."""


def checked_guards(
    logs: Sequence[Sequence[Decision]],
    samples: Sequence[Mapping[str, int]],
    fit: Fit,
) -> list[SizeGuard]:
    """The guards of the decisions the lowerings at `samples` took (see the module docstring).

    LinnetError when the lowerings decided differently: the graphs then hold
    different outcomes, and no one graph is right on both sides.
    """
    first = logs[0]
    for k in range(max(len(log) for log in logs)):
        _agree([log[k] if k < len(log) else None for log in logs], samples)
    guards: dict[tuple[object, ...], tuple[int, SizeGuard]] = {}
    for k, decision in enumerate(first):
        taken = [log[k] for log in logs]
        if all(d == decision for d in taken):
            continue  # the same at every sample: it does not depend on the dynamic sizes
        rank = _rank(decision)
        for guard in _guards(taken, fit, ", ".join(samples[0])):
            key = (guard.lhs, guard.rel, guard.modulus)
            if key not in guards or rank < guards[key][0]:
                guards[key] = (rank, guard)
    return [guard for _, guard in guards.values()]


def _rank(d: Decision) -> int:
    """Which decision names a guard several decisions share: what the source wrote (a slice,
    a comparison) before the size in a type it made (`min(8, N)` of `x[0:8]`), before an
    IR op the constant folder evaluated."""
    if d.where.startswith("the size "):
        return 1
    if d.where.startswith("the folded op "):
        return 2
    return 0


def _agree(taken: Sequence[Decision | None], samples: Sequence[Mapping[str, int]]) -> None:
    present = [d for d in taken if d is not None]
    first = present[0]
    same_place = len(present) == len(taken) and all(
        (d.kind, d.operator, d.where) == (first.kind, first.operator, first.where) for d in present
    )
    sides = {_side(d) for d in present} - {"either"}
    if same_place and len(sides) <= 1:
        return
    sizes = ", ".join(_shown(s) for s in samples)
    outcomes = "; ".join(
        f"{_shown(s)}: {_outcome(d) if d is not None else 'not taken'}"
        for s, d in zip(samples, taken, strict=True)
    )
    raise LinnetError(
        f"dynamic {', '.join(samples[0])}: the size decision `{first.operator}` "
        f"({first.where}) goes different ways at the sample sizes {sizes} ({outcomes}); "
        "one graph cannot serve both sides: export with these generics bound"
    )


def _side(d: Decision) -> str:
    """What a decision chose: the comparison's truth, the operand `min`/`max` picked."""
    if d.kind in COMPARISONS:
        return str(bool(d.result))
    if d.kind in ("min", "max"):
        if d.left == d.right:
            return "either"
        return "left" if (d.left < d.right) == (d.kind == "min") else "right"
    return "either"  # floor and mod: checked by the fit of their result


def _outcome(d: Decision) -> str:
    if d.kind == "opaque":
        return "a folded value"
    if d.kind in COMPARISONS:
        return f"{d.left} {d.kind} {d.right} is {str(bool(d.result)).lower()}"
    return f"{d.kind}({d.left}, {d.right}) = {d.result}"


def _shown(values: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())


def _guards(taken: Sequence[Decision], fit: Fit, names: str) -> list[SizeGuard]:
    first = taken[0]
    what = f"the size decision `{first.operator}` ({first.where})"
    if first.kind == "opaque":
        raise LinnetError(
            f"dynamic {names}: {what} folds tensors or fractions that "
            "depend on the size; no guard can say where its outcome holds: "
            "export with these generics bound"
        )
    left = fit([d.left for d in taken], f"the left operand of {what}")
    right = fit([d.right for d in taken], f"the right operand of {what}")
    why = f" (`{first.operator}`, {first.where}, folded at the exported sizes)"
    if first.kind in COMPARISONS:
        rel = first.kind if first.result else NEGATED[first.kind]
        return _compare(left, rel, right, why)
    if first.kind in ("min", "max"):
        if any(_side(d) == "right" for d in taken):
            left, right = right, left
        return _compare(left, "<=" if first.kind == "min" else ">=", right, why)
    result = fit([d.result for d in taken], f"the result of {what}")
    symbol = "/" if first.kind == "floor" else "%"
    text = f"{_term(left)} {symbol} {_term(right)} == {result}{why}"
    if first.kind == "floor":  # right * result <= left < right * (result + 1)
        rest = left - right * result
        return [*_compare(rest, ">=", 0, why, text), *_compare(rest, "<", right, why, text)]
    # mod: 0 <= result < right and right divides left - result
    found = [*_compare(result, ">=", 0, why, text), *_compare(result, "<", right, why, text)]
    multiple = left - result
    if isinstance(multiple, Poly) or isinstance(right, Poly):
        scale = _denominator(multiple, right)
        found.append(SizeGuard(multiple * scale, "==", right * scale, text))
    return found


def _compare(left: Dim, rel: str, right: Dim, why: str, text: str | None = None) -> list[SizeGuard]:
    difference = left - right
    if not isinstance(difference, Poly):
        return []  # a constant relation, true at the samples: true at every size
    scaled = difference * difference.denominator
    if isinstance(scaled, Poly) and _always(scaled, rel):
        return []  # `0 <= N`: true at every size, since sizes are never negative
    shown = f"{shown_dim(left)} {rel} {shown_dim(right)}{why}"
    return [SizeGuard(scaled, rel, None, text or shown)]


def _always(p: Poly, rel: str) -> bool:
    """Whether `p rel 0` holds for all non-negative values of the generics (every
    coefficient has the sign the relation wants; a strict one needs the constant too)."""
    zero = tuple(0 for _ in p.names)
    const = dict(p.terms).get(zero, Fraction(0))
    signs = [c for e, c in p.terms if e != zero]
    above = all(c >= 0 for c in signs) and (const > 0 or (rel == ">=" and const >= 0))
    below = all(c <= 0 for c in signs) and (const < 0 or (rel == "<=" and const <= 0))
    return (rel in (">=", ">", "!=") and above) or (rel in ("<=", "<", "!=") and below)


def shown_dim(d: Dim) -> str:
    """A fitted size as people write it: `N - 4`, `-N + 8`, `3*B + 2*S - 1` (`str(Poly)`
    is the `dim_param` form, `N + -4`, which `parse_poly` reads back)."""
    if not isinstance(d, Poly):
        return str(d)
    text = ""
    for exps, c in d.terms:
        factors = [
            name if p == 1 else f"{name}^{p}" for name, p in zip(d.names, exps, strict=True) if p
        ]
        size = abs(c)
        if size != 1 or not factors:
            factors.insert(0, str(size))
        term = "*".join(factors)
        if not text:
            text = f"-{term}" if c < 0 else term
        else:
            text += f" - {term}" if c < 0 else f" + {term}"
    return text


def _term(d: Dim) -> str:
    shown = shown_dim(d)
    return f"({shown})" if " " in shown or shown.startswith("-") else shown


def _denominator(*values: Dim) -> int:
    d = 1
    for v in values:
        if isinstance(v, Poly):
            n = v.denominator
            d = d * n // _gcd(d, n)
    return d


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


def guard_holds(guard: SizeGuard, values: Mapping[str, int]) -> bool:
    """Whether the guard holds at these sizes of the dynamic generics."""
    from linnet.ir.symbolic import RELATIONS, evaluate

    lhs = evaluate(guard.lhs, values)
    if guard.modulus is None:
        return bool(RELATIONS[guard.rel](lhs, 0))
    modulus = evaluate(guard.modulus, values)
    return modulus != 0 and lhs % modulus == 0
