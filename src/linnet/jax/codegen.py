"""Core IR function -> `jax.numpy` source (what `load_source` runs and `linnet jax` prints).

Stage: backend. Input: a lowered, optimised `Function` (static shapes).
Output: `Generated`: the Python source of one function and the callable it
defines,

    def entry(W, S, x, ...):   # W params/buffers by path, S state by path
        ...                    # one assignment per op, jnp / lax calls
        return [results], {state path: new value}

Every op becomes one assignment: elementwise ops are `jnp` calls (which
broadcast like the IR), `contract` is `lax.dot_general` at full precision,
shape ops are `jnp`/`lax` calls with their static attributes spelled out, and
the few ops whose Linnet semantics differ from one JAX call (integer
division, float -> int casts, empty reductions, low-precision accumulation)
call the helpers of `linnet.jax.kernels` (bound as `K`). `while` becomes
`lax.while_loop`, a runtime `for` `lax.scan` and `if` `lax.cond`, with their regions as nested
functions (which read enclosing values as closures); `call` ops are inlined
with a comment naming the op. Constants are module globals `_c<n>` (NumPy
arrays, embedded as XLA constants when traced). With `remat=` (a
`linnet.jax.remat.LayerRemat`) each layer's run of top-level ops becomes a
nested `layer_<n>` function called through `jax.checkpoint`.

The function is pure, so it traces under `jax.jit`, `jax.grad` and
`jax.vjp` (reverse-mode differentiation stops at `lax.while_loop`, a JAX
rule). 64-bit dtypes need `jax_enable_x64`; the callers run it inside
`linnet.jax.dtypes.x64_scope` when `Generated.x64` says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from linnet.errors import InternalError
from linnet.ir.core import FLOAT_DTYPES, Function, Op, Region, Value
from linnet.ir.pynames import Namer
from linnet.ir.regions import clause_region, free_values, region_free_values, walk
from linnet.jax import clauses as clauses_module
from linnet.jax import collectives as collectives_module
from linnet.jax import kernels as kernels_module
from linnet.jax import natives as natives_module
from linnet.jax.collectives import ALIAS as COLLECTIVES_ALIAS
from linnet.jax.collectives import collective_call
from linnet.jax.dtypes import JNP_NAMES, needs_x64
from linnet.jax.layers import Group, Run, shared_layers
from linnet.jax.natives import find_native
from linnet.jax.remat import LayerRemat, Segment, layer_segments
from linnet.records import record

Entry = Callable[..., tuple[list[Any], dict[str, Any]]]

_UNARY = {
    "exp": "jnp.exp",
    "log": "jnp.log",
    "sqrt": "jnp.sqrt",
    "rsqrt": "lax.rsqrt",
    "sin": "jnp.sin",
    "cos": "jnp.cos",
    "tanh": "jnp.tanh",
    "neg": "jnp.negative",
    "not": "jnp.invert",
}
_BINARY = {
    "add": "jnp.add",
    "sub": "jnp.subtract",
    "mul": "jnp.multiply",
    "max": "jnp.maximum",
    "min": "jnp.minimum",
    "and": "jnp.bitwise_and",
    "or": "jnp.bitwise_or",
    "xor": "jnp.bitwise_xor",
    "shl": "jnp.left_shift",
    "shr": "jnp.right_shift",
    "eq": "jnp.equal",
    "ne": "jnp.not_equal",
    "lt": "jnp.less",
    "le": "jnp.less_equal",
    "gt": "jnp.greater",
    "ge": "jnp.greater_equal",
}
_REDUCE = {"max": "jnp.max", "min": "jnp.min", "any": "jnp.any", "all": "jnp.all"}

# One `lax` primitive each, for operands of one dtype (what the IR guarantees) broadcast to
# the result's shape first: a `jnp` call costs several times as much to trace and lower.
_LAX_UNARY = {
    "exp": "lax.exp",
    "log": "lax.log",
    "sqrt": "lax.sqrt",
    "rsqrt": "lax.rsqrt",
    "sin": "lax.sin",
    "cos": "lax.cos",
    "tanh": "lax.tanh",
    "neg": "lax.neg",
}
_LAX_BINARY = {
    "add": "lax.add",
    "sub": "lax.sub",
    "mul": "lax.mul",
    "max": "lax.max",
    "min": "lax.min",
    "and": "lax.bitwise_and",
    "or": "lax.bitwise_or",
    "xor": "lax.bitwise_xor",
    "eq": "lax.eq",
    "ne": "lax.ne",
    "lt": "lax.lt",
    "le": "lax.le",
    "gt": "lax.gt",
    "ge": "lax.ge",
}
_LAX_REDUCE = {"max": "lax.reduce_max", "min": "lax.reduce_min"}


@record
class Generated:
    """Generated source and its compiled entry for one function."""

    source: str
    entry: Entry
    x64: bool


def ints(op: Op, key: str) -> tuple[int, ...]:
    value = op.attrs[key]
    if not isinstance(value, tuple):
        raise InternalError(f"op {op.kind}: attr {key} is not a tuple")
    return tuple(int(v) for v in value)


def _tuple(values: Sequence[object]) -> str:
    items = ", ".join(str(v) for v in values)
    return f"({items},)" if len(values) == 1 else f"({items})"


_RESERVED = frozenset(
    {"jnp", "lax", "K", "N", "W", "S", "np", "clauses", "jax", "_remat_policy", COLLECTIVES_ALIAS}
)


class _Emitter:
    """Writes the lines of the entry function (and its nested region functions)."""

    def __init__(self, namer: Namer, globals_: dict[str, Any], lean: bool = False) -> None:
        self.name = namer
        self.globals = globals_
        # lax arithmetic and std natives (linnet.jax.natives): the StableHLO path only, so
        # that load_source keeps the program (and the f32 rounding) its gradients are pinned to
        self.lean = lean
        self.lines: list[str] = []
        self.depth = 1

    def line(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def assign(self, op: Op, expression: str, comment: str = "", *, unpack: bool = False) -> None:
        """`results = expression`; `unpack` when the expression is a tuple (loops, branches)."""
        target = ", ".join(self.name(v) for v in op.results)
        if unpack and len(op.results) == 1:
            target += ","
        suffix = f"  # {comment}" if comment else ""
        self.line(f"{target} = {expression}{suffix}")

    def region(self, region: Region) -> None:
        for op in region.ops:
            self.op(op)

    def op(self, op: Op) -> None:
        if op.kind in _UNARY or op.kind == "abs":
            self.emit_unary(op)
        elif op.kind in _BINARY or op.kind in ("div", "rem"):
            self.emit_binary(op)
        else:
            handler = getattr(self, f"emit_{op.kind}", None)
            if handler is None:
                raise InternalError(f"the JAX backend has no rule for op {op.kind!r}")
            handler(op)

    def args(self, op: Op) -> list[str]:
        return [self.name(v) for v in op.operands]

    def widened(self, value: Value, shape: tuple[int, ...]) -> str:
        """`value` broadcast to `shape` by NumPy's rule (language.md 7.6), as `lax` wants it."""
        name = self.name(value)
        own = value.type.shape
        if own == shape:
            return name
        dims = tuple(range(len(shape) - len(own), len(shape)))
        return f"lax.broadcast_in_dim({name}, {_tuple(shape)}, {_tuple(dims)})"

    def alias(self, op: Op, value: Value) -> None:
        """A result equal to its operand (a same-dtype cast, a same-shape broadcast)."""
        self.assign(op, self.name(value))

    # -- sources ---------------------------------------------------------------------

    def bind_global(self, op: Op, array: np.ndarray[Any, Any]) -> None:
        name = f"_c{len(self.globals)}"
        self.globals[name] = array
        self.name.names[op.results[0]] = name
        self.name.taken.add(name)

    def emit_const(self, op: Op) -> None:
        if op.results[0] in self.name.names:
            return  # bound up front (`generate` binds every constant first)
        value = op.attrs["value"]
        assert isinstance(value, np.ndarray)
        self.bind_global(op, value)

    def emit_iota(self, op: Op) -> None:
        t = op.results[0].type
        self.assign(op, f"lax.iota({JNP_NAMES[t.dtype]}, {t.shape[0]})")

    def emit_param(self, op: Op) -> None:
        self.assign(op, f"W[{str(op.attrs['path'])!r}]")

    emit_buffer = emit_param

    def emit_state(self, op: Op) -> None:
        self.assign(op, f"S[{str(op.attrs['path'])!r}]")

    # -- elementwise -----------------------------------------------------------------

    def emit_cast(self, op: Op) -> None:
        source, target = op.operands[0].type.dtype, op.results[0].type.dtype
        (x,) = self.args(op)
        if source == target:
            self.alias(op, op.operands[0])
        elif target == "bool":
            self.assign(op, f"K.to_bool({x})")
        elif source in FLOAT_DTYPES and target not in FLOAT_DTYPES:
            self.assign(op, f"K.float_to_int({x}, {target!r})")
        else:
            self.assign(op, f"lax.convert_element_type({x}, {JNP_NAMES[target]})")

    def emit_unary(self, op: Op) -> None:
        (x,) = self.args(op)
        dtype = op.operands[0].type.dtype
        if op.kind == "abs":
            if dtype.startswith("u"):
                self.alias(op, op.operands[0])
            else:
                self.assign(op, f"lax.abs({x})" if dtype != "bool" else f"jnp.abs({x})")
        elif self.lean and op.kind in _LAX_UNARY and dtype in FLOAT_DTYPES:
            self.assign(op, f"{_LAX_UNARY[op.kind]}({x})")
        else:
            self.assign(op, f"{_UNARY[op.kind]}({x})")

    def emit_binary(self, op: Op) -> None:
        a, b = op.operands
        dtype = a.type.dtype
        shape = op.results[0].type.shape
        fn = _LAX_BINARY.get(op.kind)
        if op.kind == "div" and dtype in FLOAT_DTYPES:
            fn = "lax.div"
        if self.lean and fn is not None and a.type.dtype == b.type.dtype:
            self.assign(op, f"{fn}({self.widened(a, shape)}, {self.widened(b, shape)})")
            return
        if op.kind == "div":
            fn = "jnp.true_divide" if dtype in FLOAT_DTYPES else "K.int_div"
        elif op.kind == "rem":
            fn = "K.fmod" if dtype in FLOAT_DTYPES else "K.int_rem"
        else:
            fn = _BINARY[op.kind]
        self.assign(op, f"{fn}({self.name(a)}, {self.name(b)})")

    def emit_select(self, op: Op) -> None:
        shape = op.results[0].type.shape
        c, a, b = (self.widened(v, shape) for v in op.operands)
        self.assign(op, f"lax.select({c}, {a}, {b})")

    # -- shape ops -------------------------------------------------------------------

    def emit_broadcast(self, op: Op) -> None:
        self.assign(op, self.widened(op.operands[0], ints(op, "shape")))

    def emit_reshape(self, op: Op) -> None:
        (x,) = self.args(op)
        if op.operands[0].type.shape == op.results[0].type.shape:
            self.alias(op, op.operands[0])
        else:
            self.assign(op, f"lax.reshape({x}, {_tuple(ints(op, 'shape'))})")

    def emit_permute(self, op: Op) -> None:
        (x,) = self.args(op)
        perm = ints(op, "perm")
        if perm == tuple(range(len(perm))):
            self.alias(op, op.operands[0])
        else:
            self.assign(op, f"lax.transpose({x}, {_tuple(perm)})")

    def emit_slice(self, op: Op) -> None:
        (x,) = self.args(op)
        shape = op.operands[0].type.shape
        starts: list[int] = []
        stops: list[int] = []
        for dim, start, stop in zip(shape, ints(op, "start"), ints(op, "stop"), strict=True):
            stop = min(stop, dim)  # stop clamped (language.md 9.3)
            starts.append(min(start, stop))
            stops.append(stop)
        steps = ints(op, "step")
        if all(s == 1 for s in steps):
            self.assign(op, f"lax.slice({x}, {_tuple(starts)}, {_tuple(stops)})")
        else:
            self.assign(op, f"lax.slice({x}, {_tuple(starts)}, {_tuple(stops)}, {_tuple(steps)})")

    def emit_concat(self, op: Op) -> None:
        xs = ", ".join(self.args(op))
        self.assign(op, f"lax.concatenate([{xs}], {op.attrs['axis']})")

    def emit_cumsum(self, op: Op) -> None:
        # In the operand's own dtype (language-extensions 5.2): jnp.cumsum widens integers.
        (x,) = self.args(op)
        self.assign(op, f"jnp.cumsum({x}, axis={op.attrs['axis']}, dtype={x}.dtype)")

    def emit_gather(self, op: Op) -> None:
        x, i = self.args(op)
        self.assign(op, f"K.gather({x}, {i}, {op.attrs['axis']})")

    def emit_take(self, op: Op) -> None:
        self.assign(op, f"K.take({', '.join(self.args(op))})")

    # -- reductions and contraction ------------------------------------------------------

    def emit_reduce(self, op: Op) -> None:
        t = op.operands[0].type
        kind = str(op.attrs["kind"])
        axes = ints(op, "axes")
        (x,) = self.args(op)
        if not axes:
            self.alias(op, op.operands[0])
        elif any(t.shape[a] == 0 for a in axes):
            out = op.results[0].type
            self.assign(op, f"K.empty_reduction({kind!r}, {t.dtype!r}, {_tuple(out.shape)})")
        elif kind == "sum" and t.dtype in ("f32", "f64"):
            self.assign(op, f"lax.reduce_sum({x}, {_tuple(axes)})")
        elif kind in ("sum", "prod"):
            self.assign(op, f"K.reduce_{kind}({x}, {_tuple(axes)}, {t.dtype!r})")
        elif kind in _LAX_REDUCE and t.dtype != "bool":
            self.assign(op, f"{_LAX_REDUCE[kind]}({x}, {_tuple(axes)})")
        else:
            self.assign(op, f"{_REDUCE[kind]}({x}, axis={_tuple(axes)})")

    def emit_contract(self, op: Op) -> None:
        x, y = self.args(op)
        dims = ", ".join(
            _tuple(ints(op, k)) for k in ("lhs_batch", "rhs_batch", "lhs_contract", "rhs_contract")
        )
        dtype = op.operands[0].type.dtype
        self.assign(op, f"K.contract({x}, {y}, {dims}, {dtype!r})")

    # -- control flow and calls ----------------------------------------------------------

    def nested(self, head: str, region: Region, unpack: str | None, results: str) -> None:
        """A nested function `head` whose body is `region`."""
        self.line(head)
        self.depth += 1
        if unpack is not None and region.args:
            names = ", ".join(self.name(v) for v in region.args)
            self.line(f"{names}{',' if len(region.args) == 1 else ''} = {unpack}")
        self.region(region)
        self.line(f"return {results}")
        self.depth -= 1

    def emit_while(self, op: Op) -> None:
        cond, body = op.regions
        cond_fn, body_fn = self.name.fresh("loop_cond"), self.name.fresh("loop_body")
        self.nested(f"def {cond_fn}(carried):", cond, "carried", self.name(cond.results[0]))
        self.nested(
            f"def {body_fn}(carried):",
            body,
            "carried",
            _tuple([self.name(v) for v in body.results]) if body.results else "()",
        )
        init = _tuple(self.args(op)) if op.operands else "()"
        if op.results:
            self.assign(op, f"lax.while_loop({cond_fn}, {body_fn}, {init})", unpack=True)
        else:
            self.line(f"lax.while_loop({cond_fn}, {body_fn}, {init})")

    def emit_for(self, op: Op) -> None:
        """`lax.scan(step, carry, jnp.arange(start, stop))` (language-extensions 1.5): `step`
        takes the carried values and the `i64` index and returns the next carried values
        and the rows, which `lax.scan` stacks on a new axis 0."""
        (body,) = op.regions
        start, stop = int(str(op.attrs["start"])), int(str(op.attrs["stop"]))
        count = len(op.operands)
        if start == stop:
            # No iteration: the body is not traced (it may index an empty axis), the
            # carried values pass through and each scan value is empty.
            empty = [
                f"jnp.zeros({_tuple(v.type.shape)}, dtype={JNP_NAMES[v.type.dtype]})"
                for v in op.results[count:]
            ]
            if op.results:
                self.assign(op, _tuple([*self.args(op), *empty]), unpack=True)
            return
        step, carried, index = (self.name.fresh(h) for h in ("scan_step", "carried", "index"))
        following = _tuple([self.name(v) for v in body.results[:count]]) if count else "()"
        rows = body.results[count:]
        stacked = _tuple([self.name(v) for v in rows]) if rows else "()"
        self.nested(
            f"def {step}({carried}, {index}):",
            body,
            f"({index}, *{carried})",
            f"{following}, {stacked}",
        )
        init = _tuple(self.args(op)) if op.operands else "()"
        indices = f"jnp.arange({start}, {stop}, dtype=jnp.int64)"
        final, scans = self.name.fresh("final"), self.name.fresh("stacked")
        self.line(f"{final}, {scans} = lax.scan({step}, {init}, {indices})")
        if op.results:
            self.assign(op, f"(*{final}, *{scans})", unpack=True)

    def emit_if(self, op: Op) -> None:
        then, otherwise = op.regions
        names = []
        for branch, hint in ((then, "then"), (otherwise, "otherwise")):
            fn = self.name.fresh(hint)
            values = _tuple([self.name(v) for v in branch.results]) if branch.results else "()"
            self.nested(f"def {fn}():", branch, None, values)
            names.append(fn)
        (c,) = self.args(op)
        call = f"lax.cond({c}, {names[0]}, {names[1]})"
        if op.results:
            self.assign(op, call, unpack=True)
        else:
            self.line(call)

    def emit_call(self, op: Op) -> None:
        if clause_region(op) is not None:
            self.emit_clause_call(op)
            return
        collective = collective_call(op)
        if collective is not None:  # a std.nn.parallel call under shard_map (jax.parallel)
            self.globals[COLLECTIVES_ALIAS] = collectives_module
            self.assign(op, collective.format(*self.args(op)), str(op.attrs["callee"]))
            return
        if "kernel_instance" in op.attrs and self.emit_kernel(op):
            return
        native = find_native(op) if self.lean else None
        if native is not None:  # linnet.jax.natives
            self.assign(op, native(self.args(op)), str(op.attrs["callee"]))
            return
        (body,) = op.regions
        self.line(f"# {op.attrs['callee']}")
        # Region values are SSA: arguments and results alias the caller's names.
        for arg, operand in zip(body.args, op.operands, strict=True):
            self.name.names[arg] = self.name(operand)
        self.region(body)
        for result, value in zip(op.results, body.results, strict=True):
            if result in self.name.names:
                self.line(f"{self.name(result)} = {self.name(value)}")
            else:
                self.name.names[result] = self.name(value)

    def remat_segment(self, ops: Sequence[Op], segment: Segment, later: set[Value]) -> None:
        """`ops` (layer `segment.index`) as a nested function called through
        `jax.checkpoint` (`linnet.jax.remat`): its arguments are the values the ops read
        from before them, its results the values of theirs read after them."""
        inputs = sorted({self.name(v) for v in region_free_values(Region((), list(ops), ()))})
        inputs = [n for n in inputs if n not in self.globals]
        fn = self.name.fresh(f"layer_{segment.index}")
        self.line(f"def {fn}(W, S{''.join(', ' + n for n in inputs)}):")
        self.depth += 1
        for op in ops:
            self.op(op)
        produced = [v for op in ops for v in op.results if v in later]
        outputs = list(dict.fromkeys(self.name(v) for v in produced))
        self.line(f"return {_tuple(outputs) if outputs else '()'}")
        self.depth -= 1
        call = (
            f"jax.checkpoint({fn}, policy=_remat_policy)(W, S{''.join(', ' + n for n in inputs)})"
        )
        if outputs:
            target = ", ".join(outputs) + ("," if len(outputs) == 1 else "")
            self.line(f"{target} = {call}")
        else:
            self.line(call)

    def emit_clause_call(self, op: Op) -> None:
        """An op with a gradient clause: its body and clause as nested functions under
        `jax.custom_vjp` (`clauses.apply`, language-extensions 3.4). The values either
        region reads from outside (constants aside) are passed as extra arguments, so
        no traced value is closed over; they receive zero cotangents."""
        body, gradient = op.regions[0], clause_region(op)
        assert gradient is not None
        outside = region_free_values(body) | region_free_values(gradient)
        free = sorted({self.name(v) for v in outside} - set(self.globals))
        forward = self.name.fresh("forward")
        backward = self.name.fresh("backward")
        self.line(f"# {op.attrs['callee']} (gradient clause)")
        params = [self.name(v) for v in body.args] + free
        launcher = self.kernel_launcher(op) if "kernel_instance" in op.attrs else None
        if launcher is None:
            self.nested(
                f"def {forward}({', '.join(params)}):", body, None, self.name(body.results[0])
            )
        else:  # the kernel computes the value (language-extensions 3.3)
            self.line(f"def {forward}({', '.join(params)}):")
            launched = ", ".join(self.name(v) for v in body.args)
            self.depth += 1
            self.line(f"return {launcher}({launched})")
            self.depth -= 1
        *operands, result, grad = (self.name(v) for v in gradient.args)
        params = [*operands, *free, result, grad]
        results = [self.name(v) for v in gradient.results]
        self.nested(
            f"def {backward}({', '.join(params)}):",
            gradient,
            None,
            results[0] if len(results) == 1 else _tuple(results),
        )
        wrt = tuple(int(i) for i in op.attrs["wrt"])  # type: ignore[attr-defined]
        args = "".join(f", {a}" for a in [*self.args(op), *free])
        self.assign(op, f"clauses.apply({forward}, {backward}, {wrt!r}{args})")

    def emit_kernel(self, op: Op) -> bool:
        """An op naming a kernel, launched through Pallas when it can be (`linnet.jax.pallas`)."""
        name = self.kernel_launcher(op)
        if name is None:
            return False
        self.assign(op, f"{name}({', '.join(self.args(op))})", str(op.attrs["callee"]))
        return True

    def kernel_launcher(self, op: Op) -> str | None:
        """The global name bound to the Pallas launch of the op's kernel, or None when
        the body runs instead."""
        from linnet.jax.pallas import pallas_launcher

        launcher = pallas_launcher(op)
        if launcher is None:
            return None
        name = f"_kernel{len(self.globals)}"
        self.globals[name] = launcher
        return name


