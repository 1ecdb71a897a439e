"""Index notation, reductions and slicing (language.md sections 8 and 9).

Stage: part of the body checker. In: `Index`, `Reduction` and
`ComprehensionStmt` nodes. Out: their types, `IndexingInfo`,
`ReductionInfo`, `ComprehensionInfo`, resolutions of index components to
`IndexVar`s, and the diagnostics E2201, E2204, E2209, E3101-E3106.

Index-notation mode (8.3) is active while `chk.index_vars` is not None:
inside a comprehension body and inside any reduction body. There an index
expression without slices or `...` is an element access; every other index
expression is slicing (9), which keeps or removes axes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from linnet.check.decls import IndexVar
from linnet.check.dims import Dim, Symbol
from linnet.check.kernels import tile_access_ok
from linnet.check.program import (
    AxisSelection,
    ComprehensionInfo,
    IndexingInfo,
    ReductionInfo,
)
from linnet.check.shapes import dims_equal, items_equal
from linnet.check.types import (
    BOOL,
    ERROR,
    ArrayType,
    BlockType,
    CtFloatType,
    CtIntType,
    DType,
    ErrorType,
    ScalarType,
    Shape,
    ShapeItem,
    TensorType,
    Type,
    in_class,
    is_integer,
    scalar,
    shape_str,
    show,
)
from linnet.diagnostics import Label
from linnet.spelling import did_you_mean
from linnet.syntax import ast
from linnet.syntax.tokens import PRELUDE_NAMES

if TYPE_CHECKING:
    from linnet.check.exprs import BodyChecker

ZERO = Dim.const(0)
# The domain of an index whose access already failed: no follow-up E3102/E3103.
POISONED = object()


def check_index(chk: BodyChecker, e: ast.Index, expected: Type | None) -> Type:
    target = e.target
    if isinstance(target, ast.Name) and chk.index_vars and target.ident.name in chk.index_vars:
        # 8.3: the indexed value is looked up as a value even if an index has its name.
        saved = chk.index_vars
        chk.index_vars = {}
        try:
            t = chk.expr(target)
        finally:
            chk.index_vars = saved
    else:
        t = chk.expr(target)
    if isinstance(t, ErrorType):
        return ERROR
    if isinstance(t, ArrayType):
        return array_element(chk, e, t)
    if isinstance(t, TensorType) and chk.kernel is not None and not tile_access_ok(chk, e):
        return ERROR  # language-extensions 4.3 B15
    if not isinstance(t, TensorType):
        chk.ctx.error(
            "E2104",
            f"{show(t)} cannot be indexed",
            e.target.span,
            "not a tensor",
            notes=("only tensors and `sub` arrays can be indexed",),
        )
        return ERROR
    comps = e.components
    if chk.index_vars is not None and not any(
        isinstance(c, (ast.Slice, ast.EllipsisComponent)) for c in comps
    ):
        return chk.prefer(e, element_access(chk, e, t), expected)
    return slicing(chk, e, t)


# ---------------------------------------------------------------- index notation


def element_access(chk: BodyChecker, e: ast.Index, t: TensorType) -> Type:
    """8.3: every axis addressed by an index variable, a pack index or a position."""
    comps = e.components
    shape = t.shape
    packs = [i for i, c in enumerate(comps) if isinstance(c, ast.PackIndex)]
    if len(packs) > 1:
        chk.ctx.error(
            "E3106",
            "at most one pack index per tensor access",
            comps[packs[1]].span,
            "second pack index",
        )
        _poison(chk, comps)
        return ERROR
    ok = True
    if packs:
        p = packs[0]
        before, after = comps[:p], comps[p + 1 :]
        if len(before) + len(after) > len(shape):
            _poison(chk, comps)
            return _rank_mismatch(chk, e, t)
        split = len(shape) - len(after)
        positions = list(range(len(before))) + list(range(split, len(shape)))
        plain = list(before) + list(after)
        pack = comps[p]
        assert isinstance(pack, ast.PackIndex)
        ok = _pack_component(chk, pack, tuple(shape[len(before) : split]), e)
    else:
        plain = list(comps)
        positions = list(range(len(comps)))
        if len(comps) != len(shape):
            if t.has_pack:
                chk.ctx.error(
                    "E3106",
                    "this access does not cover the pack axes of the tensor",
                    e.span,
                    "needs a pack index",
                    notes=(f"the tensor is `{t!r}`",),
                    help=("declare a pack output `let y[*s, ...]` and index with `*s`",),
                )
                _poison(chk, comps)
                return ERROR
            _poison(chk, comps)
            return _rank_mismatch(chk, e, t)
    for comp, pos in zip(plain, positions, strict=True):
        item = shape[pos]
        assert not isinstance(comp, (ast.PackIndex, ast.Slice, ast.EllipsisComponent))
        if type(item) is Symbol:
            chk.ctx.error(
                "E3106",
                f"a plain index cannot address the pack axes `*{item.name}`",
                comp.span,
                "pack axis",
                help=("index the pack with a pack index `*s`",),
            )
            ok = False
            continue
        assert isinstance(item, Dim)
        if not _plain_component(chk, comp, item, e, pos):
            ok = False
    if not ok:
        _poison(chk, comps)
        return ERROR
    chk.program.indexings[e] = IndexingInfo("element")
    return scalar(t.dtype)


def _poison(chk: BodyChecker, comps: tuple[ast.Component, ...]) -> None:
    index_vars = chk.index_vars
    assert index_vars is not None
    for c in comps:
        name = (
            c.name.name
            if isinstance(c, ast.PackIndex)
            else (c.ident.name if isinstance(c, ast.Name) else None)
        )
        var = index_vars.get(name) if name is not None else None
        if var is not None and var.domain is None:
            var.domain = POISONED


def _rank_mismatch(chk: BodyChecker, e: ast.Index, t: TensorType) -> Type:
    chk.ctx.error(
        "E2204",
        f"this access has {len(e.components)} indices but the tensor has {len(t.shape)} axes",
        e.span,
        "wrong number of indices",
        notes=(f"the tensor is `{t!r}`",),
    )
    return ERROR


def _pack_component(chk: BodyChecker, c: ast.PackIndex, items: Shape, access: ast.Index) -> bool:
    name = c.name.name
    index_vars = chk.index_vars
    assert index_vars is not None
    var = index_vars.get(name)
    if var is None:
        chk.ctx.error(
            "E3101",
            f"the pack index `*{name}` is not bound",
            c.span,
            "unknown pack index",
            notes=("free indices are never summed implicitly",),
            help=did_you_mean(name, [v for v, i in index_vars.items() if i.is_pack])
            or (f"list it on the left: `let y[*{name}, ...]`",),
        )
        return False
    chk.resolutions[c] = var
    if not var.is_pack:
        chk.ctx.error(
            "E3106",
            f"`{name}` is a plain index, not a pack index",
            c.span,
            "not a pack index",
            help=(f"declare it as `*{name}` in the output list",),
        )
        return False
    if var.domain is POISONED:
        return True
    if var.domain is None:
        var.domain = items
        var.bound_at = access
        var.bound_desc = f"`{access.target.span.text}`"
        return True
    bound = var.domain
    assert isinstance(bound, tuple)
    if len(bound) == len(items) and all(
        items_equal(a, b, chk.facts) for a, b in zip(bound, items, strict=True)
    ):
        return True
    _extent_conflict(chk, var, c, f"[{shape_str(bound)}]", f"[{shape_str(items)}]")
    return False


def _plain_component(
    chk: BodyChecker, c: ast.Expr, extent: Dim, access: ast.Index, position: int
) -> bool:
    index_vars = chk.index_vars
    assert index_vars is not None
    if isinstance(c, ast.Name):
        name = c.ident.name
        var = index_vars.get(name)
        if var is not None:
            chk.resolutions[c] = var
            if var.is_pack:
                chk.ctx.error(
                    "E3106",
                    f"the pack index `{name}` must be written `*{name}`",
                    c.span,
                    "pack index without `*`",
                )
                return False
            return bind_domain(chk, var, extent, c, access, position)
        if chk.scope.lookup(name) is None and name not in PRELUDE_NAMES:
            if name not in chk.statement_unbound:
                chk.statement_unbound.add(name)
                chk.ctx.error(
                    "E3101",
                    f"the index `{name}` is not bound",
                    c.span,
                    "neither an output nor a reduction index",
                    notes=("free indices are never summed implicitly",),
                    help=did_you_mean(name, chk.index_vars or {})
                    or (f"reduce over it with `sum[{name}] ...` or list it on the left",),
                )
            return False
    t = chk.expr(c)
    if isinstance(t, ErrorType):
        return False
    if isinstance(t, CtIntType):
        return _position_in_range(chk, c, t.value, extent)
    if isinstance(t, ScalarType) and is_integer(t.dtype):
        return True
    chk.ctx.error(
        "E3104",
        "a tensor access takes index variables or integer positions",
        c.span,
        f"found {show(t)}",
    )
    return False


def bind_domain(
    chk: BodyChecker, var: IndexVar, extent: Dim, use: ast.Expr, access: ast.Index, position: int
) -> bool:
    """The first access fixes an index's domain; later ones must agree (8.2, E2201)."""
    if var.domain is POISONED:
        return True
    if var.domain is None:
        var.domain = extent
        var.bound_at = access
        var.bound_desc = f"axis {position} of `{access.target.span.text}`"
        return True
    bound = var.domain
    assert isinstance(bound, Dim)
    if dims_equal(bound, extent, chk.facts):
        return True
    _extent_conflict(chk, var, use, f"{bound}", f"{extent}")
    return False


