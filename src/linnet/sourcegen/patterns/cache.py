"""KV-cache writes spelled out, back to `std.nn.cache::write_span`.

Stage: pattern recovery (see `linnet.sourcegen.patterns`). Linnet's exporter
writes std `write_span(cache, value, at)` (positions `[at, at + N)` of a
`[B, H, S, D]` cache take `value[:, :, s - at]`) as its canonical body:

    off    = Range(0, S, 1) - at
    inside = (off >= 0) & (off < N)
    source = Min(Max(off, 0), N - 1)
    out    = Where(Reshape(inside, [S, 1]), Gather(value, source, axis=2), cache)

The chain becomes one `linnet::write_span` node (inputs cache, value, at);
its translator checks the shapes (cache and value equal but on the position
axis, `S` and `N` the extents the constants say, `at` an `i32` scalar) and
writes the call, or the chain stays as written. The constants are exact: a
span clamped to another bound, or a range from 1, is not this write.
"""

from __future__ import annotations

from linnet.sourcegen import build
from linnet.sourcegen.graph import Graph, Node
from linnet.sourcegen.patterns.match import Bind, Const, Match, Matcher, Op, Pattern, Peek, Var
from linnet.sourcegen.patterns.passes import _run, info
from linnet.sourcegen.translate import Context, Registry, Unsupported
from linnet.sourcegen.values import FLOAT_DTYPES


def install(registry: Registry) -> None:
    registry.add("linnet", "write_span", translate_write_span)


def recover_write_span(graph: Graph) -> list[str]:
    """Replace each spelled-out `write_span` with a `linnet::write_span` node."""

    def pattern(_: Matcher) -> Pattern:
        # The position range may be shared with another write: it stays (dead
        # code removal drops it once nothing reads it).
        positions = Peek(Op("Range", Const(0.0), Const(None, capture="s"), Const(1.0)))
        offset = Bind("off", Op("Sub", positions, Var("at")))
        inside = Op(
            "And",
            Op("GreaterOrEqual", offset, Const(0.0)),
            Op("Less", Var("off"), Const(None, capture="n")),
        )
        source = Op("Min", Op("Max", Var("off"), Const(0.0)), Const(None, capture="last"))
        taken = Op("Gather", Var("value"), source, attrs={"axis": 2}, capture="gather")
        return Op("Where", Op("Reshape", inside, Var("_rows"), capture="rows"), taken, Var("cache"))

    def make(matcher: Matcher, m: Match, root: Node) -> Node | None:
        cache, value, at = m.vars["cache"], m.vars["value"], m.vars["at"]
        cs, vs = _shape(graph, cache), _shape(graph, value)
        at_info = info(graph, at)
        if cs is None or vs is None or len(cs) != 4 or len(vs) != 4:
            return None
        if at_info is None or at_info.dtype != "i32" or at_info.shape != ():
            return None
        s, n = cs[2], vs[2]
        if not isinstance(s, int) or not isinstance(n, int) or n < 1:
            return None
        if m.consts["s"] != s or m.consts["n"] != n or m.consts["last"] != n - 1:
            return None
        if (cs[0], cs[1], cs[3]) != (vs[0], vs[1], vs[3]):
            return None
        if _shape(graph, m.captured["rows"].outputs[0]) != (s, 1):
            return None
        if _shape(graph, root.outputs[0]) != cs:
            return None
        return Node("write_span", "linnet", root.name, (cache, value, at), root.outputs,
                    scope=root.scope)  # fmt: skip

    return _run(graph, ("Where",), pattern, make, _describe)


def _describe(node: Node, m: Match) -> str:
    return f"recovered `write_span` from {len(m.nodes)} nodes ending at `{node.outputs[0]}`"


def _shape(graph: Graph, name: str) -> tuple[object, ...] | None:
    i = info(graph, name)
    return None if i is None or i.shape is None else tuple(i.shape)


def translate_write_span(ctx: Context) -> None:
    cache, value, at = ctx.need(0), ctx.need(1), ctx.need(2)
    if cache.rank != 4 or value.rank != 4 or cache.dtype != value.dtype:
        raise Unsupported("the cache and the value must be [B, H, S, D] of one dtype")
    if cache.dtype not in FLOAT_DTYPES:
        raise Unsupported("write_span writes float caches")
    if at.dtype != "i32" or not at.is_scalar:
        raise Unsupported("the position must be an i32 scalar")
    for a in (0, 1, 3):
        if not ctx.equal(cache.shape[a], value.shape[a]):
            raise Unsupported("the value does not line up with the cache")
    fn = ctx.std("nn.cache", "write_span")
    expr = build.call(fn, ctx.ref(cache), ctx.ref(value), ctx.ref(at))
    ctx.output(0, ctx.let(expr, cache.shape, cache.dtype, "written"))
