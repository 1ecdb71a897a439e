"""The graph under construction: ONNX nodes, names for IR values, constants, subgraphs.

Stage: the exporter's working state (IR -> ModelProto). The lowering rules
(`elementwise`, `shapes`, `reduce`, `control`)
receive an `Emitter` and one IR `Op`; they read the ONNX names of the
operands, append nodes, and return one name per result. The invariant every
rule keeps: the ONNX value behind an IR value has exactly the IR value's
dtype and shape; wider compute dtypes (`dtypes`) live only inside a rule.

Names are unique across the whole model (`t0, t1, ...`), so a Loop or If
body may read any value of an enclosing graph by its name, as ONNX allows.
Constants are deduplicated per graph scope (a constant made inside a body is
not visible to its parent or siblings, so each scope keeps its own cache and
looks outward first).

Dynamic generics (`linnet.ir.dynamic`): with `dynamic` set, a size may be a
polynomial in the dynamic generics (`B * S`), so rules read shapes and size
attributes through `shape_of` and `attr` and build shape tensors with
`dims` instead of `ints`. Each generic is read once from the input axis that
carries it (`Shape` with `start`/`end`), each polynomial is computed once
(`Mul`/`Add`/`Div` on i64), in the main graph so every body can read it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import onnx
from onnx import helper

from linnet.errors import InternalError
from linnet.ir.core import Op, Region, TensorType, Value, numpy_dtype
from linnet.ir.dynamic import DynamicShapes
from linnet.ir.symbolic import Dim, Poly
from linnet.onnx.export.dtypes import ONNX_TYPES, check_provider_name

Rule = Callable[["Emitter", Op], Sequence[str]]
"""A lowering rule: one IR op to ONNX nodes; returns the names of its results."""


def onnx_type(dtype: str) -> int:
    """The `TensorProto` element type of an IR dtype."""
    return ONNX_TYPES[dtype]


def value_info(
    name: str, t: TensorType, dims: Sequence[Dim] | None = None, *, named: bool = True
) -> onnx.ValueInfoProto:
    """A graph input/output declaration with the static shape of `t`, or with `dims`:
    a symbolic size is a `dim_param` (its text, `B * S`) when `named`, else left unknown."""
    if dims is None:
        return helper.make_tensor_value_info(name, onnx_type(t.dtype), list(t.shape))
    shape: list[int | str | None] = [
        d if isinstance(d, int) else (str(d) if named else None) for d in dims
    ]
    return helper.make_tensor_value_info(name, onnx_type(t.dtype), shape)


def contiguous(value: object, dtype: str) -> np.ndarray[Any, Any]:
    """`value` as a C-contiguous array of `dtype`, keeping rank 0 (`ascontiguousarray` would not)."""
    array = np.asarray(value, dtype=numpy_dtype(dtype))
    return array if array.flags.c_contiguous else array.copy(order="C")


def little_endian(array: object, dtype: str) -> np.ndarray[Any, Any]:
    """`array` as a C-contiguous little-endian array of `dtype`: ONNX's raw byte layout.

    No copy when `array` already is one (a memory-mapped checkpoint tensor stays mapped).
    """
    value = contiguous(array, dtype)
    if value.dtype.byteorder == ">" or (value.dtype.byteorder == "=" and sys.byteorder == "big"):
        value = value.byteswap().view(value.dtype.newbyteorder("<"))
    return value


def describe_tensor(
    tensor: onnx.TensorProto, name: str, value: np.ndarray[Any, Any], dtype: str
) -> None:
    """Name, element type and dims of `tensor`, without its data."""
    tensor.name = name
    tensor.data_type = onnx_type(dtype)
    tensor.dims.extend(value.shape)


def fill_tensor(
    tensor: onnx.TensorProto, name: str, array: np.ndarray[Any, Any], dtype: str
) -> None:
    """Store `array` as `dtype` in `tensor`: raw little-endian bytes (bf16 as its 16-bit pattern)."""
    value = little_endian(array, dtype)
    describe_tensor(tensor, name, value, dtype)
    tensor.raw_data = value.tobytes()  # protobuf takes only `bytes`: one copy, unavoidable


def tensor_proto(array: np.ndarray[Any, Any], dtype: str, name: str = "") -> onnx.TensorProto:
    """`array` stored as `dtype` in a new `TensorProto`."""
    tensor = onnx.TensorProto()
    fill_tensor(tensor, name, array, dtype)
    return tensor


class Scope:
    """One graph being filled: its nodes, the names of IR values it defines, its constants."""

    def __init__(self, parent: Scope | None) -> None:
        self.parent = parent
        self.nodes: list[onnx.NodeProto] = []
        self.names: dict[Value, str] = {}
        self.constants: dict[tuple[str, tuple[int, ...], bytes], str] = {}

    def lookup(self, value: Value) -> str | None:
        scope: Scope | None = self
        while scope is not None:
            found = scope.names.get(value)
            if found is not None:
                return found
            scope = scope.parent
        return None

    def constant(self, key: tuple[str, tuple[int, ...], bytes]) -> str | None:
        scope: Scope | None = self
        while scope is not None:
            found = scope.constants.get(key)
            if found is not None:
                return found
            scope = scope.parent
        return None


class Emitter:
    """Builds ONNX nodes for IR ops (see the module docstring).

    `provider` picks per-provider choices (`dtypes`, fused kernels);
    `natives` lets `call` ops of known standard-library ops become standard
    ONNX operators (`Softmax`, `Sigmoid`), `fused` ONNX Runtime's contrib
    kernels (`fused`); `sources` maps `(kind, path)` of each `param`,
    `buffer` and `state` read to its graph input or initializer name.
    """

    def __init__(
        self,
        rules: Mapping[str, Rule],
        *,
        provider: str = "cpu",
        fused: bool = False,
        natives: bool = True,
        sources: Mapping[tuple[str, str], str] | None = None,
        dynamic: DynamicShapes | None = None,
        int8_activations: bool = False,
    ) -> None:
        self.rules = rules
        # Weight-only quantised kernels may round activations to int8 (`fused_quant`).
        self.int8_activations = int8_activations
        self.dynamic = dynamic
        # Per dynamic generic: the (graph input name, axis) it is read from.
        self.dim_inputs: dict[str, tuple[str, int]] = {}
        self._dim_names: dict[object, str] = {}
        self.provider = check_provider_name(provider)
        self.fused = fused
        self.natives = natives
        self.sources: dict[tuple[str, str], str] = dict(sources or {})
        self.domains: dict[str, int] = {}
        self.scope = Scope(None)
        self._count = 0
        # Compile-time values of IR values (folded constants), for rules that can use them.
        self.known: dict[Value, np.ndarray[Any, Any]] = {}
        # The op that defined each value, for kernels that check how an operand was built.
        self.producers: dict[Value, Op] = {}

    # -- names ----------------------------------------------------------------------------

    def fresh(self, hint: str = "t") -> str:
        name = f"{hint}{self._count}"
        self._count += 1
        return name

    def name(self, value: Value) -> str:
        found = self.scope.lookup(value)
        if found is None:
            raise InternalError(f"value {value!r} has no ONNX name (read before definition)")
        return found

    def bind(self, value: Value, name: str) -> None:
        self.scope.names[value] = name

    # -- nodes ----------------------------------------------------------------------------

    def node(
        self,
        op_type: str,
        inputs: Sequence[str],
        attrs: Mapping[str, Any] | None = None,
        *,
        outputs: int = 1,
        domain: str = "",
    ) -> list[str]:
        """Append one node; returns its fresh output names."""
        names = [self.fresh() for _ in range(outputs)]
        # what `helper.make_node` builds, without its keyword round trip (a node per op)
        node = onnx.NodeProto()
        node.op_type = op_type
        node.input.extend(inputs)
        node.output.extend(names)
        if domain:
            node.domain = domain
        if attrs:
            node.attribute.extend(
                [helper.make_attribute(k, v) for k, v in sorted(attrs.items()) if v is not None]
            )
        self.scope.nodes.append(node)
        if domain:
            self.domains.setdefault(domain, 1)
        return names

    def one(
        self,
        op_type: str,
        inputs: Sequence[str],
        attrs: Mapping[str, Any] | None = None,
        *,
        domain: str = "",
    ) -> str:
        """Append a single-output node and return its output name."""
        return self.node(op_type, inputs, attrs, domain=domain)[0]

    def const(self, value: object, dtype: str) -> str:
        """A constant tensor (deduplicated within the visible scopes)."""
        array = contiguous(value, dtype)
        key = (dtype, tuple(array.shape), array.tobytes())
        found = self.scope.constant(key)
        if found is not None:
            return found
        name = self.one("Constant", [], {"value": tensor_proto(array, dtype)})
        self.scope.constants[key] = name
        return name

    def ints(self, values: Sequence[int]) -> str:
        """A 1-D i64 constant (shapes, axes, starts of `Slice`...)."""
        return self.const(np.asarray(list(values), dtype=np.int64).reshape(len(values)), "i64")

    # -- sizes (dynamic generics) --------------------------------------------------------------

    def shape_of(self, value: Value) -> tuple[Dim, ...]:
        """The shape of `value`; with dynamic generics, sizes may be polynomials."""
        if self.dynamic is None:
            return value.type.shape
        return self.dynamic.shape(value)

    def attr(self, op: Op, key: str) -> object:
        """An attribute of `op`, in symbolic form where it varies with a dynamic generic."""
        if self.dynamic is None:
            return op.attrs[key]
        return self.dynamic.attr(op, key)

    def dims(self, values: Sequence[Dim]) -> str:
        """A 1-D i64 tensor of sizes (a constant when none is symbolic); a symbolic one is
        computed once, in the main graph (every layer reshapes to the same `[B, S, H]`)."""
        if not any(isinstance(d, Poly) for d in values):
            return self.ints([d for d in values if isinstance(d, int)])
        key = ("dims", tuple(values))
        found = self._dim_names.get(key)
        if found is None:
            with self._main_graph():
                found = self._dims(values)
            self._dim_names[key] = found
        return found

    @contextmanager
    def _main_graph(self) -> Iterator[None]:
        """Nodes go to the main graph while the block runs (sizes: visible in every body)."""
        inner = self.scope
        root = inner
        while root.parent is not None:
            root = root.parent
        self.scope = root
        try:
            yield
        finally:
            self.scope = inner

    def _dims(self, values: Sequence[Dim]) -> str:
        parts: list[str] = []
        run: list[int] = []
        for d in values:
            if isinstance(d, Poly):
                if run:
                    parts.append(self.ints(run))
                    run = []
                parts.append(self.dim(d))
            else:
                run.append(int(d))
        if run:
            parts.append(self.ints(run))
        return parts[0] if len(parts) == 1 else self.one("Concat", parts, {"axis": 0})

    def dim(self, d: Dim) -> str:
        """One size as a 1-D i64 tensor of one element, computed once in the main graph."""
        if isinstance(d, int):
            return self.ints([d])
        found = self._dim_names.get(d)
        if found is not None:
            return found
        with self._main_graph():
            name = self._compute(d)
        self._dim_names[d] = name
        return name

    def dim_scalar(self, d: Dim) -> str:
        """One size as a rank-0 i64 tensor."""
        if isinstance(d, int):
            return self.const(d, "i64")
        key = ("scalar", d)
        found = self._dim_names.get(key)
        if found is None:
            vector = self.dim(d)
            with self._main_graph():
                found = self.one("Reshape", [vector, self.ints([])])
            self._dim_names[key] = found
        return found

    def _compute(self, d: Poly) -> str:
        """The polynomial on i64 `[1]` tensors: a sum of products, then the denominator."""
        denominator = d.denominator
        total: str | None = None
        for exps, coef in d.terms:
            factors: list[str] = []
            for name, power in zip(d.names, exps, strict=True):
                factors += [self._generic(name)] * power
            scaled = int(coef * denominator)
            term = factors[0] if factors else self.ints([scaled])
            for f in factors[1:]:
                term = self.one("Mul", [term, f])
            if factors and scaled != 1:
                term = self.one("Mul", [term, self.ints([scaled])])
            total = term if total is None else self.one("Add", [total, term])
        assert total is not None
        if denominator != 1:
            total = self.one("Div", [total, self.ints([denominator])])
        return total

    def _generic(self, name: str) -> str:
        found = self._dim_names.get(name)
        if found is None:
            if name not in self.dim_inputs:
                raise InternalError(f"dynamic generic `{name}` has no input to read it from")
            source, axis = self.dim_inputs[name]
            found = self.one("Shape", [source], {"start": axis, "end": axis + 1})
            self._dim_names[name] = found
        return found

    def cast(self, name: str, source: str, target: str) -> str:
        """A plain ONNX `Cast` (none when the dtypes agree); see `elementwise` for IR casts."""
        if source == target:
            return name
        return self.one("Cast", [name], {"to": onnx_type(target)})

    # -- regions ----------------------------------------------------------------------------

    def emit_ops(self, ops: Iterable[Op]) -> None:
        """Lower each op in order, binding its results."""
        rules, producers, dynamic = self.rules, self.producers, self.dynamic
        for op in ops:
            rule = rules.get(op.kind)
            if rule is None:
                raise InternalError(f"the ONNX exporter has no rule for op {op.kind}")
            names = rule(self, op)
            if len(names) != len(op.results):
                raise InternalError(f"rule for {op.kind} returned {len(names)} names")
            bound = self.scope.names  # the rule is back in this scope
            for value, name in zip(op.results, names, strict=True):
                bound[value] = name
                producers[value] = op
            if op.kind == "const" and (
                dynamic is None or (op not in dynamic.fills and op not in dynamic.values)
            ):
                array = op.attrs["value"]
                assert isinstance(array, np.ndarray)
                self.known[op.results[0]] = array

    def inline(self, region: Region, args: Sequence[str]) -> list[str]:
        """Emit `region` into the current graph with its args bound to `args`; its result names."""
        for value, name in zip(region.args, args, strict=True):
            self.bind(value, name)
        self.emit_ops(region.ops)
        return [self.name(v) for v in region.results]

    @contextmanager
    def subgraph(self) -> Iterator[Scope]:
        """A nested graph scope (Loop/If bodies); nodes go there until the block ends."""
        outer = self.scope
        self.scope = Scope(outer)
        try:
            yield self.scope
        finally:
            self.scope = outer

    def make_subgraph(
        self,
        scope: Scope,
        name: str,
        inputs: Sequence[tuple[str, TensorType | Value]],
        outputs: Sequence[tuple[str, TensorType | Value]],
    ) -> onnx.GraphProto:
        """A `GraphProto` of a finished nested scope, outputs renamed through `Identity`.

        Every output gets its own node inside the body: an output must not be
        an input, an outer value or another output of the same body. An IR
        value stands for its type, symbolic sizes left unknown.
        """
        out_infos = []
        for source, t in outputs:
            renamed = self.fresh()
            scope.nodes.append(helper.make_node("Identity", [source], [renamed]))
            out_infos.append(self._body_info(renamed, t))
        in_infos = [self._body_info(n, t) for n, t in inputs]
        return helper.make_graph(scope.nodes, name, in_infos, out_infos)

    def _body_info(self, name: str, t: TensorType | Value) -> onnx.ValueInfoProto:
        if isinstance(t, TensorType):
            return value_info(name, t)
        return value_info(name, t.type, self.shape_of(t), named=False)
