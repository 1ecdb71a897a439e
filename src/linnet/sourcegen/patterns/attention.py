"""Attention and rotary-embedding recovery: exporters' spelled-out forms back to std calls.

Stage: pattern recovery (see `linnet.sourcegen.patterns`). Two passes:

**Attention.** PyTorch's `scaled_dot_product_attention` and eager attention
export as

    MatMul(Softmax(MatMul(q * c1, kT * c2) + mask, axis=-1), v)

(the scale also appears as one `Mul`/`Div` after the first `MatMul`, or not
at all; a `Where(IsNaN(p), 0, p)` guard, or eager attention's `Cast` to the
dtype the probabilities already have, may follow the softmax). `kT` is the
key with its last two axes swapped: a `Transpose`, the head split's
`Transpose(perm=[0, 2, 3, 1])`, or the dynamo exporter's batched transpose
`Reshape(Transpose(Reshape(k, [-1, S, D]), [0, 2, 1]), [B, H, D, S])`. Keys and
values repeated for grouped-query attention (`repeat_kv`:
`Reshape(Expand(Unsqueeze(k, 2), [B, Hk, n, S, D]), [B, Hk * n, S, D])`) are
taken back to their `Hk` heads. The mask, when present, must be a boolean
turned additive (`Where(m, 0, fill)`, or its negation, `fill` at most -1e9): a
`[Q, K]` mask (or `[1, 1, Q, K]`) gives `attention`/`grouped_attention` with
`some(mask)`, a per-row `[B, 1, Q, K]` mask `attention_rows`/`grouped_attention_rows`.
Linnet's own exporter writes std `attention`'s body: `Where(mask, scores,
-1e30)` before the softmax, heads repeated with `Reshape(k, [B, Hk, 1, S, D])`
for the unsqueeze; a softmax the softmax pass already folded (`linnet::softmax`)
is accepted. A mask whose construction is proven to be `k <= q`
(`linnet.sourcegen.patterns.causal`) becomes `causal_mask<S, S>()`, and its
subgraph goes once nothing else reads it.

Every recovery computes what the graph computes, query rows whose keys are
all masked included: a `-inf` mask's rows (NaN, or zeros behind the NaN guard)
are written after the std call, finite masks recover only where std's -1e30 is
exact (`linnet.sourcegen.patterns.attention_mask` says which forms and why).

**Rotary embeddings.** `x * cos + cat(-x[..., D/2:], x[..., :D/2]) * sin`
(rotate-half, HF Llama) over `x: [B, H, S, D]` becomes `linnet::rope`, whose
translator calls `rope` with `[S, D]` tables, or `rope_rows` with `[B, S, D]`
tables when the tables differ per batch row.
"""

from __future__ import annotations

import numpy as np

from linnet.check.dims import Dim
from linnet.sourcegen import build
from linnet.sourcegen.graph import Graph, Node
from linnet.sourcegen.patterns import attention_mask as masks
from linnet.sourcegen.patterns.causal import is_causal
from linnet.sourcegen.patterns.match import (
    Bind,
    Const,
    Either,
    Match,
    Matcher,
    Op,
    Pattern,
    Peek,
    Var,
    add,
    mul,
)
from linnet.sourcegen.patterns.passes import _run, info
from linnet.sourcegen.translate import Context, Registry, Unsupported, Value
from linnet.sourcegen.values import FLOAT_DTYPES
from linnet.syntax import ast

STD_MASKED = -1e30
"""The score `std.nn.attention` gives a masked key: `select(mask, scores, -1e30)`."""

F32_REL = 2e-7  # -1e30 stored in f32


def install(registry: Registry) -> None:
    registry.add("linnet", "attention", translate_attention)
    registry.add("linnet", "rope", translate_rope)


# ---------------------------------------------------------------- attention recovery


