"""ONNX `MatMul`, `Gemm`, `Einsum`, `MatMulInteger` -> `std.linalg` or index notation.

Stage: ONNX import, translation. Two plain matrices call
`std.linalg::matmul`, equal leading axes `std.linalg::batched_matmul`; every
other product (a 1-D operand, broadcast leading axes, a transposed `Gemm`
operand, any `Einsum` equation) is written in index notation, where the
summed index is explicit: `let y[b, s, o] = sum[k] x[b, s, k] * w[k, o]`.
A leading axis of extent 1 that broadcasts against a longer one is read at
position 0.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from linnet.check.dims import Dim
from linnet.onnx.importer.graph import translator
from linnet.onnx.importer.ops._common import FLOAT_DTYPES, INT_DTYPES, cast
from linnet.onnx.importer.ops.reduce import access
from linnet.sourcegen import build
from linnet.sourcegen.translate import Context, Unsupported
from linnet.sourcegen.values import Value
from linnet.syntax import ast

ONE = Dim.const(1)


def _numeric(v: Value, op: str) -> None:
    if v.dtype not in FLOAT_DTYPES and v.dtype not in INT_DTYPES:
        raise Unsupported(f"{op} of {v.dtype}")


def matmul_value(ctx: Context, a: Value, b: Value, hint: str = "product") -> Value:
    """NumPy `matmul` semantics (ONNX MatMul): 1-D operands and broadcast leading axes."""
    if a.dtype != b.dtype:
        raise Unsupported("operands of different dtypes")
    _numeric(a, "MatMul")
    if a.is_scalar or b.is_scalar:
        raise Unsupported("MatMul of a scalar")
    if a.rank == 2 and b.rank == 2 and ctx.equal(a.shape[1], b.shape[0]):
        fn = ctx.std("linalg", "matmul")
        return ctx.let(
            build.call(fn, ctx.ref(a), ctx.ref(b)), (a.shape[0], b.shape[1]), a.dtype, hint
        )
    if (
        a.rank == b.rank > 2
        and all(ctx.equal(x, y) for x, y in zip(a.shape[:-2], b.shape[:-2], strict=True))
        and ctx.equal(a.shape[-1], b.shape[-2])
    ):
        fn = ctx.std("linalg", "batched_matmul")
        shape = (*a.shape[:-1], b.shape[-1])
        return ctx.let(build.call(fn, ctx.ref(a), ctx.ref(b)), shape, a.dtype, hint)
    a_rows = a.shape if a.rank > 1 else (ONE, a.shape[0])
    b_cols = b.shape if b.rank > 1 else (b.shape[0], ONE)
    if not ctx.equal(a_rows[-1], b_cols[-2]):
        if a_rows[-1].as_int() is not None and b_cols[-2].as_int() is not None:
            raise Unsupported(f"inner extents {a_rows[-1]} and {b_cols[-2]} differ")
        ctx.require(a_rows[-1], "==", b_cols[-2])
    lead = ctx.broadcast(a_rows[:-2], b_cols[:-2])
    names = ctx.indices(len(lead) + 3)
    batch, m, n, k = names[: len(lead)], names[-3], names[-2], names[-1]
    a_idx = _lead_access(ctx, batch, lead, a_rows[:-2]) + ([m] if a.rank > 1 else []) + [k]
    b_idx = _lead_access(ctx, batch, lead, b_cols[:-2]) + [k] + ([n] if b.rank > 1 else [])
    body = build.reduction(
        "sum", [k], build.binary("*", access(ctx, a, a_idx), access(ctx, b, b_idx))
    )
    outs = batch + ([m] if a.rank > 1 else []) + ([n] if b.rank > 1 else [])
    dims = list(lead) + ([a_rows[-2]] if a.rank > 1 else []) + ([b_cols[-1]] if b.rank > 1 else [])
    if not outs:
        return ctx.let(body, (), a.dtype, hint)
    return ctx.comprehension(outs, body, dims, a.dtype, hint)


def _lead_access(
    ctx: Context, names: Sequence[str], lead: Sequence[Dim], own: Sequence[Dim]
) -> list[str | ast.Expr]:
    """Indices for an operand's leading axes, aligned from the right with the output's."""
    out: list[str | ast.Expr] = []
    offset = len(lead) - len(own)
    for i, d in enumerate(own):
        full = lead[offset + i]
        if ctx.equal(d, ONE) and not ctx.equal(full, ONE):
            out.append(build.int_lit(0))
        else:
            out.append(names[offset + i])
    return out


@translator("MatMul")
def matmul(ctx: Context) -> None:
    ctx.output(0, matmul_value(ctx, ctx.need(0), ctx.need(1)))


@translator("Gemm")
def gemm(ctx: Context) -> None:
    a, b, c = ctx.need(0), ctx.need(1), ctx.input(2)
    if a.rank != 2 or b.rank != 2 or a.dtype != b.dtype:
        raise Unsupported("operands must be matrices of one dtype")
    _numeric(a, "Gemm")
    alpha = float(ctx.attr("alpha", 1.0))
    beta = float(ctx.attr("beta", 1.0))
    ta, tb = bool(ctx.attr("transA", 0)), bool(ctx.attr("transB", 0))
    if not ta and not tb:
        y = matmul_value(ctx, a, b)
    else:
        m, k, n = ctx.indices(3)
        rows = a.shape[1] if ta else a.shape[0]
        cols = b.shape[0] if tb else b.shape[1]
        inner_a = a.shape[0] if ta else a.shape[1]
        inner_b = b.shape[1] if tb else b.shape[0]
        if not ctx.equal(inner_a, inner_b):
            ctx.require(inner_a, "==", inner_b)
        lhs = access(ctx, a, [k, m] if ta else [m, k])
        rhs = access(ctx, b, [n, k] if tb else [k, n])
        body = build.reduction("sum", [k], build.binary("*", lhs, rhs))
        y = ctx.comprehension([m, n], body, (rows, cols), a.dtype, "product")
    is_float = a.dtype in FLOAT_DTYPES
    expr: ast.Expr = ctx.ref(y)
    if alpha != 1.0:
        expr = build.binary("*", _scalar(alpha, is_float), expr)
    if c is not None and beta != 0.0:
        bias: ast.Expr = ctx.ref(c)
        if beta != 1.0:
            bias = build.binary("*", _scalar(beta, is_float), bias)
        expr = build.binary("+", expr, bias)
        ctx.broadcast(y.shape, c.shape)
    if expr is not y.expr:
        y = ctx.let(expr, y.shape, a.dtype, "gemm")
    ctx.output(0, y)


def _scalar(value: float, is_float: bool) -> ast.Expr:
    if is_float:
        return build.float_lit(value)
    if not value.is_integer():
        raise Unsupported("a fractional alpha or beta on integers")
    return build.int_lit(int(value))


@translator("MatMulInteger")
def matmul_integer(ctx: Context) -> None:
    a, b = ctx.need(0), ctx.need(1)
    a_zero, b_zero = ctx.input(2), ctx.input(3)
    if a.dtype not in ("i8", "u8") or b.dtype not in ("i8", "u8"):
        raise Unsupported("operands must be 8-bit integers")
    wide = []
    for v, zero in ((a, a_zero), (b, b_zero)):
        expr: ast.Expr = cast(ctx.ref(v), "i32")
        if zero is not None:
            if zero.rank > 1 or (zero.rank == 1 and not ctx.equal(zero.shape[0], ONE)):
                raise Unsupported("per-row or per-column zero points")
            z = cast(access(ctx, zero, [build.int_lit(0)] * zero.rank), "i32")
            expr = build.binary("-", expr, z)
        wide.append(ctx.let(expr, v.shape, "i32", "wide"))
    ctx.output(0, matmul_value(ctx, wide[0], wide[1]))


# ---------------------------------------------------------------- Einsum

_TERM = re.compile(r"^[A-Za-z]*(\.\.\.)?[A-Za-z]*$")


@translator("Einsum")
def einsum(ctx: Context) -> None:
    equation = str(ctx.attr("equation")).replace(" ", "")
    operands = [ctx.need(i) for i in range(ctx.n_inputs)]
    if "->" in equation:
        lhs, rhs = equation.split("->")
    else:
        lhs, rhs = equation, None
    terms = lhs.split(",")
    if len(terms) != len(operands) or not all(_TERM.match(t) for t in terms):
        raise Unsupported(f"equation {equation!r}")
    dtype = operands[0].dtype
    if any(v.dtype != dtype for v in operands):
        raise Unsupported("operands of different dtypes")
    _numeric(operands[0], "Einsum")
    ell_rank = 0
    for t, v in zip(terms, operands, strict=True):
        if "..." in t:
            ell_rank = max(ell_rank, v.rank - (len(t) - 3))
    ell = [f"_{i}" for i in range(ell_rank)]
    letters: dict[str, Dim] = {}
    accesses: list[ast.Expr] = []
    names: dict[str, str] = {}

    def index_name(letter: str) -> str:
        if letter not in names:
            names[letter] = ctx.indices(1, hints=letter.lower() if letter.isalpha() else "e")[0]
            ctx.t.locals.reserve(names[letter])
        return names[letter]

    for t, v in zip(terms, operands, strict=True):
        labels = _expand(t, v.rank, ell)
        if len(labels) != v.rank:
            raise Unsupported(f"term {t!r} does not match rank {v.rank}")
        for label, d in zip(labels, v.shape, strict=True):
            if label in letters and not ctx.equal(letters[label], d):
                if ctx.equal(d, ONE) or ctx.equal(letters[label], ONE):
                    raise Unsupported("broadcasting inside an einsum term")
                ctx.require(letters[label], "==", d)
            letters.setdefault(label, d)
        accesses.append(access(ctx, v, [index_name(label) for label in labels]))
    if rhs is None:
        counts: dict[str, int] = {}
        for t in terms:
            for ch in t.replace("...", ""):
                counts[ch] = counts.get(ch, 0) + 1
        out_labels = ell + sorted(ch for ch, n in counts.items() if n == 1)
    else:
        if not _TERM.match(rhs):
            raise Unsupported(f"equation {equation!r}")
        out_labels = _expand(rhs, len(rhs.replace("...", "")) + ell_rank, ell)
    summed = [label for label in letters if label not in out_labels]
    body = accesses[0]
    for a in accesses[1:]:
        body = build.binary("*", body, a)
    if summed:
        body = build.reduction("sum", [index_name(s) for s in summed], body)
    if not out_labels:
        ctx.output(0, ctx.let(body, (), dtype, "contracted"))
        return
    dims = [letters[label] for label in out_labels]
    outs = [index_name(label) for label in out_labels]
    ctx.output(0, ctx.comprehension(outs, body, dims, dtype, "contracted"))


def _expand(term: str, rank: int, ell: list[str]) -> list[str]:
    if "..." not in term:
        return list(term)
    before, after = term.split("...")
    n = rank - len(before) - len(after)
    if n < 0:
        raise Unsupported(f"term {term!r} has more labels than axes")
    return list(before) + ell[len(ell) - n :] + list(after)
