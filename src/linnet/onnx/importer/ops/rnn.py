"""ONNX `RNN`, `GRU`, `LSTM` -> the recurrence unrolled over a static sequence length.

Stage: ONNX import, translation. The sequence length must be known at import
time; each time step becomes a few statements (one comprehension per gate:
`sum[i] x[t, b, i] * w_z[h, i] + sum[k] h_prev[b, k] * r_z[h, k] + bias[h]`,
then the cell update), with the weights of each gate and direction sliced
once (`w[0, 0:H]`). Gate orders, biases, `linear_before_reset` (GRU),
peepholes (LSTM), both directions and both layouts follow the operator spec;
the activations may be `Sigmoid`, `Tanh` or `Relu` (the defaults are the
spec's). `clip`, `input_forget` and variable `sequence_lens` refuse the node.
"""

from __future__ import annotations

from collections.abc import Callable

from linnet.check.dims import Dim
from linnet.onnx.importer.graph import translator
from linnet.onnx.importer.ops._common import FLOAT_DTYPES
from linnet.onnx.importer.ops.reduce import access
from linnet.onnx.importer.ops.shapes import permuted, reshaped
from linnet.sourcegen import build
from linnet.sourcegen.translate import Context, Unsupported
from linnet.sourcegen.values import Value
from linnet.syntax import ast

Act = Callable[[ast.Expr], ast.Expr]

_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_DEFAULT_ACTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}


def _activation(name: str) -> Act:
    one = build.float_lit(1.0)
    if name == "Sigmoid":
        return lambda e: build.binary(
            "/",
            one,
            build.paren(
                build.binary("+", one, build.call("exp", build.unary("-", build.paren(e))))
            ),
        )
    if name == "Tanh":
        return lambda e: build.call("tanh", e)
    if name == "Relu":
        return lambda e: build.call("max", e, build.float_lit(0.0))
    raise Unsupported(f"activation {name!r}")


class _Cell:
    """Weights of one direction, sliced per gate."""

    def __init__(
        self, ctx: Context, kind: str, w: Value, r: Value, b: Value | None, d: int, hidden: int
    ) -> None:
        gates = _GATES[kind]
        self.w = [self._rows(ctx, w, d, g * hidden, hidden, "w") for g in range(gates)]
        self.r = [self._rows(ctx, r, d, g * hidden, hidden, "r") for g in range(gates)]
        self.wb: list[Value | None] = [None] * gates
        self.rb: list[Value | None] = [None] * gates
        if b is not None:
            self.wb = [self._rows(ctx, b, d, g * hidden, hidden, "wb") for g in range(gates)]
            self.rb = [
                self._rows(ctx, b, d, (gates + g) * hidden, hidden, "rb") for g in range(gates)
            ]

    @staticmethod
    def _rows(ctx: Context, v: Value, d: int, start: int, n: int, hint: str) -> Value:
        expr = build.index(
            ctx.ref(v),
            [build.int_lit(d), build.slice_(build.int_lit(start), build.int_lit(start + n))],
        )
        return ctx.let(expr, (Dim.const(n), *v.shape[2:]), v.dtype, hint)


def _gate(
    ctx: Context, x: Value, t: int, layout: int, cell: _Cell, g: int, h_prev: Value | None,
    batch: Dim, hidden: int, dtype: str, hint: str, *, with_recurrent_bias: bool = True,
) -> Value:  # fmt: skip
    """`x_t W_g^T + h_prev R_g^T + Wb_g + Rb_g` as a `[B, H]` comprehension."""
    b, h, i, k = ctx.indices(4)
    xt = access(ctx, x, [build.int_lit(t), b, i] if layout == 0 else [b, build.int_lit(t), i])
    terms: list[ast.Expr] = [
        build.reduction("sum", [i], build.binary("*", xt, access(ctx, cell.w[g], [h, i])))
    ]
    if h_prev is not None:
        terms.append(
            build.reduction(
                "sum",
                [k],
                build.binary("*", access(ctx, h_prev, [b, k]), access(ctx, cell.r[g], [h, k])),
            )
        )
    wb, rb = cell.wb[g], cell.rb[g]
    if wb is not None:
        terms.append(access(ctx, wb, [h]))
    if rb is not None and with_recurrent_bias:
        terms.append(access(ctx, rb, [h]))
    body = terms[0]
    # A reduction swallows what follows it (3.3 rule 14): keep reductions last or parenthesised.
    for term in terms[1:]:
        body = build.binary(
            "+", build.paren(body) if isinstance(body, ast.Reduction) else body, term
        )
    return ctx.comprehension([b, h], body, (batch, Dim.const(hidden)), dtype, hint)


