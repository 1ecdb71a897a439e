"""Dense projections spelled as `Gemm`, back to `std.nn.linear::linear`.

Stage: pattern recovery (see `linnet.sourcegen.patterns`). Linnet's exporter
writes std `linear(x, weight, bias?)` over `x: [*S, In]` with `weight:
[Out, In]` as

    Reshape(Gemm(Reshape(x, [prod(S), In]), weight, bias?, transB=1), [*S, Out])

(no reshapes when `x` is already `[N, In]`), the bias either as the `Gemm`'s
third input or, as Linnet's exporter writes it, an `Add` of the stored
`[Out]` bias after the unflatten (the same sum, the same rounding). The
chain becomes one `linnet::linear` node (inputs x, weight, bias or ""). Only `Gemm` with
`alpha = beta = 1`, `transA = 0` and `transB = 1` is this op (PyTorch's
`[Out, In]` weight), a bias must be one value per output, and each reshape
must be exactly the flatten and the unflatten of the leading axes; anything
else stays as written.
"""

from __future__ import annotations

import math

from linnet.check.dims import Dim
from linnet.sourcegen import build
from linnet.sourcegen.graph import Graph, Node
from linnet.sourcegen.patterns.match import Match, Matcher, Op, Pattern, Var
from linnet.sourcegen.patterns.passes import _run, info, is_float, stored_info
from linnet.sourcegen.translate import Context, Registry, Unsupported
from linnet.sourcegen.values import FLOAT_DTYPES


def install(registry: Registry) -> None:
    registry.add("linnet", "linear", translate_linear)


def recover_linear(graph: Graph) -> list[str]:
    """Replace each `Gemm` projection (with its reshapes) with a `linnet::linear` node."""

    def wrapped(_: Matcher) -> Pattern:
        flat = Op("Reshape", Var("x"), Var("_flat"), capture="flat")
        return Op("Reshape", Op("Gemm", flat, Var("w"), capture="gemm"), Var("_out"))

    def plain(_: Matcher) -> Pattern:
        return Op("Gemm", Var("x"), Var("w"), capture="gemm")

    def make(matcher: Matcher, m: Match, root: Node) -> Node | None:
        return _linear_node(graph, m, root)

    def biased(_: Matcher) -> Pattern:
        unbiased = Op("linear", Var("x"), Var("w"), capture="linear", domain="linnet")
        return Op("Add", unbiased, Var("b"), commutative=True)

    def add_bias(matcher: Matcher, m: Match, root: Node) -> Node | None:
        return _with_bias(graph, m, root)

    notes = _run(graph, ("Reshape",), wrapped, make, _describe)
    notes += _run(graph, ("Gemm",), plain, make, _describe)
    return notes + _run(graph, ("Add",), biased, add_bias, _describe)


def _with_bias(graph: Graph, m: Match, root: Node) -> Node | None:
    """`linear(x, w) + b` as `linear(x, w, b)` when `b` is a stored `[Out]` of x's dtype."""
    linear = m.captured["linear"]
    if len(linear.inputs) > 2 and linear.inputs[2]:
        return None  # already has a bias
    x, w, b = m.vars["x"], m.vars["w"], m.vars["b"]
    wi, bi = stored_info(graph, w), stored_info(graph, b)
    out, before = info(graph, root.outputs[0]), info(graph, linear.outputs[0])
    if wi is None or bi is None or out is None or before is None or wi.shape is None:
        return None
    if bi.shape != (wi.shape[0],) or bi.dtype != wi.dtype or out.shape != before.shape:
        return None
    return Node("linear", "linnet", root.name, (x, w, b), root.outputs, scope=root.scope)


def _linear_node(graph: Graph, m: Match, root: Node) -> Node | None:
    gemm = m.captured["gemm"]
    attrs = gemm.attrs
    if int(attrs.get("transA", 0)) != 0 or int(attrs.get("transB", 0)) != 1:
        return None
    if float(attrs.get("alpha", 1.0)) != 1.0 or float(attrs.get("beta", 1.0)) != 1.0:
        return None
    x, w = m.vars["x"], m.vars["w"]
    xi, wi, out = info(graph, x), stored_info(graph, w), info(graph, root.outputs[0])
    if xi is None or wi is None or out is None or xi.shape is None or wi.shape is None:
        return None
    if out.shape is None or len(wi.shape) != 2 or not xi.shape or not is_float(graph, x):
        return None
    if xi.dtype != wi.dtype or out.dtype != xi.dtype:
        return None
    n_out, n_in = wi.shape
    lead = tuple(xi.shape[:-1])
    if xi.shape[-1] != n_in or tuple(out.shape) != (*lead, n_out):
        return None
    if "flat" in m.captured:
        fi = info(graph, m.captured["flat"].outputs[0])
        if not all(isinstance(d, int) for d in lead):
            return None
        if fi is None or fi.shape != (math.prod(lead), n_in):  # type: ignore[arg-type]
            return None
    elif len(lead) != 1:
        return None
    bias = gemm.inputs[2] if len(gemm.inputs) > 2 else ""
    if bias:
        bi = stored_info(graph, bias)
        if bi is None or bi.shape != (n_out,) or bi.dtype != xi.dtype:
            return None
    return Node("linear", "linnet", root.name, (x, w, bias), root.outputs, scope=root.scope)


def _describe(node: Node, m: Match) -> str:
    return f"recovered `linear` from {len(m.nodes)} nodes ending at `{node.outputs[0]}`"


def translate_linear(ctx: Context) -> None:
    x, w, b = ctx.need(0), ctx.need(1), ctx.input(2)
    if x.dtype not in FLOAT_DTYPES or x.rank < 1 or w.rank != 2 or w.dtype != x.dtype:
        raise Unsupported("linear needs x [*S, In] and a weight [Out, In] of one float dtype")
    if not ctx.equal(w.shape[1], x.shape[-1]):
        raise Unsupported("the weight's input axis does not match x")
    out: tuple[Dim, ...] = (*x.shape[:-1], w.shape[0])
    args = [ctx.ref(x), ctx.ref(w)]
    if b is not None:
        if b.rank != 1 or not ctx.equal(b.shape[0], w.shape[0]) or b.dtype != x.dtype:
            raise Unsupported("the bias must be one value per output")
        args.append(build.some(ctx.ref(b)))
    fn = ctx.std("nn.linear", "linear")
    ctx.output(0, ctx.let(build.call(fn, *args), out, x.dtype, "projected"))