def _extent_conflict(chk: BodyChecker, var: IndexVar, use: object, first: str, second: str) -> None:
    chk.proof_error(
        "E2201",
        f"the index `{var.name}` is used on axes of different extents",
        var.ident.span,
        "index declared here",
        related=(Label(use.span, "used here with a different extent"),),  # type: ignore[attr-defined]
        notes=(
            f"`{var.name}` has extent `{first}` from {var.bound_desc}",
            f"here it indexes an axis of extent `{second}`",
        ),
        help=("give both axes the same generic, or state their equality in `where`",),
    )


def check_reduction(chk: BodyChecker, e: ast.Reduction, expected: Type | None) -> Type:
    """`sum<D>[i, j] body` (8.6)."""
    outer = chk.index_vars
    scope = dict(outer) if outer is not None else {}
    own: list[IndexVar] = []
    seen: dict[str, ast.Ident] = {}
    for ident in e.indices:
        if ident.name in seen:
            chk.ctx.error(
                "E3105",
                f"the index `{ident.name}` is listed twice",
                ident.span,
                "duplicate index",
                related=(Label(seen[ident.name].span, "first listed here"),),
            )
            continue
        seen[ident.name] = ident
        var = IndexVar(ident.name, ident, False)
        own.append(var)
        scope[ident.name] = var
        chk.resolutions[ident] = var
    chk.index_vars = scope
    try:
        body = chk.expr(e.body)
    finally:
        chk.index_vars = outer
    ok = not isinstance(body, ErrorType)
    for var in own:
        if var.domain is POISONED:
            ok = False
        elif var.domain is None and isinstance(body, ScalarType):
            chk.ctx.error(
                "E3102",
                f"the reduction index `{var.name}` indexes no tensor",
                var.ident.span,
                "unused reduction index",
                notes=("an index takes its extent from the axes it is used on",),
                help=("remove it",),
            )
            ok = False
    accumulator: DType | None = None
    if e.accumulator is not None:
        from linnet.check.typeconv import element_dtype

        accumulator = element_dtype(chk, e.accumulator)
        if accumulator is None:
            ok = False
    if isinstance(body, ErrorType) or not ok:
        return ERROR
    if not isinstance(body, ScalarType):
        helps = ("index every tensor in the body",) if isinstance(body, TensorType) else ()
        if isinstance(body, (CtIntType, CtFloatType)):
            helps = ("reduce a typed value; a literal has no dtype",)
        chk.ctx.error(
            "E3104",
            f"the reduced expression must be a scalar, found {show(body)}",
            e.body.span,
            "not a typed scalar",
            help=helps,
        )
        return ERROR
    dtype = body.dtype
    wants_bool = e.kind in ("any", "all")
    if (wants_bool and dtype is not BOOL) or (not wants_bool and not in_class(dtype, "Numeric")):
        needed = "`bool`" if wants_bool else "a Numeric dtype"
        chk.ctx.error(
            "E2104",
            f"`{e.kind}` reduces {needed}, found `{dtype}`",
            e.kind_span,
            "wrong dtype for this reduction",
            help=(
                ("compare to get booleans, e.g. `x[n] > 0.0`",)
                if wants_bool
                else ("use `any`/`all` for booleans; constrain a generic with `Numeric`",)
            ),
        )
        return ERROR
    if accumulator is not None and accumulator is not dtype:
        chk.ctx.error(
            "E2103",
            "the reduced expression does not have the accumulator dtype",
            e.body.span,
            f"has dtype `{dtype}`",
            notes=(f"the accumulator is `{accumulator}`", f"the body is `{dtype}`"),
            help=(f"convert the body: `{e.kind}<{accumulator}>[...] cast<{accumulator}>(...)`",),
        )
        return ERROR
    result = accumulator or dtype
    chk.program.reductions[e] = ReductionInfo(tuple(own), result)
    return scalar(result)


