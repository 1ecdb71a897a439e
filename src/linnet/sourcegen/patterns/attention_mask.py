"""Attention masks: which masked forms recover exactly, and rows with every key masked.

Stage: pattern recovery and translation, for the attention pass
(`linnet.sourcegen.patterns.attention`). Std `attention` (and its `_rows` and
grouped variants) replaces a masked score by -1e30 (`select(mask, scores,
-1e30)`), so a query row whose keys are ALL masked gets uniform weights: the
mean of the values. A graph's mask may compute something else on such a row,
and a recovery must never change a value silently, so each masked form is
recovered only where it is exact:

- **Linnet's own `Where(mask, scores, -1e30)`** is the standard body: exact.
- **`Where(mask, 0, -inf)` added to the scores.** On a row with a visible
  key the masked weights are `exp(-inf) = 0`, as std's `exp(-1e30 - max)`
  (0 in every float dtype). A fully masked row is all `-inf`: its softmax is
  NaN. Guarded by `Where(IsNaN(p), 0, p)` (PyTorch's "safe softmax", which
  the TorchScript exporter writes for SDPA) it gives zeros. The recovery
  emits the std call and then writes those rows as the graph does:
  `visible[b, q] = any[k] mask[b, q, k]`, and `select(visible, attended, 0.0)`
  (guarded) or NaN (unguarded; Linnet has no NaN literal, the importer's
  `Context.literal` spells it as an overflow to inf times 0, computed at run time).
- **A large finite value added (`finfo(f32).min`, -1e30 and below).** Every
  masked score `s + fill` rounds to `fill` itself while `|s|` is below half an
  ulp of `fill` (3.8e22 at -1e30 in f32, 2e31 at `finfo.min`; 7e13 at -1e30
  in f64), so a fully masked row is uniform, exactly as std's -1e30; on other
  rows the masked weights underflow to 0. Exact, with no fix-up.
- **A smaller finite value (-1e9, and down to `MASK_FLOOR`).** Masked weights
  on a row with a visible key still underflow to 0, but a fully masked row
  keeps its scores' differences (`s - 1e9` rounds to multiples of 64 in f32),
  which std's uniform row does not. Recovered only when no row can be fully
  masked (a mask proven causal, with as many keys as queries); otherwise the
  chain stays as written, with a note saying why. Values above `MASK_FLOOR`
  (-1e4, say) do not even zero a masked weight next to large scores and never
  recover.

With no mask, or a proven causal mask over `Q == K`, every row sees a key and
every form is exact. The NaN guard only changes NaN probabilities, which the
forms above give only on fully masked rows (a NaN in the query, key or value
is outside what this module proves equal).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from linnet.check.dims import Dim
from linnet.sourcegen import build
from linnet.sourcegen.translate import Context, Translation, Unsupported, Value
from linnet.syntax import ast

MASK_FLOOR = -1e9
"""An additive mask value at or below this zeroes a masked weight (exp underflows
to 0 in every float dtype) on any row that has a visible key."""

SWAMPING_FILL = -1e30
"""An additive mask value at or below this absorbs the score it is added to (see the
module docstring), so a fully masked row is uniform, exactly as std's -1e30 gives."""

MEAN, ZERO, NAN, DIFFERS = "mean", "zero", "nan", "differs"
"""What a query row with every key masked computes in the graph: the mean of the
values (what std gives), zeros, NaN, or neither (something std cannot write)."""


def full_rows(fill: float, guarded: bool) -> str:
    """What a fully masked row computes when the masked scores are `scores + fill`
    (`fill <= MASK_FLOOR`), with or without the `Where(IsNaN(p), 0, p)` guard."""
    if math.isinf(fill):
        return ZERO if guarded else NAN
    return MEAN if fill <= SWAMPING_FILL else DIFFERS


def kept_note(output: str, fill: float) -> str:
    """Why an attention chain with a non-swamping finite mask stays as written."""
    return (
        f"kept attention ending at `{output}` as written: its mask adds {fill:.6g}, which does "
        "not absorb the scores, so a query row with every key masked follows its scores "
        "where std attention averages the values"
    )


def rows_note(rows: str) -> str:
    """The note's clause for a recovery that writes fully masked rows itself."""
    if rows == ZERO:
        return " (a query row with every key masked gives zeros, as the graph's NaN guard does)"
    if rows == NAN:
        return " (a query row with every key masked gives NaN, as the graph's softmax does)"
    return ""


def boolean_mask(
    ctx: Context, mask: Value, b: Dim, nq: Dim, nk: Dim, negated: bool
) -> tuple[ast.Expr, bool]:
    """The boolean mask as `[Q, K]` (shared) or `[B, Q, K]` (rows); true = attend."""
    if mask.dtype != "bool":
        raise Unsupported("the mask must be boolean")
    one = Dim.const(1)
    expr = ctx.ref(mask)
    if mask.rank == 2:
        rows = False
        qd, kd = mask.shape
    elif mask.rank == 4 and ctx.equal(mask.shape[1], one):
        rows = not ctx.equal(mask.shape[0], one)
        if rows and not ctx.equal(mask.shape[0], b):
            raise Unsupported("the mask's batch axis does not match")
        qd, kd = mask.shape[2], mask.shape[3]
        target = [b, nq, nk] if rows else [nq, nk]
        expr = build.call("reshape", expr, ctx.shape_lit(target))
    else:
        raise Unsupported("the mask must be [Q, K] or [B or 1, 1, Q, K]")
    if not ctx.equal(qd, nq) or not ctx.equal(kd, nk):
        raise Unsupported("the mask does not cover [Q, K]")
    if negated:
        expr = build.binary("^", expr, build.bool_lit(True))
    return expr, rows


