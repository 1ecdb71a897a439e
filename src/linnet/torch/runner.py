"""Interpreted execution of a Core IR function on PyTorch tensors (`compile=False`).

Stage: backend. Input: a lowered, optimised `Function`, a device, and whether
weight-derived values may be cached. Output: a `Runner`, callable with the
weights and state (by path) and the inputs, returning the results and the new
state values. The IR is walked op by op on every call; to keep that walk
cheap, it is first turned into a list of small closures over one flat value
list (each value gets a slot), so a call costs a dictionary-free loop of
kernel calls. The kernels are those of `linnet.torch.ops` (and, for `call`
ops of known standard-library ops, the native kernels of
`linnet.torch.natives`); control flow (`while`, `for`, `if`) runs its regions with
Python loops.

Values that depend only on constants and shapes (and, when allowed, weights)
form a prologue that runs once and is cached (`linnet.torch.analysis`); the
cache is recomputed when any weight it read changed (`Tensor._version` counts
in-place writes such as `load_state_dict`, identity catches replaced tensors).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from linnet.errors import InternalError
from linnet.ir.core import Function, Op, Region, Value
from linnet.ir.regions import clause_region, region_free_values
from linnet.torch import clauses
from linnet.torch.analysis import free_values, hoist, walk, weights_key
from linnet.torch.dtypes import storage
from linnet.torch.natives import Native, begin_call, find_native
from linnet.torch.ops import Context, Kernel, make_kernel

Env = list[Any]
Step = Callable[[Env], None]
READS = ("param", "buffer", "state")


def _simple_step(kernel: Kernel, ins: tuple[int, ...], out: int) -> Step:
    """A step calling `kernel`, specialised on the operand count (the common cases)."""
    if len(ins) == 1:
        (a,) = ins

        def step1(env: Env) -> None:
            env[out] = kernel(env[a])

        return step1
    if len(ins) == 2:
        a, b = ins

        def step2(env: Env) -> None:
            env[out] = kernel(env[a], env[b])

        return step2

    def step(env: Env) -> None:
        env[out] = kernel(*[env[i] for i in ins])

    return step


def _tuple_step(kernel: Kernel, ins: tuple[int, ...], outs: tuple[int, ...]) -> Step:
    """A step calling `kernel`, which returns one tensor per slot of `outs`."""

    def step(env: Env) -> None:
        values: Any = kernel(*[env[i] for i in ins])
        for slot, value in zip(outs, values, strict=True):
            env[slot] = value

    return step


def run_steps(steps: Sequence[Step], env: Env) -> None:
    for step in steps:
        step(env)


class _Compiler:
    """Turns regions into steps over slots of one flat environment."""

    def __init__(self, context: Context, natives: bool) -> None:
        self.context = context
        self.natives = natives
        self.slots: dict[Value, int] = {}
        self.template: Env = []
        self.reads: list[tuple[int, str, str]] = []  # (slot, kind, path)

    def slot(self, value: Value) -> int:
        found = self.slots.get(value)
        if found is None:
            found = self.slots[value] = len(self.template)
            self.template.append(None)
        return found

    def region(self, region: Region) -> list[Step]:
        for arg in region.args:
            self.slot(arg)
        return [step for step, _ in self.ops(region.ops)]

    def ops(self, ops: Sequence[Op]) -> list[tuple[Step, Op]]:
        """Steps for `ops`, each with the op it runs (calls of bodies are flattened)."""
        out: list[tuple[Step, Op]] = []
        for op in ops:
            out.extend(self.op(op))
        return out

    def op(self, op: Op) -> list[tuple[Step, Op]]:
        if op.kind in READS:
            self.reads.append((self.slot(op.results[0]), op.kind, str(op.attrs["path"])))
            return []
        if op.kind in ("const", "iota"):
            self.template[self.slot(op.results[0])] = make_kernel(op, self.context)()
            return []
        if op.kind == "while":
            return [(self.while_(op), op)]
        if op.kind == "for":
            return [(self.for_(op), op)]
        if op.kind == "if":
            return [(self.if_(op), op)]
        if op.kind == "call":
            return self.call(op)
        ins = tuple(self.slot(v) for v in op.operands)
        return [(_simple_step(make_kernel(op, self.context), ins, self.slot(op.result)), op)]

    def while_(self, op: Op) -> Step:
        cond, body = op.regions
        init = [self.slot(v) for v in op.operands]
        cond_args = [self.slot(v) for v in cond.args]
        body_args = [self.slot(v) for v in body.args]
        cond_steps = self.region(cond)
        body_steps = self.region(body)
        test = self.slot(cond.results[0])
        body_out = [self.slot(v) for v in body.results]
        outs = [self.slot(v) for v in op.results]

        def step(env: Env) -> None:
            carried = [env[i] for i in init]
            while True:
                for i, value in zip(cond_args, carried, strict=True):
                    env[i] = value
                run_steps(cond_steps, env)
                if not bool(env[test]):
                    break
                for i, value in zip(body_args, carried, strict=True):
                    env[i] = value
                run_steps(body_steps, env)
                carried = [env[i] for i in body_out]
            for i, value in zip(outs, carried, strict=True):
                env[i] = value

        return step

    def for_(self, op: Op) -> Step:
        """A runtime `for` (language-extensions 1.5): the carried values in slots, each
        scan value's rows collected and stacked (an empty tensor for zero rows)."""
        (body,) = op.regions
        start, stop = int(str(op.attrs["start"])), int(str(op.attrs["stop"]))
        carried_count = len(op.operands)
        init = [self.slot(v) for v in op.operands]
        index, *body_args = [self.slot(v) for v in body.args]
        body_steps = self.region(body)
        body_out = [self.slot(v) for v in body.results]
        next_carried, row_slots = body_out[:carried_count], body_out[carried_count:]
        outs = [self.slot(v) for v in op.results]
        empty = [(v.type.shape, storage(v.type.dtype)) for v in op.results[carried_count:]]
        device = self.context.device

        def step(env: Env) -> None:
            carried = [env[i] for i in init]
            rows: list[list[torch.Tensor]] = [[] for _ in row_slots]
            for i in torch.arange(start, stop, device=device):
                env[index] = i
                for slot, value in zip(body_args, carried, strict=True):
                    env[slot] = value
                run_steps(body_steps, env)
                carried = [env[slot] for slot in next_carried]
                for collected, slot in zip(rows, row_slots, strict=True):
                    collected.append(env[slot])
            for slot, value in zip(outs, carried, strict=False):
                env[slot] = value
            for slot, collected, (shape, dtype) in zip(
                outs[carried_count:], rows, empty, strict=True
            ):
                env[slot] = (
                    torch.stack(collected, 0)
                    if collected
                    else torch.empty(shape, dtype=dtype, device=device)
                )

        return step

    def if_(self, op: Op) -> Step:
        test = self.slot(op.operands[0])
        branches = [(self.region(r), [self.slot(v) for v in r.results]) for r in op.regions]
        outs = [self.slot(v) for v in op.results]

        def step(env: Env) -> None:
            steps, results = branches[0] if bool(env[test]) else branches[1]
            run_steps(steps, env)
            values = [env[i] for i in results]
            for i, value in zip(outs, values, strict=True):
                env[i] = value

        return step

    def call(self, op: Op) -> list[tuple[Step, Op]]:
        native = find_native(op, self.context) if self.natives else None
        ins = tuple(self.slot(v) for v in op.operands)
        if clause_region(op) is not None:  # the native (a kernel) forward, the clause backward
            return [(self.clause_call(op, ins, native), op)]
        if native is not None and len(op.results) > 1:  # a kernel with several results
            return [(_tuple_step(native.kernel, ins, tuple(map(self.slot, op.results))), op)]
        if native is not None:
            return [(_simple_step(native.kernel, ins, self.slot(op.result)), op)]
        # The body runs once per call: its arguments and results share the caller's slots.
        (body,) = op.regions
        for arg, operand in zip(body.args, op.operands, strict=True):
            self.slots[arg] = self.slot(operand)
        steps = self.ops(body.ops)
        for result, value in zip(op.results, body.results, strict=True):
            if result in self.slots:
                raise InternalError(f"call result {result!r} is defined twice")
            self.slots[result] = self.slot(value)
        return steps

    def clause_call(self, op: Op, ins: tuple[int, ...], native: Native | None = None) -> Step:
        """An op with a gradient clause: one `torch.autograd.Function` (`clauses`).

        The body (or `native`, the op's kernel launch, when there is one: 3.4) and the
        clause run on this environment; the values the clause reads from outside are
        captured when the op runs (later steps may release them)."""
        body, gradient = op.regions[0], clause_region(op)
        assert gradient is not None
        body_args = [self.slot(v) for v in body.args]
        body_steps = self.region(body)
        body_out = self.slot(body.results[0])
        grad_args = [self.slot(v) for v in gradient.args]
        grad_steps = self.region(gradient)
        grad_outs = [self.slot(v) for v in gradient.results]
        free = [self.slot(v) for v in region_free_values(gradient)]
        wrt = tuple(int(i) for i in op.attrs["wrt"])  # type: ignore[attr-defined]
        out = self.slot(op.result)

        def step(env: Env) -> None:
            captured = [env[i] for i in free]

            def forward(*args: torch.Tensor) -> torch.Tensor:
                if native is not None:
                    launched: torch.Tensor = native.kernel(*args)
                    return launched
                for i, value in zip(body_args, args, strict=True):
                    env[i] = value
                run_steps(body_steps, env)
                result: torch.Tensor = env[body_out]
                return result

            def backward(*args: torch.Tensor) -> tuple[torch.Tensor, ...]:
                for i, value in zip(free, captured, strict=True):
                    env[i] = value
                for i, value in zip(grad_args, args, strict=True):
                    env[i] = value
                run_steps(grad_steps, env)
                return tuple(env[i] for i in grad_outs)

            env[out] = clauses.apply(forward, backward, wrt, *[env[i] for i in ins])

        return step