def check_comprehension(chk: BodyChecker, s: ast.ComprehensionStmt) -> None:
    """`let name[i, *s] = body` (8.1)."""
    outputs: list[IndexVar] = []
    scope: dict[str, IndexVar] = {}
    seen: dict[str, ast.Ident] = {}
    duplicates = False
    for out in s.indices:
        ident = out.name
        if ident.name in seen:
            duplicates = True
            chk.ctx.error(
                "E3105",
                f"the output index `{ident.name}` is listed twice",
                ident.span,
                "duplicate index",
                related=(Label(seen[ident.name].span, "first listed here"),),
            )
            continue
        seen[ident.name] = ident
        var = IndexVar(ident.name, ident, out.is_pack)
        outputs.append(var)
        scope[ident.name] = var
        chk.resolutions[ident] = var
    outer = chk.index_vars
    chk.index_vars = scope
    try:
        body = chk.expr(s.value)
    finally:
        chk.index_vars = outer
    result: Type = ERROR
    ok = bool(outputs) and not duplicates and not isinstance(body, ErrorType)
    if not s.indices:
        chk.ctx.error(
            "E3104",
            "a comprehension needs at least one output index",
            s.name.span,
            "no output indices",
            help=("use `let` for a scalar",),
        )
    # An output without domain is reported only for a typed scalar body: a literal or
    # tensor body is already E3104, which explains the missing domains too.
    for var in outputs:
        if var.domain is POISONED:
            ok = False
        elif var.domain is None and isinstance(body, ScalarType):
            chk.ctx.error(
                "E3103",
                f"the output index `{var.name}` indexes no tensor",
                var.ident.span,
                "no domain",
                notes=("an index takes its extent from the axes it is used on",),
                help=("remove it",),
            )
            ok = False
    if isinstance(body, ErrorType):
        ok = False
    elif not isinstance(body, ScalarType):
        if isinstance(body, (CtIntType, CtFloatType)):
            helps: tuple[str, ...] = ("build a constant tensor with `fill<T>(shape, value)`",)
        elif isinstance(body, TensorType):
            helps = ("index every axis of every tensor in the body",)
        else:
            helps = ()
        chk.ctx.error(
            "E3104",
            f"the body of a comprehension must be a typed scalar, found {show(body)}",
            s.value.span,
            "not a typed scalar",
            help=helps,
        )
        ok = False
    if ok:
        assert isinstance(body, ScalarType)
        shape: list[ShapeItem] = []
        for var in outputs:
            if var.is_pack:
                assert isinstance(var.domain, tuple)
                shape.extend(var.domain)
            else:
                assert isinstance(var.domain, Dim)
                shape.append(var.domain)
        result = TensorType(tuple(shape), body.dtype)
    local = chk.declare_local(s.name, result, "comprehension")
    if local is not None:
        chk.program.comprehensions[s] = ComprehensionInfo(tuple(outputs), local, result)


