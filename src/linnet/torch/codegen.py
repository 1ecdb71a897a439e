"""Core IR function -> straight-line PyTorch source (`compile=True`).

Stage: backend. Input: a lowered, optimised `Function` (static shapes), a
device, and whether weight-derived values may be hoisted. Output: `Generated`:
the Python source of two functions and the compiled callables.

    def prologue(W):           # constants, shapes and (if allowed) weights only
        ...                    # run once per weight version, its results cached
        return (...)
    def entry(W, S, H, x, ...):   # W weights by path, S state by path, H the prologue's results
        ...
        return [results], {state path: new value}

Every op becomes one assignment. The common cases are spelled inline with
torch calls (`F.linear`, `torch.matmul`, `x.reshape(...)`, operators); rarer
ones (guarded integer division, emulated unsigned dtypes, gathers) call the
very kernel object the interpreted runner uses, bound as a global `_k<n>`, so
the two paths share one semantics. Constants that are not inlined as Python
literals are globals `_c<n>` (iotas `_iota<n>`). `call` ops of known
standard-library ops become native kernels (`linnet.torch.natives`); the
others are inlined with a comment naming the op. Native linears that read the
same `x` (a layer's q, k and v; its gate and up) are joined into one call of
their `Native.many` function (`join_calls`), which runs them as one native call
with one OpenMP parallel region: measured in a TinyLlama-shaped int4 decode
step that saves per layer three wrapper calls and three thread wake-ups. `while`, `for` and `if` become
Python loops and branches (a scan stacks its rows with `torch.stack`). Each intermediate is deleted after its last use
(`del`), as eager code drops it, so the allocator can reuse its memory.
`linnet.torch.standalone` writes the same source as a self-contained module
(the globals spelled out), which `linnet torch` prints.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from linnet.ir.core import Function, Op, Region, Value
from linnet.ir.pynames import Namer
from linnet.ir.regions import clause_region, region_free_values
from linnet.native.kernels import MANY
from linnet.records import record
from linnet.torch import clauses as clauses_module
from linnet.torch import natives as natives_module
from linnet.torch import ops as ops_module
from linnet.torch.analysis import Hoisting, free_values, hoist, walk, weights_key
from linnet.torch.dtypes import EMULATED, FLOATS, MASKED, storage, to_torch
from linnet.torch.natives import Native, find_native
from linnet.torch.ops import Context, ContractPlan, contract_plan, ints, make_kernel

Entry = Callable[..., tuple[list[torch.Tensor], dict[str, torch.Tensor]]]
Prologue = Callable[[Any], tuple[torch.Tensor, ...]]

_OPERATORS = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "eq": "==",
    "ne": "!=",
    "lt": "<",
    "le": "<=",
    "gt": ">",
    "ge": ">=",
    "and": "&",
    "or": "|",
    "xor": "^",
}
_TORCH_BINARY = {
    "max": "torch.maximum",
    "min": "torch.minimum",
    "shl": "torch.bitwise_left_shift",
    "shr": "torch.bitwise_right_shift",
}
_TORCH_UNARY = {
    "exp": "torch.exp",
    "log": "torch.log",
    "sqrt": "torch.sqrt",
    "rsqrt": "torch.rsqrt",
    "sin": "torch.sin",
    "cos": "torch.cos",
    "tanh": "torch.tanh",
    "neg": "torch.neg",
    "not": "torch.bitwise_not",
}
_INLINE_SCALAR_OK = frozenset({"add", "sub", "mul", "div", "eq", "ne", "lt", "le", "gt", "ge"})


def torch_dtype(dtype: str) -> str:
    """`torch.float32` for `f32` (the storage dtype, see `linnet.torch.dtypes`)."""
    return "torch." + str(storage(dtype)).removeprefix("torch.")


def literal(value: object) -> str:
    """A Python literal for a scalar (`float('inf')` where repr is not a literal)."""
    if isinstance(value, bool | np.bool_):
        return "True" if value else "False"
    if isinstance(value, float | np.floating):
        number = float(value)
        if math.isnan(number):
            return "float('nan')"
        if math.isinf(number):
            return "float('inf')" if number > 0 else "float('-inf')"
        return repr(number)
    return repr(int(value))  # type: ignore[call-overload]


def _shape(shape: Sequence[int]) -> str:
    items = ", ".join(str(d) for d in shape)
    return f"({items},)" if len(shape) == 1 else f"({items})"


@record
class Generated:
    """Generated source and its compiled functions for one entry and input types."""

    source: str
    entry: Entry
    prologue: Prologue | None
    hoisting: Hoisting
    globals: dict[str, Any]
    kernels: dict[str, Op]
    """The op behind each fallback kernel global `_k<n>` (`standalone` rebuilds them)."""


# Module names and builtins the generated code uses; globals start with "_",
# which `Namer.fresh` never produces.
_RESERVED = frozenset(
    {"torch", "F", "ops", "natives", "clauses", "W", "S", "H", "DEVICE", "bool", "float"}
)


class _Emitter:
    """Writes the lines of one Python function from IR regions."""

    def __init__(
        self,
        context: Context,
        namer: Namer,
        globals_: dict[str, Any],
        natives: bool,
        kernels: dict[str, Op],
    ) -> None:
        self.context = context
        self.kernels = kernels
        self.name = namer
        self.globals = globals_
        self.natives = natives
        self.lines: list[str] = []
        self.depth = 1
        self.spans: list[tuple[Op, int, int]] | None = None  # top-level ops and their lines
        self.joined: dict[int, list[Op]] = {}
        """Top-level native calls on one `x` made as one `many` call (`join_calls`): the
        members by the id of the first; the others are written there, not in their place."""

    # -- helpers ---------------------------------------------------------------------

    def line(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def bind_global(self, prefix: str, value: object) -> str:
        name = f"_{prefix}{len(self.globals)}"
        self.globals[name] = value
        return name

    def operand(self, value: Value, allow_literal: bool = False) -> str:
        """A value's name, or a literal for a rank-0 constant where the op allows it."""
        known = self.context.known(value)
        if allow_literal and known is not None and value.type.rank == 0:
            dtype = value.type.dtype
            if dtype not in EMULATED:
                return literal(known.item() if dtype != "bf16" else float(known))
        return self.name(value)

    def assign(self, op: Op, expression: str, comment: str = "") -> None:
        target = ", ".join(self.name(v) for v in op.results)
        suffix = f"  # {comment}" if comment else ""
        self.line(f"{target} = {expression}{suffix}")

    def fallback(self, op: Op, why: str) -> None:
        """Call the runner's kernel for this op (shared semantics for the rare cases)."""
        kernel = self.bind_global("k", make_kernel(op, self.context))
        self.kernels[kernel] = op
        args = ", ".join(self.name(v) for v in op.operands)
        self.assign(op, f"{kernel}({args})", f"{op.kind} {why}")

    # -- regions ---------------------------------------------------------------------

    def region(self, region: Region, skip: set[int] | None = None) -> None:
        for op in region.ops:
            if op.kind in ("const", "iota") or (skip is not None and id(op) in skip):
                continue
            record = self.spans is not None and self.depth == 1 and not self._inlined(op)
            start = len(self.lines)
            members = self.joined.get(id(op)) if self.depth == 1 else None
            if members is None:
                self.op(op)
            else:
                self.emit_joined(members)
            if record and self.spans is not None:
                # each member's results are made, and its operands read, on these lines
                for member in members or (op,):
                    self.spans.append((member, start, len(self.lines)))

    def _inlined(self, op: Op) -> bool:
        """Whether `op` is a call whose body is written out in place (no native kernel)."""
        return op.kind == "call" and (not self.natives or find_native(op, self.context) is None)

    def release_dead(self, keep: set[str]) -> None:
        """Insert `del` after each top-level value's last use (straight-line code only).

        Holding every intermediate until the function returns keeps the allocator
        from reusing their memory; eager code drops them as it goes.
        """
        assert self.spans is not None
        names = self.name.names
        last: dict[str, int] = {}
        for index, (op, _, _) in enumerate(self.spans):
            for value in op.results if op.kind not in ("param", "buffer", "state") else ():
                name = names.get(value)
                if name is not None:
                    last.setdefault(name, index)
            for value in free_values(op):
                name = names.get(value)
                if name is not None and name in last:
                    last[name] = index
        after: dict[int, list[str]] = {}
        for name, index in last.items():
            if name not in keep and name not in self.globals:
                after.setdefault(self.spans[index][2], []).append(name)
        lines: list[str] = []
        for position, text in enumerate(self.lines):
            lines.append(text)
            dropped = after.get(position + 1)
            if dropped:
                lines.append("    " + f"del {', '.join(dropped)}")
        self.lines = lines

    def op(self, op: Op) -> None:
        handler = getattr(self, f"emit_{op.kind}", None)
        if handler is None:
            if op.kind in _OPERATORS or op.kind in _TORCH_BINARY or op.kind in ("div", "rem"):
                self.emit_binary(op)
            elif op.kind in _TORCH_UNARY or op.kind == "abs":
                self.emit_unary(op)
            else:
                self.fallback(op, "")
            return
        handler(op)

    # -- sources ---------------------------------------------------------------------

    def emit_const(self, op: Op) -> None:
        value = op.attrs["value"]
        assert isinstance(value, np.ndarray)
        device = self.context.device
        if device.type == "meta":
            # Printing only (`linnet torch`): constants are small (folding caps them) and
            # the printer writes their values out, so they stay real, on the CPU.
            device = torch.device("cpu")
        tensor = to_torch(value, op.results[0].type.dtype, device)
        name = self.bind_global("c", tensor)
        self.name.names[op.results[0]] = name
        self.name.taken.add(name)

    def emit_iota(self, op: Op) -> None:
        t = op.results[0].type
        tensor = torch.arange(t.shape[0], dtype=storage(t.dtype), device=self.context.device)
        name = self.bind_global("iota", tensor)
        self.name.names[op.results[0]] = name
        self.name.taken.add(name)

    def emit_param(self, op: Op) -> None:
        self.assign(op, f"W[{str(op.attrs['path'])!r}]")

    emit_buffer = emit_param

    def emit_state(self, op: Op) -> None:
        self.assign(op, f"S[{str(op.attrs['path'])!r}]")

    # -- elementwise -----------------------------------------------------------------

    def emit_cast(self, op: Op) -> None:
        source, target = op.operands[0].type.dtype, op.results[0].type.dtype
        x = self.name(op.operands[0])
        if source == target:
            self.assign(op, x)
        elif source in EMULATED or target in EMULATED:
            self.fallback(op, f"{source} -> {target}")
        elif source in FLOATS and target not in FLOATS and target not in ("bool", "i64"):
            self.assign(op, f"{x}.to(torch.int64).to({torch_dtype(target)})")
        else:
            self.assign(op, f"{x}.to({torch_dtype(target)})")

    def emit_unary(self, op: Op) -> None:
        dtype = op.operands[0].type.dtype
        x = self.name(op.operands[0])
        if op.kind == "abs":
            self.assign(op, x if dtype.startswith("u") else f"torch.abs({x})")
        elif dtype in MASKED and op.kind in ("neg", "not"):
            self.fallback(op, dtype)
        else:
            self.assign(op, f"{_TORCH_UNARY[op.kind]}({x})")

    def emit_binary(self, op: Op) -> None:
        kind, dtype = op.kind, op.operands[0].type.dtype
        emulated = dtype in EMULATED
        if emulated and (kind in ("div", "rem", "max", "min", "shr", "lt", "le", "gt", "ge")):
            self.fallback(op, dtype)
            return
        if kind in ("div", "rem") and dtype not in FLOATS:
            divisor = self.context.known(op.operands[1])
            if divisor is None or np.any(divisor == 0) or np.any(divisor == -1):
                self.fallback(op, f"{dtype} (guarded)")
                return
        scalars = kind in _INLINE_SCALAR_OK and not emulated
        left, right = op.operands
        left_first = kind in ("add", "sub", "mul") or (kind == "div" and dtype in FLOATS)
        a = self.operand(left, scalars and left_first and self.context.known(right) is None)
        b = self.operand(right, scalars and a == self.name(left))
        if kind == "div":
            expr = (
                f"{a} / {b}" if dtype in FLOATS else f"torch.div({a}, {b}, rounding_mode='trunc')"
            )
        elif kind == "rem":
            expr = f"torch.fmod({a}, {b})"
        elif kind in _OPERATORS:
            expr = f"{a} {_OPERATORS[kind]} {b}"
        else:
            expr = f"{_TORCH_BINARY[kind]}({a}, {b})"
        if dtype in MASKED and kind in ("add", "sub", "mul", "shl"):
            expr = f"torch.bitwise_and({expr}, {MASKED[dtype]})"
        self.assign(op, expr)

    def emit_select(self, op: Op) -> None:
        c, a, b = op.operands
        both_literal = self.context.known(a) is not None and self.context.known(b) is not None
        a_name = self.operand(a, not both_literal and a.type.dtype not in EMULATED)
        b_name = self.operand(b, a_name == self.name(a) and b.type.dtype not in EMULATED)
        self.assign(op, f"torch.where({self.name(c)}, {a_name}, {b_name})")

    # -- shape ops -------------------------------------------------------------------

    def emit_broadcast(self, op: Op) -> None:
        x = self.name(op.operands[0])
        self.assign(op, f"{x}.expand({_shape(ints(op, 'shape'))})")

    def emit_reshape(self, op: Op) -> None:
        x = self.name(op.operands[0])
        self.assign(op, f"{x}.reshape({_shape(ints(op, 'shape'))})")

    def emit_permute(self, op: Op) -> None:
        x = self.name(op.operands[0])
        self.assign(op, f"{x}.permute({_shape(ints(op, 'perm'))})")

    def emit_slice(self, op: Op) -> None:
        x = self.name(op.operands[0])
        shape = op.operands[0].type.shape
        parts = []
        for dim, start, stop, step in zip(
            shape, ints(op, "start"), ints(op, "stop"), ints(op, "step"), strict=True
        ):
            text = ("" if start == 0 else str(start)) + ":" + ("" if stop >= dim else str(stop))
            parts.append(text + (f":{step}" if step != 1 else ""))
        while parts and parts[-1] == ":":
            parts.pop()
        self.assign(op, f"{x}[{', '.join(parts)}]" if parts else x)

    def emit_concat(self, op: Op) -> None:
        xs = ", ".join(self.name(v) for v in op.operands)
        self.assign(op, f"torch.cat(({xs},), dim={op.attrs['axis']})")

    def emit_cumsum(self, op: Op) -> None:
        (x,) = (self.name(v) for v in op.operands)
        self.assign(op, f"torch.cumsum({x}, dim={op.attrs['axis']}, dtype={x}.dtype)")

    def emit_gather(self, op: Op) -> None:
        x, i = (self.name(v) for v in op.operands)
        self.assign(op, f"ops.gather({x}, {i}, {op.attrs['axis']})")

    def emit_take(self, op: Op) -> None:
        x, *indices = (self.name(v) for v in op.operands)
        if not indices:
            self.assign(op, x)
            return
        longs = ", ".join(f"{i}.long()" for i in indices)
        self.assign(op, f"{x}[{longs},]")

    # -- reductions and contraction ------------------------------------------------------

    def emit_reduce(self, op: Op) -> None:
        t = op.operands[0].type
        kind = str(op.attrs["kind"])
        axes = ints(op, "axes")
        x = self.name(op.operands[0])
        if not axes:
            self.assign(op, x)
        elif (
            t.dtype in EMULATED
            or any(t.shape[a] == 0 for a in axes)
            or (kind == "prod" and len(axes) > 1)
        ):
            self.fallback(op, kind)
        elif kind in ("sum", "prod"):
            dim = _shape(axes) if kind == "sum" else str(axes[0])
            self.assign(op, f"torch.{kind}({x}, dim={dim}, dtype={torch_dtype(t.dtype)})")
        else:
            name = {
                "max": "torch.amax",
                "min": "torch.amin",
                "any": "torch.any",
                "all": "torch.all",
            }
            self.assign(op, f"{name[kind]}({x}, dim={_shape(axes)})")

    def emit_contract(self, op: Op) -> None:
        dtype = op.operands[0].type.dtype
        if dtype not in FLOATS:
            self.fallback(op, dtype)
            return
        plan = contract_plan(op)
        x, y = (self.name(v) for v in op.operands)
        linear = _as_linear(op, plan)
        if linear:
            self.assign(op, f"F.linear({x}, {y})")
            return
        lhs = _prepare(
            x, plan.lhs_perm, plan.identity_lhs, plan.lhs_flat, op.operands[0].type.shape
        )
        rhs = _prepare(
            y, plan.rhs_perm, plan.identity_rhs, plan.rhs_flat, op.operands[1].type.shape
        )
        product = f"torch.matmul({lhs}, {rhs})"
        if tuple(plan.out_shape) != (*plan.lhs_flat[:-1], plan.rhs_flat[-1]):
            product += f".reshape({_shape(plan.out_shape)})"
        self.assign(op, product)

    # -- control flow and calls ----------------------------------------------------------

    def emit_while(self, op: Op) -> None:
        cond, body = op.regions
        carried = [self.name.fresh("carried") for _ in op.operands]
        if carried:
            self.line(f"{', '.join(carried)} = {', '.join(self.name(v) for v in op.operands)}")
        self.line("while True:")
        self.depth += 1
        self._bind_args(cond.args, carried)
        self.region(cond)
        self.line(f"if not bool({self.name(cond.results[0])}):")
        self.line("    break")
        self._bind_args(body.args, carried)
        self.region(body)
        if carried:
            self.line(f"{', '.join(carried)} = {', '.join(self.name(v) for v in body.results)}")
        self.depth -= 1
        if op.results:
            self.assign(op, ", ".join(carried))

    def emit_for(self, op: Op) -> None:
        """`for i in torch.arange(start, stop)` with the carried values as locals; each scan value's
        rows go to a list, stacked with `torch.stack` (zero rows: `torch.empty`)."""
        (body,) = op.regions
        start, stop = int(str(op.attrs["start"])), int(str(op.attrs["stop"]))
        count = len(op.operands)
        carried = [self.name.fresh("carried") for _ in op.operands]
        rows = [self.name.fresh("rows") for _ in op.results[count:]]
        if carried:
            self.line(f"{', '.join(carried)} = {', '.join(self.name(v) for v in op.operands)}")
        for name in rows:
            self.line(f"{name} = []")
        index, *args = body.args
        # the i64 index, a view per step of one arange made on the device
        self.line(f"for {self.name(index)} in torch.arange({start}, {stop}, device=DEVICE):")
        self.depth += 1
        self._bind_args(args, carried)
        self.region(body)
        if carried:
            self.line(
                f"{', '.join(carried)} = {', '.join(self.name(v) for v in body.results[:count])}"
            )
        for name, value in zip(rows, body.results[count:], strict=True):
            self.line(f"{name}.append({self.name(value)})")
        self.depth -= 1
        stacked = []
        for name, result in zip(rows, op.results[count:], strict=True):
            t = result.type
            empty = f"torch.empty({_shape(t.shape)}, dtype={torch_dtype(t.dtype)}, device=DEVICE)"
            stacked.append(f"torch.stack({name}, 0)" if stop > start else empty)
        if op.results:
            self.assign(op, ", ".join([*carried, *stacked]))
        if rows:
            self.line(f"del {', '.join(rows)}")  # the stacks are copies: free the rows

    def _bind_args(self, args: Sequence[Value], names: Sequence[str]) -> None:
        if args:
            self.line(f"{', '.join(self.name(v) for v in args)} = {', '.join(names)}")

    def emit_if(self, op: Op) -> None:
        then, otherwise = op.regions
        self.line(f"if bool({self.name(op.operands[0])}):")
        for branch in (then, otherwise):
            self.depth += 1
            self.region(branch)
            if op.results:
                self.assign(op, ", ".join(self.name(v) for v in branch.results))
            else:
                self.line("pass")
            self.depth -= 1
            if branch is then:
                self.line("else:")

    def emit_call(self, op: Op) -> None:
        callee = str(op.attrs["callee"])
        native = find_native(op, self.context) if self.natives else None
        if clause_region(op) is not None:  # the native (a kernel) forward, the clause backward
            self.emit_clause_call(op, callee, native)
            return
        if native is not None:
            args = [self.name(v) for v in op.operands]
            self.assign(op, native.source(args), f"{callee} (native)")
            return
        (body,) = op.regions
        self.line(f"# {callee}")
        # Region values are SSA: arguments and results alias the caller's names.
        for arg, operand in zip(body.args, op.operands, strict=True):
            self.name.names[arg] = self.name(operand)
        self.region(body)
        for result, value in zip(op.results, body.results, strict=True):
            if result in self.name.names:
                self.line(f"{self.name(result)} = {self.name(value)}")
            else:
                self.name.names[result] = self.name(value)

    def emit_joined(self, members: Sequence[Op]) -> None:
        """Native calls on one `x` as one call of their `Native.many` function."""
        native = find_native(members[0], self.context)
        assert native is not None and native.many
        x = self.name(members[0].operands[0])
        parts = []
        for op in members:
            rest = [self.name(v) for v in op.operands[1:]]
            rest += ["None"] * (native.arity - len(rest))
            parts.append(f"({', '.join(rest)})")
        targets = ", ".join(self.name(op.results[0]) for op in members)
        callees = ", ".join(sorted({str(op.attrs["callee"]) for op in members}))
        expression = f"natives.{native.many}({x}, {', '.join(parts)})"
        self.line(f"{targets} = {expression}  # {callees} x{len(members)} (native)")

    def emit_clause_call(self, op: Op, callee: str, native: Native | None = None) -> None:
        """An op with a gradient clause: its body (or `native`, the op's kernel launch)
        and clause as local functions, applied through `clauses.apply` (one
        `torch.autograd.Function`, language-extensions 3.4). Values the clause reads
        from outside are bound as defaults when the call runs, since `del` may drop
        them before the backward pass."""
        body, gradient = op.regions[0], clause_region(op)
        assert gradient is not None
        forward = self.name.fresh("forward")
        backward = self.name.fresh("backward")
        self.line(f"# {callee} (gradient clause)")
        if native is None:
            self._local_function(forward, body, [])
        else:
            params = [self.name.fresh(f"operand{i}") for i in range(len(op.operands))]
            self.line(f"def {forward}({', '.join(params)}):")
            self.depth += 1
            self.line(f"return {native.source(params)}")
            self.depth -= 1
        free = sorted({self.name(v) for v in region_free_values(gradient)})
        self._local_function(backward, gradient, free)
        wrt = tuple(int(i) for i in op.attrs["wrt"])  # type: ignore[attr-defined]
        args = "".join(f", {self.name(v)}" for v in op.operands)
        self.assign(op, f"clauses.apply({forward}, {backward}, {wrt!r}{args})")

    def _local_function(self, name: str, region: Region, defaults: Sequence[str]) -> None:
        params = [self.name(v) for v in region.args] + [f"{d}={d}" for d in defaults]
        self.line(f"def {name}({', '.join(params)}):")
        self.depth += 1
        self.region(region)
        results = [self.name(v) for v in region.results]
        self.line(f"return {results[0]}" if len(results) == 1 else f"return ({', '.join(results)})")
        self.depth -= 1


