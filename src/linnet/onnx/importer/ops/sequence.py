"""ONNX `CausalConvWithState` and `LinearAttention`: sequence mixers with a carried state.

Stage: ONNX import, translation. Both come from recurrent/linear-attention
decoders (opset 24+) and follow the operator definitions:

- `CausalConvWithState` is a depthwise 1-D convolution over the past state
  (or zeros) followed by the input, with an optional bias and SiLU, returning
  the last `k - 1` positions as the new state;
- `LinearAttention` runs its recurrence `S <- decay * S + k (beta (v - S^T k))^T`,
  `o = scale * S^T q` once per time step (the sequence length must be known at
  import time; the steps are unrolled), in f32, for the `linear`, `gated`,
  `delta` and `gated_delta` update rules, with grouped query heads.
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


@translator("CausalConvWithState")
def causal_conv_with_state(ctx: Context) -> None:
    x, w, bias, past = ctx.need(0), ctx.need(1), ctx.input(2), ctx.input(3)
    T = x.dtype
    if T not in FLOAT_DTYPES or x.rank != 3 or w.rank != 3:
        raise Unsupported("input [B, C, L] and weight [C, 1, K] of a float dtype")
    activation = str(ctx.attr("activation", "none"))
    if activation not in ("none", "silu", "swish"):
        raise Unsupported(f"activation {activation!r}")
    batch, channels, length = x.shape
    k = w.shape[2].as_int()
    if k is None or k < 1:
        raise Unsupported("a symbolic kernel")
    if k > 1:
        if past is None:
            state_dims = [batch, channels, Dim.const(k - 1)]
            zero = build.call(
                "fill", ctx.shape_lit(state_dims), F(0.0), generics=[build.named_type(T)]
            )
            past_expr: ast.Expr = zero
        else:
            past_expr = ctx.ref(past)
        expr = build.call("concat", past_expr, ctx.ref(x), named=[("axis", build.int_lit(2))])
        padded = ctx.let(expr, (batch, channels, ctx.simplify(length + (k - 1))), T, "padded")
    else:
        padded = x
    pos = position_table(ctx, length, "pos")
    taps = position_table(ctx, Dim.const(k), "taps")
    b, c, t, j = ctx.indices(4)
    at = build.binary("+", access(ctx, pos, [t]), access(ctx, taps, [j]))
    body: ast.Expr = build.reduction(
        "sum",
        [j],
        build.binary(
            "*", access(ctx, padded, [b, c, at]), access(ctx, w, [c, build.int_lit(0), j])
        ),
    )
    if bias is not None:
        body = build.binary("+", access(ctx, bias, [c]), body)
    out = ctx.comprehension([b, c, t], body, x.shape, T, "conv")
    if activation != "none":
        wide = ctx.let(cast(ctx.ref(out), "f32"), out.shape, "f32", "wide") if T != "f32" else out
        silu = ctx.std("nn.activations", "silu")
        act = ctx.let(build.call(silu, ctx.ref(wide)), out.shape, "f32", "activated")
        out = act if T == "f32" else ctx.let(cast(ctx.ref(act), T), out.shape, T, "activated")
    ctx.output(0, out)
    if ctx.n_outputs > 1 and ctx.node.outputs[1]:
        total = ctx.simplify(length + (k - 1))
        start = ctx.simplify(total - (k - 1))
        sliced = build.index(
            ctx.ref(padded), [build.slice_(), build.slice_(), build.slice_(ctx.dim(start))]
        )
        ctx.output(1, ctx.let(sliced, (batch, channels, Dim.const(k - 1)), T, "state"))


def _split_heads(ctx: Context, v: Value, heads: int, hint: str) -> Value:
    b, t, hd = v.shape
    n = hd.as_int()
    if n is None or n % heads:
        raise Unsupported(f"{hd} does not split into {heads} heads")
    split = reshaped(ctx, v, [b, t, Dim.const(heads), Dim.const(n // heads)], hint)
    out = permuted(ctx, split, [0, 2, 1, 3], hint)
    if out.dtype == "f32":
        return out
    return ctx.let(cast(ctx.ref(out), "f32"), out.shape, "f32", hint)


@translator("LinearAttention")
def linear_attention(ctx: Context) -> None:
    q_in, k_in, v_in = ctx.need(0), ctx.need(1), ctx.need(2)
    past, decay, beta = ctx.input(3), ctx.input(4), ctx.input(5)
    T = q_in.dtype
    if T not in FLOAT_DTYPES or q_in.rank != 3 or k_in.rank != 3 or v_in.rank != 3:
        raise Unsupported("query, key and value must be float [B, T, H * D]")
    rule = str(ctx.attr("update_rule", "gated_delta"))
    if rule not in ("linear", "gated", "delta", "gated_delta"):
        raise Unsupported(f"update_rule {rule!r}")
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if gating != (decay is not None) or delta != (beta is not None):
        raise Unsupported("decay and beta must match the update rule")
    hq, hk = int(ctx.attr("q_num_heads", 0)), int(ctx.attr("kv_num_heads", 0))
    if hq <= 0 or hk <= 0 or hq % hk:
        raise Unsupported("q_num_heads must be a positive multiple of kv_num_heads")
    steps = q_in.shape[1].as_int()
    if steps is None:
        raise Unsupported("a symbolic sequence length")
    q = _split_heads(ctx, q_in, hq, "query")
    k = _split_heads(ctx, k_in, hk, "key")
    v = _split_heads(ctx, v_in, hk, "value")
    batch, dk, dv = q.shape[0], q.shape[3], v.shape[3]
    group = hq // hk
    scale = float(ctx.attr("scale", 0.0)) or 1.0 / math.sqrt(int(dk.as_int() or 1))
    gate = _per_step(ctx, decay, hk, dk, "decay") if decay is not None else None
    weight = _per_step(ctx, beta, hk, None, "beta") if beta is not None else None
    state_dims = (batch, Dim.const(hk), dk, dv)
    if past is not None:
        state = (
            past
            if past.dtype == "f32"
            else ctx.let(cast(ctx.ref(past), "f32"), past.shape, "f32", "state")
        )
    else:
        zero = build.call(
            "fill", ctx.shape_lit(state_dims), F(0.0), generics=[build.named_type("f32")]
        )
        state = ctx.let(zero, state_dims, "f32", "state")
    kv_head = None
    if group > 1:
        kv_head = ctx.let(
            build.binary(
                "/",
                build.call("iota", build.int_lit(hq), generics=[build.named_type("i64")]),
                build.int_lit(group),
            ),
            (Dim.const(hq),),
            "i64",
            "kv_head",
        )
    outputs: list[Value] = []
    for step in range(steps):
        ts = build.int_lit(step)
        b, h, d, m = ctx.indices(4)
        if gate is not None:
            g = access(
                ctx, gate, [b, h, ts, d if gate.shape[3].as_int() != 1 else build.int_lit(0)]
            )
            body = build.binary("*", access(ctx, state, [b, h, d, m]), build.call("exp", g))
            state = ctx.comprehension([b, h, d, m], body, state_dims, "f32", "state")
        b, h, m, d = ctx.indices(4)
        v_t: ast.Expr = access(ctx, v, [b, h, ts, m])
        if weight is not None:
            retrieved = build.reduction(
                "sum",
                [d],
                build.binary("*", access(ctx, state, [b, h, d, m]), access(ctx, k, [b, h, ts, d])),
            )
            beta_t = access(
                ctx,
                weight,
                [b, h if weight.shape[1].as_int() != 1 else build.int_lit(0), ts, build.int_lit(0)],
            )
            v_t = build.binary(
                "*", beta_t, build.paren(build.binary("-", v_t, build.paren(retrieved)))
            )
        update = ctx.comprehension([b, h, m], v_t, (batch, Dim.const(hk), dv), "f32", "update")
        b, h, d, m = ctx.indices(4)
        grown = build.binary(
            "+",
            access(ctx, state, [b, h, d, m]),
            build.binary("*", access(ctx, k, [b, h, ts, d]), access(ctx, update, [b, h, m])),
        )
        state = ctx.comprehension([b, h, d, m], grown, state_dims, "f32", "state")
        b, h, m, d = ctx.indices(4)
        sh: str | ast.Expr = h if kv_head is None else access(ctx, kv_head, [h])
        read = build.reduction(
            "sum",
            [d],
            build.binary("*", access(ctx, q, [b, h, ts, d]), access(ctx, state, [b, sh, d, m])),
        )
        outputs.append(
            ctx.comprehension(
                [b, h, m],
                build.binary("*", F(scale), build.paren(read)),
                (batch, Dim.const(hq), dv),
                "f32",
                "read",
            )
        )
    lifted = [reshaped(ctx, o, [batch, Dim.const(1), Dim.const(hq), dv], "step") for o in outputs]
    if len(lifted) == 1:
        stacked = lifted[0]
    else:
        expr = build.call(
            "concat", *(ctx.ref(o) for o in lifted), named=[("axis", build.int_lit(1))]
        )
        stacked = ctx.let(expr, (batch, Dim.const(steps), Dim.const(hq), dv), "f32", "outputs")
    merged = reshaped(ctx, stacked, [batch, Dim.const(steps), ctx.simplify(dv * hq)], "outputs")
    if T != "f32":
        merged = ctx.let(cast(ctx.ref(merged), T), merged.shape, T, "outputs")
    ctx.output(0, merged)
    if ctx.n_outputs > 1 and ctx.node.outputs[1]:
        out_dtype = past.dtype if past is not None else T
        final = (
            state
            if out_dtype == "f32"
            else ctx.let(cast(ctx.ref(state), out_dtype), state.shape, out_dtype, "state")
        )
        ctx.output(1, final)


def _per_step(ctx: Context, v: Value, heads: int, dk: Dim | None, hint: str) -> Value:
    """`decay` / `beta` `[B, T, H]` or `[B, T, H * dk]` as `[B, H, T, 1 or dk]` in f32."""
    if v.rank != 3:
        raise Unsupported(f"{hint} must be rank 3")
    b, t, last = v.shape
    n = last.as_int()
    if n is None:
        raise Unsupported(f"a symbolic {hint}")
    if n in (heads, 1):
        shaped = reshaped(ctx, v, [b, t, Dim.const(n), Dim.const(1)], hint)
    elif dk is not None and n == heads * int(dk.as_int() or 0):
        shaped = reshaped(ctx, v, [b, t, Dim.const(heads), dk], hint)
    else:
        raise Unsupported(f"{hint} of last extent {n}")
    out = permuted(ctx, shaped, [0, 2, 1, 3], hint)
    if out.dtype == "f32":
        return out
    return ctx.let(cast(ctx.ref(out), "f32"), out.shape, "f32", hint)