# ---------------------------------------------------------------- slicing


def slicing(chk: BodyChecker, e: ast.Index, t: TensorType) -> Type:
    """9.2-9.5: integer indices remove axes, slices keep them, `...` fills the middle."""
    comps = e.components
    shape = t.shape
    ellipses = [i for i, c in enumerate(comps) if isinstance(c, ast.EllipsisComponent)]
    if len(ellipses) > 1:
        chk.ctx.error(
            "E2204",
            "at most one `...` per index list",
            comps[ellipses[1]].span,
            "second `...`",
        )
        return ERROR
    if ellipses:
        q = ellipses[0]
        front, back = comps[:q], comps[q + 1 :]
    else:
        front, back = comps, ()
    explicit = len(front) + len(back)
    placed: list[tuple[ast.Component, int]] = [(c, i) for i, c in enumerate(front)]
    placed += [(c, len(shape) - len(back) + i) for i, c in enumerate(back)]
    if explicit > len(shape) and not t.has_pack:
        chk.ctx.error(
            "E2204",
            f"{explicit} components address a tensor with {len(shape)} axes",
            e.span,
            "too many components",
            notes=(f"the tensor is `{t!r}`",),
        )
        return ERROR
    ok = True
    selections: list[AxisSelection] = []
    for comp, pos in placed:
        if isinstance(comp, ast.PackIndex):
            chk.ctx.error(
                "E3106",
                "pack indices belong to index notation, not to slicing",
                comp.span,
                "pack index in slicing",
                help=("use `...` to keep the pack axes",),
            )
            ok = False
            continue
        item = shape[pos] if 0 <= pos < len(shape) else None
        if item is None or type(item) is Symbol:
            chk.ctx.error(
                "E3106",
                "an explicit component cannot address the axes of a shape pack",
                comp.span,
                "pack axis",
                help=("place `...` so that the index applies to a named dimension",),
            )
            ok = False
            continue
        assert isinstance(item, Dim)
        selection = _select_axis(chk, comp, item, pos)
        if selection is None:
            ok = False
        else:
            selections.append(selection)
    if not ok:
        return ERROR
    removed = {s.axis for s in selections if s.kind == "index"}
    extents = {s.axis: s.extent for s in selections if s.kind == "slice"}
    out: list[ShapeItem] = []
    for i, item in enumerate(shape):
        if i in removed:
            continue
        extent = extents.get(i)
        out.append(extent if extent is not None else item)
    chk.program.indexings[e] = IndexingInfo("slice", tuple(selections))
    if not out:
        return scalar(t.dtype)
    return TensorType(tuple(out), t.dtype)