def _as_linear(op: Op, plan: ContractPlan) -> bool:
    """Whether a contract is `x[..., K] . w[N, K]`, which `F.linear` computes directly."""
    lhs, rhs = (v.type for v in op.operands)
    attrs = {k: ints(op, k) for k in ("lhs_batch", "rhs_batch", "lhs_contract", "rhs_contract")}
    return (
        not attrs["lhs_batch"]
        and rhs.rank == 2
        and lhs.rank >= 1
        and attrs["lhs_contract"] == (lhs.rank - 1,)
        and attrs["rhs_contract"] == (1,)
    )


def _prepare(
    name: str, perm: tuple[int, ...], identity: bool, flat: tuple[int, ...], shape: Sequence[int]
) -> str:
    text = name
    current = tuple(shape)
    if not identity:
        text += f".permute({_shape(perm)})"
        current = tuple(shape[p] for p in perm)
    if current != tuple(flat):
        text += f".reshape({_shape(flat)})"
    return text


CACHE_WRITES = frozenset(
    {"std.nn.cache::write_rows", "std.nn.cache::write_slots", "std.nn.cache::write_span"}
)
COPYING = frozenset({"gather"})  # ops whose result never aliases their operand


def donated_states(fn: Function) -> frozenset[Value]:
    """State reads that a top-level cache write may update in place: the path is read
    once, the write is the read's last use (nothing reads the old cache after it,
    nested regions included) and takes it only as its cache, every earlier use copies
    (a view of the old cache would see the write), and the old value is neither a
    result nor a state's new value."""
    reads: dict[str, list[Value]] = {}
    for op in walk(fn.body):
        if op.kind == "state":
            reads.setdefault(str(op.attrs["path"]), []).append(op.results[0])
    once = {found[0] for found in reads.values() if len(found) == 1}
    kept = set(fn.results) | set(fn.state_updates.values())
    uses: dict[Value, list[Op]] = {}
    for op in fn.body.ops:
        for value in free_values(op) & once:
            uses.setdefault(value, []).append(op)
    return frozenset(
        value
        for value, (*earlier, op) in uses.items()
        if op.kind == "call"
        and op.attrs.get("callee") in CACHE_WRITES
        and op.operands[0] is value
        and value not in op.operands[1:]
        and value not in kept
        and all(use.kind in COPYING for use in earlier)
    )


