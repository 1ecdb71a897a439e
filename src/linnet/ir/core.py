"""Core IR data structures and the `Builder` that creates them.

Stage: the output of binding + lowering (architecture.md, "Core IR"), the input
of the passes and of every backend. After binding every shape is static, so a
`TensorType` is a tuple of ints and a dtype name; values are SSA (defined once,
by an op result or a region argument), ops form a small closed set (see
`linnet.ir.ops` for the per-op rules), and nested regions (`while`, `if`,
`call`) may read values defined in enclosing regions.

Values compare and hash by identity (`eq=False`); each also carries a unique
integer `id` so that dumps and debuggers can tell them apart. The printer
numbers values by position instead, so printed IR is stable across runs.

NumPy is not imported here (the package stays light, architecture.md
"Package layout"); `numpy_dtype` imports it on first use.

Example:
    >>> b = Builder.for_function([("x", TensorType((2, 3), "f32"))])
    >>> (x,) = b.args
    >>> y = b.binary("add", x, b.const(1.0, "f32"))
    >>> fn = b.finish_function("main", [y])
    >>> fn.results[0].type
    TensorType(shape=(2, 3), dtype='f32')
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from linnet.errors import InternalError
from linnet.records import field, record

if TYPE_CHECKING:
    import numpy as np

DTYPES = ("bool", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f16", "bf16", "f32", "f64")
FLOAT_DTYPES = frozenset({"f16", "bf16", "f32", "f64"})
SIGNED_DTYPES = frozenset({"i8", "i16", "i32", "i64"})
UNSIGNED_DTYPES = frozenset({"u8", "u16", "u32", "u64"})
INTEGER_DTYPES = SIGNED_DTYPES | UNSIGNED_DTYPES
NUMERIC_DTYPES = INTEGER_DTYPES | FLOAT_DTYPES

_BITS = {
    "bool": 8, "i8": 8, "i16": 16, "i32": 32, "i64": 64, "u8": 8, "u16": 16, "u32": 32,
    "u64": 64, "f16": 16, "bf16": 16, "f32": 32, "f64": 64,
}  # fmt: skip

# NumPy's names for our dtypes (bf16 comes from ml_dtypes, which registers "bfloat16").
_NUMPY_NAMES = {
    "bool": "bool", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
    "f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64",
}  # fmt: skip
_FROM_NUMPY = {v: k for k, v in _NUMPY_NAMES.items()}


def dtype_bits(dtype: str) -> int:
    """Storage width in bits (bool counts as one byte, as in NumPy and SafeTensors)."""
    return _BITS[dtype]


def numpy_dtype(dtype: str) -> np.dtype[Any]:
    """The NumPy dtype that stores `dtype` (bf16 via ml_dtypes)."""
    import numpy as np

    if dtype == "bf16":
        import ml_dtypes

        bf16: np.dtype[Any] = np.dtype(ml_dtypes.bfloat16)
        return bf16
    return np.dtype(_NUMPY_NAMES[dtype])


def dtype_of_numpy(np_dtype: object) -> str:
    """Our dtype name for a NumPy dtype (`float32` -> `f32`); InternalError if unsupported."""
    name = str(np_dtype)
    if name not in _FROM_NUMPY:
        raise InternalError(f"NumPy dtype {name} has no Linnet dtype")
    return _FROM_NUMPY[name]


def dtype_named(raw: object) -> str | None:
    """Our dtype name for what a user may pass as a dtype: ours (`f32`), NumPy's name
    (`float32`, `bfloat16`, `int64`), a NumPy dtype or scalar type (`np.float32`), a
    torch dtype (`torch.float32`) or a JAX scalar type (`jnp.bfloat16`); None otherwise.

    Neither torch nor JAX is imported to tell: a torch dtype is recognised when torch
    is already imported (whoever holds one has), a JAX scalar type by the NumPy
    `dtype` it carries.
    """
    import sys

    import numpy as np

    if isinstance(raw, str):
        return raw if raw in _NUMPY_NAMES else _FROM_NUMPY.get(raw)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(raw, torch.dtype):
        return _FROM_NUMPY.get(str(raw).removeprefix("torch."))
    if isinstance(raw, type):
        # JAX's scalar types are classes that carry a NumPy dtype
        carried = getattr(raw, "dtype", None)
        raw = np.dtype(raw) if issubclass(raw, np.generic) else carried
    if isinstance(raw, np.dtype):
        return _FROM_NUMPY.get(str(raw))
    return None


@record(frozen=True)
class TensorType:
    """A static tensor type: the shape (rank 0 is a scalar) and a dtype from `DTYPES`."""

    shape: tuple[int, ...]
    dtype: str

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements (1 for a scalar, 0 if any axis is empty)."""
        n = 1
        for d in self.shape:
            n *= d
        return n

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(str(d) for d in self.shape)}]"


