"""The importer graph under construction, and what every ATen operator mapping shares.

Stage: the torch importer's second step (`linnet.torch.importer.aten` walks the
exported program; `ops_tensor` and `ops_nn` map each operator). A `Builder`
fills a `linnet.sourcegen.graph.Graph` with ONNX-vocabulary nodes, one value
per FX node (its name kept), with types from each node's `meta["val"]`
(symbolic extents become the generic names of `Capture.dims`); folded values
become constants where a translated node reads them. A mapping that cannot
translate its node raises `Skip` with the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import fx

from linnet.sourcegen.builder import GraphBuilder, Skip
from linnet.sourcegen.graph import DimLike, TensorInfo
from linnet.torch.dtypes import linnet_dtype
from linnet.torch.importer.capture import Capture


def source_line(node: fx.Node) -> str:
    """`file.py:line` of the innermost frame of the node's stack trace, or ``""``."""
    trace = str(node.meta.get("stack_trace") or "")
    where = ""
    for line in trace.splitlines():
        line = line.strip()
        if line.startswith('File "'):
            path, _, rest = line[6:].partition('", line ')
            number = rest.split(",")[0]
            where = f"{path.rsplit('/', 1)[-1]}:{number}"
    return where


class Builder(GraphBuilder):
    """Fills a `Graph` while walking an exported program's nodes in order."""

    separator = "__"

    def __init__(self, cap: Capture) -> None:
        super().__init__()
        self.cap = cap
        self.names: dict[fx.Node, Any] = {}

    # ---------------------------------------------------------------- values

    def const(self, value: Any, dtype: np.dtype[Any] | type | None = None) -> str:
        """A compile-time constant: a name in `graph.constants`."""
        arr = np.asarray(value, dtype=dtype)
        name = self.fresh("const")
        self.constant(name, arr)
        return name

    def constant(self, name: str, arr: np.ndarray[Any, Any]) -> None:
        self.graph.constants[name] = arr
        self.graph.value_info[name] = TensorInfo(
            name, np_dtype(arr.dtype), tuple(int(s) for s in arr.shape)
        )

    def value(self, arg: Any) -> str:
        """The graph value an argument names (a folded value becomes a constant)."""
        if isinstance(arg, fx.Node):
            name = self.names.get(arg)
            if isinstance(name, str):
                return name
            if arg in self.cap.folded:
                folded = self.cap.folded[arg]
                if isinstance(folded, torch.Tensor):
                    self.constant(arg.name, numpy_of(folded))
                    self.names[arg] = arg.name
                    return arg.name
            if isinstance(name, tuple) and name[0] == "extent":
                scalar = self.extent(arg.meta.get("val"))
                self.names[arg] = scalar
                return scalar
            raise Skip(f"reads `{arg.name}`, which is not a tensor value here")
        raise Skip(f"expects a tensor, got {arg!r}")

    def extent(self, size: Any) -> str:
        """A size (a `torch.SymInt` of dynamic dims, or an int) as a rank-0 i64 value."""
        if isinstance(size, int):
            return self.const(np.array(size, dtype=np.int64))
        return self.emit("Squeeze", [self.size_value(size), self.ints([0])], "i64", ())

    def size_value(self, size: Any) -> str:
        """A size as a one-element i64 value: an int is a constant; a `torch.SymInt`
        reads the `Shape` of the input that carries each dynamic dim it names and
        combines them as its expression does (`2*s41` -> `Mul`), so translation
        sees the generics (`2 * S`)."""
        if isinstance(size, int):
            return self.ints([size])
        if not isinstance(size, torch.SymInt):
            raise Skip(f"an extent {size!r} that is not a size")
        return self._expr_value(size.node.expr)

    def _expr_value(self, expr: Any) -> str:
        if getattr(expr, "is_Integer", False):
            return self.ints([int(expr)])
        if getattr(expr, "is_Symbol", False):
            name = self.cap.dims.get(str(expr))
            src = None if name is None else self.input_axis(name)
            if name is None or src is None:
                raise Skip(f"an extent `{expr}` that is no dynamic dim of an input")
            value, axis = src
            return self.emit("Shape", [value], "i64", (1,), {"start": axis, "end": axis + 1})
        ops = {"Mul": "Mul", "Add": "Add", "FloorDiv": "Div"}
        op = ops.get(type(expr).__name__)
        if op is None or not expr.args:
            raise Skip(f"an extent `{expr}` that is not a sum or product of dynamic dims")
        out = self._expr_value(expr.args[0])
        for arg in expr.args[1:]:
            out = self.emit(op, [out, self._expr_value(arg)], "i64", (1,))
        return out

    def known_extent(self, expr: Any) -> bool:
        """Whether every symbol of `expr` is a dynamic dim of an input."""
        return all(str(s) in self.cap.dims for s in getattr(expr, "free_symbols", ()))

    def input_axis(self, dim: DimLike) -> tuple[str, int] | None:
        """The first input and axis whose extent is `dim`."""
        for info in self.graph.inputs:
            for axis, d in enumerate(info.shape or ()):
                if d == dim:
                    return info.name, axis
        return None

    def info(self, arg: Any) -> TensorInfo:
        """The type of a tensor argument (from its `meta["val"]`)."""
        if isinstance(arg, fx.Node):
            name = self.value(arg)
            known = self.graph.value_info.get(name)
            if known is not None:
                return known
            arr = self.graph.constants.get(name)
            if arr is not None:
                return TensorInfo(name, np_dtype(arr.dtype), tuple(int(s) for s in arr.shape))
        raise Skip("an argument of unknown type")

    def shape_of(self, val: Any, inputs: bool = False) -> tuple[DimLike, ...]:
        """`val`'s extents: sizes, the generic names of dynamic dims, and None for an
        expression of them (`2*s41`); an input's extents (`inputs`) are never None."""
        dims: list[DimLike] = []
        for d in val.shape:
            if isinstance(d, torch.SymInt):
                expr = d.node.expr
                if getattr(expr, "is_number", False):
                    dims.append(int(expr))
                    continue
                sym = str(expr)
                name = self.cap.dims.get(sym)
                if name is None and self.known_extent(expr) and not inputs:
                    dims.append(None)  # `2*S`: the translators work it out from the operands
                    continue
                if name is None:
                    raise Skip(f"an extent `{sym}` that is no dynamic dim of an input")
                dims.append(name)
            else:
                dims.append(int(d))
        return tuple(dims)


