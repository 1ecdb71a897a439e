"""ONNX `Attention` (opset 23+) and `RotaryEmbedding` -> `std.nn.attention` or index notation.

Stage: ONNX import, translation. A plain self-attention (4-D heads-first
inputs, no mask or a causal one over equal query and key lengths, no cache,
no softcap, only `Y` wanted) calls `std.nn.attention::attention` or
`grouped_attention` with `causal_mask<S, S>()`. Everything else the operator
offers (3-D inputs split into heads, past keys and values with `present_*`
outputs, boolean or additive masks of any broadcast rank shorter than the
keys, causal masks offset by the cache, sliding windows, `nonpad_kv_seqlen`,
softcap, the four `qk_matmul_output` modes, fully masked rows giving zeros) is
written out in index notation in f32, following the operator's definition
step by step. `RotaryEmbedding` becomes one comprehension over position
tables (rotate-half or interleaved pairs, partial rotation).
"""

from __future__ import annotations

import math

from linnet.check.dims import Dim
from linnet.onnx.importer.graph import translator
from linnet.onnx.importer.ops._common import FLOAT_DTYPES, cast
from linnet.onnx.importer.ops.reduce import access
from linnet.onnx.importer.ops.shapes import permuted, reshaped
from linnet.onnx.importer.ops.slicing import position_table
from linnet.sourcegen import build
from linnet.sourcegen.translate import Context, Unsupported
from linnet.sourcegen.values import Value
from linnet.syntax import ast

F = build.float_lit


