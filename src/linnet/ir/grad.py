"""Reverse-mode differentiation of a lowered entry: the loss and its gradients (`--grad`).

Stage: after lowering and optimisation, before an exporter (language-extensions
section 6). In: a `Function` whose only result is a floating scalar (the loss)
and what to differentiate: `param` paths (an entry of a block) or input
positions (a module-level entry). Out: a new `Function` with the same inputs
returning the loss, one gradient per differentiated value (same type; zeros
where the loss does not depend on it) and then the entry's state updates.

Why our own: the exported program must not depend on a framework's autodiff,
and every exporter (ONNX, generated PyTorch, StableHLO) then emits ordinary
ops. The rules follow section 6.3:

- `call` regions are inlined first: op calls differentiate their canonical
  bodies (no native kernel stands in), except that a call of an op with a
  gradient clause stays one op whose backward pass is its clause, inlined on
  the operands, the result and the incoming gradient (section 3.3);
- `cast` between float dtypes converts the gradient; integer and bool values
  (casts to them, comparisons, bitwise ops, `iota`, index values) carry none;
- `select` sends the gradient to the chosen operand; elementwise `max`/`min`
  and the `max`/`min` reductions send it to the extreme, split evenly
  between ties (as PyTorch's `amax` and JAX do);
- runtime-index reads (`gather`, `take`) scatter-add, written as a
  contraction with a one-hot matrix; `slice` scatters into zeros the same
  way (a constant selection matrix per sliced axis); `concat`, `reshape`,
  `permute`, `broadcast` and `contract` use their adjoints; broadcasting in
  elementwise ops sums the gradient back to the operand's shape;
- `cumsum`'s gradient is the running sum from the other end, computed as
  `total - cumsum(g) + g` (the IR has no reversal);
- values read from `state` (and buffers) are constants;
- a runtime `for` is differentiated by storing the carried values each
  iteration starts from and replaying the iterations backwards
  (`linnet.ir.grad_scan`);
- a `while` or `if` the loss depends on through a differentiated value is
  refused, naming the loop: section 6.3 does not differentiate `while`, and
  a runtime `if` has no static branch to follow.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from typing import TYPE_CHECKING

import numpy as np

from linnet.errors import LinnetError
from linnet.ir.core import FLOAT_DTYPES, Builder, Function, Op, Region, TensorType, Value
from linnet.ir.regions import clause_region

if TYPE_CHECKING:
    from linnet.ir.bind import BoundModel

_NO_GRADIENT = frozenset(
    {"const", "iota", "param", "buffer", "state", "eq", "ne", "lt", "le", "gt", "ge"}
    | {"and", "or", "xor", "not", "shl", "shr"}
)


def differentiate_entry(
    fn: Function, model: BoundModel | None = None, present: Set[str] = frozenset()
) -> tuple[Function, list[str]]:
    """Section 6.2's differentiated values, then `differentiate`; also their names in order.

    For an entry of a block (`model`), every floating `param` present, in manifest order;
    for a module-level entry, every floating input, in parameter order.
    """
    if model is None:
        floating = [i for i, (_, v) in enumerate(fn.inputs) if v.type.dtype in FLOAT_DTYPES]
        return differentiate(fn, inputs=floating), [fn.inputs[i][0] for i in floating]
    params = {
        path: t
        for path, t in model.live_tensors(present, "param").items()
        if t.dtype in FLOAT_DTYPES
    }
    return differentiate(fn, params=params), list(params)


def differentiate(
    fn: Function, *, params: Mapping[str, TensorType] | None = None, inputs: Sequence[int] = ()
) -> Function:
    """`fn`'s loss, then the gradient of each param path and input position, then its state.

    `params` maps the differentiated paths to their types, in manifest order (a param the
    entry never reads gets a zero gradient).
    """
    params = dict(params or {})
    if len(fn.results) != 1 or fn.results[0].type.rank != 0:
        raise LinnetError(
            f"entry `{fn.name}` must return one floating scalar (the loss) to be differentiated"
        )
    loss = fn.results[0]
    if loss.type.dtype not in FLOAT_DTYPES:
        raise LinnetError(
            f"entry `{fn.name}` returns `{loss.type.dtype}`: the loss must be a floating scalar"
        )
    ops, vmap = _inline(fn.body.ops, {v: v for v in fn.body.args})
    b = Builder()
    b.args = fn.body.args
    b.ops = ops
    grads = _Backward(b, fn.name)
    wrt_inputs = [fn.body.args[i] for i in inputs]
    param_values: dict[str, list[Value]] = {p: [] for p in params}
    for op in ops:
        if op.kind == "param" and op.attrs["path"] in param_values:
            param_values[str(op.attrs["path"])].append(op.result)
    active = _active(ops, {*wrt_inputs, *(v for vs in param_values.values() for v in vs)})
    loss = vmap.get(loss, loss)
    grads.run(ops, loss, active)
    results = [loss]
    for path, t in params.items():
        results.append(grads.total(param_values[path], t))
    for value in wrt_inputs:
        results.append(grads.total([value], value.type))
    updates = {path: vmap.get(v, v) for path, v in fn.state_updates.items()}
    return Function(
        fn.name,
        fn.inputs,
        Region(fn.body.args, _without_clauses(b.ops), tuple(results)),
        (*results,),
        updates,
    )


# -- inlining ---------------------------------------------------------------------------------


def _inline(ops: Sequence[Op], vmap: dict[Value, Value]) -> tuple[list[Op], dict[Value, Value]]:
    """`ops` with every `call` replaced by its body; values renamed through `vmap`."""
    out: list[Op] = []
    for op in ops:
        if clause_region(op) is not None:
            out.append(_kept_clause_call(op, vmap))
            continue
        if op.kind == "call":
            (region,) = op.regions
            inner = dict(vmap)
            for arg, operand in zip(region.args, op.operands, strict=True):
                inner[arg] = vmap.get(operand, operand)
            body, inner = _inline(region.ops, inner)
            out.extend(body)
            for result, value in zip(op.results, region.results, strict=True):
                vmap[result] = inner.get(value, value)
            continue
        operands = tuple(vmap.get(v, v) for v in op.operands)
        regions = tuple(_clone_region(r, vmap) for r in op.regions)
        if operands == op.operands and regions == op.regions:
            out.append(op)
            continue
        results = tuple(Value(r.type, r.name) for r in op.results)
        for old, new in zip(op.results, results, strict=True):
            vmap[old] = new
        out.append(Op(op.kind, operands, results, dict(op.attrs), regions))
    return out, vmap


def _kept_clause_call(op: Op, vmap: dict[Value, Value]) -> Op:
    """A call of an op with a gradient clause stays one op (its clause is its backward
    pass, section 3.4); its regions read the renamed outer values."""
    operands = tuple(vmap.get(v, v) for v in op.operands)
    regions = tuple(_clone_region(r, vmap) for r in op.regions)
    results = tuple(Value(r.type, r.name) for r in op.results)
    for old, new in zip(op.results, results, strict=True):
        vmap[old] = new
    return Op(op.kind, operands, results, dict(op.attrs), regions)


def _without_clauses(ops: Sequence[Op]) -> list[Op]:
    """`ops` with each clause call reduced to a plain call (its clause is spent)."""
    out = []
    for op in ops:
        if clause_region(op) is not None:
            attrs = {k: v for k, v in op.attrs.items() if k != "wrt"}
            op = Op(op.kind, op.operands, op.results, attrs, op.regions[:1])
        out.append(op)
    return out


def _clone_region(region: Region, vmap: dict[Value, Value]) -> Region:
    inner = dict(vmap)
    ops, inner = _inline(region.ops, inner)
    if ops == region.ops:
        return region
    return Region(region.args, ops, tuple(inner.get(v, v) for v in region.results))


def _reads(region: Region) -> set[Value]:
    found: set[Value] = set()
    for op in region.ops:
        found.update(op.operands)
        for r in op.regions:
            found |= _reads(r)
    return found


def _active(ops: Sequence[Op], seeds: set[Value]) -> set[Value]:
    """Float values that depend on a differentiated value."""
    active = set(seeds)
    for op in ops:
        if op.kind in _NO_GRADIENT:
            continue
        used = set(op.operands)
        for region in op.regions:
            used |= _reads(region)
        if used & active:
            active.update(r for r in op.results if r.type.dtype in FLOAT_DTYPES)
    return active


# -- the backward pass ------------------------------------------------------------------------


class _Backward:
    """Gradients accumulated per forward value while walking the ops backwards."""

    def __init__(self, b: Builder, entry: str) -> None:
        self.b = b
        self.entry = entry
        self.grad: dict[Value, Value] = {}

    def run(self, ops: Sequence[Op], loss: Value, active: set[Value]) -> None:
        self.grad[loss] = self.b.const(1.0, loss.type.dtype)
        self.pull(ops, active)

    def pull(self, ops: Sequence[Op], active: set[Value]) -> None:
        """Walk `ops` backwards from the gradients already seeded in `self.grad`."""
        for op in reversed(ops):
            gs = [self.grad.get(r) for r in op.results]
            if all(g is None for g in gs):
                continue
            wanted = [v in active for v in op.operands]
            if clause_region(op) is not None:
                self.clause(op, gs[0], wanted)
                continue
            if op.kind == "for":  # replayed backwards (language-extensions 6.3)
                from linnet.ir.grad_scan import differentiate_for

                differentiate_for(self, op, gs, active)
                continue
            if (op.regions and any(wanted)) or any(_reads(r) & active for r in op.regions):
                raise LinnetError(
                    f"entry `{self.entry}`: the loss depends on a `{op.kind}` loop or branch, "
                    "which --grad does not differentiate (language-extensions 6.3)"
                )
            if not any(wanted) or op.kind in _NO_GRADIENT:
                continue
            rule = getattr(self, f"d_{op.kind}", None)
            if rule is None:
                raise LinnetError(f"entry `{self.entry}`: no gradient rule for the op `{op.kind}`")
            for operand, want, g in zip(op.operands, wanted, rule(op, gs), strict=True):
                if want and g is not None:
                    self.add(operand, g)

    def clause(self, op: Op, g: Value | None, wanted: list[bool]) -> None:
        """An op with a gradient clause: the clause, inlined on (operands, result, `g`),
        gives the gradients of the operands in `wrt`; nothing inside the body is
        differentiated, the other operands receive none (section 3.3)."""
        if g is None:
            return
        gradient = clause_region(op)
        assert gradient is not None
        mapping = dict(zip(gradient.args, (*op.operands, op.result, g), strict=True))
        ops, mapping = _inline(gradient.ops, mapping)
        self.b.ops.extend(_without_clauses(ops))
        wrt = [int(i) for i in op.attrs["wrt"]]  # type: ignore[attr-defined]
        for index, value in zip(wrt, gradient.results, strict=True):
            if wanted[index]:
                self.add(op.operands[index], mapping.get(value, value))

    def add(self, value: Value, g: Value) -> None:
        if g.type.shape != value.type.shape:
            g = self.unbroadcast(g, value.type.shape)
        before = self.grad.get(value)
        self.grad[value] = g if before is None else self.b.binary("add", before, g)

    def total(self, values: Sequence[Value], t: TensorType) -> Value:
        found = [self.grad[v] for v in values if v in self.grad]
        if not found:
            return self.b.broadcast(self.b.const(0.0, t.dtype), t.shape)
        total = found[0]
        for g in found[1:]:
            total = self.b.binary("add", total, g)
        return total

    # -- helpers ---------------------------------------------------------------------------

    def const(self, value: float, like: Value) -> Value:
        return self.b.const(value, like.type.dtype)

    def unbroadcast(self, g: Value, shape: tuple[int, ...]) -> Value:
        """Sum `g` over the axes a right-aligned broadcast to its shape added or stretched."""
        extra = g.type.rank - len(shape)
        axes = list(range(extra)) + [
            extra + i for i, d in enumerate(shape) if d == 1 and g.type.shape[extra + i] != 1
        ]
        if axes:
            g = self.b.reduce(g, "sum", axes)
        return g if g.type.shape == shape else self.b.reshape(g, shape)

    def expand(self, g: Value, shape: tuple[int, ...], axes: Sequence[int]) -> Value:
        """`g` (the shape without `axes`) put back to `shape` by broadcasting along `axes`."""
        kept = [1 if i in axes else d for i, d in enumerate(shape)]
        return self.b.broadcast(self.b.reshape(g, kept), shape)

    def onehot(self, indices: Value, n: int, dtype: str) -> Value:
        """`[*indices.shape, n]`: 1 where the last coordinate equals the index."""
        idx = self.b.cast(indices, "i64") if indices.type.dtype != "i64" else indices
        idx = self.b.reshape(idx, (*idx.type.shape, 1))
        hits = self.b.binary("eq", idx, self.b.iota(n, "i64"))
        return self.b.cast(hits, dtype)

    def select_matrix(self, rows: Sequence[int], n: int, dtype: str) -> Value:
        """`[len(rows), n]` constant with a 1 at `(k, rows[k])`."""
        m = np.zeros((len(rows), n))
        m[np.arange(len(rows)), list(rows)] = 1.0
        return self.b.const(m, dtype)

    def move_last_to(self, x: Value, axis: int) -> Value:
        """Move the last axis of `x` to position `axis`."""
        r = x.type.rank
        perm = list(range(r - 1))
        perm.insert(axis, r - 1)
        return x if perm == list(range(r)) else self.b.permute(x, perm)

    # -- rules: one per op kind; each returns one gradient (or None) per operand ----------

    def d_add(self, op: Op, gs: list[Value | None]) -> list[Value | None]:
        return [gs[0], gs[0]]

    def d_sub(self, op: Op, gs: list[Value | None]) -> list[Value | None]:
        (g,) = gs
        assert g is not None
        return [g, self.b.unary("neg", g)]

    def d_mul(self, op: Op, gs: list[Value | None]) -> list[Value | None]:
        (g,) = gs
        a, c = op.operands
        assert g is not None
        return [self.b.binary("mul", g, c), self.b.binary("mul", g, a)]

    def d_div(self, op: Op, gs: list[Value | None]) -> list[Value | None]:
        (g,) = gs
        _, c = op.operands
        assert g is not None
        ga = self.b.binary("div", g, c)
        quotient = op.result
        return [ga, self.b.unary("neg", self.b.binary("mul", ga, quotient))]

    def d_rem(self, op: Op, gs: list[Value | None]) -> list[Value | None]:
        # a = trunc(a / b) * b + r, so dr/da = 1 and dr/db = -trunc(a / b) = -(a - r) / b.
        (g,) = gs
        a, c = op.operands
        assert g is not None
        times = self.b.binary("div", self.b.binary("sub", a, op.result), c)
        return [g, self.b.unary("neg", self.b.binary("mul", g, times))]

    def _extreme(self, op: Op, g: Value, strict: str) -> list[Value | None]:
        a, c = op.operands
        one, half, zero = self.const(1.0, a), self.const(0.5, a), self.const(0.0, a)
        tie = self.b.select(self.b.binary("eq", a, c), half, zero)
        share = self.b.select(self.b.binary(strict, a, c), one, tie)
        other = self.b.binary("sub", one, share)
        return [self.b.binary("mul", g, share), self.b.binary("mul", g, other)]

    def d_max(self, op: Op, gs: list[Value | None]) -> list[Value | None]:
        assert gs[0] is not None
        return self._extreme(op, gs[0], "gt")

    def d_min(self, op: Op, gs: list[Value | None]) -> list[Value | None]:
        assert gs[0] is not None
        return self._extreme(op, gs[0], "lt")

    def d_neg(self, op: Op, gs: list[Value | None]) -> list[Value | None]:
        assert gs[0] is not None
        return [self.b.unary("neg", gs[0])]

    def d_exp(self, op: Op, gs: list[Value | None]) -> list[Value | None]:
        assert gs[0] is not None
        return [self.b.binary("mul", gs[0], op.result)]

    def d_log(self, op: Op, gs: list[Value | None]) -> list[Value | None]:
        assert gs[0] is not None
        return [self.b.binary("div", gs[0], op.operands[0])]

    def d_sqrt(self, op: Op, gs: list[Value | None]) -> list[Value | None]:
        assert gs[0] is not None
        half = self.b.binary("div", gs[0], op.result)
        return [self.b.binary("mul", half, self.const(0.5, op.result))]

    def d_rsqrt(self, op: Op, gs: list[Value | None]) -> list[Value | None]:
        # d x^-1/2 = -1/2 x^-3/2 = -1/2 y / x
        assert gs[0] is not None
        (x,) = op.operands
        slope = self.b.binary("mul", self.b.binary("div", op.result, x), self.const(-0.5, x))
        return [self.b.binary("mul", gs[0], slope)]

    def d_sin(self, op: Op, gs: list[Value | None]) -> list[Value | None]:
        assert gs[0] is not None
        return [self.b.binary("mul", gs[0], self.b.unary("cos", op.operands[0]))]

    def d_cos(self, op: Op, gs: list[Value | None]) -> list[Value | None]:
        assert gs[0] is not None
        sin = self.b.unary("sin", op.operands[0])
        return [self.b.unary("neg", self.b.binary("mul", gs[0], sin))]

    def d_tanh(self, op: Op, gs: list[Value | None]) -> list[Value | None]:
        assert gs[0] is not None
        y = op.result
        slope = self.b.binary("sub", self.const(1.0, y), self.b.binary("mul", y, y))
        return [self.b.binary("mul", gs[0], slope)]

    def d_abs(self, op: Op, gs: list[Value | None]) -> list[Value | None]:
        assert gs[0] is not None
        (x,) = op.operands
        zero = self.const(0.0, x)
        sign = self.b.select(
            self.b.binary("gt", x, zero),
            self.const(1.0, x),
            self.b.select(self.b.binary("lt", x, zero), self.const(-1.0, x), zero),
        )
        return [self.b.binary("mul", gs[0], sign)]

    def d_select(self, op: Op, gs: list[Value | None]) -> list[Value | None]:
        (g,) = gs
        cond, a, _ = op.operands
        assert g is not None
        zero = self.const(0.0, a)
        return [None, self.b.select(cond, g, zero), self.b.select(cond, zero, g)]

    def d_cast(self, op: Op, gs: list[Value | None]) -> list[Value | None]:
        (x,) = op.operands
        if gs[0] is None or x.type.dtype not in FLOAT_DTYPES:
            return [None]
        if op.result.type.dtype not in FLOAT_DTYPES:
            return [None]
        return [self.b.cast(gs[0], x.type.dtype)]

    def d_broadcast(self, op: Op, gs: list[Value | None]) -> list[Value | None]:
        assert gs[0] is not None
        return [self.unbroadcast(gs[0], op.operands[0].type.shape)]

    def d_reshape(self, op: Op, gs: list[Value | None]) -> list[Value | None]:
        assert gs[0] is not None
        return [self.b.reshape(gs[0], op.operands[0].type.shape)]

    def d_permute(self, op: Op, gs: list[Value | None]) -> list[Value | None]:
        assert gs[0] is not None
        perm = [int(p) for p in op.attrs["perm"]]  # type: ignore[attr-defined]
        inverse = [perm.index(i) for i in range(len(perm))]
        return [self.b.permute(gs[0], inverse)]

    def d_slice(self, op: Op, gs: list[Value | None]) -> list[Value | None]:
        (g,) = gs
        (x,) = op.operands
        assert g is not None
        start, stop, step = (
            [int(v) for v in op.attrs[k]]  # type: ignore[attr-defined]
            for k in ("start", "stop", "step")
        )
        for axis, n in enumerate(x.type.shape):
            rows = list(range(start[axis], min(stop[axis], n), step[axis]))
            if rows == list(range(n)):
                continue
            m = self.select_matrix(rows, n, g.type.dtype)  # [out, n]
            spread = self.b.contract(g, m, lhs_contract=[axis], rhs_contract=[0])
            g = self.move_last_to(spread, axis)
        return [g]

    def d_concat(self, op: Op, gs: list[Value | None]) -> list[Value | None]:
        (g,) = gs
        assert g is not None
        axis = int(op.attrs["axis"])  # type: ignore[call-overload]
        out: list[Value | None] = []
        offset = 0
        for x in op.operands:
            start = [0] * g.type.rank
            stop = list(g.type.shape)
            start[axis], stop[axis] = offset, offset + x.type.shape[axis]
            offset += x.type.shape[axis]
            out.append(self.b.slice(g, start, stop, [1] * g.type.rank))
        return out

    def d_cumsum(self, op: Op, gs: list[Value | None]) -> list[Value | None]:
        (g,) = gs
        assert g is not None
        axis = int(op.attrs["axis"])  # type: ignore[call-overload]
        total = self.expand(self.b.reduce(g, "sum", [axis]), g.type.shape, [axis])
        running = self.b.cumsum(g, axis)
        return [self.b.binary("add", self.b.binary("sub", total, running), g)]

    def d_gather(self, op: Op, gs: list[Value | None]) -> list[Value | None]:
        (g,) = gs
        x, indices = op.operands
        assert g is not None
        axis = int(op.attrs["axis"])  # type: ignore[call-overload]
        k = indices.type.rank
        hot = self.onehot(indices, x.type.shape[axis], g.type.dtype)  # [*I, n]
        spread = self.b.contract(
            g, hot, lhs_contract=list(range(axis, axis + k)), rhs_contract=list(range(k))
        )  # [pre, post, n]
        return [self.move_last_to(spread, axis), None]

    def d_take(self, op: Op, gs: list[Value | None]) -> list[Value | None]:
        (g,) = gs
        x, *indices = op.operands
        assert g is not None
        shape = g.type.shape
        flat: Value | None = None
        stride = 1
        for axis in reversed(range(x.type.rank)):
            idx = indices[axis]
            idx = self.b.cast(idx, "i64") if idx.type.dtype != "i64" else idx
            if idx.type.shape != shape:
                idx = self.b.broadcast(idx, shape)
            term = idx if stride == 1 else self.b.binary("mul", idx, self.b.const(stride, "i64"))
            flat = term if flat is None else self.b.binary("add", flat, term)
            stride *= x.type.shape[axis]
        assert flat is not None
        hot = self.onehot(flat, x.type.size, g.type.dtype)  # [*J, size]
        r = len(shape)
        spread = self.b.contract(g, hot, lhs_contract=list(range(r)), rhs_contract=list(range(r)))
        return [self.b.reshape(spread, x.type.shape), *([None] * len(indices))]

    def d_reduce(self, op: Op, gs: list[Value | None]) -> list[Value | None]:
        (g,) = gs
        (x,) = op.operands
        assert g is not None
        axes = [int(a) for a in op.attrs["axes"]]  # type: ignore[attr-defined]
        kind = op.attrs["kind"]
        spread = self.expand(g, x.type.shape, axes)
        if kind == "sum":
            return [spread]
        y = self.expand(op.result, x.type.shape, axes)
        if kind == "prod":
            return [self.b.binary("div", self.b.binary("mul", spread, y), x)]
        if kind in ("max", "min"):
            hits = self.b.cast(self.b.binary("eq", x, y), x.type.dtype)
            count = self.expand(self.b.reduce(hits, "sum", axes), x.type.shape, axes)
            return [self.b.binary("mul", self.b.binary("div", spread, count), hits)]
        return [None]

    def d_contract(self, op: Op, gs: list[Value | None]) -> list[Value | None]:
        (g,) = gs
        lhs, rhs = op.operands
        assert g is not None
        lb, rb, lc, rc = (
            [int(a) for a in op.attrs[k]]  # type: ignore[attr-defined]
            for k in ("lhs_batch", "rhs_batch", "lhs_contract", "rhs_contract")
        )
        nb = len(lb)
        lfree = [i for i in range(lhs.type.rank) if i not in lb + lc]
        rfree = [i for i in range(rhs.type.rank) if i not in rb + rc]
        g_batch = list(range(nb))
        g_lfree = list(range(nb, nb + len(lfree)))
        g_rfree = list(range(nb + len(lfree), g.type.rank))
        # d lhs: g (batch, lfree, rfree) with rhs (contracting rfree) -> (batch, lfree, rc axes)
        dl = self.b.contract(
            g,
            rhs,
            lhs_batch=g_batch,
            rhs_batch=rb,
            lhs_contract=g_rfree,
            rhs_contract=rfree,
        )
        dl_axes = lb + lfree + [lc[rc.index(a)] for a in sorted(rc)]
        # d rhs: g with lhs (contracting lfree) -> (batch, rfree, lc axes)
        dr = self.b.contract(
            g,
            lhs,
            lhs_batch=g_batch,
            rhs_batch=lb,
            lhs_contract=g_lfree,
            rhs_contract=lfree,
        )
        dr_axes = rb + rfree + [rc[lc.index(a)] for a in sorted(lc)]
        return [self._to_order(dl, dl_axes), self._to_order(dr, dr_axes)]

    def _to_order(self, x: Value, axes: list[int]) -> Value:
        """`x`, whose axis i is operand axis `axes[i]`, permuted into operand order."""
        perm = [axes.index(i) for i in range(len(axes))]
        return x if perm == list(range(len(axes))) else self.b.permute(x, perm)
