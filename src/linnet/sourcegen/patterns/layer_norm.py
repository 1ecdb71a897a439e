"""Layer norm spelled out, back to the standard library's `layer_norm`.

Stage: pattern recovery (see `linnet.sourcegen.patterns`). PyTorch's
TorchScript exporter below opset 17, BERT/GPT-2-style hand-written modules and
exporters without a fused op write layer norm over the last axis as

    d = x - ReduceMean(x)
    n = d / Sqrt(ReduceMean(d ^ 2) + eps)      (d * d; d * Reciprocal(...); d * (1 / ...))
    y = n * weight + bias                       (either or both may be missing)

optionally with the `Cast`s of mixed precision around `n` and on `x`. The
chain becomes one `linnet::layer_norm` node (inputs `x`, weight or "", bias or
""), which `linnet.sourcegen.patterns.emit` writes as `layer_norm(x, w,
some(b), eps)`; a missing weight is written as ones, so the call stays the one
the examples use. The square's exponent and the `1` of a reciprocal are exact:
`Pow(d, 3)` is not a variance, and such a chain stays as written.

This pass runs before the RMS norm pass: the tail of a layer norm is also an
RMS norm of the centred input, and the whole chain is the better reading.
"""

from __future__ import annotations

from collections.abc import Callable

from linnet.sourcegen.graph import Graph, Node
from linnet.sourcegen.patterns.match import (
    Bind,
    Const,
    Either,
    Match,
    Matcher,
    Op,
    Pattern,
    Var,
    add,
    maybe_cast,
    mul,
)
from linnet.sourcegen.patterns.passes import (
    _last_axis,
    _linnet_rms_normalized,
    _linnet_rms_shapes,
    _recovered,
    _run,
    info,
    is_float,
    reduce_axes,
    reduces_one_axis,
    uncast_input,
)
from linnet.sourcegen.translate import numpy_dtype_name

FORMS = ("weight_bias", "weight", "bias", "plain")
"""The affine tails tried, most complete first (a full chain is never read as a part)."""


def _normalized(matcher: Matcher) -> Pattern:
    """`(xf - mean(xf)) / sqrt(mean((xf - mean(xf))^2) + eps)`, in its spellings.

    The centred value is read twice (numerator and square): `Bind` names it
    where the numerator matches (always first), `Var("d")` in the square.
    """
    last = _last_axis(matcher)
    centred = Bind(
        "d", Op("Sub", Var("xf"), Op("ReduceMean", Var("xf"), check=last, capture="mean"))
    )
    square = Either(Op("Pow", Var("d"), Const(2.0)), Op("Mul", Var("d"), Var("d")))
    variance = Op("ReduceMean", square, check=last, capture="var")
    denom = Op("Sqrt", add(variance, Const(None, capture="eps")))
    return Either(
        Op("Div", centred, denom),
        mul(centred, Op("Reciprocal", denom)),
        mul(centred, Op("Div", Const(1.0), denom)),
    )


def layer_norm(graph: Graph) -> list[str]:
    """Replace each spelled-out layer norm with a `linnet::layer_norm` node."""
    notes: list[str] = []
    for form in ("weight_bias", "weight"):
        notes += _run(graph, _roots(form), _linnet_pattern(form), _linnet_maker(graph), _describe)
    for form in FORMS:
        notes += _run(graph, _roots(form), _form_pattern(form), _maker(graph), _describe)
    return notes


def _linnet_pattern(form: str) -> Callable[[Matcher], Pattern]:
    """Linnet's exporter's spelling of std `layer_norm` (its canonical body):

        d = xf - Reshape(ReduceSum(xf, [-1], keepdims=0) / H, [*S, 1])
        n = d * Reshape(Reciprocal(Sqrt(Reshape(MatMul(d_row, d_col)) / H + eps)), [*S, 1])
        y = Cast?(n) * weight (+ bias)

    the variance written as in `rms_norm` (`passes._linnet_rms_normalized`).
    """

    def pattern(_: Matcher) -> Pattern:
        total = Op("ReduceSum", Var("xf"), capture="total")
        mean = Op("Div", total, Const(None, capture="h_mean"))
        centred = Op("Sub", Var("xf"), Op("Reshape", mean, Var("_mean"), capture="mean_r"))
        n = maybe_cast(_linnet_rms_normalized(Bind("d", centred)))
        if form == "weight_bias":
            return add(mul(n, Var("w")), Var("b"))
        return mul(n, Var("w"))

    return pattern