def _heads(ctx: Context, v: Value, heads: int | None, what: str) -> Value:
    """`[B, S, H * D]` -> `[B, H, S, D]`; 4-D inputs pass unchanged."""
    if v.rank == 4:
        return v
    if v.rank != 3 or not heads:
        raise Unsupported(f"{what} must be 4-D, or 3-D with the number of heads")
    b, s, hidden = v.shape
    head = ctx.simplify(hidden // Dim.const(heads))
    if not ctx.equal(head * heads, hidden):
        if hidden.as_int() is not None:
            raise Unsupported(f"{hidden} does not split into {heads} heads")
        ctx.require(hidden % Dim.const(heads), "==", Dim.const(0))
    split = reshaped(ctx, v, [b, s, Dim.const(heads), head], f"{what}_split")
    return permuted(ctx, split, [0, 2, 1, 3], f"{what}_heads")


def _wants(ctx: Context, i: int) -> bool:
    return ctx.n_outputs > i and bool(ctx.node.outputs[i])


def _neg_inf(ctx: Context) -> ast.Expr:
    return ctx.literal(-math.inf, "f32")


@translator("Attention")
def attention(ctx: Context) -> None:
    q_in, k_in, v_in = ctx.need(0), ctx.need(1), ctx.need(2)
    mask, past_k, past_v = ctx.input(3), ctx.input(4), ctx.input(5)
    nonpad = ctx.input(6)
    T = q_in.dtype
    if T not in FLOAT_DTYPES or k_in.dtype != T or v_in.dtype != T:
        raise Unsupported(f"Attention of {T}")
    if (past_k is None) != (past_v is None):
        raise Unsupported("past_key without past_value")
    q = _heads(ctx, q_in, ctx.attr("q_num_heads", None), "query")
    k = _heads(ctx, k_in, ctx.attr("kv_num_heads", None), "key")
    v = _heads(ctx, v_in, ctx.attr("kv_num_heads", None), "value")
    B, H, S, D = q.shape
    Hk = k.shape[1]
    scale_attr = ctx.attr("scale", None)
    is_causal = bool(ctx.attr("is_causal", 0))
    softcap = float(ctx.attr("softcap", 0.0))
    mode = int(ctx.attr("qk_matmul_output_mode", 0))
    left = int(ctx.attr("left_window_size", -1))
    right = int(ctx.attr("right_window_size", -1))
    if past_k is not None and past_v is not None:
        k = _concat_seq(ctx, past_k, k, "present_key")
        v = _concat_seq(ctx, past_v, v, "present_value")
    L = k.shape[2]
    d_int = D.as_int()
    if scale_attr is not None:
        scale = float(scale_attr)
    elif d_int is not None:
        scale = 1.0 / math.sqrt(d_int)
    else:
        scale = math.nan
    simple = (
        mask is None
        and past_k is None
        and nonpad is None
        and softcap == 0.0
        and left < 0
        and right < 0
        and not any(_wants(ctx, i) for i in (1, 2, 3))
        and q_in.rank == 4
        and (not is_causal or ctx.equal(S, L))
        and not math.isnan(scale)
        and ctx.equal(v.shape[3], D)
        and int(ctx.attr("softmax_precision", 1)) in (1, 0)
        and T == "f32"
    )
    if simple:
        ctx.output(0, _std_attention(ctx, q, k, v, scale, is_causal))
        return
    rep = _group(ctx, H, Hk)
    f32 = "f32"
    narrow = f32 != T
    if math.isnan(scale):
        raise Unsupported("a symbolic head size without a scale")
    # As the operator defines it: Q * sqrt(scale) and K * sqrt(scale) in T, scores in
    # T; a narrow T is rounded at the same steps so f16/bf16 results match.
    root = math.sqrt(scale)
    qf = _scaled(ctx, q, root, narrow, "query")
    kf = _scaled(ctx, k, root, narrow, "key")
    vf = v if not narrow else ctx.let(cast(ctx.ref(v), f32), v.shape, f32, "value_f32")
    kv_head = (
        None
        if rep == 1
        else ctx.let(
            build.binary(
                "/",
                build.call("iota", ctx.dim(H), generics=[build.named_type("i64")]),
                build.int_lit(rep),
            ),
            (H,),
            "i64",
            "kv_head",
        )
    )
    b, h, i, j, d = ctx.indices(5)
    kvh: str | ast.Expr = h if kv_head is None else access(ctx, kv_head, [h])
    dot = build.binary("*", access(ctx, qf, [b, h, i, d]), access(ctx, kf, [b, kvh, j, d]))
    raw: ast.Expr = build.reduction("sum", [d], dot)
    if narrow:
        raw = cast(cast(build.paren(raw), T), f32)
    scores = ctx.comprehension([b, h, i, j], raw, (B, H, S, L), f32, "scores")
    if softcap > 0:
        capped = build.binary(
            "*", F(softcap), build.call("tanh", build.binary("/", ctx.ref(scores), F(softcap)))
        )
        scores = ctx.let(capped, scores.shape, f32, "capped")
    bias = _bias(ctx, mask, is_causal, left, right, nonpad, past_k, B, H, S, L)
    if bias is not None:
        b2, h2, i2, j2 = ctx.indices(4)
        total = build.binary(
            "+",
            access(ctx, scores, [b2, h2, i2, j2]),
            _read_bias(ctx, bias, [b2, h2, i2, j2], (B, H, S, L)),
        )
        biased = ctx.comprehension([b2, h2, i2, j2], total, (B, H, S, L), f32, "biased")
    else:
        biased = scores
    probs = _masked_softmax(ctx, biased, bias, (B, H, S, L))
    if narrow:
        probs = ctx.let(cast(cast(ctx.ref(probs), T), f32), probs.shape, f32, "probs")
    e = ctx.indices(1, hints="e")[0]
    b3, h3, i3, j3 = ctx.indices(4, hints="bhqk")
    while e in (b3, h3, i3, j3):
        e += "e"
    kvh3: str | ast.Expr = h3 if kv_head is None else access(ctx, kv_head, [h3])
    weighted = build.reduction(
        "sum",
        [j3],
        build.binary("*", access(ctx, probs, [b3, h3, i3, j3]), access(ctx, vf, [b3, kvh3, j3, e])),
    )
    Dv = v.shape[3]
    out = ctx.comprehension([b3, h3, i3, e], weighted, (B, H, S, Dv), f32, "attended")
    if f32 != T:
        out = ctx.let(cast(ctx.ref(out), T), out.shape, T, "attended")
    if q_in.rank == 3:
        merged = permuted(ctx, out, [0, 2, 1, 3], "merged")
        out = reshaped(ctx, merged, [B, S, ctx.simplify(H * Dv)], "merged")
    ctx.output(0, out)
    if _wants(ctx, 1):
        ctx.output(1, k)
    if _wants(ctx, 2):
        ctx.output(2, v)
    if _wants(ctx, 3):
        picked = {0: scores, 1: scores, 2: biased, 3: probs}.get(mode)
        if picked is None:
            raise Unsupported(f"qk_matmul_output_mode {mode}")
        if f32 != T:
            picked = ctx.let(cast(ctx.ref(picked), T), picked.shape, T, "qk")
        ctx.output(3, picked)


def _scaled(ctx: Context, v: Value, root: float, narrow: bool, hint: str) -> Value:
    """`v * sqrt(scale)` in v's dtype, as f32."""
    scaled = ctx.let(build.binary("*", ctx.ref(v), F(root)), v.shape, v.dtype, f"{hint}_scaled")
    if not narrow:
        return scaled
    return ctx.let(cast(ctx.ref(scaled), "f32"), v.shape, "f32", f"{hint}_f32")


def _group(ctx: Context, H: Dim, Hk: Dim) -> int:
    h, hk = H.as_int(), Hk.as_int()
    if ctx.equal(H, Hk):
        return 1
    if h is None or hk is None or hk == 0 or h % hk:
        raise Unsupported(f"{H} query heads cannot share {Hk} key/value heads")
    return h // hk


def _concat_seq(ctx: Context, past: Value, new: Value, hint: str) -> Value:
    if past.rank != 4 or past.dtype != new.dtype:
        raise Unsupported("past keys and values must be 4-D of the inputs' dtype")
    dims = list(new.shape)
    dims[2] = ctx.simplify(past.shape[2] + new.shape[2])
    expr = build.call("concat", ctx.ref(past), ctx.ref(new), named=[("axis", build.int_lit(2))])
    return ctx.let(expr, dims, new.dtype, hint)


def _std_attention(ctx: Context, q: Value, k: Value, v: Value, scale: float, causal: bool) -> Value:
    grouped = not ctx.equal(q.shape[1], k.shape[1])
    fn = ctx.std("nn.attention", "grouped_attention" if grouped else "attention")
    mask: ast.Expr = build.none()
    if causal:
        cm = ctx.std("nn.attention", "causal_mask")
        mask = build.some(build.call(cm, generics=[ctx.dim(q.shape[2]), ctx.dim(k.shape[2])]))
    if grouped:
        _group(ctx, q.shape[1], k.shape[1])
    expr = build.call(fn, ctx.ref(q), ctx.ref(k), ctx.ref(v), F(scale), mask)
    return ctx.let(expr, (*q.shape[:3], v.shape[3]), q.dtype, "attended")


def _bias(
    ctx: Context,
    mask: Value | None,
    causal: bool,
    left: int,
    right: int,
    nonpad: Value | None,
    past: Value | None,
    B: Dim,
    H: Dim,
    S: Dim,
    L: Dim,
) -> Value | None:
    """The additive f32 bias `[B, H, S, L]` (0 or -inf, plus a float mask), or None."""
    if mask is None and not causal and left < 0 and right < 0 and nonpad is None:
        return None
    b, h, i, j = ctx.indices(4)
    terms: list[ast.Expr] = []
    allowed: list[ast.Expr] = []
    used: set[str] = set()
    if mask is not None:
        padded = _pad_mask(ctx, mask, L)
        every = [b, h, i, j]
        at = every[4 - padded.rank :]
        lead_dims = (B, H, S, L)[4 - padded.rank :]
        comps: list[str | ast.Expr] = []
        for name, own, want in zip(at, padded.shape, lead_dims, strict=True):
            if ctx.equal(own, Dim.const(1)) and not ctx.equal(want, Dim.const(1)):
                comps.append(build.int_lit(0))
            else:
                comps.append(name)
                used.add(name)
        read = access(ctx, padded, comps)
        if padded.dtype == "bool":
            allowed.append(read)
        else:
            terms.append(read if padded.dtype == "f32" else cast(read, "f32"))
    if causal or left >= 0 or right >= 0 or nonpad is not None:
        qpos = position_table(ctx, S, "query_pos")
        kpos = position_table(ctx, L, "key_pos")
        qi, kj = access(ctx, qpos, [i]), access(ctx, kpos, [j])
        used.update((i, j))
        if nonpad is not None:
            used.add(b)
            if past is not None:
                raise Unsupported("nonpad_kv_seqlen with past keys")
            n = access(ctx, nonpad, [b])
            n = n if nonpad.dtype == "i64" else cast(n, "i64")
            offset: ast.Expr = build.binary("-", n, ctx.dim(S))
            allowed.append(build.binary("<", kj, n))
        else:
            offset = build.int_lit(0) if past is None else ctx.dim(past.shape[2])
        frontier = build.binary("+", qi, offset)
        if causal:
            allowed.append(build.binary("<=", kj, frontier))
        if left >= 0:
            allowed.append(build.binary("<=", build.binary("-", frontier, kj), build.int_lit(left)))
        if right >= 0:
            allowed.append(
                build.binary("<=", build.binary("-", kj, frontier), build.int_lit(right))
            )
    body: ast.Expr | None = None
    if allowed:
        cond = build.paren(allowed[0]) if len(allowed) > 1 else allowed[0]
        for a in allowed[1:]:
            cond = build.binary("&", cond, build.paren(a))
        body = build.call("select", cond, F(0.0), _neg_inf(ctx))
    for t in terms:
        body = t if body is None else build.binary("+", t, body)
    assert body is not None
    # Axes no term reads stay of extent 1 (an output index needs a domain, 8.1).
    full = (B, H, S, L)
    outs = [n for n in (b, h, i, j) if n in used]
    dims = [d for n, d in zip((b, h, i, j), full, strict=True) if n in used]
    value = ctx.comprehension(outs, body, dims, "f32", "bias")
    shape = [d if n in used else Dim.const(1) for n, d in zip((b, h, i, j), full, strict=True)]
    return reshaped(ctx, value, shape, "bias")


def _read_bias(ctx: Context, bias: Value, names: list[str], full: tuple[Dim, ...]) -> ast.Expr:
    comps: list[str | ast.Expr] = []
    for n, own, want in zip(names, bias.shape, full, strict=True):
        one = ctx.equal(own, Dim.const(1)) and not ctx.equal(want, Dim.const(1))
        comps.append(build.int_lit(0) if one else n)
    return access(ctx, bias, comps)


def _pad_mask(ctx: Context, mask: Value, L: Dim) -> Value:
    """A mask shorter than the keys is padded with False / -inf (ONNX Attention)."""
    if mask.rank < 1 or mask.rank > 4:
        raise Unsupported("attn_mask must have 1 to 4 axes")
    last = mask.shape[-1]
    if ctx.equal(last, L):
        return mask
    n, total = last.as_int(), L.as_int()
    if n is None or total is None or n > total:
        raise Unsupported("attn_mask longer than the keys, or symbolic")
    dims = list(mask.shape)
    dims[-1] = Dim.const(total - n)
    fill_value = (
        build.bool_lit(False) if mask.dtype == "bool" else ctx.literal(-math.inf, mask.dtype)
    )
    block = build.call(
        "fill", ctx.shape_lit(dims), fill_value, generics=[build.named_type(mask.dtype)]
    )
    out = list(mask.shape)
    out[-1] = L
    expr = build.call(
        "concat", ctx.ref(mask), block, named=[("axis", build.int_lit(mask.rank - 1))]
    )
    return ctx.let(expr, out, mask.dtype, "mask")


def _masked_softmax(ctx: Context, x: Value, bias: Value | None, dims: tuple[Dim, ...]) -> Value:
    """Softmax over the keys; a row whose bias is -inf everywhere gives zeros (ONNX)."""
    b, h, i, j = ctx.indices(4)
    peak = ctx.comprehension(
        [b, h, i],
        build.reduction("max", [j], access(ctx, x, [b, h, i, j])),
        dims[:3],
        "f32",
        "peak",
    )
    open_row: Value | None = None
    if bias is not None:
        # Rows of the bias (its own shape: axes it does not vary along have extent 1).
        big = F(-3.4028234663852886e38)
        rb, rh, ri, rj = ctx.indices(4)
        found = build.reduction(
            "any", [rj], build.binary(">=", access(ctx, bias, [rb, rh, ri, rj]), big)
        )
        open_row = ctx.comprehension([rb, rh, ri], found, bias.shape[:3], "bool", "open_row")
        safe = build.call(
            "select",
            _read_bias(ctx, open_row, [b, h, i], dims[:3]),
            access(ctx, peak, [b, h, i]),
            F(0.0),
        )
        peak = ctx.comprehension([b, h, i], safe, dims[:3], "f32", "peak")
    shifted = build.call(
        "exp", build.binary("-", access(ctx, x, [b, h, i, j]), access(ctx, peak, [b, h, i]))
    )
    weights = ctx.comprehension([b, h, i, j], shifted, dims, "f32", "weights")
    total = ctx.comprehension(
        [b, h, i],
        build.reduction("sum", [j], access(ctx, weights, [b, h, i, j])),
        dims[:3],
        "f32",
        "total",
    )
    ratio: ast.Expr = build.binary(
        "/", access(ctx, weights, [b, h, i, j]), access(ctx, total, [b, h, i])
    )
    if open_row is not None:
        ratio = build.call("select", _read_bias(ctx, open_row, [b, h, i], dims[:3]), ratio, F(0.0))
    return ctx.comprehension([b, h, i, j], ratio, dims, "f32", "probs")


# ---------------------------------------------------------------- RotaryEmbedding


@translator("RotaryEmbedding")
def rotary_embedding(ctx: Context) -> None:
    x, cos_cache, sin_cache, positions = ctx.need(0), ctx.need(1), ctx.need(2), ctx.input(3)
    T = x.dtype
    if T not in FLOAT_DTYPES or cos_cache.dtype != T or sin_cache.dtype != T:
        raise Unsupported(f"RotaryEmbedding of {T}")
    interleaved = bool(ctx.attr("interleaved", 0))
    heads = int(ctx.attr("num_heads", 0))
    if x.rank == 4:
        view = permuted(ctx, x, [0, 2, 1, 3], "rows")  # [B, S, H, D]
    elif x.rank == 3:
        if not heads:
            raise Unsupported("a 3-D input needs num_heads")
        bsz, seq, hidden = x.shape
        view = reshaped(
            ctx, x, [bsz, seq, Dim.const(heads), ctx.simplify(hidden // Dim.const(heads))], "rows"
        )
    else:
        raise Unsupported("input must be 3-D or 4-D")
    D = view.shape[3].as_int()
    if D is None:
        raise Unsupported("a symbolic head size")
    rot = int(ctx.attr("rotary_embedding_dim", 0)) or D
    if rot % 2 or rot > D:
        raise Unsupported(f"rotary_embedding_dim {rot}")
    half = rot // 2
    pos = position_table(ctx, Dim.const(D), "lane")
    p = ctx.ref(pos)
    inside = build.binary("<", p, build.int_lit(rot))
    if interleaved:
        pair = build.binary("/", p, build.int_lit(2))
        partner = build.binary(
            "-",
            build.binary("+", p, build.int_lit(1)),
            build.binary(
                "*", build.int_lit(2), build.paren(build.binary("%", p, build.int_lit(2)))
            ),
        )
        first = build.binary("==", build.binary("%", p, build.int_lit(2)), build.int_lit(0))
    else:
        pair = build.binary("%", p, build.int_lit(half))
        first = build.binary("<", p, build.int_lit(half))
        partner = build.call(
            "select",
            first,
            build.binary("+", p, build.int_lit(half)),
            build.binary("-", p, build.int_lit(half)),
        )
    pair_v = ctx.let(
        build.call("select", inside, pair, build.int_lit(0)), (Dim.const(D),), "i64", "pair"
    )
    partner_v = ctx.let(build.call("select", inside, partner, p), (Dim.const(D),), "i64", "partner")
    sign_v = ctx.let(
        build.call("select", first, ctx.typed(-1.0, T), ctx.typed(1.0, T)),
        (Dim.const(D),),
        T,
        "sign",
    )
    inside_v = ctx.let(inside, (Dim.const(D),), "bool", "rotated")
    b, s, h, d = ctx.indices(4)
    k = access(ctx, pair_v, [d])
    if positions is not None:
        row = access(ctx, positions, [b, s])
        cos_e, sin_e = access(ctx, cos_cache, [row, k]), access(ctx, sin_cache, [row, k])
    else:
        if cos_cache.rank != 3:
            raise Unsupported("without position_ids the caches must be [B, S, D/2]")
        cos_e, sin_e = access(ctx, cos_cache, [b, s, k]), access(ctx, sin_cache, [b, s, k])
    own = access(ctx, view, [b, s, h, d])
    other = access(ctx, view, [b, s, h, access(ctx, partner_v, [d])])
    turned = build.binary(
        "+",
        build.binary("*", cos_e, own),
        build.binary("*", build.binary("*", access(ctx, sign_v, [d]), sin_e), other),
    )
    body = build.call("select", access(ctx, inside_v, [d]), turned, own)
    out = ctx.comprehension([b, s, h, d], body, view.shape, T, "rotated")
    if x.rank == 4:
        ctx.output(0, permuted(ctx, out, [0, 2, 1, 3], "rotated"))
    else:
        ctx.output(0, reshaped(ctx, out, x.shape, "rotated"))