def recover_attention(graph: Graph) -> list[str]:
    """Replace each attention chain by `linnet::attention`; returns notes on the chains
    kept as written because std attention would differ on fully masked rows."""
    kept: list[str] = []

    def pattern(matcher: Matcher) -> Pattern:
        def last_axis(node: Node) -> bool:
            axis = int(node.attrs.get("axis", -1))
            rank = _rank(graph, node.inputs[0])
            return rank is not None and axis in (-1, rank - 1)

        key_t = Either(
            Op("Transpose", Var("k_src"), capture="kt"),
            Op(
                "Reshape",
                Op("Transpose", Op("Reshape", Var("k_src"), Var("_r1")), capture="kt3"),
                Var("_r2"),
            ),
        )
        qk = Either(
            Op(
                "MatMul",
                mul(Var("q"), Const(None, capture="c1")),
                mul(key_t, Const(None, capture="c2")),
            ),
            Op("MatMul", Var("q"), key_t),
        )
        scaled = Either(
            mul(qk, Const(None, capture="c3")),
            Op("Div", qk, Const(None, capture="d3")),
            qk,
        )
        masked = Either(
            add(
                scaled,
                Peek(
                    Op("Where", Var("mask"), Const(None, capture="m_t"), Const(None, capture="m_f"))
                ),
            ),
            # The standard library's own body (Linnet's exporter): masked scores -1e30.
            Op("Where", Var("mask"), scaled, Const(STD_MASKED, rel=F32_REL, capture="m_sel")),
            scaled,
        )

        def last_axis_recovered(node: Node) -> bool:
            rank = _rank(graph, node.inputs[0])
            return rank is not None and int(node.attrs.get("axis", -1)) == rank - 1

        # The softmax pass may already have folded a spelled-out softmax.
        probs = Bind(
            "p",
            Either(
                Op("Softmax", masked, check=last_axis),
                Op("softmax", masked, check=last_axis_recovered, domain="linnet"),
            ),
        )
        guarded = Op("Where", Op("IsNaN", probs), Const(0.0), Var("p"), capture="guard")
        # Eager attention casts the probabilities to the value's dtype (a no-op in f32).
        cast = Op("Cast", probs, capture="p_cast")
        return Op("MatMul", Either(guarded, cast, probs), Var("v_src"))

    def make(matcher: Matcher, m: Match, root: Node) -> Node | None:
        return _attention_node(graph, matcher, m, root, kept)

    notes = _run(graph, ("MatMul",), pattern, make, _describe_attention)
    return notes + kept


def _describe_attention(node: Node, m: Match) -> str:
    kind = "grouped attention" if len(node.inputs) > 6 and node.inputs[6] else "attention"
    mask = "a boolean mask" if node.inputs[3] else "no mask"
    if node.attrs.get("causal"):
        mask = "a causal mask (its construction proven `k <= q`)"
    rows = "" if node.attrs.get("causal") else masks.rows_note(str(node.attrs.get("full_rows")))
    return (
        f"recovered `{kind}` with {mask} and scale {float(node.attrs['scale']):.6g} from "
        f"{len(m.nodes)} nodes ending at `{node.outputs[0]}`{rows}"
    )


def _rank(graph: Graph, name: str) -> int | None:
    i = info(graph, name)
    return None if i is None or i.shape is None else len(i.shape)


def _shape(graph: Graph, name: str) -> tuple[object, ...] | None:
    i = info(graph, name)
    return None if i is None or i.shape is None else tuple(i.shape)


