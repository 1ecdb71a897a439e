"""A tiny, framework-neutral registry for testing the importer back half.

The ONNX importer's real translators live in `linnet.onnx.importer.ops`; these
few (arithmetic, a matrix product, a sigmoid) let the tests drive
`linnet.sourcegen` on hand-built graphs without any framework.
"""

from __future__ import annotations

import numpy as np

from linnet.pipeline import check_source
from linnet.sourcegen import build
from linnet.sourcegen.graph import Graph, Node, TensorInfo
from linnet.sourcegen.layout import Layout
from linnet.sourcegen.module import assemble, format_module
from linnet.sourcegen.patterns import recover
from linnet.sourcegen.patterns.emit import install
from linnet.sourcegen.translate import Context, Registry, Translation, Unsupported, translate

REGISTRY = Registry("test")
install(REGISTRY)

_OPS = {"Add": "+", "Sub": "-", "Mul": "*", "Div": "/"}


@REGISTRY.register("Add", "Sub", "Mul", "Div")
def _arith(ctx: Context) -> None:
    a, b = ctx.need(0), ctx.need(1)
    if a.const is not None and b.const is not None:
        fn = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}
        ctx.output(0, ctx.constant(fn[ctx.node.op](a.const, b.const).astype(a.const.dtype)))
        return
    shape = ctx.broadcast(a.shape, b.shape)
    expr = build.binary(_OPS[ctx.node.op], ctx.ref(a), ctx.ref(b))
    ctx.output(0, ctx.let(expr, shape, a.dtype, ctx.node.op.lower()))


@REGISTRY.register("Sigmoid", "Exp", "Sqrt", "Tanh", "Neg", "Reciprocal")
def _unary(ctx: Context) -> None:
    x = ctx.need(0)
    op = ctx.node.op
    if op == "Sigmoid":
        expr = build.call(ctx.std("nn.activations", "sigmoid"), ctx.ref(x))
    elif op == "Neg":
        expr = build.unary("-", ctx.ref(x))
    elif op == "Reciprocal":
        expr = build.binary("/", build.float_lit(1.0), ctx.ref(x))
    else:
        expr = build.call(op.lower(), ctx.ref(x))
    ctx.output(0, ctx.let(expr, x.shape, x.dtype, op.lower()))


@REGISTRY.register("Pow")
def _pow(ctx: Context) -> None:
    x, e = ctx.need(0), ctx.const(1)
    if e is None or float(e) != 2.0:
        raise Unsupported("only squares")
    ctx.output(0, ctx.let(build.binary("*", ctx.ref(x), ctx.ref(x)), x.shape, x.dtype, "square"))


@REGISTRY.register("ReduceMean", "ReduceSum", "ReduceMax")
def _reduce_last(ctx: Context) -> None:
    x = ctx.need(0)
    axes = ctx.attr("axes")
    if axes not in ([-1], [x.rank - 1]) or x.rank != 2:
        raise Unsupported("the last axis of a matrix only")
    i, j = ctx.indices(2)
    kind = {"ReduceMean": "sum", "ReduceSum": "sum", "ReduceMax": "max"}[ctx.node.op]
    body = build.reduction(kind, [j], build.index(ctx.ref(x), [build.name(i), build.name(j)]))
    red = ctx.comprehension([i], body, x.shape[:1], x.dtype, "reduced")
    expr = ctx.ref(red)
    if ctx.node.op == "ReduceMean":
        expr = build.binary(
            "/", expr, build.call("cast", ctx.dim(x.shape[1]), generics=[build.named_type(x.dtype)])
        )
    shape = (x.shape[0], x.shape[1] * 0 + 1)
    ctx.output(
        0, ctx.let(build.call("reshape", expr, ctx.shape_lit(shape)), shape, x.dtype, "kept")
    )


@REGISTRY.register("MatMul")
def _matmul(ctx: Context) -> None:
    a, b = ctx.need(0), ctx.need(1)
    if a.rank != 2 or b.rank != 2:
        raise Unsupported("matrices only")
    i, k, j = ctx.indices(3)
    prod = build.binary(
        "*",
        build.index(ctx.ref(a), [build.name(i), build.name(k)]),
        build.index(ctx.ref(b), [build.name(k), build.name(j)]),
    )
    body = build.reduction("sum", [k], prod)
    ctx.output(0, ctx.comprehension([i, j], body, (a.shape[0], b.shape[1]), a.dtype, "product"))


def node(op: str, inputs: list[str], outputs: list[str], **attrs: object) -> Node:
    return Node(op, "", "", tuple(inputs), tuple(outputs), dict(attrs))


def graph(
    nodes: list[Node],
    inputs: list[TensorInfo],
    outputs: list[TensorInfo],
    initializers: dict[str, np.ndarray] | None = None,
    constants: dict[str, np.ndarray] | None = None,
    value_info: list[TensorInfo] | None = None,
) -> Graph:
    g = Graph("g", inputs, outputs, nodes, initializers or {}, constants or {})
    for info in [*inputs, *outputs, *(value_info or [])]:
        g.value_info[info.name] = info
    return g


def lower(g: Graph, *, patterns: bool = True) -> tuple[str, Translation, list[str]]:
    """Recover, translate, assemble and format `g`; the text must check."""
    notes = recover(g) if patterns else []
    stored = [(n, tuple(a.shape), "f32") for n, a in g.initializers.items()]
    layout = Layout.plan(stored, dict(g.paths))
    t = translate(g, REGISTRY, layout)
    assert not t.refusals, [str(r) for r in t.refusals]
    text = format_module(assemble(t, layout, module_name="generated"))
    program = check_source(text, "generated.linnet")
    errors = [d for d in program.diagnostics if d.is_error]
    assert not errors, (text, errors)
    return text, t, notes + t.notes
