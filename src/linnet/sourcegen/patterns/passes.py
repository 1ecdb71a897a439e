"""Recovery passes for elementwise and normalisation chains.

Each pass finds a decomposed chain and replaces it with one `linnet` domain
node that `linnet.sourcegen.patterns.emit` translates to a standard-library
call:

| chain (ONNX operator names)                                        | node                |
| ------------------------------------------------------------------ | ------------------- |
| `Mul(x, Sigmoid(x))` (or `x * (1 / (1 + Exp(-x)))`)                | `linnet::silu`      |
| `0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))`          | `linnet::gelu`      |
| `0.5 * x * (1 + Erf(x / sqrt(2)))`                                 | `linnet::gelu_erf`  |
| `Exp(x - ReduceMax(x)) / ReduceSum(Exp(...))` over one axis        | `linnet::softmax`   |
| `w * (x * 1/sqrt(ReduceMean(x^2) + eps))` over the last axis       | `linnet::rms_norm`  |
| `(x - mean) / sqrt(mean((x - mean)^2) + eps) * w + b` (`layer_norm`)| `linnet::layer_norm`|

Linnet's own exporter writes std `rms_norm` with the sum of squares as a
batched `MatMul` of `x` reshaped to a row and a column, then `/ H`, `+ eps`,
`Reciprocal(Sqrt)` reshaped to `[*S, 1]`; that form is matched too, each
reshape checked to be exactly the one the standard body implies.

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


def stored_info(graph: Graph, name: str) -> TensorInfo | None:
    """`info`, or for a stored tensor without value info (an initializer that is
    not a graph input), its shape and dtype from the array."""
    found = info(graph, name)
    if found is not None:
        return found
    arr = graph.initializers.get(name)
    if arr is None:
        return None
    from linnet.sourcegen.translate import numpy_dtype_name

    return TensorInfo(name, numpy_dtype_name(arr.dtype), tuple(int(d) for d in arr.shape))


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
    removed: set[int] = set()  # ids of the nodes earlier replacements took out
    for node in list(reversed(graph.nodes)):
        if node.op not in roots or node.domain != "" or not node.outputs:
            continue
        if id(node) in removed:
            continue  # removed by an earlier replacement
        m = matcher.match(node.outputs[0], pat)
        if m is None:
            continue
        new = make(matcher, m, node)
        if new is None:
            continue
        new.attrs["_note"] = describe(new, m)
        matcher.replace(m, node.outputs[0], new)
        removed.update(id(n) for n in m.nodes)
    return notes


def uncast_input(matcher: Matcher, m: Match, xf: str) -> str:
    """The input a norm's statistics are computed from, before a widening `Cast`.

    PyTorch's mixed-precision norms cast `x` to f32 first; when that `Cast`
    feeds only the matched chain (and is no graph output), it joins the match
    and the norm reads `x` itself. Otherwise `xf` is the input.
    """
    producer = matcher.producers.get(xf)
    matched = {id(n) for n in m.nodes}
    if (
        producer is not None
        and producer.op == "Cast"
        and producer.domain == ""
        and all(id(u) in matched for u in matcher.consumers.get(xf, []))
        and xf not in matcher.outputs
    ):
        m.nodes.append(producer)
        return producer.inputs[0]
    return xf


def _recovered(what: str, node: Node, m: Match) -> str:
    return f"recovered `{what}` from {len(m.nodes)} nodes ending at `{node.outputs[0]}`"


# ---------------------------------------------------------------- silu


def silu(graph: Graph) -> list[str]:
    def pattern(_: Matcher) -> Pattern:
        # Sigmoid as an op, or as its definition `1 / (1 + exp(-x))` (Linnet's
        # exporter without native ops).
        spelled = Op("Div", Const(1.0), add(Const(1.0), Op("Exp", Op("Neg", Var("x")))))
        return mul(Var("x"), Either(Op("Sigmoid", Var("x")), spelled))

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
    present = {node.op for node in graph.nodes if node.domain == ""}
    for name, form, needs in (("gelu", tanh_form, "Tanh"), ("gelu_erf", erf_form, "Erf")):
        if needs not in present:
            continue  # the form reads a `Tanh` / `Erf` node: none, no match (a Llama has none)

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

    notes = _run(graph, ("Div",), _linnet_softmax, _linnet_softmax_node, _softmax_note)
    return notes + _run(graph, ("Div",), pattern, make, _softmax_note)


def _softmax_note(node: Node, m: Match) -> str:
    return _recovered("softmax", node, m)


def _linnet_softmax(_: Matcher) -> Pattern:
    """Linnet's exporter's spelling of std `softmax` (its canonical body, in f32):
    `e = Exp(x - Reshape(ReduceMax(x, [-1], keepdims=0), [*S, 1]))`, then
    `e / Reshape(ReduceSum(e, [-1], keepdims=0), [*S, 1])`."""
    peak = Op("Reshape", Op("ReduceMax", Var("x"), capture="max"), Var("_p"), capture="peak")
    e = Bind("e", Op("Exp", Op("Sub", Var("x"), peak)))
    total = Op("Reshape", Op("ReduceSum", Var("e"), capture="sum"), Var("_t"), capture="total")
    return Op("Div", e, total)


def _linnet_softmax_node(matcher: Matcher, m: Match, root: Node) -> Node | None:
    graph = matcher.graph
    x = m.vars["x"]
    xi = info(graph, x)
    if xi is None or xi.shape is None or not xi.shape or xi.dtype != "f32":
        return None
    last = len(xi.shape) - 1
    kept = (*xi.shape[:-1], 1)
    for reduce, reshaped in (("max", "peak"), ("sum", "total")):
        node = m.captured[reduce]
        if int(node.attrs.get("keepdims", 1)) != 0:
            return None
        if reduce_axes(matcher, node) not in ([-1], [last]):
            return None
        out = info(graph, m.captured[reshaped].outputs[0])
        if out is None or out.shape is None or tuple(out.shape) != kept:
            return None
    return Node(
        "softmax", "linnet", root.name, (x,), root.outputs, {"axis": last}, scope=root.scope
    )


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
            _linnet_rms_normalized(),
        )
        return mul(Var("w"), maybe_cast(normalized))

    def make(matcher: Matcher, m: Match, root: Node) -> Node | None:
        xf, w = m.vars["xf"], m.vars["w"]
        x = uncast_input(matcher, m, xf)
        xi, xfi, wi = info(graph, x), info(graph, xf), stored_info(graph, w)
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
        if "sum" in m.captured and not _linnet_rms_shapes(graph, m, xfi.shape):
            return None
        eps = m.consts["eps"]
        return Node(
            "rms_norm", "linnet", root.name, (x, w), root.outputs, {"eps": eps}, scope=root.scope
        )

    return _run(graph, ("Mul",), pattern, make, lambda n, m: _recovered("rms_norm", n, m))


def _linnet_rms_normalized(x: Pattern | None = None) -> Pattern:
    """`xf * Reshape(Reciprocal(Sqrt(Reshape(MatMul(xf_row, xf_col)) / H + eps)))`.

    Linnet's exporter writes std `rms_norm`'s `sum[h] xf * xf` as a batched
    `MatMul` of `xf` reshaped to `[*S, 1, H]` and `[*S, H, 1]`, `rsqrt` as
    `Reciprocal(Sqrt)`, and the row statistic broadcast back with a reshape to
    `[*S, 1]`; `_linnet_rms_shapes` checks every reshape is exactly that.
    """
    var = "xf" if x is None else "d"
    dots = Op(
        "MatMul",
        Op("Reshape", Var(var), Var("_row"), capture="row"),
        Op("Reshape", Var(var), Var("_col"), capture="col"),
        capture="sum",
    )
    mean = Op("Div", Op("Reshape", dots, Var("_ms"), capture="ms"), Const(None, capture="h"))
    denom = Op("Sqrt", add(mean, Const(None, capture="eps")))
    inverse = Op("Reshape", Op("Reciprocal", denom), Var("_inv"), capture="inv")
    # `x` (the layer norm's centred value, bound as `d`) is matched first.
    return mul(Var("xf") if x is None else x, inverse)


def _linnet_rms_shapes(graph: Graph, m: Match, shape: tuple[object, ...] | None) -> bool:
    """The reshapes of `_linnet_rms_normalized` over `xf: [*S, H]`, and the divisor `H`."""
    if shape is None or not shape:
        return False
    lead, h = tuple(shape[:-1]), shape[-1]
    if not isinstance(h, int) or m.consts.get("h") != float(h):
        return False
    expected = {
        "row": (*lead, 1, h),
        "col": (*lead, h, 1),
        "sum": (*lead, 1, 1),
        "ms": lead,
        "inv": (*lead, 1),
    }
    for key, want in expected.items():
        got = info(graph, m.captured[key].outputs[0])
        if got is None or got.shape is None or tuple(got.shape) != want:
            return False
    return True


def _layer_norm(graph: Graph) -> list[str]:
    from linnet.sourcegen.patterns.layer_norm import layer_norm

    return layer_norm(graph)


def _attention(graph: Graph) -> list[str]:
    from linnet.sourcegen.patterns.attention import recover_attention

    return recover_attention(graph)


def _rope(graph: Graph) -> list[str]:
    from linnet.sourcegen.patterns.attention import recover_rope

    return recover_rope(graph)


def _linear(graph: Graph) -> list[str]:
    from linnet.sourcegen.patterns.linear import recover_linear

    return recover_linear(graph)


def _write_span(graph: Graph) -> list[str]:
    from linnet.sourcegen.patterns.cache import recover_write_span

    return recover_write_span(graph)


# Layer norm before RMS norm: a layer norm's tail is an RMS norm of the centred input.
PASSES: list[Callable[[Graph], list[str]]] = [
    silu,
    gelu,
    softmax,
    _layer_norm,
    rms_norm,
    _attention,
    _rope,
    _write_span,
    _linear,
]