def _attention_node(
    graph: Graph, matcher: Matcher, m: Match, root: Node, kept: list[str]
) -> Node | None:
    """The `linnet::attention` node; shapes are checked by its translator (exact dims).

    `attrs["full_rows"]` says what a query row with every key masked computes
    (`attention_mask.full_rows`); a chain whose such rows std cannot write is
    kept as written unless the mask is proven causal, with a note in `kept`.

    Inputs: q, key source, value, mask, then the shape operands the translator
    needs to verify what the chain did: the batched transpose's two reshape
    targets, and each repeat's expand and reshape targets ("" when absent).
    """
    q = m.vars["q"]
    rank = _rank(graph, q)
    if rank is not None and rank != 4:
        return None
    if "p_cast" in m.captured:
        before, after = info(graph, m.vars["p"]), info(graph, m.captured["p_cast"].outputs[0])
        if before is None or after is None or before.dtype != after.dtype:
            return None
    attrs: dict[str, object] = {}
    key = m.vars["k_src"]
    extra = ["", ""]
    if "kt" in m.captured:
        perm = [int(p) for p in m.captured["kt"].attrs.get("perm", [])]
        if len(perm) != 4:
            return None
        attrs["key_perm"] = [perm[i] for i in (0, 1, 3, 2)]
    else:
        t3 = m.captured["kt3"]
        if [int(p) for p in t3.attrs.get("perm", [])] != [0, 2, 1]:
            return None
        attrs["key_perm"] = "batched"
        extra = [m.vars["_r1"], m.vars["_r2"]]
    scale = 1.0
    for c in ("c1", "c2", "c3"):
        if c in m.consts:
            scale *= m.consts[c]
    if "d3" in m.consts:
        if m.consts["d3"] == 0:
            return None
        scale /= m.consts["d3"]
    attrs["scale"] = scale
    mask = ""
    if "m_sel" in m.consts:
        attrs["negated"] = False
        attrs["std_masked"] = True  # masked scores already -1e30, as the std op
        mask = m.vars["mask"]
        if _bool_value(graph, mask) and is_causal(matcher, mask, False):
            attrs["causal"] = True
        elif not _bool_value(graph, mask):
            return None
    elif "mask" in m.vars:
        t, f = m.consts["m_t"], m.consts["m_f"]
        if t == 0.0 and f <= masks.MASK_FLOOR:
            attrs["negated"], fill = False, f
        elif f == 0.0 and t <= masks.MASK_FLOOR:
            attrs["negated"], fill = True, t
        else:
            return None
        mask = m.vars["mask"]
        attrs["full_rows"] = masks.full_rows(fill, "guard" in m.captured)
        if is_causal(matcher, mask, bool(attrs["negated"])):
            attrs["causal"] = True
        elif attrs["full_rows"] == masks.DIFFERS:
            kept.append(masks.kept_note(root.outputs[0], fill))
            return None
    v = m.vars["v_src"]
    repeats = ["", "", "", ""]
    if attrs["key_perm"] in ([0, 1, 2, 3], "batched"):
        k_heads, k_nodes, k_shapes = _unrepeat(matcher, key)
        v_heads, v_nodes, v_shapes = _unrepeat(matcher, v)
        if k_heads is not None and v_heads is not None:
            key, v = k_heads, v_heads
            m.nodes.extend(k_nodes + v_nodes)
            repeats = [*k_shapes, *v_shapes]
    inputs = (q, key, v, mask, *extra, *repeats)
    return Node("attention", "linnet", root.name, inputs, root.outputs, attrs, scope=root.scope)


def _bool_value(graph: Graph, name: str) -> bool:
    i = info(graph, name)
    return i is not None and i.dtype == "bool"