def _select_axis(
    chk: BodyChecker, comp: ast.Component, extent: Dim, pos: int
) -> AxisSelection | None:
    if isinstance(comp, ast.Slice):
        return _slice(chk, comp, extent, pos)
    assert not isinstance(comp, (ast.EllipsisComponent, ast.PackIndex))
    t = chk.expr(comp)
    if isinstance(t, ErrorType):
        return None
    if isinstance(t, CtIntType):
        if not _position_in_range(chk, comp, t.value, extent):
            return None
        return AxisSelection(pos, "index", comp, start=t.value)
    if isinstance(t, ScalarType) and is_integer(t.dtype):
        return AxisSelection(pos, "index", comp)
    chk.ctx.error(
        "E3104",
        "an index must be an integer",
        comp.span,
        f"found {show(t)}",
        notes=("indices are compile-time integers or runtime scalars of an integer dtype",),
    )
    return None


def _position_in_range(chk: BodyChecker, node: ast.Expr, index: Dim, extent: Dim) -> bool:
    """E2209: refuted only if provably negative or provably `>=` the extent (9.2)."""
    value = index.as_int()
    negative = value < 0 if value is not None else chk.facts.prove(index, "<", ZERO)
    if negative:
        chk.ctx.error(
            "E2209",
            "negative indices are not supported",
            node.span,
            "negative index",
            help=("count from the front, e.g. `x[N - 1]` for the last element",),
        )
        return False
    if chk.facts.prove(index, ">=", extent):
        chk.ctx.error(
            "E2209",
            f"the index `{index}` is out of range for an axis of extent `{extent}`",
            node.span,
            "out of range",
            help=("keep indices within the axis",),
        )
        return False
    return True