_next_id = itertools.count().__next__
"""The next value id (a bound C method: a value is made for every result of every op)."""


@record(eq=False)
class Value:
    """An SSA value: the result of one op or an argument of one region."""

    type: TensorType
    name: str = ""
    id: int = field(default_factory=_next_id, kw_only=True)

    def __repr__(self) -> str:
        label = f" {self.name}" if self.name else ""
        return f"<Value %{self.id}{label} : {self.type}>"


@record(eq=False)
class Op:
    """One operation: `kind` from the closed set in `linnet.ir.ops`, attrs per kind."""

    kind: str
    operands: tuple[Value, ...]
    results: tuple[Value, ...]
    attrs: dict[str, object]
    regions: tuple[Region, ...] = ()

    @property
    def result(self) -> Value:
        """The single result (InternalError for ops with several)."""
        if len(self.results) != 1:
            raise InternalError(f"op {self.kind} has {len(self.results)} results, not one")
        return self.results[0]


@record(eq=False)
class Region:
    """A list of ops with arguments and results; may read values of enclosing regions.

    `settled` marks a region that reads nothing from outside itself and that the
    passes have already brought to their fixed point (an `op` call body lowered
    once and cloned, `linnet.ir.lower.reuse`): the passes leave it as it is.
    """

    args: tuple[Value, ...]
    ops: list[Op]
    results: tuple[Value, ...]
    settled: bool = False


@record(eq=False)
class Function:
    """One entry after lowering.

    `body.args` are the input values (in `inputs` order); `results` flatten a
    tuple result in order; `state_updates` maps each assigned state path to its
    final value.
    """

    name: str
    inputs: tuple[tuple[str, Value], ...]
    body: Region
    results: tuple[Value, ...]
    state_updates: dict[str, Value]


@record(eq=False)
class Program:
    """A bound model: declared params/buffers/state by path and the lowered entries."""

    params: dict[str, TensorType]
    buffers: dict[str, TensorType]
    state: dict[str, TensorType]
    entries: dict[str, Function]
    generics: dict[str, object]


RegionSpec = Region | Callable[["Builder", tuple[Value, ...]], Sequence[Value]]
"""A region given ready-made, or as a callback that fills a fresh builder and returns results."""


def _ints(values: Sequence[int] | Any, what: str) -> tuple[int, ...]:
    try:
        # ints as they are (a dynamic export's `ir.traced.Traced` sizes keep their trace)
        return tuple(v if isinstance(v, int) and type(v) is not bool else int(v) for v in values)
    except (TypeError, ValueError) as exc:
        raise InternalError(f"{what} must be a sequence of integers, got {values!r}") from exc