def _unrepeat(matcher: Matcher, value: str) -> tuple[str | None, list[Node], list[str]]:
    """`Reshape(Expand(Unsqueeze(x, 2), e), r)` -> (x, its nodes, [e, r]); the
    translator checks `e` is `[B, Hk, n, S, D]` and `r` is `[B, Hk * n, S, D]`.

    Linnet's exporter writes the unsqueeze as `Reshape(x, [B, Hk, 1, S, D])`
    (std `repeat_heads`); that is accepted when the shapes show exactly it."""
    graph = matcher.graph
    reshape = matcher.producers.get(value)
    if reshape is None or reshape.op != "Reshape" or len(reshape.inputs) < 2:
        return None, [], []
    expand = matcher.producers.get(reshape.inputs[0])
    if expand is None or expand.op != "Expand":
        return None, [], []
    unsq = matcher.producers.get(expand.inputs[0])
    if unsq is not None and unsq.op == "Reshape":
        before, after = _shape(graph, unsq.inputs[0]), _shape(graph, unsq.outputs[0])
        if before is None or after is None or len(before) != 4:
            return None, [], []
        if after != (*before[:2], 1, *before[2:]):
            return None, [], []
        return unsq.inputs[0], [], [expand.inputs[1], reshape.inputs[1]]
    if unsq is None or unsq.op != "Unsqueeze":
        return None, [], []
    axes = unsq.attrs.get("axes")
    if axes is None and len(unsq.inputs) > 1:
        arr = graph.constants.get(unsq.inputs[1])
        if arr is None and unsq.inputs[1] in graph.initializers:
            arr = graph.initializers[unsq.inputs[1]]
        axes = None if arr is None else [int(a) for a in np.asarray(arr).reshape(-1)]
    if axes not in ([2], [-3]):
        return None, [], []
    # The repeat stays in the graph (a `Shape` of the repeated value may still read
    # it for its extents); once nothing reads its data, dead-code removal drops it.
    return unsq.inputs[0], [], [expand.inputs[1], reshape.inputs[1]]


# ---------------------------------------------------------------- rope recovery


def recover_rope(graph: Graph) -> list[str]:
    def pattern(matcher: Matcher) -> Pattern:
        rotated = Op(
            "Concat",
            Op("Neg", Op("Slice", Var("x"), Var("_s1"), Var("_e1"), capture="upper")),
            Op("Slice", Var("x"), Var("_s2"), Var("_e2"), capture="lower"),
            capture="cat",
        )
        return add(mul(Var("x"), Var("cos")), mul(rotated, Var("sin")))

    def make(matcher: Matcher, m: Match, root: Node) -> Node | None:
        x, cos, sin = m.vars["x"], m.vars["cos"], m.vars["sin"]
        xs = _shape(graph, x)
        if xs is None or len(xs) != 4 or not isinstance(xs[3], int) or xs[3] % 2:
            return None
        d = xs[3]
        if not _concat_last(m.captured["cat"], 4):
            return None
        if not _slice_is(matcher, m.captured["upper"], d // 2, d) or not _slice_is(
            matcher, m.captured["lower"], 0, d // 2
        ):
            return None
        for table in (cos, sin):
            ts = _shape(graph, table)
            if ts is None or ts[-1] != d or len(ts) not in (2, 4):
                return None
            if len(ts) == 4 and ts[1] != 1:
                return None
            if info(graph, table) is None or info(graph, table).dtype != info(graph, x).dtype:  # type: ignore[union-attr]
                return None
        return Node("rope", "linnet", root.name, (x, cos, sin), root.outputs, scope=root.scope)

    return _run(
        graph,
        ("Add",),
        pattern,
        make,
        lambda n, m: f"recovered `rope` from {len(m.nodes)} nodes ending at `{n.outputs[0]}`",
    )


def _concat_last(node: Node, rank: int) -> bool:
    axis = int(node.attrs.get("axis", 0))
    return axis in (-1, rank - 1)