def numpy_of(t: torch.Tensor) -> np.ndarray[Any, Any]:
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.detach().cpu().float().numpy().astype(ml_dtypes.bfloat16)
    return np.ascontiguousarray(t.detach().cpu().numpy())


def np_dtype(dtype: np.dtype[Any]) -> str | None:
    from linnet.sourcegen.translate import numpy_dtype_name

    try:
        return numpy_dtype_name(dtype)
    except Exception:
        return None


# ---------------------------------------------------------------- helpers


def out_type(b: Builder, node: fx.Node) -> tuple[str | None, tuple[DimLike, ...]]:
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        raise Skip("a result that is not one tensor")
    return linnet_dtype(val.dtype), b.shape_of(val)


def result(b: Builder, node: fx.Node, op: str, inputs: Sequence[str], **attrs: Any) -> str:
    dtype, shape = out_type(b, node)
    name = b.emit(op, inputs, dtype, shape, attrs, out=node.name)
    b.names[node] = name
    return name


def linnet_node(b: Builder, node: fx.Node, op: str, inputs: Sequence[str], **attrs: Any) -> str:
    dtype, shape = out_type(b, node)
    name = b.emit(op, inputs, dtype, shape, attrs, domain="linnet", out=node.name)
    b.names[node] = name
    return name


def args_of(node: fx.Node) -> list[Any]:
    """The node's positional arguments (FX types them as a union; handlers check them)."""
    return list(node.args)


def kwargs_of(node: fx.Node) -> dict[str, Any]:
    return dict(node.kwargs)


def alias(b: Builder, node: fx.Node, arg: Any) -> None:
    b.names[node] = b.value(arg)


