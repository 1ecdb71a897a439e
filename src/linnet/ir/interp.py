"""The NumPy reference interpreter: the oracle every backend is tested against.

Stage: a backend of the Core IR (architecture.md "Backends"). Input: a lowered
`Function` plus NumPy arrays for its params/buffers (by path), state (by path)
and inputs (in order). Output: the function's results and the new state.
Region-free ops run through the kernel table in `linnet.ir.kernels` (where the
numeric choices are documented); this module adds the sources (`param`,
`buffer`, `state`) and the region ops (`while`, `for`, `if`, `call`: a call runs its
canonical body). Values are SSA, so one environment keyed by value identity
serves every region: a region reads enclosing values by looking them up.

Arrays crossing the boundary must have exactly the declared shape and dtype;
a mismatch is a `LinnetError` naming the input or path (a backend test that
feeds f64 data to an f32 input should cast it first, not rely on this module).

Example:
    >>> import numpy as np
    >>> from linnet.ir.core import Builder, TensorType
    >>> b = Builder.for_function([("x", TensorType((3,), "i32"))])
    >>> q = b.binary("div", b.args[0], b.const(2, "i32"))
    >>> fn = b.finish_function("halve", [q])
    >>> run_function(fn, {}, {}, [np.array([-3, 3, 5], np.int32)])[0][0]
    array([-1,  1,  2], dtype=int32)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from linnet.errors import InternalError, LinnetError
from linnet.ir.core import Function, Op, Program, Region, TensorType, Value, numpy_dtype
from linnet.ir.kernels import KERNELS, Array


def coerce(array: object, expected: TensorType, what: str) -> Array:
    """`array` as an ndarray of exactly `expected`; LinnetError naming `what` otherwise."""
    value = np.asarray(array)
    if value.dtype != numpy_dtype(expected.dtype) or value.shape != expected.shape:
        shown = f"{value.dtype}{list(value.shape)}"
        raise LinnetError(f"{what}: expected {expected}, got an array of {shown}")
    return value


class Interpreter:
    """Evaluates one function; `env` maps each defined value to its array."""

    def __init__(
        self,
        params: Mapping[str, object],
        state: Mapping[str, object],
        buffers: Mapping[str, object] | None = None,
    ) -> None:
        self.params = params
        self.buffers = params if buffers is None else buffers
        self.state = state
        self.env: dict[Value, Array] = {}

    def read(self, value: Value) -> Array:
        try:
            return self.env[value]
        except KeyError:
            raise InternalError(f"value {value!r} is read before it is defined") from None

    def run_region(self, region: Region, args: Sequence[Array]) -> list[Array]:
        for value, array in zip(region.args, args, strict=True):
            self.env[value] = array
        for op in region.ops:
            self.run_op(op)
        return [self.read(v) for v in region.results]

    def run_op(self, op: Op) -> None:
        handler = REGION_AND_SOURCE_RULES.get(op.kind)
        if handler is not None:
            outputs = handler(self, op)
        else:
            kernel = KERNELS.get(op.kind)
            if kernel is None:
                raise InternalError(f"the interpreter has no rule for op {op.kind}")
            with np.errstate(all="ignore"):  # semantics of overflow etc. are in kernels.py
                outputs = [kernel(op, [self.read(v) for v in op.operands])]
        for value, array in zip(op.results, outputs, strict=True):
            self.env[value] = array

    def source(self, op: Op, table: Mapping[str, object], what: str) -> list[Array]:
        path = op.attrs["path"]
        assert isinstance(path, str)
        if path not in table:
            raise LinnetError(f"{what} {path} has no value")
        return [coerce(table[path], op.results[0].type, f"{what} {path}")]


def _run_param(interp: Interpreter, op: Op) -> list[Array]:
    return interp.source(op, interp.params, "param")


def _run_buffer(interp: Interpreter, op: Op) -> list[Array]:
    return interp.source(op, interp.buffers, "buffer")


def _run_state(interp: Interpreter, op: Op) -> list[Array]:
    return interp.source(op, interp.state, "state")


def _run_while(interp: Interpreter, op: Op) -> list[Array]:
    cond, body = op.regions
    carried = [interp.read(v) for v in op.operands]
    while bool(interp.run_region(cond, carried)[0]):
        carried = interp.run_region(body, carried)
    return carried


def _run_for(interp: Interpreter, op: Op) -> list[Array]:
    """Carried values feed each iteration; scan rows are stacked on a new axis 0 (0 rows
    give an empty array of the declared shape)."""
    (body,) = op.regions
    start, stop = op.attrs["start"], op.attrs["stop"]
    assert isinstance(start, int) and isinstance(stop, int)
    carried = [interp.read(v) for v in op.operands]
    rows: list[list[Array]] = [[] for _ in op.results[len(carried) :]]
    for i in range(start, stop):
        out = interp.run_region(body, [np.array(i, np.int64), *carried])
        carried = out[: len(carried)]
        for collected, row in zip(rows, out[len(carried) :], strict=True):
            collected.append(row)
    stacked = [
        np.stack(collected) if collected else np.zeros(v.type.shape, numpy_dtype(v.type.dtype))
        for collected, v in zip(rows, op.results[len(carried) :], strict=True)
    ]
    return [*carried, *stacked]


def _run_if(interp: Interpreter, op: Op) -> list[Array]:
    then, otherwise = op.regions
    taken = then if bool(interp.read(op.operands[0])) else otherwise
    return interp.run_region(taken, [])


def _run_call(interp: Interpreter, op: Op) -> list[Array]:
    # The reference runs the canonical body; backends may substitute a kernel.
    return interp.run_region(op.regions[0], [interp.read(v) for v in op.operands])


REGION_AND_SOURCE_RULES: dict[str, Callable[[Interpreter, Op], list[Array]]] = {
    "param": _run_param,
    "buffer": _run_buffer,
    "state": _run_state,
    "while": _run_while,
    "for": _run_for,
    "if": _run_if,
    "call": _run_call,
}


def run_function(
    fn: Function,
    params: Mapping[str, object],
    state: Mapping[str, object],
    inputs: Sequence[object],
    *,
    buffers: Mapping[str, object] | None = None,
) -> tuple[list[Array], dict[str, Array]]:
    """Run `fn`; return its results and the new state (`state` with the updates applied).

    `params` holds params by path, and buffers too unless `buffers` is given.
    """
    if len(inputs) != len(fn.inputs):
        raise LinnetError(f"entry {fn.name} takes {len(fn.inputs)} inputs, got {len(inputs)}")
    arrays = [
        coerce(array, value.type, f"input {name or index} of entry {fn.name}")
        for index, ((name, value), array) in enumerate(zip(fn.inputs, inputs, strict=True))
    ]
    interp = Interpreter(params, state, buffers)
    results = interp.run_region(fn.body, arrays)
    new_state: dict[str, Array] = {path: np.asarray(v) for path, v in state.items()}
    for path, value in fn.state_updates.items():
        new_state[path] = _owned(interp.read(value))
    return [_owned(r) for r in results], new_state


def _owned(array: Array) -> Array:
    """A writable C-contiguous array (kernels may return read-only broadcast views)."""
    if array.flags.c_contiguous and array.flags.writeable:
        return array
    return array.copy(order="C")


def zero_state(program: Program) -> dict[str, Array]:
    """Every state member as zeros, its value before the first call (architecture.md)."""
    return {path: np.zeros(t.shape, numpy_dtype(t.dtype)) for path, t in program.state.items()}


def run_entry(
    program: Program,
    entry: str,
    weights: Mapping[str, object],
    state: Mapping[str, object] | None,
    inputs: Sequence[object],
) -> tuple[list[Array], dict[str, Array]]:
    """Run one entry of a program; `weights` holds params and buffers by path, state defaults to zeros.

    Every declared param and buffer must be present with its declared type.
    """
    if entry not in program.entries:
        known = ", ".join(sorted(program.entries)) or "none"
        raise LinnetError(f"entry {entry} does not exist (entries: {known})")
    for path, t in {**program.params, **program.buffers}.items():
        if path not in weights:
            raise LinnetError(f"weight {path} ({t}) is missing")
        coerce(weights[path], t, f"weight {path}")
    current: Mapping[str, Any] = zero_state(program) if state is None else state
    return run_function(program.entries[entry], weights, current, inputs)