def _slice_is(matcher: Matcher, node: Node, start: int, stop: int) -> bool:
    """A `Slice` of the last axis from `start` to `stop` (an end past the axis counts)."""
    graph = matcher.graph

    def ints(i: int) -> list[int] | None:
        if i >= len(node.inputs) or not node.inputs[i]:
            return None
        name = node.inputs[i]
        arr = graph.constants.get(name)
        if arr is None and name in graph.initializers:
            arr = graph.initializers[name]
        if arr is None:
            arr = matcher.constant(name)
        return None if arr is None else [int(a) for a in np.asarray(arr).reshape(-1)]

    if node.opset and node.opset < 10:
        starts, ends = node.attrs.get("starts"), node.attrs.get("ends")
        axes, steps = node.attrs.get("axes"), None
    else:
        starts, ends, axes, steps = ints(1), ints(2), ints(3), ints(4)
    rank = _rank(graph, node.inputs[0])
    if starts is None or ends is None or rank is None or len(starts) != 1 or len(ends) != 1:
        return False
    if axes is not None and (len(axes) != 1 or axes[0] not in (-1, rank - 1)):
        return False
    if axes is None and rank != 1:
        return False
    if steps is not None and steps != [1]:
        return False
    end = ends[0]
    return starts[0] == start and (
        end == stop or (stop > start and end >= stop and end > (1 << 30))
    )


# ---------------------------------------------------------------- translators


def translate_attention(ctx: Context) -> None:
    q, key, v = ctx.need(0), ctx.need(1), ctx.need(2)
    mask = ctx.input(3)
    if q.rank != 4 or key.rank != 4 or v.rank != 4:
        raise Unsupported("attention over [B, H, S, D] only")
    if not (q.dtype == key.dtype == v.dtype) or q.dtype not in FLOAT_DTYPES:
        raise Unsupported("query, key and value must share a float dtype")
    groups = 1
    if ctx.input(6) is not None:
        # Keys and values repeated per group of query heads (checked on the sources).
        groups = _groups(ctx, tuple(key.shape), 6)
        if _groups(ctx, tuple(v.shape), 8) != groups:
            raise Unsupported("keys and values are repeated differently")
    key_expr, key_shape = _key(ctx, key, groups)
    b, h, nq, d = q.shape
    kb, kh, nk, kd = key_shape
    if not ctx.equal(kh * groups, h) or not ctx.equal(v.shape[1], kh):
        raise Unsupported("query heads must be a multiple of key heads")
    for a, bb in ((kb, b), (v.shape[0], b), (kd, d), (v.shape[2], nk)):
        if not ctx.equal(a, bb):
            raise Unsupported("query, key and value shapes do not line up")
    rows = False
    m_expr = None
    # What a query row with every key masked computes in the graph (std gives the mean).
    full_rows = str(ctx.attr("full_rows", masks.MEAN))
    seen: masks.Visibility | None = None
    if mask is not None:
        negated = bool(ctx.attr("negated", False))
        m_expr, rows = masks.boolean_mask(ctx, mask, b, nq, nk, negated)
        if ctx.attr("causal", False) and ctx.equal(nq, nk):
            # The mask's subgraph computes `k <= q` (proven when recovering); with
            # as many keys as queries that is the std causal mask (every row sees
            # a key), and the subgraph, read by nothing else, is dropped after
            # translation.
            cm = ctx.std("nn.attention", "causal_mask")
            m_expr, rows = build.call(cm, generics=[ctx.dim(nq), ctx.dim(nk)]), False
            full_rows = masks.MEAN
        elif full_rows == masks.DIFFERS:
            raise Unsupported("a row with every key masked would differ from std attention")
        elif full_rows != masks.MEAN:
            # The mask, bound to a local: read by the call and by the test for rows
            # that see no key.
            dims = [b, nq, nk] if rows else [nq, nk]
            seen = masks.visibility(ctx, mask, m_expr, rows, dims, negated)
            m_expr = ctx.ref(seen.mask)
    name = ("grouped_" if groups != 1 else "") + "attention" + ("_rows" if rows else "")
    fn = ctx.std("nn.attention", name)
    scale = float(np.float32(float(ctx.attr("scale"))))
    args = [ctx.ref(q), key_expr, ctx.ref(v), ctx.literal(scale, "f32")]
    if m_expr is not None:
        args.append(m_expr if rows else build.some(m_expr))
    shape = (b, h, nq, v.shape[3])
    attended = ctx.let(build.call(fn, *args), shape, q.dtype, "attended")
    if seen is not None:
        attended = masks.write_full_rows(ctx, attended, seen, full_rows)
    ctx.output(0, attended)