def _recurrent(
    ctx: Context,
    state: Value,
    weights: Value,
    bias: Value | None,
    batch: Dim,
    hidden: int,
    dtype: str,
) -> Value:
    b, h, k = ctx.indices(3)
    body: ast.Expr = build.reduction(
        "sum", [k], build.binary("*", access(ctx, state, [b, k]), access(ctx, weights, [h, k]))
    )
    if bias is not None:
        body = build.binary("+", access(ctx, bias, [h]), body)
    return ctx.comprehension([b, h], body, (batch, Dim.const(hidden)), dtype, "recurrent")


def _elementwise(
    ctx: Context, expr: ast.Expr, batch: Dim, hidden: int, dtype: str, hint: str
) -> Value:
    return ctx.let(expr, (batch, Dim.const(hidden)), dtype, hint)


def _state(
    ctx: Context, v: Value | None, d: int, layout: int, batch: Dim, hidden: int, hint: str
) -> Value | None:
    if v is None:
        return None
    comps = [build.int_lit(d)] if layout == 0 else [build.slice_(), build.int_lit(d)]
    return ctx.let(build.index(ctx.ref(v), comps), (batch, Dim.const(hidden)), v.dtype, hint)


@translator("RNN", "GRU", "LSTM")
def recurrent(ctx: Context) -> None:
    kind = ctx.node.op
    x, w, r = ctx.need(0), ctx.need(1), ctx.need(2)
    b, lens, h0 = ctx.input(3), ctx.input(4), ctx.input(5)
    c0 = ctx.input(6) if kind == "LSTM" else None
    peep = ctx.input(7) if kind == "LSTM" else None
    dtype = x.dtype
    if dtype not in FLOAT_DTYPES or x.rank != 3:
        raise Unsupported(f"{kind} of {dtype}")
    if ctx.attr("clip", None) is not None:
        raise Unsupported("clip")
    if kind == "LSTM" and int(ctx.attr("input_forget", 0)):
        raise Unsupported("input_forget")
    layout = int(ctx.attr("layout", 0))
    direction = str(ctx.attr("direction", "forward"))
    dirs = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}.get(direction)
    if dirs is None:
        raise Unsupported(f"direction {direction!r}")
    hidden = int(ctx.attr("hidden_size", 0)) or (w.shape[1].as_int() or 0) // _GATES[kind]
    steps_dim = x.shape[0] if layout == 0 else x.shape[1]
    batch = x.shape[1] if layout == 0 else x.shape[0]
    steps = steps_dim.as_int()
    if steps is None:
        raise Unsupported("a symbolic sequence length")
    if lens is not None and (lens.const is None or not bool((lens.const == steps).all())):
        raise Unsupported("sequence_lens shorter than the sequence")
    names = list(ctx.attr("activations", [])) or _DEFAULT_ACTS[kind] * len(dirs)
    per = len(_DEFAULT_ACTS[kind])
    if (
        len(names) != per * len(dirs)
        or ctx.attr("activation_alpha", None)
        or ctx.attr("activation_beta", None)
    ):
        raise Unsupported("activations with parameters")
    ys: list[list[Value]] = []
    finals_h: list[Value] = []
    finals_c: list[Value] = []
    for d, backward in enumerate(dirs):
        acts = [_activation(n) for n in names[d * per : (d + 1) * per]]
        cell = _Cell(ctx, kind, w, r, b, d, hidden)
        h_prev = _state(ctx, h0, d, layout, batch, hidden, "h0")
        c_prev = _state(ctx, c0, d, layout, batch, hidden, "c0")
        p: list[Value | None] = (
            [None, None, None]
            if peep is None
            else [_Cell._rows(ctx, peep, d, j * hidden, hidden, "p") for j in range(3)]
        )
        outputs: dict[int, Value] = {}
        order = range(steps - 1, -1, -1) if backward else range(steps)
        for t in order:
            if kind == "RNN":
                h_new = _elementwise(ctx, acts[0](ctx.ref(_gate(ctx, x, t, layout, cell, 0, h_prev, batch, hidden, dtype, "pre"))),
                                     batch, hidden, dtype, "h")  # fmt: skip
            elif kind == "GRU":
                h_new = _gru_step(ctx, x, t, layout, cell, h_prev, batch, hidden, dtype, acts)
            else:
                h_new, c_new = _lstm_step(
                    ctx, x, t, layout, cell, h_prev, c_prev, p, batch, hidden, dtype, acts
                )
                c_prev = c_new
            outputs[t] = h_new
            h_prev = h_new
        ys.append([outputs[t] for t in range(steps)])
        assert h_prev is not None
        finals_h.append(h_prev)
        if c_prev is not None:
            finals_c.append(c_prev)
    _outputs(ctx, ys, finals_h, finals_c, batch, hidden, dtype, layout)