def generate(
    fn: Function, remat: LayerRemat | None = None, *, share_layers: bool = False
) -> Generated:
    """`jax.numpy` source for `fn` and the callable it defines (see the module docstring);
    with `remat`, each layer's ops run under `jax.checkpoint` (`linnet.jax.remat`).
    `share_layers` (what XLA-only callers ask, `StableHLORunner`) makes the program lean:
    layers computed alike call one jitted function (`linnet.jax.layers`), arithmetic is one
    `lax` primitive per op and std cache writes and attention are natives
    (`linnet.jax.natives`)."""
    namer = Namer(_RESERVED)
    globals_: dict[str, Any] = {
        "jnp": jnp,
        "lax": lax,
        "K": kernels_module,
        "N": natives_module,
        "np": np,
        "clauses": clauses_module,
        "jax": jax,
        "_remat_policy": None if remat is None else remat.policy,
    }
    for name, value in fn.inputs:
        namer.names[value] = namer.fresh(name)
    # Constants first: globals shared by every nested function.
    emitter = _Emitter(namer, globals_)
    for op in walk(fn.body):
        if op.kind == "const":
            emitter.emit_const(op)
    body = Region(fn.body.args, [op for op in fn.body.ops if op.kind != "const"], ())
    main = _Emitter(namer, globals_, lean=share_layers)
    if remat is not None:
        _emit_layers(main, body.ops, fn, remat)
    elif share_layers:
        _emit_shared_layers(main, body.ops, fn)
    else:
        main.region(body)
    results = ", ".join(namer(v) for v in fn.results)
    updates = ", ".join(f"{path!r}: {namer(v)}" for path, v in fn.state_updates.items())
    main.line(f"return [{results}], {{{updates}}}")
    signature = ", ".join(f"{name}: {value.type}" for name, value in fn.inputs)
    inputs = "".join(f", {namer(v)}" for _, v in fn.inputs)
    source = "\n".join(
        [f"# entry {fn.name}({signature})", f"def entry(W, S{inputs}):", *main.lines, ""]
    )
    code = compile(source, f"<linnet jax {fn.name}>", "exec")
    exec(code, globals_)
    return Generated(source, globals_["entry"], needs_x64(fn))