def _key(ctx: Context, key: Value, groups: int) -> tuple[ast.Expr, tuple[Dim, ...]]:
    """The key as `[B, H, K, D]`: the source, permuted as the chain did (the chain
    transposed the key after repeating its heads `groups` times)."""
    perm = ctx.attr("key_perm")
    if perm == "batched":
        # Reshape(Transpose(Reshape(k, r1), [0, 2, 1]), r2) swaps the last two axes
        # exactly when r1 merges the leading axes and r2 splits them back.
        b, h, n, d = key.shape
        h = h * groups
        r1, r2 = ctx.elements(4), ctx.elements(5)
        assert r1 is not None and r2 is not None
        if len(r1) != 3 or len(r2) != 4:
            raise Unsupported("not a batched transpose")
        lead = r1[0]
        if lead.as_int() == -1:
            lead = b * h
        if not all(
            ctx.equal(x, y) for x, y in zip((lead, r1[1], r1[2]), (b * h, n, d), strict=True)
        ):
            raise Unsupported("not a batched transpose")
        if not all(ctx.equal(x, y) for x, y in zip(r2, (b, h, d, n), strict=True)):
            raise Unsupported("not a batched transpose")
        return ctx.ref(key), tuple(key.shape)
    p = [int(x) for x in perm]
    if p == [0, 1, 2, 3]:
        return ctx.ref(key), tuple(key.shape)
    if groups != 1:
        raise Unsupported("a repeated key transposed another way")
    shape = tuple(key.shape[i] for i in p)
    expr = build.call("permute", ctx.ref(key), build.shape([build.int_lit(i) for i in p]))
    return expr, shape


def _groups(ctx: Context, shape: tuple[Dim, ...], at: int) -> int:
    """The repeat count of `Reshape(Expand(Unsqueeze(x, 2), e), r)`, checking `e` and `r`."""
    e, r = ctx.elements(at), ctx.elements(at + 1)
    if e is None or r is None or len(e) != 5 or len(r) != 4:
        raise Unsupported("not a head repeat")
    b, hk, s, d = shape
    n = e[2].as_int()
    if n is None or n < 1:
        raise Unsupported("the repeat count must be a constant")
    if not all(
        ctx.equal(x, y) for x, y in zip((e[0], e[1], e[3], e[4]), (b, hk, s, d), strict=True)
    ):
        raise Unsupported("not a head repeat")
    # The reshape target may copy the batch extent (0) and infer one extent (-1):
    # with every other extent as expected, the inferred one is the expected one.
    misses = [
        i
        for i, (x, y) in enumerate(zip(r, (b, hk * n, s, d), strict=True))
        if not (ctx.equal(x, y) or (i == 0 and x.as_int() == 0))
    ]
    if len(misses) > 1 or (misses and r[misses[0]].as_int() != -1):
        raise Unsupported("not a head repeat")
    return n


def translate_rope(ctx: Context) -> None:
    x, cos, sin = ctx.need(0), ctx.need(1), ctx.need(2)
    b, _h, s, d = x.shape
    tables: list[ast.Expr] = []
    rows = False
    for t in (cos, sin):
        if t.rank == 4 and not ctx.equal(t.shape[0], Dim.const(1)):
            rows = True
    for t in (cos, sin):
        e = ctx.ref(t)
        if t.rank == 4:
            target = [b, s, d] if rows else [s, d]
            e = build.call("reshape", e, ctx.shape_lit(target))
        tables.append(e)
    fn = ctx.std("nn.rope", "rope_rows" if rows else "rope")
    ctx.output(0, ctx.let(build.call(fn, ctx.ref(x), *tables), x.shape, x.dtype, "rotated"))


__all__ = ["install", "recover_attention", "recover_rope"]
_unused = (Pattern, Const, Either)