def _gru_step(
    ctx: Context, x: Value, t: int, layout: int, cell: _Cell, h_prev: Value | None,
    batch: Dim, hidden: int, dtype: str, acts: list[Act],
) -> Value:  # fmt: skip
    f, g = acts
    z = _elementwise(
        ctx,
        f(ctx.ref(_gate(ctx, x, t, layout, cell, 0, h_prev, batch, hidden, dtype, "z_pre"))),
        batch,
        hidden,
        dtype,
        "z",
    )
    rr = _elementwise(
        ctx,
        f(ctx.ref(_gate(ctx, x, t, layout, cell, 1, h_prev, batch, hidden, dtype, "r_pre"))),
        batch,
        hidden,
        dtype,
        "r",
    )
    linear = bool(ctx.attr("linear_before_reset", 0))
    xw = _gate(
        ctx, x, t, layout, cell, 2, None, batch, hidden, dtype, "xh", with_recurrent_bias=False
    )
    if h_prev is None:
        # No previous state: its recurrent product is zero, only its bias remains
        # (gated by r when the reset applies after the product).
        rb = cell.rb[2]
        rec = None
        if rb is not None:
            rec = build.binary("*", ctx.ref(rr), ctx.ref(rb)) if linear else ctx.ref(rb)
        cand = ctx.ref(xw) if rec is None else build.binary("+", ctx.ref(xw), rec)
    elif linear:
        rec_v = _recurrent(ctx, h_prev, cell.r[2], cell.rb[2], batch, hidden, dtype)
        cand = build.binary("+", ctx.ref(xw), build.binary("*", ctx.ref(rr), ctx.ref(rec_v)))
    else:
        gated = _elementwise(
            ctx, build.binary("*", ctx.ref(rr), ctx.ref(h_prev)), batch, hidden, dtype, "gated"
        )
        rec_v = _recurrent(ctx, gated, cell.r[2], cell.rb[2], batch, hidden, dtype)
        cand = build.binary("+", ctx.ref(xw), ctx.ref(rec_v))
    h_cand = _elementwise(ctx, g(cand), batch, hidden, dtype, "candidate")
    keep = build.binary(
        "*", build.paren(build.binary("-", build.float_lit(1.0), ctx.ref(z))), ctx.ref(h_cand)
    )
    if h_prev is not None:
        keep = build.binary("+", keep, build.binary("*", ctx.ref(z), ctx.ref(h_prev)))
    return _elementwise(ctx, keep, batch, hidden, dtype, "h")