class Builder:
    """Appends ops to one region, inferring result types from the `linnet.ir.ops` rules.

    A builder for a nested region is made with `nested(arg_types)` (or implicitly,
    by passing a callback to `while_`, `if_` or `call`).
    """

    def __init__(self, arg_types: Sequence[TensorType] = (), arg_names: Sequence[str] = ()) -> None:
        names = list(arg_names) + [""] * (len(arg_types) - len(arg_names))
        self.args: tuple[Value, ...] = tuple(
            Value(t, n) for t, n in zip(arg_types, names, strict=True)
        )
        self.ops: list[Op] = []

    # -- construction of regions and functions ------------------------------------------

    @classmethod
    def for_function(cls, inputs: Sequence[tuple[str, TensorType]]) -> Builder:
        """A builder whose args are the named inputs of a function."""
        return cls([t for _, t in inputs], [n for n, _ in inputs])

    def nested(self, arg_types: Sequence[TensorType] = ()) -> Builder:
        """A builder for a region nested in this one (it may read this region's values)."""
        return Builder(arg_types)

    def finish(self, results: Sequence[Value]) -> Region:
        """The region built so far, returning `results`."""
        return Region(self.args, self.ops, tuple(results))

    def finish_function(
        self,
        name: str,
        results: Sequence[Value],
        state_updates: Mapping[str, Value] | None = None,
    ) -> Function:
        """A function whose inputs are this builder's args (named by their `Value.name`)."""
        body = self.finish(results)
        return Function(
            name,
            tuple((v.name, v) for v in self.args),
            body,
            tuple(results),
            dict(state_updates or {}),
        )

    def _region(self, spec: RegionSpec, arg_types: Sequence[TensorType]) -> Region:
        if isinstance(spec, Region):
            return spec
        inner = self.nested(arg_types)
        return inner.finish(spec(inner, inner.args))

    # -- the generic entry point -------------------------------------------------------

    def add(
        self,
        kind: str,
        operands: Sequence[Value] = (),
        attrs: Mapping[str, object] | None = None,
        *,
        regions: Sequence[Region] = (),
        types: Sequence[TensorType] | None = None,
        name: str = "",
    ) -> tuple[Value, ...]:
        """Append an op; result types come from its rule (`types` where the rule needs them)."""
        from linnet.ir import ops as op_rules

        attr_dict = dict(attrs or {})
        result_types = op_rules.infer(
            kind,
            [v.type for v in operands],
            attr_dict,
            regions,
            None if types is None else tuple(types),
        )
        results = tuple(Value(t, name) for t in result_types)
        self.ops.append(Op(kind, tuple(operands), results, attr_dict, tuple(regions)))
        return results

    def emit(
        self,
        kind: str,
        operands: Sequence[Value] = (),
        attrs: Mapping[str, object] | None = None,
        *,
        type: TensorType | None = None,
        name: str = "",
    ) -> Value:
        """Append a single-result op and return its result."""
        types = None if type is None else (type,)
        (result,) = self.add(kind, operands, attrs, types=types, name=name)
        return result

    # -- conveniences, one per op family --------------------------------------------------

    def const(self, value: object, dtype: str, name: str = "") -> Value:
        """A constant of `dtype` (any array-like; converted like `numpy.asarray`).

        A float that overflows a narrow dtype becomes +-inf, as an IEEE cast does
        (the attention mask's -1e30 in f16), without NumPy's overflow warning.
        """
        import numpy as np

        from linnet.ir.traced import note_const, untraced

        with np.errstate(over="ignore"):
            array = np.asarray(untraced(value), dtype=numpy_dtype(dtype))
        note_const(array, value)  # a dynamic export's traced sizes (`linnet.ir.traced`)
        return self.emit("const", (), {"value": array}, name=name)

    def iota(self, n: int, dtype: str = "i64") -> Value:
        return self.emit("iota", (), {}, type=TensorType(_ints((n,), "iota size"), dtype))

    def param(self, path: str, type: TensorType) -> Value:
        return self.emit("param", (), {"path": path}, type=type, name=path)

    def buffer(self, path: str, type: TensorType) -> Value:
        return self.emit("buffer", (), {"path": path}, type=type, name=path)

    def state(self, path: str, type: TensorType) -> Value:
        return self.emit("state", (), {"path": path}, type=type, name=path)

    def cast(self, x: Value, dtype: str) -> Value:
        return self.emit("cast", (x,), {}, type=TensorType(x.type.shape, dtype))

    def unary(self, kind: str, x: Value) -> Value:
        return self.emit(kind, (x,))

    def binary(self, kind: str, a: Value, b: Value) -> Value:
        return self.emit(kind, (a, b))

    def select(self, cond: Value, a: Value, b: Value) -> Value:
        return self.emit("select", (cond, a, b))

    def broadcast(self, x: Value, shape: Sequence[int]) -> Value:
        return self.emit("broadcast", (x,), {"shape": _ints(shape, "broadcast shape")})

    def reshape(self, x: Value, shape: Sequence[int]) -> Value:
        return self.emit("reshape", (x,), {"shape": _ints(shape, "reshape shape")})

    def permute(self, x: Value, perm: Sequence[int]) -> Value:
        return self.emit("permute", (x,), {"perm": _ints(perm, "permute perm")})

    def slice(
        self,
        x: Value,
        start: Sequence[int],
        stop: Sequence[int],
        step: Sequence[int] | None = None,
    ) -> Value:
        steps = (1,) * x.type.rank if step is None else _ints(step, "slice step")
        attrs = {
            "start": _ints(start, "slice start"),
            "stop": _ints(stop, "slice stop"),
            "step": steps,
        }
        return self.emit("slice", (x,), attrs)

    def concat(self, xs: Sequence[Value], axis: int) -> Value:
        return self.emit("concat", tuple(xs), {"axis": int(axis)})

    def cumsum(self, x: Value, axis: int) -> Value:
        return self.emit("cumsum", (x,), {"axis": int(axis)})

    def gather(self, x: Value, indices: Value, axis: int) -> Value:
        return self.emit("gather", (x, indices), {"axis": int(axis)})

    def take(self, x: Value, *indices: Value) -> Value:
        return self.emit("take", (x, *indices))

    def reduce(self, x: Value, kind: str, axes: Sequence[int]) -> Value:
        return self.emit("reduce", (x,), {"kind": kind, "axes": _ints(axes, "reduce axes")})

    def contract(
        self,
        lhs: Value,
        rhs: Value,
        *,
        lhs_batch: Sequence[int] = (),
        rhs_batch: Sequence[int] = (),
        lhs_contract: Sequence[int] = (),
        rhs_contract: Sequence[int] = (),
    ) -> Value:
        attrs = {
            "lhs_batch": _ints(lhs_batch, "lhs_batch"),
            "rhs_batch": _ints(rhs_batch, "rhs_batch"),
            "lhs_contract": _ints(lhs_contract, "lhs_contract"),
            "rhs_contract": _ints(rhs_contract, "rhs_contract"),
        }
        return self.emit("contract", (lhs, rhs), attrs)

    def while_(
        self, init: Sequence[Value], cond: RegionSpec, body: RegionSpec
    ) -> tuple[Value, ...]:
        """A loop carrying `init`; `cond` returns a bool scalar, `body` the new carried values.

        Callbacks receive a nested builder and the carried values as its args.
        """
        carried = [v.type for v in init]
        cond_region = self._region(cond, carried)
        body_region = self._region(body, carried)
        return self.add("while", tuple(init), {}, regions=(cond_region, body_region))

    def if_(self, cond: Value, then: RegionSpec, else_: RegionSpec) -> tuple[Value, ...]:
        """Two argument-less regions; both return the same types."""
        regions = (self._region(then, ()), self._region(else_, ()))
        return self.add("if", (cond,), {}, regions=regions)

    def call(
        self,
        callee: str,
        args: Sequence[Value],
        body: RegionSpec,
        generics: Mapping[str, object] | None = None,
        *,
        gradient: Region | None = None,
        wrt: Sequence[int] = (),
    ) -> tuple[Value, ...]:
        """A named `op` call whose body computes it (a backend may substitute a native kernel).

        `gradient` is the op's gradient clause (language-extensions 3.4): a region with
        args (operands, result, incoming gradient) returning the gradients of the operands
        at positions `wrt` (attr `wrt`); it replaces the body's derivative.
        """
        region = self._region(body, [v.type for v in args])
        attrs: dict[str, object] = {"callee": callee, "generics": dict(generics or {})}
        if gradient is None:
            return self.add("call", tuple(args), attrs, regions=(region,))
        attrs["wrt"] = [int(i) for i in wrt]
        return self.add("call", tuple(args), attrs, regions=(region, gradient))
