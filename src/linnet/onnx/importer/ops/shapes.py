"""ONNX shape operators -> compile-time dimensions, `reshape`, `permute`, `broadcast_to`.

Stage: ONNX import, translation. `Shape` and `Size` produce compile-time
values whose elements are dimensions (`[batch, seq, 768]`), so the usual
exporter subgraph `Shape -> Gather -> Unsqueeze -> Concat -> Reshape` folds
into `reshape(x, [batch, seq, 12, 64])` and generates no code. The data
movement operators here fold the same way on such values (NumPy moves the
`Dim` elements), and otherwise become the prelude's `reshape`, `permute`,
`broadcast_to` and `concat` (10.2), or slicing (9).

Linnet has no rank-0 tensors (5.1): a rank-0 ONNX value is a scalar, so
`Reshape`/`Squeeze` to rank 0 read the single element (`x[0, 0]`) and
`Unsqueeze`/`Reshape`/`Expand` of a scalar `fill` a tensor with it.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import numpy as np

from linnet.check.dims import Dim
from linnet.onnx.importer.graph import translator
from linnet.onnx.importer.ops._common import (
    axes_list,
    elements_array,
    fold,
    fold_ok,
    mark_nonneg,
    norm_axis,
    numel,
    same_sign,
    symbolic_result,
)
from linnet.sourcegen import build
from linnet.sourcegen.translate import Context, Translation, Unsupported
from linnet.sourcegen.values import INT_DTYPES, Value
from linnet.syntax import ast

ONE = Dim.const(1)


# ---------------------------------------------------------------- shape queries


@translator("Shape")
def shape(ctx: Context) -> None:
    x = ctx.need(0)
    rank = x.rank
    start = int(ctx.attr("start", 0))
    end = ctx.attr("end", None)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    stop = rank if end is None else int(end)
    stop = min(max(stop + rank if stop < 0 else stop, 0), rank)
    dims = list(x.shape[start:stop])
    ctx.output(0, ctx.symbolic(dims, "i64"))


@translator("Size")
def size(ctx: Context) -> None:
    x = ctx.need(0)
    ctx.output(0, ctx.symbolic([numel(x.shape)], "i64", scalar=True))


# ---------------------------------------------------------------- reshaping


_RESHAPED: weakref.WeakKeyDictionary[Translation, dict[int, Value]] = weakref.WeakKeyDictionary()
"""Per translation: the value each `reshape` result was reshaped from (chains collapse)."""
_PERMUTED: weakref.WeakKeyDictionary[Translation, dict[int, tuple[Value, list[int]]]] = (
    weakref.WeakKeyDictionary()
)
"""Per translation: the value and axes each `permute` result came from (chains compose)."""


def reshaped(ctx: Context, x: Value, dims: Sequence[Dim], hint: str = "reshaped") -> Value:
    """`x` with the shape `dims` (same element count), folding known values.

    A reshape of a reshape reads the original value (`reshape(reshape(x, a), b)`
    is `reshape(x, b)`); the intermediate statement goes if nothing else reads it.
    """
    dims = tuple(ctx.simplify(d) for d in dims)
    sources = _RESHAPED.setdefault(ctx.t, {})
    origin = sources.get(id(x))
    if origin is not None:
        x = origin
    if len(dims) == x.rank and all(ctx.equal(a, b) for a, b in zip(dims, x.shape, strict=True)):
        return x
    arr = _known(x)
    if arr is not None:
        static = static_ints(dims)
        if static is not None:
            moved = arr.reshape(static)
            out = _from_known(ctx, moved, x)
            if out is not None:
                return out
    if not dims:
        # Rank 0 is a scalar (5.1): read the single element.
        expr = build.index(ctx.ref(x), [build.int_lit(0)] * x.rank) if x.rank else ctx.ref(x)
        return ctx.let(expr, (), x.dtype, hint)
    if x.is_scalar:
        return ctx.let(_fill(ctx, dims, ctx.ref(x), x.dtype), dims, x.dtype, hint)
    if not ctx.equal(numel(dims), numel(x.shape)):
        ctx.require(numel(dims), "==", numel(x.shape))
    expr = build.call("reshape", ctx.ref(x), ctx.shape_lit(dims))
    out = ctx.let(expr, dims, x.dtype, hint)
    sources[id(out)] = x
    return same_sign(ctx, x, out)


def static_ints(dims: Sequence[Dim]) -> list[int] | None:
    """The extents as integers when every one is a constant."""
    out: list[int] = []
    for d in dims:
        v = d.as_int()
        if v is None:
            return None
        out.append(v)
    return out


def _fill(ctx: Context, dims: Sequence[Dim], value: ast.Expr, dtype: str) -> ast.Expr:
    return build.call("fill", ctx.shape_lit(dims), value, generics=[build.named_type(dtype)])


def _known(x: Value) -> np.ndarray | None:
    """`x`'s value as an array (ints for constants, `Dim`s for shape values), if known."""
    if x.const is not None and (x.source is None or x.dtype in INT_DTYPES or x.dtype == "bool"):
        return x.const
    return elements_array(x)


