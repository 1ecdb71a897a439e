"""Dynamic generics by tracing: one traced lowering, one lowering to check it.

Stage: `linnet.ir.dynamic.lower_dynamic` tries this first. The entry is lowered
(and optimised) once with each dynamic generic bound to a `linnet.ir.traced.Traced`
int at its first sample size: every size computed from them carries its
polynomial, so the `DynamicShapes` table is read off that one graph instead of
being fitted across lowerings. Then the entry is lowered once more, plainly, at
a check point where every dynamic generic has moved (see below), and the two graphs are walked in
step: the same ops, kinds, dtypes and non-integer attributes; every traced
integer must be its polynomial at the check point, every plain integer the same
there. That second lowering is the safety net for what the trace cannot follow
(`range()`, `operator.index`, a string, a dict key: a size turned into a plain
int without a hook): such an int changes between the two lowerings and is caught.
The check lowering's passes run for as many rounds as changed something in the
traced one (`passes.rounds_mirrored`), without the round that only confirms the
fixed point: the walk compares what they made, which is a valid optimisation of
the check lowering whatever the count.

Decisions on sizes (`linnet.ir.size_decisions`) are compared the same way:
the two logs must take the same decisions with the same outcomes, their
operands traced (or the same at both points), and become the guards as the
sampler makes them (`checked_guards` with the traces as the fit).

Anything this path cannot vouch for (a trace lost, `x / S` or an unguarded
`S // 4`; a varying size without a trace, a constant whose values vary
untraced, graphs that differ, a decision without a trace) makes `lower_traced`
return the reason instead, and `lower_dynamic` falls back to the sampler, which either fits it
from more lowerings or refuses it with its own message.

What it accepts is right at every size its guards allow, short of a size that
loses its trace where no hook sees it and still agrees at both lowerings (a
NumPy `s // 8` at 5 and 6): the check point is a later sample of the sampler's,
of the other parity and far from the first where the samples allow, so that the
common forms (`S // 2`, `S % 2`, `S - 1`) differ. The sampler has the same blind
spot over its 3 to 5 samples. A decision both lowerings take the same way is
guarded where the sampler, whose samples may straddle its threshold, refused it
(`N / 4` with samples 5 and 6: the guard `4 <= N < 8`).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from linnet.errors import LinnetError
from linnet.ir.core import Function, Op, Region, TensorType, Value
from linnet.ir.dynamic import VALUES_LIMIT, DynamicShapes
from linnet.ir.passes import rounds_mirrored, rounds_recorded
from linnet.ir.size_decisions import checked_guards, recording
from linnet.ir.symbolic import Dim, Poly
from linnet.ir.traced import Traced, Tracing, tracing

Lower = Callable[[Mapping[str, int]], Function]

_UNSEEN = object()


class NotTraced(LinnetError):
    """Why the traced lowering cannot be vouched for (the sampler takes over)."""


def lower_traced(
    lower_at: Lower,
    order: tuple[str, ...],
    samples: Mapping[str, Sequence[int]],
    fits: Callable[[Mapping[str, int]], bool],
) -> tuple[Function, DynamicShapes] | str:
    """The entry lowered once traced at the first samples and checked at later ones (see
    the module docstring), or why it could not be."""
    first = {n: samples[n][0] for n in order}
    check = _check_point(order, samples, fits)
    if check is None:
        return "no check point satisfies the entry's where clauses"
    names = tuple(order)
    values = {n: Traced(first[n], Poly.var(names, n)) for n in order}
    try:
        with tracing() as state, recording() as log, rounds_recorded() as rounds:
            fn = lower_at(values)
        lost = state.first_loss()
        if lost is not None:
            return f"the trace was lost at {lost}"
        with recording() as check_log, rounds_mirrored(rounds):
            checked = lower_at(check)
        matcher = _Matcher(names, check, state)
        guards = checked_guards([log, check_log], [dict(first), check], matcher.fit_decision)
        dims = matcher.run(fn, checked)
    except NotTraced as exc:
        return str(exc)
    except Exception as exc:  # the sampler reports it (or gets past it)
        return f"{type(exc).__name__}: {exc}"
    dims.guards = guards
    dims.samples = {n: (first[n], check[n]) for n in order}
    dims.method = "traced"
    return fn, dims


def _check_point(
    order: tuple[str, ...],
    samples: Mapping[str, Sequence[int]],
    fits: Callable[[Mapping[str, int]], bool],
) -> dict[str, int] | None:
    """One later sample per generic, every generic moved at once: of the other parity
    than its first sample where one is, else the farthest, and fitting the `where`
    clauses together."""
    options: list[list[int]] = []
    for name in order:
        first, *rest = samples[name]
        # the other parity first, then the farthest: more of what a lost trace computes
        # (`S // 4`, `S % 2`) differs there
        options.append(sorted(rest, key=functools.partial(_rank, first)))
    for values in itertools.islice(itertools.product(*options), 64):
        point = dict(zip(order, values, strict=True))
        if fits(point):
            return point
    return None


def _rank(first: int, value: int) -> tuple[bool, int]:
    return value % 2 == first % 2, -abs(value - first)


def _op_what(op: Op, index: int) -> str:
    return f"op {index} (`{op.kind}`)"


class _Matcher:
    """Walks the traced lowering and the check lowering in step (see the module docstring)."""

    def __init__(self, names: tuple[str, ...], check: Mapping[str, int], state: Tracing) -> None:
        self.names = names
        self.check = dict(check)
        self.state = state
        self.dims = DynamicShapes(names, {}, {}, {}, {}, {}, {})
        self.at_check: dict[Poly, int] = {}
        self.corr: dict[Value, Value] = {}
        self.types: dict[tuple[int, int], object] = {}
        self.attrs: dict[tuple[int, int], tuple[object, bool]] = {}

    def fail(self, what: str) -> NotTraced:
        return NotTraced(f"{what} differs between the traced lowering and the check")

    # -- integers ------------------------------------------------------------------------

    def dim(self, a: int, b: object, what: str) -> Dim:
        """The size `a` of the traced lowering as a polynomial, checked against `b`."""
        if type(a) is Traced:
            return self.poly(a.poly, b, what)
        if a != b:
            raise NotTraced(f"{what} varies with the size but was not traced ({a}, then {b})")
        return a

    def poly(self, poly: Poly, b: object, what: str) -> Poly:
        """`poly`, checked to be `b` at the check point."""
        expected = self.at_check.get(poly)
        if expected is None:
            expected = self.at_check[poly] = poly.evaluate(self.check)
        if expected != b:
            raise NotTraced(
                f"{what}: traced as `{poly}`, which is {expected} at the check point, "
                f"but the check lowering has {b}"
            )
        return poly

    def fit_decision(self, values: list[int], what: str) -> Dim:
        """`checked_guards`'s fit: an operand of a decision at the two points."""
        return self.dim(values[0], values[1], what)

    # -- values --------------------------------------------------------------------------

    def define(self, a: Value, b: Value, what: str) -> None:
        self.corr[b] = a
        ta, tb = a.type, b.type
        key = (id(ta), id(tb))  # both graphs stay alive; clones share their types
        found = self.types.get(key, _UNSEEN)
        if found is _UNSEEN:
            found = self.types[key] = self.shape(ta, tb, what)
        if found is not None:
            self.dims.shapes[a] = found  # type: ignore[assignment]

    def shape(self, ta: TensorType, tb: TensorType, what: str) -> tuple[Dim, ...] | None:
        """The symbolic shape of a traced type (None: no traced axis), checked against `tb`."""
        sa, sb = ta.shape, tb.shape
        if ta.dtype != tb.dtype or len(sa) != len(sb):
            raise self.fail(f"the type of {what}")
        if sa == sb and not any(type(d) is Traced for d in sa):
            return None
        shape = tuple(
            self.dim(x, y, f"axis {i} of {what}")
            for i, (x, y) in enumerate(zip(sa, sb, strict=True))
        )
        return shape if any(isinstance(d, Poly) for d in shape) else None

    def use(self, a: Value, b: Value, what: str) -> None:
        if self.corr.get(b) is not a:
            raise self.fail(f"an operand of {what}")

    # -- the walk ------------------------------------------------------------------------

    def run(self, fa: Function, fb: Function) -> DynamicShapes:
        what = f"entry `{fa.name}`"
        if len(fa.inputs) != len(fb.inputs) or len(fa.results) != len(fb.results):
            raise self.fail(f"the inputs or results of {what}")
        for (name, a), (_, b) in zip(fa.inputs, fb.inputs, strict=True):
            self.define(a, b, f"input `{name}`")
        self.region(fa.body, fb.body, what)
        for a, b in zip(fa.results, fb.results, strict=True):
            self.use(a, b, what)
        if list(fa.state_updates) != list(fb.state_updates):
            raise self.fail(f"the state {what} assigns")
        for path, a in fa.state_updates.items():
            self.use(a, fb.state_updates[path], f"state `{path}`")
        return self.dims

    def region(self, ra: Region, rb: Region, what: str) -> None:
        if len(ra.args) != len(rb.args) or len(ra.ops) != len(rb.ops):
            raise self.fail(f"the number of ops of {what}")
        for a, b in zip(ra.args, rb.args, strict=True):
            self.define(a, b, f"an argument of {what}")
        op = self.op
        for index, (oa, ob) in enumerate(zip(ra.ops, rb.ops, strict=True)):
            op(oa, ob, index)
        for a, b in zip(ra.results, rb.results, strict=True):
            self.use(a, b, what)

    def op(self, oa: Op, ob: Op, index: int) -> None:
        """One op of each graph (the walk's inner loop: descriptions only made on a
        failure or a first sight; the lengths compared first make the zips exact)."""
        if (
            oa.kind != ob.kind
            or len(oa.operands) != len(ob.operands)
            or len(oa.results) != len(ob.results)
            or len(oa.regions) != len(ob.regions)
            or oa.attrs.keys() != ob.attrs.keys()
        ):
            raise self.fail(f"the kind or attributes of {_op_what(oa, index)}")
        corr = self.corr
        for a, b in zip(oa.operands, ob.operands, strict=False):
            if corr.get(b) is not a:
                raise self.fail(f"an operand of {_op_what(oa, index)}")
        if oa.regions:
            what = _op_what(oa, index)
            for ra, rb in zip(oa.regions, ob.regions, strict=False):
                self.region(ra, rb, what)
        if oa.attrs:
            self.op_attrs(oa, ob, index)
        types = self.types
        shapes = self.dims.shapes
        for a, b in zip(oa.results, ob.results, strict=False):
            corr[b] = a
            ta, tb = a.type, b.type
            key = (id(ta), id(tb))  # both graphs stay alive; clones share their types
            found = types.get(key, _UNSEEN)
            if found is _UNSEEN:
                found = types[key] = self.shape(ta, tb, f"result of {_op_what(oa, index)}")
            if found is not None:
                shapes[a] = found  # type: ignore[assignment]

    def op_attrs(self, oa: Op, ob: Op, index: int) -> None:
        symbolic: dict[str, object] = {}
        attrs = self.attrs
        for key, va in oa.attrs.items():
            vb = ob.attrs[key]
            if oa.kind == "const" and key == "value":
                self.const(oa, va, vb, _op_what(oa, index))
                continue
            kind = type(va)
            if kind is str or kind is bool or va is None:
                if type(vb) is not kind or va != vb:
                    raise self.fail(f"the value attribute `{key}` of {_op_what(oa, index)}")
                continue
            memo = (id(va), id(vb))  # most attributes are shared by the clones of a body
            found = attrs.get(memo)
            if found is None:
                what = f"attribute `{key}` of {_op_what(oa, index)}"
                found = attrs[memo] = self.attr(va, vb, what)
            if found[1]:
                symbolic[key] = found[0]
        if symbolic:
            self.dims.attrs[oa] = symbolic

    def attr(self, a: object, b: object, what: str) -> tuple[object, bool]:
        """The attribute with Polys for its traced ints, and whether it has any."""
        kind = type(a)
        if kind is Traced:
            return self.dim(a, b, what), True  # type: ignore[arg-type]
        if kind is int or isinstance(a, np.integer):
            if type(b) is bool or not isinstance(b, int | np.integer) or a != b:
                raise NotTraced(f"{what} varies with the size but was not traced ({a}, then {b})")
            return a, False
        if kind is tuple or kind is list:
            if type(b) is not kind or len(a) != len(b):  # type: ignore[arg-type]
                raise self.fail(f"the length of {what}")
            items = [self.attr(x, y, what) for x, y in zip(a, b, strict=True)]  # type: ignore[call-overload]
            if not any(v for _, v in items):
                return a, False
            return tuple(x for x, _ in items), True
        if kind is dict:
            if type(b) is not dict or a.keys() != b.keys():  # type: ignore[attr-defined]
                raise self.fail(f"the keys of {what}")
            fitted = {k: self.attr(v, b[k], what) for k, v in a.items()}  # type: ignore[attr-defined]
            if not any(v for _, v in fitted.values()):
                return a, False
            return {k: x for k, (x, _) in fitted.items()}, True
        if isinstance(a, np.ndarray):
            if not isinstance(b, np.ndarray) or not np.array_equal(a, b) or a.dtype != b.dtype:
                raise self.fail(f"the array {what}")
            return a, False
        if kind is not type(b) or a != b:
            raise self.fail(f"the value {what}")
        return a, False

    def const(self, op: Op, a: object, b: object, what: str) -> None:
        assert isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
        traced = self.state.const_dims(a)
        if a.dtype != b.dtype:
            raise self.fail(f"the dtype of {what}")
        if a.shape != b.shape:  # a varying shape: only one value repeated, the same
            if traced is not None or not a.size or not b.size:
                raise NotTraced(f"the constant {what} varies in shape and value")
            fa, fb = a.reshape(-1), b.reshape(-1)
            if not (np.all(fa == fa[0]) and np.all(fb == fb[0]) and fa[0] == fb[0]):
                raise NotTraced(f"the constant {what} varies in shape and is no one value")
            self.dims.fills[op] = fa[0].item()
            return
        if traced is None:
            # the same bytes first: cheaper than `array_equal` for the many small constants
            if a.tobytes() != b.tobytes() and not np.array_equal(a, b):
                raise NotTraced(f"the constant {what} varies with the size but was not traced")
            return
        if a.size > VALUES_LIMIT:
            raise NotTraced(f"the constant {what} has too many traced elements")
        elements = b.reshape(-1)
        found: list[Dim] = []
        for i, d in enumerate(traced):
            there = int(elements[i])
            if isinstance(d, Poly):
                found.append(self.poly(d, there, f"element {i} of {what}"))
            elif d != there:
                raise NotTraced(f"element {i} of {what} varies with the size but was not traced")
            else:
                found.append(d)
        if any(isinstance(d, Poly) for d in found):
            self.dims.values[op] = tuple(found)