JOIN_CALLS = True
"""Whether `generate` joins native calls on one `x` (`join_calls`); benchmarks turn it off to
compare (bench/torch_decode_profile.py --inside)."""


def join_calls(ops: Sequence[Op], context: Context, skip: set[int]) -> dict[int, list[Op]]:
    """Top-level native calls that may run as one call on their shared first operand: same
    `Native.many`, the same `x` value, each later member's other operands made before the
    first member (so the joined call can stand in the first one's place). By the id of the
    first member, groups of 2 to `natives_quant.MANY` members in program order."""
    made: dict[Value, int] = {}
    open_groups: dict[tuple[str, Value], list[Op]] = {}
    first_at: dict[int, int] = {}
    found: list[list[Op]] = []
    for index, op in enumerate(ops):
        for value in op.results:
            made[value] = index
        if op.kind != "call" or id(op) in skip or clause_region(op) is not None:
            continue
        native = find_native(op, context)
        if native is None or not native.many or len(op.results) != 1:
            continue
        key = (native.many, op.operands[0])
        group = open_groups.get(key)
        if group is not None and len(group) < MANY:
            start = first_at[id(group[0])]
            if all(made.get(v, -1) < start for v in op.operands[1:]):
                group.append(op)
                continue
        open_groups[key] = [op]
        first_at[id(op)] = index
        found.append(open_groups[key])
    return {id(group[0]): group for group in found if len(group) > 1}