def _from_known(ctx: Context, arr: np.ndarray, like: Value) -> Value | None:
    if arr.dtype == object:
        return symbolic_result(ctx, arr, like.dtype)
    return fold(ctx, arr, like.dtype)


@translator("Reshape")
def reshape(ctx: Context) -> None:
    x = ctx.need(0)
    target = ctx.elements(1)
    if target is None:
        raise Unsupported("input 1 (the shape) is missing")
    allowzero = int(ctx.attr("allowzero", 0))
    dims: list[Dim | None] = []
    for i, d in enumerate(target):
        v = d.as_int()
        if v == 0 and not allowzero:
            if i >= x.rank:
                raise Unsupported(f"shape element {i} copies an axis the input lacks")
            dims.append(x.shape[i])
        elif v == -1:
            dims.append(None)
        elif v is not None and v < -1:
            raise Unsupported(f"shape element {v}")
        else:
            dims.append(d)
    ctx.output(0, reshaped(ctx, x, _infer(ctx, x, dims)))


def _infer(ctx: Context, x: Value, dims: list[Dim | None]) -> list[Dim]:
    """Fill in the one `-1` extent so that element counts agree."""
    holes = [i for i, d in enumerate(dims) if d is None]
    if len(holes) > 1:
        raise Unsupported("more than one -1 in the shape")
    if not holes:
        return [d for d in dims if d is not None]
    known = numel([d for d in dims if d is not None])
    total = numel(x.shape)
    k = known.as_int()
    if k == 0:
        raise Unsupported("-1 next to a zero extent")
    missing = ctx.simplify(total // known)
    exact = missing.as_int() is not None or not missing.has_ops()
    if not (exact and ctx.equal(missing * known, total)):
        # Not an exact polynomial quotient: state what makes it one.
        if not ctx.prove(known, ">", Dim.const(0)):
            ctx.require(known, ">", Dim.const(0))
        if not ctx.equal(total % known, Dim.const(0)):
            ctx.require(total % known, "==", Dim.const(0))
        missing = ctx.simplify(total // known)
    return [missing if d is None else d for d in dims]


@translator("Flatten")
def flatten(ctx: Context) -> None:
    x = ctx.need(0)
    axis = int(ctx.attr("axis", 1))
    if not -x.rank <= axis <= x.rank:
        raise Unsupported(f"axis {axis} is out of range for rank {x.rank}")
    axis = axis + x.rank if axis < 0 else axis
    dims = [numel(x.shape[:axis]), numel(x.shape[axis:])]
    ctx.output(0, reshaped(ctx, x, dims, "flat"))


@translator("Squeeze")
def squeeze(ctx: Context) -> None:
    x = ctx.need(0)
    axes = axes_list(ctx, "axes", 1)
    if axes is None:
        drop = [i for i, d in enumerate(x.shape) if d.as_int() == 1]
        if any(d.as_int() is None for d in x.shape):
            raise Unsupported("squeezing every 1 of a symbolic shape")
    else:
        drop = sorted({norm_axis(a, x.rank) for a in axes})
        for a in drop:
            if not ctx.equal(x.shape[a], ONE):
                if x.shape[a].as_int() is not None:
                    raise Unsupported(f"axis {a} has extent {x.shape[a]}, not 1")
                ctx.require(x.shape[a], "==", ONE)
    dims = [d for i, d in enumerate(x.shape) if i not in drop]
    ctx.output(0, reshaped(ctx, x, dims, "squeezed"))


@translator("Unsqueeze")
def unsqueeze(ctx: Context) -> None:
    x = ctx.need(0)
    axes = axes_list(ctx, "axes", 1)
    if axes is None:
        raise Unsupported("axes are required")
    rank = x.rank + len(axes)
    at = sorted(norm_axis(a, rank, what="axis") for a in axes)
    if len(set(at)) != len(at):
        raise Unsupported("repeated axes")
    dims: list[Dim] = []
    rest = iter(x.shape)
    for i in range(rank):
        dims.append(ONE if i in at else next(rest))
    ctx.output(0, reshaped(ctx, x, dims, "unsqueezed"))


# ---------------------------------------------------------------- permuting and broadcasting


@translator("Transpose")
def transpose(ctx: Context) -> None:
    x = ctx.need(0)
    perm = ctx.attr("perm", None)
    order = (
        list(reversed(range(x.rank))) if perm is None else [norm_axis(int(p), x.rank) for p in perm]
    )
    if sorted(order) != list(range(x.rank)):
        raise Unsupported(f"perm {order} is not a permutation")
    ctx.output(0, permuted(ctx, x, order))


def permuted(ctx: Context, x: Value, order: Sequence[int], hint: str = "transposed") -> Value:
    """`permute(x, order)`; the identity permutation is `x` itself."""
    if list(order) == list(range(x.rank)):
        return x
    chains = _PERMUTED.setdefault(ctx.t, {})
    earlier = chains.get(id(x))
    if earlier is not None:
        # permute(permute(y, first), order) reads y with the composed axes.
        y, first = earlier
        return permuted(ctx, y, [first[p] for p in order], hint)
    arr = _known(x)
    if arr is not None:
        out = _from_known(ctx, np.transpose(arr, order), x)
        if out is not None:
            return out
    dims = [x.shape[p] for p in order]
    expr = build.call("permute", ctx.ref(x), build.shape([build.int_lit(p) for p in order]))
    out = ctx.let(expr, dims, x.dtype, hint)
    chains[id(out)] = (x, list(order))
    return same_sign(ctx, x, out)


def broadcast_value(ctx: Context, x: Value, dims: Sequence[Dim], hint: str = "expanded") -> Value:
    """`x` broadcast to `dims` (`broadcast_to`, or `fill` for a scalar)."""
    if len(dims) == x.rank and all(ctx.equal(a, b) for a, b in zip(dims, x.shape, strict=True)):
        return x
    arr = _known(x)
    static = static_ints(dims)
    if arr is not None and static is not None:
        out = _from_known(ctx, np.broadcast_to(arr, static).copy(), x)
        if out is not None:
            return out
    if x.is_scalar:
        return ctx.let(_fill(ctx, dims, ctx.ref(x), x.dtype), dims, x.dtype, hint)
    expr = build.call("broadcast_to", ctx.ref(x), ctx.shape_lit(dims))
    return same_sign(ctx, x, ctx.let(expr, dims, x.dtype, hint))


@translator("Expand")
def expand(ctx: Context) -> None:
    x = ctx.need(0)
    target = ctx.elements(1)
    if target is None:
        raise Unsupported("input 1 (the shape) is missing")
    dims = ctx.broadcast(x.shape, target)
    ctx.output(0, broadcast_value(ctx, x, dims))


@translator("Tile")
def tile(ctx: Context) -> None:
    x = ctx.need(0)
    repeats = ctx.elements(1)
    if repeats is None or len(repeats) != x.rank:
        raise Unsupported("repeats must list one count per axis")
    arr = _known(x)
    reps = static_ints(repeats)
    if arr is not None and reps is not None:
        out = _from_known(ctx, np.tile(arr, reps), x)
        if out is not None:
            ctx.output(0, out)
            return
    # [D0, D1] -> [1, D0, 1, D1] -> [R0, D0, R1, D1] -> [R0 * D0, R1 * D1].
    spread: list[Dim] = []
    wide: list[Dim] = []
    final: list[Dim] = []
    for r, d in zip(repeats, x.shape, strict=True):
        spread += [ONE, d]
        wide += [r, d]
        final.append(r * d)
    if all(r.as_int() == 1 for r in repeats):
        ctx.output(0, x)
        return
    lifted = reshaped(ctx, x, spread, "spread")
    grown = broadcast_value(ctx, lifted, wide, "repeated")
    ctx.output(0, reshaped(ctx, grown, final, "tiled"))


# ---------------------------------------------------------------- joining and splitting


@translator("Concat")
def concat(ctx: Context) -> None:
    values = [ctx.input(i) for i in range(ctx.n_inputs)]
    parts = [v for v in values if v is not None]
    if not parts:
        raise Unsupported("no inputs")
    rank = parts[0].rank
    if rank == 0 or any(v.rank != rank or v.dtype != parts[0].dtype for v in parts):
        raise Unsupported("inputs of different ranks or dtypes, or scalars")
    axis = norm_axis(int(ctx.attr("axis")), rank)
    known = [_known(v) for v in parts]
    if all(k is not None for k in known):
        out = _from_known(ctx, np.concatenate(known, axis=axis), parts[0])  # type: ignore[arg-type]
        if out is not None:
            ctx.output(0, out)
            return
    # Empty operands (extent provably 0) add nothing.
    nonempty = [v for v in parts if not ctx.equal(v.shape[axis], Dim.const(0))] or parts[:1]
    dims = list(nonempty[0].shape)
    total = Dim.const(0)
    for v in nonempty:
        total = total + v.shape[axis]
        for i, (a, b) in enumerate(zip(v.shape, dims, strict=True)):
            if i != axis and not ctx.equal(a, b):
                if a.as_int() is not None and b.as_int() is not None:
                    raise Unsupported(f"extents {a} and {b} differ on axis {i}")
                ctx.require(a, "==", b)
    dims[axis] = total
    if len(nonempty) == 1:
        ctx.output(0, nonempty[0])
        return
    expr = build.call(
        "concat", *(ctx.ref(v) for v in nonempty), named=[("axis", build.int_lit(axis))]
    )
    ctx.output(0, ctx.let(expr, dims, parts[0].dtype, "joined"))


def slice_axis(
    ctx: Context, x: Value, axis: int, start: Dim, stop: Dim, hint: str = "part"
) -> Value:
    """`x[..., start:stop, ...]` on one axis (bounds already within the extent)."""
    comps: list[build.Component] = [build.slice_() for _ in range(x.rank)]
    comps[axis] = build.slice_(
        None if start.as_int() == 0 else ctx.dim(start),
        None if ctx.equal(stop, x.shape[axis]) else ctx.dim(stop),
    )
    dims = list(x.shape)
    dims[axis] = ctx.simplify(stop - start)
    arr = _known(x)
    if arr is not None and start.as_int() is not None and stop.as_int() is not None:
        index = [slice(None)] * x.rank
        index[axis] = slice(start.as_int(), stop.as_int())
        out = _from_known(ctx, arr[tuple(index)], x)
        if out is not None:
            return out
    return same_sign(ctx, x, ctx.let(build.index(ctx.ref(x), _trim(comps)), dims, x.dtype, hint))


def _trim(comps: list[build.Component]) -> list[build.Component]:
    """Drop trailing full slices (`x[:, 1:3, :]` reads as `x[:, 1:3]`)."""
    out = list(comps)
    while len(out) > 1 and isinstance(out[-1], ast.Slice) and _full(out[-1]):
        out.pop()
    return out


def _full(s: ast.Slice) -> bool:
    return s.start is None and s.stop is None and s.step is None


@translator("Split")
def split(ctx: Context) -> None:
    x = ctx.need(0)
    if x.rank == 0:
        raise Unsupported("Split of a scalar")
    axis = norm_axis(int(ctx.attr("axis", 0)), x.rank)
    extent = x.shape[axis]
    sizes_attr = ctx.attr("split", None)
    sizes: list[Dim]
    if sizes_attr is not None:
        sizes = [Dim.const(int(s)) for s in sizes_attr]
    elif ctx.input(1) is not None:
        given = ctx.elements(1)
        assert given is not None
        sizes = list(given)
    else:
        n = int(ctx.attr("num_outputs", ctx.n_outputs))
        sizes = _even_split(ctx, extent, n)
    if len(sizes) != ctx.n_outputs:
        raise Unsupported(f"{len(sizes)} sizes for {ctx.n_outputs} outputs")
    total = Dim.const(0)
    for s in sizes:
        total = total + s
    if not ctx.equal(total, extent):
        if total.as_int() is not None and extent.as_int() is not None:
            raise Unsupported(f"sizes add up to {total}, the axis has {extent}")
        ctx.require(total, "==", extent)
    start = Dim.const(0)
    for i, s in enumerate(sizes):
        stop = ctx.simplify(start + s)
        if ctx.node.outputs[i]:
            ctx.output(i, slice_axis(ctx, x, axis, start, stop, "split"))
        start = stop


def _even_split(ctx: Context, extent: Dim, n: int) -> list[Dim]:
    if n <= 0:
        raise Unsupported("no outputs")
    size = extent.as_int()
    if size is not None:
        chunk = -(-size // n)  # ONNX 18: ceil(D / n), the last chunk smaller
        if chunk * (n - 1) >= size and size % n:
            raise Unsupported(f"{size} cannot be split into {n} parts")
        return [Dim.const(chunk)] * (n - 1) + [Dim.const(size - chunk * (n - 1))]
    n_dim = Dim.const(n)
    if not ctx.equal(extent % n_dim, Dim.const(0)):
        ctx.require(extent % n_dim, "==", Dim.const(0))
    return [ctx.simplify(extent // n_dim)] * n


@translator("ConstantOfShape")
def constant_of_shape(ctx: Context) -> None:
    dims = ctx.elements(0)
    if dims is None:
        raise Unsupported("input 0 (the shape) is missing")
    value = ctx.attr("value", None)
    arr = np.zeros((1,), np.float32) if value is None else np.asarray(value).reshape(-1)
    if arr.size != 1:
        raise Unsupported("value must hold one element")
    from linnet.sourcegen.translate import numpy_dtype_name

    dtype = numpy_dtype_name(arr.dtype)
    static = static_ints(dims)
    if static is not None:
        ctx.output(0, fold(ctx, np.full(static, arr[0]), dtype))
        return
    expr = _fill(ctx, dims, ctx.literal(arr[0].item(), dtype), dtype)
    ctx.output(0, ctx.let(expr, dims, dtype, "filled"))


@translator("Range")
def range_(ctx: Context) -> None:
    start, limit, delta = ctx.need(0), ctx.need(1), ctx.need(2)
    dtype = start.dtype
    if fold_ok(start, limit, delta):
        assert start.const is not None and limit.const is not None and delta.const is not None
        s, lim, d = (np.asarray(v.const).reshape(()).item() for v in (start, limit, delta))
        if d == 0:
            raise Unsupported("delta 0")
        n = max(int(np.ceil((lim - s) / d)), 0)
        values = np.array([s + i * d for i in range(n)]).astype(start.const.dtype)
        ctx.output(0, fold(ctx, values, dtype))
        return
    if dtype not in INT_DTYPES:
        raise Unsupported("a floating Range needs constant inputs")
    s_el, l_el, d_el = (ctx.elements(i) for i in range(3))
    assert s_el is not None and l_el is not None and d_el is not None
    step = d_el[0].as_int()
    if step is None or step <= 0:
        raise Unsupported("delta must be a positive constant")
    first, last = s_el[0], l_el[0]
    count = ctx.simplify((last - first + (step - 1)) // Dim.const(step))
    if not ctx.prove(last, ">=", first):
        ctx.require(last, ">=", first)
    expr: ast.Expr = build.call("iota", ctx.dim(count), generics=[build.named_type(dtype)])
    if step != 1:
        expr = build.binary("*", expr, build.int_lit(step))
    if first.as_int() != 0:
        expr = build.binary(
            "+", expr, build.call("cast", ctx.dim(first), generics=[build.named_type(dtype)])
        )
    out = ctx.let(expr, (count,), dtype, "positions")
    if ctx.prove(first, ">=", Dim.const(0)):
        mark_nonneg(ctx, out)
    ctx.output(0, out)