def operand(b: Builder, node: fx.Node, arg: Any, like: str | None) -> str:
    """A tensor argument, or a Python number as a constant of the result's dtype."""
    if isinstance(arg, fx.Node):
        return b.value(arg)
    if isinstance(arg, bool | int | float):
        dtype, _ = out_type(b, node)
        np_dtype = NUMPY.get(dtype or "")
        if np_dtype is None:
            raise Skip(f"a number operand for a {dtype} result")
        return b.const(np.array(arg, dtype=np_dtype))
    raise Skip(f"an operand {arg!r}")


NUMPY: dict[str, Any] = {
    "f16": np.float16,
    "f32": np.float32,
    "f64": np.float64,
    "i8": np.int8,
    "i16": np.int16,
    "i32": np.int32,
    "i64": np.int64,
    "u8": np.uint8,
    "bool": np.bool_,
}


def cast_to(b: Builder, name: str, dtype: str | None) -> str:
    """`name` cast to `dtype` when it differs."""
    info = b.graph.value_info.get(name)
    have = info.dtype if info else None
    if info is None:
        arr = b.graph.constants.get(name)
        have = None if arr is None else np_dtype(arr.dtype)
        if arr is not None and have != dtype and dtype in NUMPY:
            return b.const(arr.astype(NUMPY[dtype]))
    if have == dtype or dtype is None:
        return name
    shape = info.shape if info and info.shape is not None else ()
    return b.emit("Cast", [name], dtype, shape, {"to": onnx_dtype(dtype)})


def onnx_dtype(dtype: str) -> int:
    from linnet.onnx.importer.graph import DTYPES

    for code, name in DTYPES.items():
        if name == dtype:
            return int(code)
    raise Skip(f"no element type for {dtype}")


def binary(op: str) -> Callable[[Builder, fx.Node], None]:
    def fn(b: Builder, node: fx.Node) -> None:
        x, y = args_of(node)[0], args_of(node)[1]
        alpha = kwargs_of(node).get("alpha", 1)
        dtype, _ = out_type(b, node)
        compare = op in ("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or")
        want = common_dtype(b, node) if compare else dtype
        xs = cast_to(b, operand_like(b, node, x, want), want)
        ys = cast_to(b, operand_like(b, node, y, want), want)
        if alpha != 1:
            ys = (
                b.emit("Mul", [ys, operand_like(b, node, alpha, want)], want, b.info(y).shape or ())
                if isinstance(y, fx.Node)
                else operand_like(b, node, y * alpha, want)
            )
        result(b, node, op, [xs, ys])

    return fn


def common_dtype(b: Builder, node: fx.Node) -> str | None:
    """The dtype two compared operands meet at (torch's promotion, from the operands)."""
    dtypes = [b.info(a).dtype for a in args_of(node)[:2] if isinstance(a, fx.Node)]
    if not dtypes:
        return None
    floats = [d for d in dtypes if d and d.startswith(("f", "bf"))]
    if floats:
        return floats[0]
    if any(isinstance(a, float) for a in args_of(node)[:2]):
        return "f32"
    return dtypes[0]


def operand_like(b: Builder, node: fx.Node, arg: Any, dtype: str | None) -> str:
    if isinstance(arg, fx.Node):
        return b.value(arg)
    np_dtype = NUMPY.get(dtype or "")
    if np_dtype is None or not isinstance(arg, bool | int | float):
        raise Skip(f"an operand {arg!r}")
    return b.const(np.array(arg, dtype=np_dtype))


def unary(op: str) -> Callable[[Builder, fx.Node], None]:
    def fn(b: Builder, node: fx.Node) -> None:
        result(b, node, op, [b.value(args_of(node)[0])])

    return fn


def linnet_unary(op: str) -> Callable[[Builder, fx.Node], None]:
    def fn(b: Builder, node: fx.Node) -> None:
        linnet_node(b, node, op, [b.value(args_of(node)[0])])

    return fn


def static(dims: Sequence[DimLike]) -> list[int]:
    """`dims` as sizes; a symbolic or unknown extent refuses the node."""
    out: list[int] = []
    for d in dims:
        if not isinstance(d, int):
            raise Skip(f"a symbolic extent `{d}` where a size is needed")
        out.append(d)
    return out


def axis_of(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def aten_key(node: fx.Node) -> str:
    """`aten.add.Tensor` -> `add.Tensor`; other namespaces keep theirs."""
    target = str(node.target)
    return target.removeprefix("aten.")