def _slice(chk: BodyChecker, s: ast.Slice, extent: Dim, pos: int) -> AxisSelection | None:
    """9.3: extent `floor((min(stop, D) - start + step - 1) / step)`."""
    start = _bound(chk, s.start) if s.start is not None else ZERO
    stop = _bound(chk, s.stop) if s.stop is not None else None
    step = 1
    if s.step is not None:
        t = chk.expr(s.step)
        value = t.value.as_int() if isinstance(t, CtIntType) else None
        if value is None or value <= 0:
            if not isinstance(t, ErrorType):
                chk.ctx.error(
                    "E2209",
                    "a slice step must be a positive integer constant",
                    s.step.span,
                    "invalid step",
                )
            return None
        step = value
    if start is None or (s.stop is not None and stop is None):
        return None
    facts = chk.facts
    end = extent if stop is None else stop.minimum(extent)
    new = (end - start + (step - 1)).floordiv(Dim.const(step))
    new = facts.simplify(new)
    if not facts.prove(new, ">=", ZERO):
        new = new.maximum(ZERO)
    return AxisSelection(pos, "slice", s, start=start, stop=stop, step=step, extent=new)


def _bound(chk: BodyChecker, node: ast.Expr) -> Dim | None:
    t = chk.expr(node)
    if isinstance(t, ErrorType):
        return None
    if isinstance(t, CtIntType):
        d = t.value
        value = d.as_int()
        if (value is not None and value >= 0) or (value is None and chk.facts.prove(d, ">=", ZERO)):
            return d
        chk.ctx.error(
            "E2209",
            f"the slice bound `{d}` is not provably non-negative",
            node.span,
            "negative bound",
            help=("no negative indices: count from the front (`N - 1`)",),
        )
        return None
    notes: tuple[str, ...] = ()
    if isinstance(t, ScalarType):
        notes = ("runtime bounds would make the shape dynamic",)
    chk.ctx.error(
        "E2209",
        "slice bounds must be compile-time integers",
        node.span,
        f"found {show(t)}",
        notes=notes,
    )
    return None


# ---------------------------------------------------------------- structural arrays


def array_element(chk: BodyChecker, e: ast.Index, t: ArrayType) -> Type:
    """9.6: one integer constant component selects an element block."""
    comps = e.components
    bad = [c for c in comps if isinstance(c, (ast.Slice, ast.EllipsisComponent, ast.PackIndex))]
    if len(comps) != 1 or bad:
        chk.ctx.error(
            "E3104",
            "a `sub` array is indexed with exactly one integer constant",
            e.span,
            "invalid array index",
        )
        return ERROR
    comp = comps[0]
    assert not isinstance(comp, (ast.Slice, ast.EllipsisComponent, ast.PackIndex))
    ct = chk.expr(comp)
    if isinstance(ct, ErrorType):
        return ERROR
    value = ct.value.as_int() if isinstance(ct, CtIntType) else None
    if value is None:
        notes = (
            ("the variable of a `static for` over a range is a runtime `i64`",)
            if isinstance(ct, ScalarType)
            else ()
        )
        chk.ctx.error(
            "E2209",
            "a `sub` array index must be an integer constant",
            comp.span,
            f"found {show(ct)}",
            notes=notes,
            help=("iterate the array with `static for`",),
        )
        return ERROR
    if value < 0 or chk.facts.prove(Dim.const(value), ">=", t.length):
        chk.ctx.error(
            "E2209",
            f"the index {value} is out of range for an array of length `{t.length}`",
            comp.span,
            "out of range",
        )
        return ERROR
    chk.program.indexings[e] = IndexingInfo("array", position=value)
    elem = t.elem
    assert isinstance(elem, BlockType)
    return elem