def _linnet_maker(graph: Graph) -> Callable[[Matcher, Match, Node], Node | None]:
    def make(matcher: Matcher, m: Match, root: Node) -> Node | None:
        shape = _shape_of(graph, m.vars["xf"])
        if shape is None or not shape or not _linnet_rms_shapes(graph, m, shape):
            return None
        total = m.captured["total"]
        axes = reduce_axes(matcher, total)
        if int(total.attrs.get("keepdims", 1)) != 0 or axes not in ([-1], [len(shape) - 1]):
            return None
        if m.consts["h_mean"] != m.consts["h"]:
            return None
        if _shape_of(graph, m.captured["mean_r"].outputs[0]) != (*shape[:-1], 1):
            return None
        return _node(graph, matcher, m, root)

    return make


def _shape_of(graph: Graph, name: str) -> tuple[object, ...] | None:
    i = info(graph, name)
    return None if i is None or i.shape is None else tuple(i.shape)


def _roots(form: str) -> tuple[str, ...]:
    return {
        "weight_bias": ("Add",),
        "weight": ("Mul",),
        "bias": ("Add",),
        "plain": ("Div", "Mul"),
    }[form]


def _form_pattern(form: str) -> Callable[[Matcher], Pattern]:
    def pattern(matcher: Matcher) -> Pattern:
        n = maybe_cast(_normalized(matcher))
        if form == "weight_bias":
            return add(mul(n, Var("w")), Var("b"))
        if form == "weight":
            return mul(n, Var("w"))
        if form == "bias":
            return add(n, Var("b"))
        return _normalized(matcher)

    return pattern


def _maker(graph: Graph) -> Callable[[Matcher, Match, Node], Node | None]:
    def make(matcher: Matcher, m: Match, root: Node) -> Node | None:
        if (
            reduces_one_axis(matcher, m.captured["mean"], last=True) is None
            or reduces_one_axis(matcher, m.captured["var"], last=True) is None
        ):
            return None
        return _node(graph, matcher, m, root)

    return make


def _node(graph: Graph, matcher: Matcher, m: Match, root: Node) -> Node | None:
    """The `linnet::layer_norm` node for a matched chain, when its dtypes and affine fit."""
    xf = m.vars["xf"]
    x = uncast_input(matcher, m, xf)
    xi, xfi, out = info(graph, x), info(graph, xf), info(graph, root.outputs[0])
    if xi is None or xfi is None or out is None or not is_float(graph, x):
        return None
    if xi.shape is None or not xi.shape or out.dtype != xi.dtype:
        return None
    # The standard op normalises in f32 and casts back before the affine
    # tail, exactly what the chain computes when its statistics run in f32.
    if xfi.dtype != "f32":
        return None
    affine = [m.vars.get("w", ""), m.vars.get("b", "")]
    for name in affine:
        if name and _vector_of(graph, name) != (xi.shape[-1], xi.dtype):
            return None
    return Node(
        "layer_norm",
        "linnet",
        root.name,
        (x, *affine),
        root.outputs,
        {"eps": m.consts["eps"]},
        scope=root.scope,
    )


def _vector_of(graph: Graph, name: str) -> tuple[object, str | None] | None:
    """`(length, dtype)` of a 1-D value, stored tensor or constant; None otherwise."""
    vi = info(graph, name)
    if vi is not None:
        return (vi.shape[0], vi.dtype) if vi.shape is not None and len(vi.shape) == 1 else None
    arr = graph.initializers.get(name)
    if arr is None:
        arr = graph.constants.get(name)
    if arr is None or arr.ndim != 1:
        return None
    return int(arr.shape[0]), numpy_dtype_name(arr.dtype)


def _describe(node: Node, m: Match) -> str:
    return _recovered("layer_norm", node, m)