def releasing(
    steps: Sequence[tuple[Step, Op]], slots: Mapping[Value, int], keep: set[int]
) -> list[Step]:
    """`steps` that also drop each value after its last use (straight-line code only).

    Holding every intermediate until the call ends keeps the allocator from
    reusing their memory; dropping them as eager code does keeps the peak low.
    """
    last: dict[int, int] = {}
    for index, (_, op) in enumerate(steps):
        for value in op.results:
            last.setdefault(slots[value], index)
        for value in free_values(op):
            found = slots.get(value)
            if found is not None and found in last:  # inputs and weights are held elsewhere
                last[found] = index
    release: dict[int, list[int]] = {}
    for slot, index in last.items():
        if slot not in keep:
            release.setdefault(index, []).append(slot)
    out: list[Step] = []
    for index, (step, _) in enumerate(steps):
        dropped = release.get(index)
        out.append(step if not dropped else _then_drop(step, tuple(dropped)))
    return out


def _then_drop(step: Step, dropped: tuple[int, ...]) -> Step:
    def run(env: Env) -> None:
        step(env)
        for slot in dropped:
            env[slot] = None

    return run


class Runner:
    """Interprets one lowered function; call it with weights, state and inputs.

    `weights` maps param and buffer paths to storage tensors, `state` maps
    state paths to their current values. The result is the list of results and
    a dict of the new values of the state paths the function assigns.
    """

    def __init__(
        self,
        fn: Function,
        device: torch.device,
        *,
        hoist_weights: bool,
        natives: bool = True,
    ) -> None:
        self.fn = fn
        context = Context.of(walk(fn.body), device)
        compiler = _Compiler(context, natives)
        self.inputs = [compiler.slot(v) for _, v in fn.inputs]
        plan = hoist(fn, weights=hoist_weights)
        in_prologue = {id(op) for op in plan.ops}
        for arg in fn.body.args:
            compiler.slot(arg)
        prologue: list[Step] = []
        main: list[tuple[Step, Op]] = []
        for op in fn.body.ops:
            steps = compiler.op(op)
            if id(op) in in_prologue:
                prologue.extend(step for step, _ in steps)
            else:
                main.extend(steps)
        self.prologue = prologue
        self.frontier = [compiler.slot(v) for v in plan.frontier]
        keep = {compiler.slot(v) for v in (*fn.results, *fn.state_updates.values())}
        self.main = releasing(main, compiler.slots, keep)
        self.hoisted_weights = plan.weights
        self.template = compiler.template
        self.reads = compiler.reads
        self.results = [compiler.slot(v) for v in fn.results]
        static = plan.static
        self.copy_results = [v in static for v in fn.results]
        self.updates = [(path, compiler.slot(v)) for path, v in fn.state_updates.items()]
        self._cache_key: tuple[object, ...] | None = None
        self._cached: list[Any] = []

    def _fill(
        self, env: Env, weights: Mapping[str, torch.Tensor], state: Mapping[str, Any]
    ) -> None:
        for slot, kind, path in self.reads:
            table = state if kind == "state" else weights
            try:
                env[slot] = table[path]
            except KeyError:
                raise InternalError(f"{kind} {path} has no tensor in the module") from None

    def _prologue(self, env: Env, weights: Mapping[str, torch.Tensor]) -> None:
        """Run the hoisted ops once per weight version; copy their frontier into `env`."""
        if not self.prologue:
            return
        key = weights_key(weights, self.hoisted_weights)
        if key != self._cache_key or not self._cached:
            run_steps(self.prologue, env)
            self._cached = [env[i] for i in self.frontier]
            self._cache_key = key
        else:
            for i, value in zip(self.frontier, self._cached, strict=True):
                env[i] = value

    def __call__(
        self,
        weights: Mapping[str, torch.Tensor],
        state: Mapping[str, torch.Tensor],
        inputs: Sequence[torch.Tensor],
    ) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
        begin_call()
        env = self.template.copy()
        for slot, tensor in zip(self.inputs, inputs, strict=True):
            env[slot] = tensor
        self._fill(env, weights, state)
        self._prologue(env, weights)
        run_steps(self.main, env)
        results = [
            env[i].clone() if copy else env[i]
            for i, copy in zip(self.results, self.copy_results, strict=True)
        ]
        return results, {path: env[i] for path, i in self.updates}
