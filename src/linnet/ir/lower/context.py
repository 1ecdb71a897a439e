"""The state of one lowering: builders, frames, parameter reads and the current state.

Stage: lowering (checked AST + bound model -> one Core IR `Function`).

- A `Lowerer` lowers one function. Ops go to the current `Builder` (nested
  regions push their own); reads of params, buffers and state at entry go to
  a separate `prefix` builder whose ops open the function body, so a read
  first made inside a loop or a call region still dominates every use, and
  each path is read once (12.6: "reads are `state` ops at entry").
- State follows program order (12.6): `state_values` holds each path's
  current value after assignments; a read sees the latest assignment, also
  across blocks (a parent reading `memory.slots` after `memory.write(...)`).
- A `Frame` is one inlined function (a `fn`, a method, an `op` body): its
  concrete generics (`Env`), its block instance, and its locals keyed by the
  checker's `LocalInfo` (so shadowing needs no scopes here). `ix` is the
  index-notation scope while a comprehension or reduction is lowered (8).
"""

from __future__ import annotations

from collections.abc import Set
from typing import TYPE_CHECKING

from linnet.check.decls import FnInfo, LocalInfo
from linnet.check.program import CheckedProgram
from linnet.check.types import CtIntType, ScalarType, StructType, TupleType, Type
from linnet.errors import InternalError, LinnetError
from linnet.ir.core import Builder, TensorType, Value
from linnet.ir.lower.reuse import InlineCache, RegionCache
from linnet.ir.lower.values import (
    LV,
    IxVal,
    Opt,
    convert_scalar,
    default_dtype,
    element_types,
    is_number,
    scalar_dtype,
)

if TYPE_CHECKING:
    from linnet.ir.bind import BlockInstance, BoundModel
    from linnet.ir.env import Env
    from linnet.ir.lower.index import IndexScope


class Frame:
    """One function being inlined: generics, block instance and locals."""

    __slots__ = ("env", "fn", "instance", "ix", "locals")

    def __init__(self, fn: FnInfo | None, env: Env, instance: BlockInstance | None) -> None:
        self.fn = fn
        self.env = env
        self.instance = instance
        self.locals: dict[LocalInfo, LV] = {}
        self.ix: IndexScope | None = None

    @property
    def where(self) -> str:
        return "a constant" if self.fn is None else f"`{self.fn.qualified_name}`"


class Lowerer:
    """Lowers one entry: see the module docstring."""

    def __init__(
        self,
        program: CheckedProgram,
        bound: BoundModel | None,
        present: Set[str],
        builder: Builder,
    ) -> None:
        self.program = program
        self.bound = bound
        self.present = present
        self.b = builder
        self.prefix = Builder()
        self.reads: dict[str, Value] = {}  # path -> its value at entry
        self.state_values: dict[str, Value] = {}  # path -> value after the latest assignment
        self.state_written: dict[str, None] = {}  # assigned paths, in first-assignment order
        self.regions = RegionCache()  # closed `op` call regions by signature (reuse)
        self.inlines = InlineCache()  # inlined method bodies by signature and shape (reuse)

    # -- builders -------------------------------------------------------------------------

    def push(self, arg_types: list[TensorType]) -> Builder:
        """Start a nested region; returns the builder that was current."""
        outer = self.b
        self.b = outer.nested(arg_types)
        return outer

    def pop(self, outer: Builder) -> Builder:
        inner = self.b
        self.b = outer
        return inner

    # -- constants ------------------------------------------------------------------------

    def const(self, value: int | float | bool, dtype: str) -> Value:
        """A rank-0 constant of `dtype` (the value converted as `cast` would, 10.3)."""
        return self.b.const(convert_scalar(value, dtype), dtype)

    def materialize(self, lv: LV, t: Type | None, env: Env) -> LV:
        """Compile-time numbers inside `lv` become constants of the dtype `t` gives them."""
        if isinstance(lv, bool):
            return self.const(lv, "bool")
        if is_number(lv):
            assert isinstance(lv, (int, float))
            if isinstance(t, CtIntType):
                return lv
            dtype = scalar_dtype(t, env) or default_dtype(lv)
            return self.const(lv, dtype)
        if isinstance(lv, tuple):
            types = element_types(t, len(lv))
            return tuple(self.materialize(x, et, env) for x, et in zip(lv, types, strict=True))
        if isinstance(lv, Opt) and lv.value is not None:
            inner = getattr(t, "inner", None)
            return Opt(self.materialize(lv.value, inner, env))
        return lv

    def value(self, lv: LV, dtype: str | None = None) -> Value:
        """An LV that must be one IR value (numbers become constants of `dtype`)."""
        if isinstance(lv, Value):
            return lv
        if isinstance(lv, IxVal) and not lv.axes:
            return lv.value
        if isinstance(lv, bool):
            return self.const(lv, "bool")  # a bool never adopts another dtype (7.3)
        if is_number(lv):
            assert isinstance(lv, (int, float))
            return self.const(lv, dtype or default_dtype(lv))
        raise InternalError(f"expected a tensor value, got {lv!r}")

    # -- params, buffers, state ---------------------------------------------------------------

    def read_tensor(self, path: str) -> Value:
        """The value of a param/buffer, or of a state member at entry (one read per path)."""
        found = self.reads.get(path)
        if found is None:
            bound = self.bound
            if bound is None or path not in bound.tensors:
                raise InternalError(f"no tensor at `{path}`")
            t = bound.tensors[path]
            found = self.prefix.emit(t.kind, (), {"path": path}, type=t.type, name=path)
            self.reads[path] = found
        return found

    def read_state(self, path: str) -> Value:
        """A state member's current value (12.6: later reads see earlier assignments)."""
        current = self.state_values.get(path)
        return current if current is not None else self.read_tensor(path)

    def write_state(self, path: str, value: Value) -> None:
        bound = self.bound
        assert bound is not None
        declared = bound.tensors[path].type
        if value.type != declared:
            raise InternalError(f"state `{path}` is {declared}, assigned {value.type}")
        self.state_values[path] = value
        self.state_written[path] = None

    def is_present(self, path: str) -> bool:
        """Whether an optional param/buffer or optional child exists with these weights."""
        bound = self.bound
        assert bound is not None
        if path in bound.optional_subs:
            return bound.sub_present(path, self.present)
        return bound.tensor_live(path, self.present)


def local_value(lw: Lowerer, fr: Frame, lv: LV, t: Type) -> LV:
    """An LV as a local of type `t` holds it: typed scalars become IR values (5.4)."""
    if isinstance(t, ScalarType) and is_number(lv):
        assert isinstance(lv, (int, float))
        return lw.const(lv, fr.env.dtype(t.dtype))
    if isinstance(t, (TupleType, StructType)) and isinstance(lv, tuple):
        types = element_types(t, len(lv))
        return tuple(
            x if et is None else local_value(lw, fr, x, et) for x, et in zip(lv, types, strict=True)
        )
    if isinstance(lv, bool):
        return lw.const(lv, "bool")
    return lv


def not_supported(what: str, fr: Frame) -> LinnetError:
    """A valid program using a construct this lowering does not handle yet."""
    return LinnetError(f"{what} is not supported yet (in {fr.where})")
