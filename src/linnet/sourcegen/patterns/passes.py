"""Recovery passes for elementwise and normalisation chains.

Each pass finds a decomposed chain and replaces it with one `linnet` domain
node that `linnet.sourcegen.patterns.emit` translates to a standard-library
call:

| chain (ONNX operator names)                                        | node                |
| ------------------------------------------------------------------ | ------------------- |
| `Mul(x, Sigmoid(x))`                                               | `linnet::silu`      |
| `0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))`          | `linnet::gelu`      |
| `0.5 * x * (1 + Erf(x / sqrt(2)))`                                 | `linnet::gelu_erf`  |
| `Exp(x - ReduceMax(x)) / ReduceSum(Exp(...))` over one axis        | `linnet::softmax`   |
| `w * (x * 1/sqrt(ReduceMean(x^2) + eps))` over the last axis       | `linnet::rms_norm`  |
| `(x - mean) / sqrt(mean((x - mean)^2) + eps) * w + b` (`layer_norm`)| `linnet::layer_norm`|

PyTorch spells RMS norm several ways (`Pow` or `Mul` for the square,
`Reciprocal(Sqrt)` or `Div(1, Sqrt)` or `Div(x, Sqrt)`, with or without the
`Cast`s of mixed precision); each is listed. The constants are exact up to
the rounding of their stored dtype: a chain with another constant (a GELU
with 0.05 for 0.044715, a square root of 3) stays as written.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from linnet.sourcegen.graph import Graph, Node, TensorInfo
from linnet.sourcegen.patterns.match import (
    Bind,
    Const,
    Either,
    Match,
    Matcher,
    Op,
    Pattern,
    Product,
    Var,
    add,
    maybe_cast,
    mul,
)

F32_REL = 2e-7  # constants stored in f32 are exact to about one ulp


def info(graph: Graph, name: str) -> TensorInfo | None:
    return graph.value_info.get(name)


def rank_of(graph: Graph, name: str) -> int | None:
    i = info(graph, name)
    return None if i is None or i.shape is None else len(i.shape)


def is_float(graph: Graph, name: str) -> bool:
    i = info(graph, name)
    return i is not None and i.dtype in ("f16", "bf16", "f32", "f64")


def reduce_axes(matcher: Matcher, node: Node) -> list[int] | None:
    """The axes a `Reduce*` node reduces (attribute or second input), None if unknown."""
    if "axes" in node.attrs:
        return [int(a) for a in node.attrs["axes"]]
    if len(node.inputs) > 1 and node.inputs[1]:
        arr = matcher.constant(node.inputs[1])
        if arr is None:
            arr = matcher.graph.constants.get(node.inputs[1])
        if arr is None and node.inputs[1] in matcher.graph.initializers:
            arr = matcher.graph.initializers[node.inputs[1]]
        return None if arr is None else [int(a) for a in np.asarray(arr).reshape(-1)]
    return None


def reduces_one_axis(matcher: Matcher, node: Node, last: bool) -> int | None:
    """The single axis (non-negative) a keepdims reduction reduces; with `last`, only the last."""
    if int(node.attrs.get("keepdims", 1)) != 1:
        return None
    axes = reduce_axes(matcher, node)
    rank = rank_of(matcher.graph, node.inputs[0])
    if axes is None or rank is None or len(axes) != 1:
        return None
    axis = axes[0] + rank if axes[0] < 0 else axes[0]
    if last and axis != rank - 1:
        return None
    return axis


def _last_axis(matcher: Matcher) -> Callable[[Node], bool]:
    return lambda node: reduces_one_axis(matcher, node, last=True) is not None


def _run(
    graph: Graph,
    roots: tuple[str, ...],
    pattern: Callable[[Matcher], Pattern],
    make: Callable[[Matcher, Match, Node], Node | None],
    describe: Callable[[Node, Match], str],
) -> list[str]:
    """Try `pattern` at every node whose op is in `roots`, last first (outermost chains)."""
    matcher = Matcher(graph)
    notes: list[str] = []
    pat = pattern(matcher)
    for node in list(reversed(graph.nodes)):
        if node.op not in roots or node.domain != "" or not node.outputs:
            continue
        if not any(n is node for n in graph.nodes):
            continue  # removed by an earlier replacement
        m = matcher.match(node.outputs[0], pat)
        if m is None:
            continue
        new = make(matcher, m, node)
        if new is None:
            continue
        new.attrs["_note"] = describe(new, m)
        matcher.replace(m, node.outputs[0], new)
    return notes


def _recovered(what: str, node: Node, m: Match) -> str:
    return f"recovered `{what}` from {len(m.nodes)} nodes ending at `{node.outputs[0]}`"


# ---------------------------------------------------------------- silu


def silu(graph: Graph) -> list[str]:
    def pattern(_: Matcher) -> Pattern:
        return mul(Var("x"), Op("Sigmoid", Var("x")))

    def make(matcher: Matcher, m: Match, root: Node) -> Node | None:
        x = m.vars["x"]
        if not is_float(graph, x):
            return None
        return Node("silu", "linnet", root.name, (x,), root.outputs, scope=root.scope)

    return _run(graph, ("Mul",), pattern, make, lambda n, m: _recovered("silu", n, m))


# ---------------------------------------------------------------- gelu


def gelu(graph: Graph) -> list[str]:
    c = math.sqrt(2.0 / math.pi)
    k = Const(0.044715, rel=F32_REL)
    # Products flatten: `0.044715 * (x * x * x)` is one product of four factors.
    cubic = Either(
        Product(k, Op("Pow", Var("x"), Const(3.0))), Product(k, Var("x"), Var("x"), Var("x"))
    )
    inner = add(Var("x"), cubic)
    tanh_arg = Either(Product(Const(c, rel=F32_REL), inner))
    tanh_form = Product(Const(0.5), Var("x"), add(Const(1.0), Op("Tanh", tanh_arg)))
    erf_arg = Either(
        Op("Div", Var("x"), Const(math.sqrt(2.0), rel=F32_REL)),
        Product(Var("x"), Const(1.0 / math.sqrt(2.0), rel=F32_REL)),
    )
    erf_form = Product(Const(0.5), Var("x"), add(Const(1.0), Op("Erf", erf_arg)))

    notes: list[str] = []
    for name, form in (("gelu", tanh_form), ("gelu_erf", erf_form)):

        def make(matcher: Matcher, m: Match, root: Node, op: str = name) -> Node | None:
            x = m.vars["x"]
            if not is_float(graph, x):
                return None
            return Node(op, "linnet", root.name, (x,), root.outputs, scope=root.scope)

        notes += _run(graph, ("Mul",), _constant_pattern(form), make, _describer(name))
    return notes


def _constant_pattern(form: Pattern) -> Callable[[Matcher], Pattern]:
    return lambda _: form


def _describer(op: str) -> Callable[[Node, Match], str]:
    return lambda n, m: _recovered(op, n, m)


# ---------------------------------------------------------------- softmax


def softmax(graph: Graph) -> list[str]:
    def pattern(matcher: Matcher) -> Pattern:
        def one_axis(node: Node) -> bool:
            return reduces_one_axis(matcher, node, last=False) is not None

        shifted = Either(
            Op("Sub", Var("x"), Op("ReduceMax", Var("x"), check=one_axis, capture="max")),
            Var("x"),
        )
        e = Bind("e", Op("Exp", shifted))
        return Op("Div", e, Op("ReduceSum", Var("e"), check=one_axis, capture="sum"))

    def make(matcher: Matcher, m: Match, root: Node) -> Node | None:
        x = m.vars["x"]
        if not is_float(graph, x):
            return None
        axis = reduces_one_axis(matcher, m.captured["sum"], last=False)
        if "max" in m.captured and reduces_one_axis(matcher, m.captured["max"], last=False) != axis:
            return None
        return Node(
            "softmax", "linnet", root.name, (x,), root.outputs, {"axis": axis}, scope=root.scope
        )

    return _run(graph, ("Div",), pattern, make, lambda n, m: _recovered("softmax", n, m))


# ---------------------------------------------------------------- rms norm


def rms_norm(graph: Graph) -> list[str]:
    def pattern(matcher: Matcher) -> Pattern:
        last = _last_axis(matcher)
        square = Either(Op("Pow", Var("xf"), Const(2.0)), Op("Mul", Var("xf"), Var("xf")))
        mean = Op("ReduceMean", square, check=last)
        denom = Op("Sqrt", add(mean, Const(None, capture="eps")))
        normalized = Either(
            mul(Var("xf"), Op("Reciprocal", denom)),
            mul(Var("xf"), Op("Div", Const(1.0), denom)),
            Op("Div", Var("xf"), denom),
        )
        return mul(Var("w"), maybe_cast(normalized))

    def make(matcher: Matcher, m: Match, root: Node) -> Node | None:
        xf, w = m.vars["xf"], m.vars["w"]
        x = xf
        producer = matcher.producers.get(xf)
        matched = {id(n) for n in m.nodes}
        if (
            producer is not None
            and producer.op == "Cast"
            and producer.domain == ""
            and all(id(u) in matched for u in matcher.consumers.get(xf, []))
            and xf not in matcher.outputs
        ):
            x = producer.inputs[0]
            m.nodes.append(producer)
        xi, xfi, wi = info(graph, x), info(graph, xf), info(graph, w)
        out = info(graph, root.outputs[0])
        if xi is None or xfi is None or wi is None or out is None:
            return None
        if wi.shape is None or xi.shape is None or len(wi.shape) != 1 or not xi.shape:
            return None
        # The standard op normalises in f32 and casts back before the weight
        # multiplies, exactly what the chain computes when it runs in f32.
        if xfi.dtype != "f32" or xi.dtype != wi.dtype or xi.dtype != out.dtype:
            return None
        if not is_float(graph, x) or wi.shape[0] != xi.shape[-1]:
            return None
        eps = m.consts["eps"]
        return Node(
            "rms_norm", "linnet", root.name, (x, w), root.outputs, {"eps": eps}, scope=root.scope
        )

    return _run(graph, ("Mul",), pattern, make, lambda n, m: _recovered("rms_norm", n, m))


def _layer_norm(graph: Graph) -> list[str]:
    from linnet.sourcegen.patterns.layer_norm import layer_norm

    return layer_norm(graph)


def _attention(graph: Graph) -> list[str]:
    from linnet.sourcegen.patterns.attention import recover_attention

    return recover_attention(graph)


def _rope(graph: Graph) -> list[str]:
    from linnet.sourcegen.patterns.attention import recover_rope

    return recover_rope(graph)


# Layer norm before RMS norm: a layer norm's tail is an RMS norm of the centred input.
PASSES: list[Callable[[Graph], list[str]]] = [
    silu,
    gelu,
    softmax,
    _layer_norm,
    rms_norm,
    _attention,
    _rope,
]
