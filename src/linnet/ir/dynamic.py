"""Dynamic entry generics: one lowered function whose sizes are polynomials in `B`, `S`.

Stage: between lowering and a backend that can compute shapes at run time
(the ONNX exporter, `export_model(dynamic=[...])`). The Core IR stays static
(architecture.md "Core IR"): the entry is lowered at concrete sizes, and what
varies with the dynamic generics is recorded beside it (`DynamicShapes`).

Two ways to get that table, the first tried first:

- Tracing (`linnet.ir.dynamic_traced`): the entry is lowered once with each
  dynamic generic bound to a `linnet.ir.traced.Traced` int (a size that carries
  its polynomial, like torch's SymInt), the table read off that graph, and the
  entry lowered once more at other sizes to check it (every traced int must be
  its polynomial there, every plain int the same). Two lowerings whatever the
  number of generics. Whatever it cannot vouch for (a lost trace, a size that
  varies untraced, graphs that differ) hands over to the sampler.
- Sampling (the rest of this module): the entry is lowered at a few sizes for
  the dynamic generics and once more off them. With two or more generics, sums
  first (`B + S`, `2 * S`: a base point and one point per generic moved,
  `symbolic.StarFit`, one lowering less than the grid for `B, S`); then a grid
  of two values each (multilinear sizes, `B * S`: what batch and length sizes
  are), and three each (degree 2 in each generic) when a size does not fit
  that; the grid reuses the lowerings already made. The lowerings must be the
  same graph op for op (kinds, operands, dtypes, ranks, every attribute that is
  not an integer); every integer that differs (an axis of a result type, a
  `reshape` or `broadcast` shape, a `slice` bound, a generic of a `call`) is
  fitted exactly (`symbolic.GridFit`, `StarFit`) and must then predict the
  extra lowering.

Either way the result is the first lowering plus a `DynamicShapes` table of
what varies; for the examples' entries the two paths give the same table (and
the same ONNX file, tests/onnx/test_export_dynamic_traced.py).

Why traced ints and samples rather than a symbolic IR: lowering, the passes and
every backend keep reading plain ints (a `Traced` is one), and each path checks
what it claims against one lowering more than it needs (identical graphs, sizes
that are their polynomials there); anything else is refused with a LinnetError
that names the op.

A constant whose shape varies is accepted only when it is one value repeated
(`DynamicShapes.fills`); a small constant of fixed shape whose integral
elements vary (`N - 1` in `std.nn.cache::write_span`) has each element fitted
(`DynamicShapes.values`); any other size-dependent constant is refused.

A compile-time decision on sizes (`N > 4`, `min(N, 8)`, `N / 4`, a clamped
slice bound) is folded at each lowering; `linnet.ir.size_decisions` records
them: outcomes that differ between lowerings are refused, the
others become `guards` (the sizes where the folded outcome holds), checked at
run time like the `where` clauses below and in the graph itself.

The table also says where each generic can be read at run time (`sources`:
an input and axis whose size is exactly that generic), and which `where`
clauses of the entry involve dynamic generics (`runtime_where`): those cannot
be checked at export time and are checked by the runtime wrappers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from linnet.collector import collector_paused
from linnet.errors import LinnetError
from linnet.ir.core import Function, Op, Region, TensorType, Value
from linnet.ir.size_decisions import Decision, SizeGuard, checked_guards, recording
from linnet.ir.symbolic import Dim, GridFit, Poly, StarFit, grid_points
from linnet.progress import track
from linnet.records import field, record

if TYPE_CHECKING:
    from linnet.check.decls import FnInfo
    from linnet.ir.bind import EntrySignature

Lower = Callable[[Mapping[str, int]], Function]
"""Lower the entry with the dynamic generics at these values (LinnetError if they do not fit)."""

CANDIDATES = (5, 7, 3, 6, 4, 9, 11, 13, 2, 8, 10, 12, 14, 15, 16, 17, 19, 23, 24, 29, 31, 32)
"""Sample sizes tried in order (1 and 0 last resorts never: they collapse broadcasts)."""
VALUES_LIMIT = 64
"""Elements of a varying constant that are fitted one by one (more: refused)."""
POINTS = 4
"""Values per dynamic generic: three for the grid, one to check the fit."""
Fitter = GridFit | StarFit


@record(frozen=True)
class RuntimeWhere:
    """A `where` clause of the entry that involves dynamic generics, ready for run time.

    `lhs` and `rhs` are `symbolic.dim_to_json` forms with the static generics
    substituted; `text` is the clause as written in the source.
    """

    text: str
    lhs: object
    rel: str
    rhs: object


@record(eq=False)
class DynamicShapes:
    """What varies in a function lowered for dynamic generics (see the module docstring).

    `shapes` holds the symbolic shape of every value that has a varying axis;
    `attrs` the symbolic form of every op attribute that varies (nested like
    the attribute, Polys in place of the varying ints); `fills` the value of
    each `const` whose shape varies (one value repeated); `values` the elements
    (flat, row-major) of each `const` whose integral values vary; `sources` maps
    each generic to an (input index, axis) that carries it. `method` says which
    path made the table (`traced` or `sampled`), `declined` why tracing handed
    over to the sampler.
    """

    names: tuple[str, ...]
    shapes: dict[Value, tuple[Dim, ...]]
    attrs: dict[Op, dict[str, object]]
    fills: dict[Op, object]
    sources: dict[str, tuple[int, int]]
    values: dict[Op, tuple[Dim, ...]]
    samples: dict[str, tuple[int, ...]]
    runtime_where: list[RuntimeWhere] = field(default_factory=list)
    results: tuple[Value, ...] = ()
    guards: list[SizeGuard] = field(default_factory=list)
    method: str = "sampled"
    declined: str = ""

    def shape(self, value: Value) -> tuple[Dim, ...]:
        return self.shapes.get(value, value.type.shape)

    def attr(self, op: Op, key: str) -> object:
        found = self.attrs.get(op)
        if found is not None and key in found:
            return found[key]
        return op.attrs[key]


def lower_dynamic(
    lower_at: Lower,
    names: Sequence[str],
    fits: Callable[[Mapping[str, int]], bool],
) -> tuple[Function, DynamicShapes]:
    """The entry lowered at its first sample sizes, and its varying sizes.

    `fits(values)` says whether the dynamic generics may take `values` (the
    entry's `where` clauses); sample values are chosen among `CANDIDATES` so
    that each generic's samples fit with the others at their first value.
    Tracing is tried first (`linnet.ir.dynamic_traced`: the first samples
    traced, later ones to check), the sampler when it declines. LinnetError
    when the graphs differ or a size is no polynomial.
    """
    from linnet.ir.dynamic_traced import lower_traced

    order = tuple(names)
    samples = _choose_samples(order, fits)
    with collector_paused():
        traced = lower_traced(lower_at, order, samples, fits)
    if not isinstance(traced, str):
        fn, dims = traced
        return fn, _finished(fn, dims)
    fn, dims = _lower_sampled(lower_at, order, samples)
    dims.declined = traced
    return fn, dims


def _lower_sampled(
    lower_at: Lower, order: tuple[str, ...], samples: dict[str, list[int]]
) -> tuple[Function, DynamicShapes]:
    """The sampler: lowerings at a grid of sizes, every varying integer fitted."""
    check = {n: samples[n][POINTS - 1] for n in order}
    lowered: dict[tuple[int, ...], tuple[Function, tuple[Decision, ...]]] = {}

    def attempt(per_name: int, star: bool = False) -> DynamicShapes:
        grid = [samples[n][:per_name] for n in order]
        fitter: Fitter = StarFit(order, grid) if star else GridFit(order, grid)
        points = fitter.points() if isinstance(fitter, StarFit) else grid_points(grid)
        wanted = [
            {n: grid[i][k] for i, (n, k) in enumerate(zip(order, point, strict=True))}
            for point in points
        ]
        wanted.append(check)
        missing = [v for v in wanted if tuple(v[n] for n in order) not in lowered]
        for values in track(missing, f"lowering at {len(missing)} sizes"):
            with recording() as log:
                fn = lower_at(values)
            lowered[tuple(values[n] for n in order)] = (fn, tuple(log))
        found = [lowered[tuple(v[n] for n in order)] for v in wanted]
        matcher = _Matcher(order, fitter, points, tuple(check[n] for n in order))
        guards = checked_guards([log for _, log in found], wanted, matcher.fit)
        dims = matcher.run([fn for fn, _ in found])
        dims.guards = guards
        return dims

    with collector_paused():
        dims = None
        if len(order) > 1:  # with one generic the star is the grid
            with contextlib.suppress(_Unfitted):
                dims = attempt(2, star=True)
        if dims is None:
            try:  # multilinear (2 values each): what batch and length sizes are
                dims = attempt(2)
            except _Unfitted:
                dims = attempt(POINTS - 1)  # degree 2 in each generic
    dims.samples = {n: tuple(samples[n]) for n in order}
    fn = lowered[tuple(samples[n][0] for n in order)][0]
    return fn, _finished(fn, dims)


def _finished(fn: Function, dims: DynamicShapes) -> DynamicShapes:
    dims.runtime_where = [_guard_clause(g) for g in dims.guards]
    dims.sources = _sources(fn, dims)
    dims.results = fn.results
    return dims


def _guard_clause(guard: SizeGuard) -> RuntimeWhere:
    """A guard as a run-time clause (`dim_to_json` form: integer terms, `mod` atoms)."""
    lhs = _poly_json(guard.lhs)
    if guard.modulus is not None:
        lhs = [[1, [["mod", lhs, _poly_json(guard.modulus)]]]]
    return RuntimeWhere(guard.text, lhs, guard.rel, [])


def _poly_json(d: Dim) -> list[object]:
    if not isinstance(d, Poly):
        return [[int(d), []]] if d else []
    terms: list[object] = []
    for exps, coef in d.terms:
        assert coef.denominator == 1, "guards have integer coefficients"
        atoms = [name for name, power in zip(d.names, exps, strict=True) for _ in range(power)]
        terms.append([int(coef), atoms])
    return terms


def _choose_samples(
    order: tuple[str, ...], fits: Callable[[Mapping[str, int]], bool]
) -> dict[str, list[int]]:
    """`POINTS` distinct sizes per generic (distinct across generics too, so that no
    two dynamic axes coincide in a sample), each fitting with the others' first."""
    first: dict[str, int] = {}
    for name in order:
        for value in CANDIDATES:
            if value in first.values():
                continue
            if _fits_with_some_rest(order, {**first, name: value}, fits):
                first[name] = value
                break
        else:
            raise LinnetError(f"no size of `{name}` satisfies the entry's where clauses")
    samples: dict[str, list[int]] = {n: [v] for n, v in first.items()}
    used = set(first.values())
    for name in order:
        for value in CANDIDATES:
            if len(samples[name]) == POINTS:
                break
            if value not in used and fits({**first, name: value}):
                samples[name].append(value)
                used.add(value)
        if len(samples[name]) < POINTS:
            raise LinnetError(
                f"dynamic `{name}`: fewer than {POINTS} sizes satisfy the entry's where "
                f"clauses ({samples[name]}), too few to derive its shape expressions"
            )
    return samples


def _fits_with_some_rest(
    order: tuple[str, ...], chosen: Mapping[str, int], fits: Callable[[Mapping[str, int]], bool]
) -> bool:
    """Whether the generics not chosen yet can take distinct spare sizes that fit with
    `chosen`: each rotation of the spare candidates is tried in turn (so a clause on a
    later generic, `M % 2 == 0`, does not reject every size of an earlier one)."""
    taken = set(chosen.values())
    spare = [c for c in CANDIDATES if c not in taken]
    rest = [n for n in order if n not in chosen]
    if not rest:
        return fits(chosen)
    for shift in range(len(spare)):
        rotated = spare[shift:] + spare[:shift]
        if fits({**chosen, **dict(zip(rest, rotated, strict=False))}):
            return True
    return False


def _sources(fn: Function, dims: DynamicShapes) -> dict[str, tuple[int, int]]:
    found: dict[str, tuple[int, int]] = {}
    for index, (_, value) in enumerate(fn.inputs):
        for axis, d in enumerate(dims.shape(value)):
            if isinstance(d, Poly):
                name = d.as_var()
                if name is not None:
                    found.setdefault(name, (index, axis))
    missing = [n for n in dims.names if n not in found]
    if missing:
        raise LinnetError(
            f"dynamic `{missing[0]}` is the size of no input axis of entry `{fn.name}` "
            "(it cannot be read from the inputs at run time)"
        )
    return found


class _Unfitted(LinnetError):
    """A size the fitted polynomial does not predict (a finer grid may fit it)."""


class _Matcher:
    """Walks N lowerings in step, fitting every integer that differs between them."""

    def __init__(
        self,
        names: tuple[str, ...],
        fitter: Fitter,
        points: list[tuple[int, ...]],
        check: tuple[int, ...],
    ) -> None:
        self.names = names
        self.points = points
        self.check = dict(zip(names, check, strict=True))
        self.dims = DynamicShapes(names, {}, {}, {}, {}, {}, {})
        self.fitter = fitter
        self.fitted: dict[tuple[int, ...], Dim] = {}  # most sizes repeat: B, S, B * S
        self.shapes: dict[tuple[tuple[int, ...], ...], tuple[Dim, ...]] = {}
        self.attrs: dict[tuple[object, ...], tuple[object, bool]] = {}
        self.corr: list[dict[Value, Value]] = []

    def run(self, fns: list[Function]) -> DynamicShapes:
        self.corr = [{} for _ in fns]
        first = fns[0]
        what = f"entry `{first.name}`"
        if any(len(f.inputs) != len(first.inputs) for f in fns):
            raise self.differs(what, "its inputs")
        for i in range(len(first.inputs)):
            self.define([f.inputs[i][1] for f in fns], f"input `{first.inputs[i][0]}`")
        self.region([f.body for f in fns], what)
        for i in range(len(first.results)):
            self.use([f.results[i] for f in fns], what)
        if any(list(f.state_updates) != list(first.state_updates) for f in fns):
            raise self.differs(what, "the state it assigns")
        for path in first.state_updates:
            self.use([f.state_updates[path] for f in fns], f"state `{path}`")
        return self.dims

    # -- errors ----------------------------------------------------------------------------

    def differs(self, where: str, what: str) -> LinnetError:
        shown = ", ".join(self.names)
        return LinnetError(
            f"dynamic {shown}: {what} of {where} changes with the size, not only its shapes "
            "(the graph is not the same for every size); export with these generics bound"
        )

    # -- values ----------------------------------------------------------------------------

    def define(self, values: Sequence[Value], what: str) -> None:
        first = values[0]
        for corr, v in zip(self.corr, values, strict=True):
            corr[v] = first
        same, dtype = first.type.shape, first.type.dtype
        if all(v.type.shape == same and v.type.dtype == dtype for v in values):
            return  # no axis varies
        key = tuple(v.type.shape for v in values)
        shape = self.shapes.get(key)
        if shape is None or any(v.type.dtype != dtype for v in values):
            types = [v.type for v in values]  # most shapes repeat: every layer's [B, S, H]
            if any(t.dtype != dtype or t.rank != first.type.rank for t in types):
                raise self.differs(what, "the type of a value")
            shape = self.shapes[key] = tuple(
                self.fit([t.shape[axis] for t in types], f"axis {axis} of {what}")
                for axis in range(first.type.rank)
            )
        if any(isinstance(d, Poly) for d in shape):
            self.dims.shapes[first] = shape

    def use(self, values: Sequence[Value], what: str) -> None:
        first = values[0]
        for corr, v in zip(self.corr, values, strict=True):
            if corr.get(v) is not first:
                raise self.differs(what, "an operand")

    # -- regions and ops -----------------------------------------------------------------

    def region(self, regions: Sequence[Region], what: str) -> None:
        first = regions[0]
        if any(len(r.args) != len(first.args) or len(r.ops) != len(first.ops) for r in regions):
            raise self.differs(what, "the number of ops")
        for args in zip(*(r.args for r in regions), strict=True):
            self.define(args, f"an argument of {what}")
        for index, ops in enumerate(zip(*(r.ops for r in regions), strict=True)):
            self.op(ops, index)
        for results in zip(*(r.results for r in regions), strict=True):
            self.use(results, what)

    def op(self, ops: Sequence[Op], index: int) -> None:
        """Match one op across the lowerings (the hot loop of an export: kept lean)."""
        first = ops[0]
        kind, keys = first.kind, first.attrs.keys()
        n_operands, n_results, n_regions = (
            len(first.operands),
            len(first.results),
            len(first.regions),
        )
        what = f"op {index} (`{kind}`)"
        for o in ops:
            if (
                o.kind != kind
                or len(o.operands) != n_operands
                or len(o.results) != n_results
                or len(o.regions) != n_regions
            ):
                raise self.differs(what, "the kind")
            if o.attrs.keys() != keys:
                raise self.differs(what, "the attributes")
        corr = self.corr
        for operands in zip(*(o.operands for o in ops), strict=True):
            mapped = operands[0]
            for table, v in zip(corr, operands, strict=True):
                if table.get(v) is not mapped:
                    raise self.differs(what, "an operand")
        for regions in zip(*(o.regions for o in ops), strict=True):
            self.region(regions, what)
        symbolic: dict[str, object] = {}
        for key, value in first.attrs.items():
            values = [o.attrs[key] for o in ops]
            if first.kind == "const" and key == "value":
                self.const(ops, values, what)
                continue
            if _all_same(value, values):
                continue
            fitted, varies = self.memo_attr(values, f"attribute `{key}` of {what}")
            if varies:
                symbolic[key] = fitted
        if symbolic:
            self.dims.attrs[first] = symbolic
        for results in zip(*(o.results for o in ops), strict=True):
            self.define(results, f"result of {what}")

    def const(self, ops: Sequence[Op], values: list[object], what: str) -> None:
        arrays = [np.asarray(v) for v in values]
        first = arrays[0]
        same_shape = all(a.shape == first.shape for a in arrays)
        if same_shape and all(a.dtype == first.dtype and np.array_equal(a, first) for a in arrays):
            return
        flat = [a.reshape(-1) for a in arrays]
        uniform = all(f.size and np.all(f == f[0]) for f in flat)
        if uniform and all(f[0] == flat[0][0] for f in flat) and not same_shape:
            self.dims.fills[ops[0]] = flat[0][0].item()
            return
        if same_shape and first.size <= VALUES_LIMIT and self._integral(arrays):
            elements = [
                self.fit([int(f[i]) for f in flat], f"element {i} of {what}")
                for i in range(first.size)
            ]
            self.dims.values[ops[0]] = tuple(elements)
            return
        raise LinnetError(
            f"dynamic {', '.join(self.names)}: the constant {what} depends on the size; "
            "export with these generics bound"
        )

    @staticmethod
    def _integral(arrays: list[np.ndarray[Any, Any]]) -> bool:
        kinds = {a.dtype.kind for a in arrays}
        if kinds <= {"i", "u"}:
            return True
        if kinds != {"f"}:
            return False
        return all(bool(np.all(np.isfinite(a) & (a == np.round(a)))) for a in arrays)

    def memo_attr(self, values: list[object], what: str) -> tuple[object, bool]:
        """`attr`, remembered for plain values (a `reshape` to `[B, S, H]` in every layer)."""
        if not all(type(v) in _PLAIN for v in values):
            return self.attr(values, what)
        key = tuple(values)
        try:
            found = self.attrs.get(key)
        except TypeError:  # unhashable inside
            return self.attr(values, what)
        if found is None:
            found = self.attrs[key] = self.attr(values, what)
        return found

    def attr(self, values: list[object], what: str) -> tuple[object, bool]:
        first = values[0]
        if isinstance(first, bool) or first is None or isinstance(first, str | float):
            if any(v != first or type(v) is not type(first) for v in values):
                raise self.differs(what, "a value")
            return first, False
        if isinstance(first, int | np.integer):
            fitted = self.fit([int(v) for v in values], what)  # type: ignore[call-overload]
            return fitted, isinstance(fitted, Poly)
        if isinstance(first, tuple | list):
            if any(not isinstance(v, tuple | list) or len(v) != len(first) for v in values):
                raise self.differs(what, "the length")
            items = [self.attr([v[i] for v in values], what) for i in range(len(first))]  # type: ignore[index]
            return tuple(x for x, _ in items), any(vary for _, vary in items)
        if isinstance(first, dict):
            if any(not isinstance(v, dict) or set(v) != set(first) for v in values):
                raise self.differs(what, "the keys")
            fitted_items = {k: self.attr([v[k] for v in values], what) for k in first}  # type: ignore[index]
            return {k: x for k, (x, _) in fitted_items.items()}, any(
                vary for _, vary in fitted_items.values()
            )
        if isinstance(first, np.ndarray):
            if any(not np.array_equal(np.asarray(v), first) for v in values):
                raise self.differs(what, "an array")
            return first, False
        if any(v != first for v in values):
            raise self.differs(what, "a value")
        return first, False

    # -- fitting ---------------------------------------------------------------------------

    def fit(self, values: list[int], what: str) -> Dim:
        first = values[0]
        if all(v == first for v in values):
            return first
        key = tuple(values)
        found = self.fitted.get(key)
        if found is None:
            found = self.fitted[key] = self._fit(values, what)
        return found

    def _fit(self, values: list[int], what: str) -> Dim:
        table = dict(zip(self.points, values[:-1], strict=True))
        try:
            poly = self.fitter(table)
        except LinnetError as exc:  # a fractional constant: no polynomial of this form
            raise _Unfitted(str(exc)) from None
        expected = poly.exact(self.check) if isinstance(poly, Poly) else poly
        if expected != values[-1]:
            shown = ", ".join(self.names)
            raise _Unfitted(
                f"dynamic {shown}: {what} is no polynomial in {shown} "
                f"(fitted `{poly}` predicts {expected} at {self.check}, lowering gives "
                f"{values[-1]}); export with these generics bound"
            )
        return poly


_PLAIN = (int, str, float, bool, tuple, type(None))


def _all_same(first: object, values: list[object]) -> bool:
    """Whether every value is `first`'s equal of its type (plain attributes only: arrays and
    anything else go through `_Matcher.attr`, which also says what differs)."""
    kind = type(first)
    if kind not in _PLAIN:
        return False
    try:
        return all(type(v) is kind and v == first for v in values)
    except (ValueError, TypeError):  # a tuple holding an array
        return False


# -- one entry of a bound model -------------------------------------------------------------


def check_dynamic_names(fn: FnInfo, names: Sequence[str]) -> tuple[str, ...]:
    """`names` as the entry's own `Dim` generics, in order; LinnetError for any other name."""
    own = {g.name: g for g in fn.generics}
    for name in names:
        g = own.get(name)
        if g is None:
            listed = ", ".join(f"`{n}`" for n, g in own.items() if g.kind == "Dim") or "none"
            raise LinnetError(
                f"dynamic `{name}` is no generic of entry `{fn.name}` (its Dim generics: "
                f"{listed}); only an entry's own Dim generics can stay dynamic"
            )
        if g.kind != "Dim" or g.is_pack:
            raise LinnetError(f"dynamic `{name}` is a {g.kind} generic; only Dim generics can be")
    if len(set(names)) != len(names):
        raise LinnetError(f"dynamic generics named twice: {', '.join(names)}")
    return tuple(names)


def lower_entry_dynamic(
    entry: EntrySignature,
    names: Sequence[str],
    generics: Mapping[str, object],
    lower: Callable[[Sequence[TensorType], Mapping[str, object]], Function],
) -> tuple[Function, DynamicShapes]:
    """`lower_dynamic` for an entry: `lower(input_types, generics)` lowers (and optimises)
    it; `generics` binds the entry's other generics (the dynamic ones are ignored there)."""
    from linnet.ir.bind import bind_entry_generics
    from linnet.target import entry_input_types

    order = check_dynamic_names(entry.fn, names)
    fixed = {k: v for k, v in generics.items() if k not in order}

    def bound(values: Mapping[str, int]) -> tuple[tuple[TensorType, ...], dict[str, object]]:
        given = {**fixed, **values}
        return entry_input_types(entry, given), given

    def fits(values: Mapping[str, int]) -> bool:
        types, given = bound(values)
        try:
            bind_entry_generics(entry, types, given)
        except LinnetError:
            return False
        return True

    def lower_at(values: Mapping[str, int]) -> Function:
        types, given = bound(values)
        return lower(types, given)

    fn, dims = lower_dynamic(lower_at, order, fits)
    dims.runtime_where = [*runtime_where(entry, order, fixed), *dims.runtime_where]
    return fn, dims


def runtime_where(
    entry: EntrySignature, names: Sequence[str], fixed: Mapping[str, object]
) -> list[RuntimeWhere]:
    """The entry's `where` clauses that involve a dynamic generic, the others substituted."""
    from linnet.check.dims import Dim as CheckDim
    from linnet.ir.bind import parse_generic
    from linnet.ir.symbolic import dim_to_json

    owner = f"entry `{entry.fn.name}`"
    mapping = {sym: CheckDim.const(v) for sym, v in entry.base.dims.items()}
    dynamic = set()
    for g in entry.fn.generics:
        if g.name in names:
            dynamic.add(g.key)
        elif g.name in fixed and g.kind == "Dim" and not g.is_pack:
            value = parse_generic(g, fixed[g.name], owner)
            assert isinstance(value, int)
            mapping[g.key] = CheckDim.const(value)  # type: ignore[index]
    clauses = []
    for c in entry.fn.where:
        if not (c.lhs.symbols() | c.rhs.symbols()) & dynamic:
            continue
        lhs, rhs = c.lhs.substitute(mapping), c.rhs.substitute(mapping)
        clauses.append(RuntimeWhere(c.text(), dim_to_json(lhs), c.rel, dim_to_json(rhs)))
    return clauses