def _emit_layers(main: _Emitter, ops: list[Op], fn: Function, remat: LayerRemat) -> None:
    """The top-level `ops`, each layer's run under `jax.checkpoint` (`linnet.jax.remat`)."""
    done = 0
    for segment in layer_segments(ops, remat):
        for op in ops[done : segment.start]:
            main.op(op)
        later: set[Value] = {*fn.results, *fn.state_updates.values()}
        for op in ops[segment.stop :]:
            later |= free_values(op)
        main.remat_segment(ops[segment.start : segment.stop], segment, later)
        done = segment.stop
    for op in ops[done:]:
        main.op(op)


def _emit_shared_layers(main: _Emitter, ops: list[Op], fn: Function) -> None:
    """The top-level `ops`, each group of alike layers as calls of one function under
    `jax.jit`, defined where the group's first layer runs (`linnet.jax.layers`)."""
    starts: dict[int, tuple[Group, Run]] = {}
    for group in shared_layers(fn, ops):
        for run in group.runs:
            starts[run.start] = (group, run)
    defined: dict[int, str] = {}
    position = 0
    while position < len(ops):
        found = starts.get(position)
        if found is None:
            main.op(ops[position])
            position += 1
            continue
        group, run = found
        outputs = [run.local[i] for i in group.outputs]
        name = defined.get(id(group))
        if name is None:
            name = defined[id(group)] = main.name.fresh(f"layer_{len(defined)}")
            main.line("@jax.jit")
            main.line(f"def {name}({', '.join(main.name(v) for v in run.outside)}):")
            main.depth += 1
            for op in ops[run.start : run.stop]:
                main.op(op)
            main.line(f"return {_tuple([main.name(v) for v in outputs]) if outputs else '()'}")
            main.depth -= 1
        call = f"{name}({', '.join(main.name(v) for v in run.outside)})"
        if outputs:
            names = ", ".join(main.name(v) for v in outputs)
            main.line(f"{names}{',' if len(outputs) == 1 else ''} = {call}")
        else:
            main.line(call)
        position = run.stop