def generate(
    fn: Function, device: torch.device, *, hoist_weights: bool, natives: bool = True
) -> Generated:
    """Python source for `fn` and the compiled callables (see the module docstring)."""
    context = Context.of(walk(fn.body), device)
    context.donated = donated_states(fn)
    plan = hoist(fn, weights=hoist_weights)
    namer = Namer(_RESERVED)
    globals_: dict[str, Any] = {
        "torch": torch,
        "F": F,
        "ops": ops_module,
        "natives": natives_module,
        "clauses": clauses_module,
        "DEVICE": device,
    }
    for name, value in fn.inputs:
        namer.names[value] = namer.fresh(name)
    # Constants and iotas first: they are globals, shared by both functions.
    kernels: dict[str, Op] = {}
    sources = _Emitter(context, namer, globals_, natives, kernels)
    for op in walk(fn.body):
        if op.kind == "const":
            sources.emit_const(op)
        elif op.kind == "iota":
            sources.emit_iota(op)
    in_prologue = {id(op) for op in plan.ops}
    frontier = [namer(v) for v in plan.frontier]
    signature = ", ".join(f"{name}: {value.type}" for name, value in fn.inputs)
    head = [f"# entry {fn.name}({signature})"]
    prologue_src: list[str] = []
    if plan.ops:
        pro = _Emitter(context, namer, globals_, natives, kernels)
        read = {v for op in plan.ops for v in free_values(op)}
        for op in fn.body.ops:
            if op.kind in ("param", "buffer") and op.results[0] in read:
                pro.op(op)
        for op in plan.ops:
            pro.op(op)
        packed = ", ".join(frontier) + ("," if len(frontier) == 1 else "")
        pro.line(f"return ({packed})")
        prologue_src = ["def prologue(W):", *pro.lines, ""]

    main = _Emitter(context, namer, globals_, natives, kernels)
    if frontier:
        main.line(f"({', '.join(frontier)}{',' if len(frontier) == 1 else ''}) = H")
    needed_by_main = set(fn.results) | set(fn.state_updates.values())
    for op in fn.body.ops:
        if id(op) not in in_prologue:
            needed_by_main |= free_values(op)
    skip = set(in_prologue)
    for op in fn.body.ops:
        unused_read = op.kind in ("param", "buffer") and op.results[0] not in needed_by_main
        if op.kind in ("const", "iota") or unused_read:
            skip.add(id(op))
    if natives and JOIN_CALLS:
        main.joined = join_calls(fn.body.ops, context, skip)
        skip |= {id(op) for group in main.joined.values() for op in group[1:]}
    main.spans = []
    main.region(fn.body, skip)
    main.release_dead({namer(v) for v in (*fn.results, *fn.state_updates.values())})
    static = plan.static
    results = [f"{namer(v)}.clone()" if v in static else namer(v) for v in fn.results]
    updates = ", ".join(
        f"{path!r}: {namer(v)}{'.clone()' if v in static else ''}"
        for path, v in fn.state_updates.items()
    )
    main.line(f"return [{', '.join(results)}], {{{updates}}}")
    inputs = "".join(f", {namer(v)}" for _, v in fn.inputs)
    source = "\n".join([*head, *prologue_src, f"def entry(W, S, H{inputs}):", *main.lines, ""])
    code = compile(source, f"<linnet {fn.name}>", "exec")
    exec(code, globals_)
    prologue = globals_.get("prologue") if plan.ops else None
    return Generated(source, globals_["entry"], prologue, plan, globals_, kernels)


class CompiledFunction:
    """A generated entry with the same call signature as the interpreted `Runner`.

    The prologue runs once per weight version (identity and `_version` of every
    weight it reads) and its results are passed to every call.
    """

    def __init__(
        self, fn: Function, device: torch.device, *, hoist_weights: bool, natives: bool = True
    ) -> None:
        self.generated = generate(fn, device, hoist_weights=hoist_weights, natives=natives)
        self._key: tuple[object, ...] | None = None
        self._hoisted: tuple[torch.Tensor, ...] = ()

    @property
    def source(self) -> str:
        return self.generated.source

    def __call__(
        self,
        weights: Mapping[str, torch.Tensor],
        state: Mapping[str, torch.Tensor],
        inputs: Sequence[torch.Tensor],
    ) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
        natives_module.begin_call()
        generated = self.generated
        if generated.prologue is not None:
            paths = generated.hoisting.weights
            key = weights_key(weights, paths)
            if key != self._key:
                self._hoisted = generated.prologue(weights)
                self._key = key
        return generated.entry(weights, state, self._hoisted, *inputs)