@dataclass(frozen=True)
class Visibility:
    """A mask bound to a local (`mask`: `[Q, K]` or `[B, Q, K]`, true = attend) and
    whether each query row sees a key (`visible[b, q] = any[k] mask[b, q, k]`)."""

    mask: Value
    visible: Value
    rows: bool


_MADE: weakref.WeakKeyDictionary[Translation, dict[tuple[object, ...], tuple[object, Any]]]
_MADE = weakref.WeakKeyDictionary()
"""Per translation, what the fix-up of fully masked rows bound to locals: the mask
and its `visible` test per graph mask (by its value, negation and layout), the NaN
scalar per dtype. Every layer then reads one `mask`, one `visible` and one `nan`:
computed once, and one loop invariant when the layers are outlined into a method."""


def _shared(ctx: Context, key: tuple[object, ...], owner: object, make: Callable[[], Any]) -> Any:
    """`make()`'s result, made once per translation for `key` (and `owner`, the
    object it was made for), as long as the local it bound is still in the body."""
    made = _MADE.setdefault(ctx.t, {})
    hit = made.get(key)
    if hit is not None and hit[0] is owner and _bound(ctx, _local_of(hit[1])):
        return hit[1]
    value = make()
    made[key] = (owner, value)
    return value


def _local_of(made: Any) -> str | None:
    value = made.visible if isinstance(made, Visibility) else made
    expr = value.expr if isinstance(value, Value) else None
    return expr.ident.name if isinstance(expr, ast.Name) else None


def _bound(ctx: Context, name: str | None) -> bool:
    """Whether the local `name` is still defined in the body being written (a refused
    node's statements are removed; a subgraph writes another body)."""
    if name is None:
        return False
    for s in ctx.t.body:
        if isinstance(s, ast.ComprehensionStmt) and s.name.name == name:
            return True
        if (
            isinstance(s, ast.LetStmt)
            and isinstance(s.pattern, ast.NamePattern)
            and s.pattern.name.name == name
        ):
            return True
    return False


def visibility(
    ctx: Context, source: Value, expr: ast.Expr, rows: bool, dims: list[Dim], negated: bool
) -> Visibility:
    """`expr` (the boolean mask as `boolean_mask` wrote it, read from the graph value
    `source`) bound to a local, and its `visible` row test; made once per mask."""

    def make() -> Visibility:
        mask = Value(tuple(dims), "bool", expr=expr)
        if not isinstance(expr, ast.Name):
            mask = ctx.let(expr, dims, "bool", "mask")
        b, q, k = ctx.indices(3, "bqk")
        row = [b, q] if rows else [q]
        shape = (dims[0], dims[1]) if rows else (dims[0],)
        seen = build.reduction("any", [k], _at(ctx, mask, [*row, k]))
        return Visibility(mask, ctx.comprehension(row, seen, shape, "bool", "visible"), rows)

    found: Visibility = _shared(ctx, ("mask", id(source), negated, rows), source, make)
    return found


def _nan(ctx: Context, dtype: str) -> Value:
    """`let nan = ...`: Linnet has no NaN literal; `Context.literal` computes one."""

    def make() -> Value:
        return ctx.let(ctx.literal(math.nan, dtype), (), dtype, "nan")

    value: Value = _shared(ctx, ("nan", dtype), None, make)
    return value


def write_full_rows(ctx: Context, attended: Value, seen: Visibility, fill: str) -> Value:
    """`attended` with every query row that sees no key replaced as the graph computes
    it; `fill` is ZERO or NAN:

        let safe_attended[b, h, q, d] = select(visible[b, q], attended[b, h, q, d], 0.0)
    """
    b, h, q, d = ctx.indices(4, "bhqd")
    row = [b, q] if seen.rows else [q]
    if fill == ZERO:
        replacement, hint = ctx.literal(0.0, attended.dtype), "safe_attended"
    elif fill == NAN:
        replacement, hint = ctx.ref(_nan(ctx, attended.dtype)), "attended_or_nan"
    else:
        raise AssertionError(f"no fix-up for fully masked rows that give {fill}")
    body = build.call(
        "select", _at(ctx, seen.visible, row), _at(ctx, attended, [b, h, q, d]), replacement
    )
    return ctx.comprehension([b, h, q, d], body, attended.shape, attended.dtype, hint)


def _at(ctx: Context, value: Value, indices: list[str]) -> ast.Expr:
    return build.index(ctx.ref(value), [build.name(i) for i in indices])