def _lstm_step(
    ctx: Context, x: Value, t: int, layout: int, cell: _Cell, h_prev: Value | None,
    c_prev: Value | None, p: list[Value | None], batch: Dim, hidden: int, dtype: str, acts: list[Act],
) -> tuple[Value, Value]:  # fmt: skip
    f, g, h_act = acts
    pre = [
        _gate(ctx, x, t, layout, cell, k, h_prev, batch, hidden, dtype, n)
        for k, n in enumerate(("i_pre", "o_pre", "f_pre", "c_pre"))
    ]

    def peep(value: Value, j: int, state: Value | None) -> ast.Expr:
        pj = p[j]
        if pj is None or state is None:
            return ctx.ref(value)
        return build.binary("+", ctx.ref(value), build.binary("*", ctx.ref(pj), ctx.ref(state)))

    i = _elementwise(ctx, f(peep(pre[0], 0, c_prev)), batch, hidden, dtype, "i")
    fg = _elementwise(ctx, f(peep(pre[2], 2, c_prev)), batch, hidden, dtype, "f")
    cg = _elementwise(ctx, g(ctx.ref(pre[3])), batch, hidden, dtype, "g")
    c_expr = build.binary("*", ctx.ref(i), ctx.ref(cg))
    if c_prev is not None:
        c_expr = build.binary("+", build.binary("*", ctx.ref(fg), ctx.ref(c_prev)), c_expr)
    c_new = _elementwise(ctx, c_expr, batch, hidden, dtype, "c")
    o = _elementwise(ctx, f(peep(pre[1], 1, c_new)), batch, hidden, dtype, "o")
    h_new = _elementwise(
        ctx, build.binary("*", ctx.ref(o), h_act(ctx.ref(c_new))), batch, hidden, dtype, "h"
    )
    return h_new, c_new


def _outputs(
    ctx: Context, ys: list[list[Value]], finals_h: list[Value], finals_c: list[Value],
    batch: Dim, hidden: int, dtype: str, layout: int,
) -> None:  # fmt: skip
    H = Dim.const(hidden)
    D = Dim.const(len(ys))
    T = Dim.const(len(ys[0]))
    if ctx.n_outputs > 0 and ctx.node.outputs[0]:
        steps = [
            reshaped(ctx, v, [Dim.const(1), Dim.const(1), batch, H], "step")
            for dirs in zip(*ys, strict=True)
            for v in dirs
        ]
        per_time = []
        for t in range(len(ys[0])):
            parts = steps[t * len(ys) : (t + 1) * len(ys)]
            if len(parts) == 1:
                per_time.append(parts[0])
            else:
                expr = build.call(
                    "concat", *(ctx.ref(v) for v in parts), named=[("axis", build.int_lit(1))]
                )
                per_time.append(ctx.let(expr, (Dim.const(1), D, batch, H), dtype, "both"))
        if len(per_time) == 1:
            y = per_time[0]
        else:
            expr = build.call(
                "concat", *(ctx.ref(v) for v in per_time), named=[("axis", build.int_lit(0))]
            )
            y = ctx.let(expr, (T, D, batch, H), dtype, "outputs")
        ctx.output(0, permuted(ctx, y, [2, 0, 1, 3], "outputs") if layout else y)
    for slot, finals in ((1, finals_h), (2, finals_c)):
        if ctx.n_outputs > slot and ctx.node.outputs[slot]:
            lifted = [reshaped(ctx, v, [Dim.const(1), batch, H], "last") for v in finals]
            if len(lifted) == 1:
                last = lifted[0]
            else:
                expr = build.call(
                    "concat", *(ctx.ref(v) for v in lifted), named=[("axis", build.int_lit(0))]
                )
                last = ctx.let(expr, (D, batch, H), dtype, "last")
            ctx.output(slot, permuted(ctx, last, [1, 0, 2], "last") if layout else last)
