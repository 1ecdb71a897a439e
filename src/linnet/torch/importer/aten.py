"""ATen graph -> importer graph, in the shared (ONNX) operator vocabulary.

Stage: the torch importer's second step. In: a `Capture` (an exported
program, its weights' paths, its folded values). Out: a
`linnet.sourcegen.graph.Graph` whose nodes are ONNX-vocabulary operators
(`MatMul`, `Reshape`, `Softmax`, ...) and the `linnet` domain nodes pattern
recovery makes (`linear`, `layer_norm`, `rms_norm`, `silu`, `gelu`), so the
shared back half (`linnet.sourcegen`: recovery, naming, layout, translation,
refusals) reads a torch model exactly as it reads an ONNX one. Every ATen
operator maps to one or a few such nodes (`ATEN`); a node with no mapping, a
shape the capture could not fix, or a data-dependent value is collected as an
`Untranslated` entry with the `file.py:line` that made it, and the caller
refuses them all at once.

Values keep the FX node names (`linear_3`); weights are stored tensors named
by their state_dict paths, so the layout lays them out as the module tree
and the original checkpoint binds unchanged. Shapes come from each node's
`meta["val"]`; symbolic extents become the generic names of `capture.dims`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import fx

from linnet.records import record
from linnet.sourcegen.graph import DimLike, Graph, Node, TensorInfo
from linnet.torch.dtypes import linnet_dtype
from linnet.torch.importer.capture import Capture

OPSET = 18
"""The ONNX opset whose operator forms the emitted nodes take (axes as inputs)."""

_DROPPED = {
    "aten._assert_tensor_metadata.default",
    "aten._assert_scalar.default",
    "aten.sym_constrain_range_for_size.default",
    "aten._assert_async.msg",
}


@record(eq=False)
class Untranslated:
    """A node the importer cannot translate, with why and where it came from."""

    node: str
    op: str
    reason: str
    where: str


class Skip(Exception):
    """A node this mapping cannot translate (the message says why)."""


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


class Builder:
    """Fills a `Graph` while walking an exported program's nodes in order."""

    def __init__(self, cap: Capture) -> None:
        self.cap = cap
        self.graph = Graph(name="model", inputs=[], outputs=[], nodes=[])
        self.graph.opsets = {"": OPSET}
        self.names: dict[fx.Node, Any] = {}
        self.untranslated: list[Untranslated] = []
        self.scope = ""
        self.where = ""
        self._count = 0

    # ---------------------------------------------------------------- values

    def fresh(self, hint: str) -> str:
        self._count += 1
        return f"{hint}__{self._count}"

    def const(self, value: Any, dtype: np.dtype[Any] | type | None = None) -> str:
        """A compile-time constant: a name in `graph.constants`."""
        arr = np.asarray(value, dtype=dtype)
        name = self.fresh("const")
        self.constant(name, arr)
        return name

    def constant(self, name: str, arr: np.ndarray[Any, Any]) -> None:
        self.graph.constants[name] = arr
        self.graph.value_info[name] = TensorInfo(
            name, _np_dtype(arr.dtype), tuple(int(s) for s in arr.shape)
        )

    def ints(self, values: Sequence[int]) -> str:
        return self.const(np.array([int(v) for v in values], dtype=np.int64))

    def value(self, arg: Any) -> str:
        """The graph value an argument names (a folded value becomes a constant)."""
        if isinstance(arg, fx.Node):
            name = self.names.get(arg)
            if isinstance(name, str):
                return name
            if arg in self.cap.folded:
                folded = self.cap.folded[arg]
                if isinstance(folded, torch.Tensor):
                    self.constant(arg.name, _numpy(folded))
                    self.names[arg] = arg.name
                    return arg.name
            raise Skip(f"reads `{arg.name}`, which is not a tensor value here")
        raise Skip(f"expects a tensor, got {arg!r}")

    def info(self, arg: Any) -> TensorInfo:
        """The type of a tensor argument (from its `meta["val"]`)."""
        if isinstance(arg, fx.Node):
            name = self.value(arg)
            known = self.graph.value_info.get(name)
            if known is not None:
                return known
            arr = self.graph.constants.get(name)
            if arr is not None:
                return TensorInfo(name, _np_dtype(arr.dtype), tuple(int(s) for s in arr.shape))
        raise Skip("an argument of unknown type")

    def shape_of(self, val: Any) -> tuple[DimLike, ...]:
        dims: list[DimLike] = []
        for d in val.shape:
            if isinstance(d, torch.SymInt):
                expr = d.node.expr
                if getattr(expr, "is_number", False):
                    dims.append(int(expr))
                    continue
                sym = str(expr)
                name = self.cap.dims.get(sym)
                if name is None:
                    raise Skip(f"an extent `{sym}` that is no dynamic dim of an input")
                dims.append(name)
            else:
                dims.append(int(d))
        return tuple(dims)

    def emit(
        self,
        op: str,
        inputs: Sequence[str],
        dtype: str | None,
        shape: Sequence[DimLike],
        attrs: dict[str, Any] | None = None,
        domain: str = "",
        out: str | None = None,
    ) -> str:
        """Append one node with one output of type (`dtype`, `shape`)."""
        name = out or self.fresh(op.lower())
        self.graph.nodes.append(
            Node(
                op=op,
                domain=domain,
                name=name,
                inputs=tuple(inputs),
                outputs=(name,),
                attrs={**(attrs or {}), **({"_where": self.where} if self.where else {})},
                opset=OPSET if domain == "" else 1,
                scope=self.scope,
            )
        )
        self.graph.value_info[name] = TensorInfo(name, dtype, tuple(shape))
        return name


def _numpy(t: torch.Tensor) -> np.ndarray[Any, Any]:
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.detach().cpu().float().numpy().astype(ml_dtypes.bfloat16)
    return np.ascontiguousarray(t.detach().cpu().numpy())


def _np_dtype(dtype: np.dtype[Any]) -> str | None:
    from linnet.sourcegen.translate import numpy_dtype_name

    try:
        return numpy_dtype_name(dtype)
    except Exception:
        return None


# ---------------------------------------------------------------- the walk


def aten_graph(cap: Capture, scopes: dict[str, str]) -> tuple[Graph, list[Untranslated]]:
    """The importer graph of `cap` and the nodes it could not translate."""
    b = Builder(cap)
    g = b.graph
    for path in cap.weights.values():
        g.initializers[path] = _numpy(cap.tensors[path])
    fx_graph = cap.program.graph_module.graph
    live = _live(fx_graph)
    dead: set[fx.Node] = set()
    for node in fx_graph.nodes:
        if node not in live:
            continue  # computes nothing the results read (a pooled output not returned)
        if node.op == "placeholder":
            if node.name in cap.weights:
                path = cap.weights[node.name]
                b.names[node] = path
                arr = g.initializers[path]
                g.value_info[path] = TensorInfo(
                    path, _np_dtype(arr.dtype), tuple(int(s) for s in arr.shape)
                )
            elif node.name in cap.inputs:
                val = node.meta.get("val")
                if not isinstance(val, torch.Tensor):
                    b.untranslated.append(
                        Untranslated(node.name, "input", "inputs must be tensors", "")
                    )
                    continue
                try:
                    info = TensorInfo(node.name, linnet_dtype(val.dtype), b.shape_of(val))
                except Skip as exc:
                    b.untranslated.append(Untranslated(node.name, "input", str(exc), ""))
                    continue
                g.inputs.append(info)
                g.value_info[node.name] = info
                b.names[node] = node.name
            continue
        if node.op == "output":
            if not b.untranslated:
                _outputs(b, node)
            continue
        if node.op != "call_function":
            b.untranslated.append(
                Untranslated(node.name, str(node.op), "not an operator call", source_line(node))
            )
            continue
        if node in cap.folded:
            continue  # materialised as a constant where a translated node reads it
        target = str(node.target)
        if target in _DROPPED:
            continue
        if any(d in dead for d in node.all_input_nodes):
            dead.add(node)  # downstream of a refused node: its cause is reported
            if _key(node) not in ATEN and target not in _DROPPED:
                b.untranslated.append(Untranslated(node.name, target,
                                                   "no translation for this operator",
                                                   source_line(node)))  # fmt: skip
            continue
        b.scope = _scope(node, scopes)
        b.where = source_line(node)
        fn = ATEN.get(_key(node))
        if fn is None:
            dead.add(node)
            b.untranslated.append(
                Untranslated(
                    node.name, target, "no translation for this operator", source_line(node)
                )
            )
            continue
        mark = len(g.nodes)
        try:
            fn(b, node)
        except Skip as exc:
            del g.nodes[mark:]
            dead.add(node)
            b.untranslated.append(Untranslated(node.name, target, str(exc), source_line(node)))
    return g, b.untranslated


def _live(graph: fx.Graph) -> set[fx.Node]:
    """The nodes the output reads, directly or not, and every placeholder."""
    live: set[fx.Node] = set()
    todo = [n for n in graph.nodes if n.op in ("output", "placeholder")]
    while todo:
        node = todo.pop()
        if node in live:
            continue
        live.add(node)
        todo.extend(node.all_input_nodes)
    return live


def _outputs(b: Builder, node: fx.Node) -> None:
    (results,) = _a(node)
    flat = list(results) if isinstance(results, list | tuple) else [results]
    user = b.cap.program.graph_signature.user_outputs
    for i, r in enumerate(flat):
        if not isinstance(r, fx.Node):
            b.untranslated.append(Untranslated("output", "output", "a non-tensor result", ""))
            continue
        if i >= len(user):
            b.untranslated.append(
                Untranslated(r.name, "output", "a buffer mutation (state) is not imported", "")
            )
            continue
        try:
            name = b.value(r)
            info = b.info(r)
        except Skip as exc:
            b.untranslated.append(Untranslated(r.name, "output", str(exc), ""))
            continue
        b.graph.outputs.append(TensorInfo(name, info.dtype, info.shape))


def _scope(node: fx.Node, scopes: dict[str, str]) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path = list(stack.values())[-1][0]
    return str(path) if isinstance(path, str) else ""


def _key(node: fx.Node) -> str:
    """`aten.add.Tensor` -> `add.Tensor`; other namespaces keep theirs."""
    target = str(node.target)
    return target.removeprefix("aten.")


# ---------------------------------------------------------------- helpers


def _out(b: Builder, node: fx.Node) -> tuple[str | None, tuple[DimLike, ...]]:
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        raise Skip("a result that is not one tensor")
    return linnet_dtype(val.dtype), b.shape_of(val)


def _result(b: Builder, node: fx.Node, op: str, inputs: Sequence[str], **attrs: Any) -> str:
    dtype, shape = _out(b, node)
    name = b.emit(op, inputs, dtype, shape, attrs, out=node.name)
    b.names[node] = name
    return name


def _linnet(b: Builder, node: fx.Node, op: str, inputs: Sequence[str], **attrs: Any) -> str:
    dtype, shape = _out(b, node)
    name = b.emit(op, inputs, dtype, shape, attrs, domain="linnet", out=node.name)
    b.names[node] = name
    return name


def _a(node: fx.Node) -> list[Any]:
    """The node's positional arguments (FX types them as a union; handlers check them)."""
    return list(node.args)


def _k(node: fx.Node) -> dict[str, Any]:
    return dict(node.kwargs)


def _alias(b: Builder, node: fx.Node, arg: Any) -> None:
    b.names[node] = b.value(arg)


def _operand(b: Builder, node: fx.Node, arg: Any, like: str | None) -> str:
    """A tensor argument, or a Python number as a constant of the result's dtype."""
    if isinstance(arg, fx.Node):
        return b.value(arg)
    if isinstance(arg, bool | int | float):
        dtype, _ = _out(b, node)
        np_dtype = _NUMPY.get(dtype or "")
        if np_dtype is None:
            raise Skip(f"a number operand for a {dtype} result")
        return b.const(np.array(arg, dtype=np_dtype))
    raise Skip(f"an operand {arg!r}")


_NUMPY: dict[str, Any] = {
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


def _cast_to(b: Builder, name: str, dtype: str | None) -> str:
    """`name` cast to `dtype` when it differs."""
    info = b.graph.value_info.get(name)
    have = info.dtype if info else None
    if info is None:
        arr = b.graph.constants.get(name)
        have = None if arr is None else _np_dtype(arr.dtype)
        if arr is not None and have != dtype and dtype in _NUMPY:
            return b.const(arr.astype(_NUMPY[dtype]))
    if have == dtype or dtype is None:
        return name
    shape = info.shape if info and info.shape is not None else ()
    return b.emit("Cast", [name], dtype, shape, {"to": _onnx_dtype(dtype)})


def _onnx_dtype(dtype: str) -> int:
    from linnet.onnx.importer.graph import DTYPES

    for code, name in DTYPES.items():
        if name == dtype:
            return int(code)
    raise Skip(f"no element type for {dtype}")


def _binary(op: str) -> Callable[[Builder, fx.Node], None]:
    def fn(b: Builder, node: fx.Node) -> None:
        x, y = _a(node)[0], _a(node)[1]
        alpha = _k(node).get("alpha", 1)
        dtype, _ = _out(b, node)
        compare = op in ("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or")
        want = _common_dtype(b, node) if compare else dtype
        xs = _cast_to(b, _operand_like(b, node, x, want), want)
        ys = _cast_to(b, _operand_like(b, node, y, want), want)
        if alpha != 1:
            ys = (
                b.emit(
                    "Mul", [ys, _operand_like(b, node, alpha, want)], want, b.info(y).shape or ()
                )
                if isinstance(y, fx.Node)
                else _operand_like(b, node, y * alpha, want)
            )
        _result(b, node, op, [xs, ys])

    return fn


def _common_dtype(b: Builder, node: fx.Node) -> str | None:
    """The dtype two compared operands meet at (torch's promotion, from the operands)."""
    dtypes = [b.info(a).dtype for a in _a(node)[:2] if isinstance(a, fx.Node)]
    if not dtypes:
        return None
    floats = [d for d in dtypes if d and d.startswith(("f", "bf"))]
    if floats:
        return floats[0]
    if any(isinstance(a, float) for a in _a(node)[:2]):
        return "f32"
    return dtypes[0]


def _operand_like(b: Builder, node: fx.Node, arg: Any, dtype: str | None) -> str:
    if isinstance(arg, fx.Node):
        return b.value(arg)
    np_dtype = _NUMPY.get(dtype or "")
    if np_dtype is None or not isinstance(arg, bool | int | float):
        raise Skip(f"an operand {arg!r}")
    return b.const(np.array(arg, dtype=np_dtype))


def _unary(op: str) -> Callable[[Builder, fx.Node], None]:
    def fn(b: Builder, node: fx.Node) -> None:
        _result(b, node, op, [b.value(_a(node)[0])])

    return fn


def _linnet_unary(op: str) -> Callable[[Builder, fx.Node], None]:
    def fn(b: Builder, node: fx.Node) -> None:
        _linnet(b, node, op, [b.value(_a(node)[0])])

    return fn


def _static(dims: Sequence[DimLike]) -> list[int]:
    """`dims` as sizes; a symbolic or unknown extent refuses the node."""
    out: list[int] = []
    for d in dims:
        if not isinstance(d, int):
            raise Skip(f"a symbolic extent `{d}` where a size is needed")
        out.append(d)
    return out


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


# ---------------------------------------------------------------- operators


def _rsqrt(b: Builder, node: fx.Node) -> None:
    dtype, shape = _out(b, node)
    root = b.emit("Sqrt", [b.value(_a(node)[0])], dtype, shape)
    _result(b, node, "Reciprocal", [root])


def _pow(b: Builder, node: fx.Node) -> None:
    x, y = _a(node)[0], _a(node)[1]
    if not isinstance(x, fx.Node):
        raise Skip("a number raised to a tensor power")
    _result(b, node, "Pow", [b.value(x), _operand(b, node, y, None)])


def _div(b: Builder, node: fx.Node) -> None:
    mode = _k(node).get("rounding_mode")
    if mode is not None:
        raise Skip(f"division with rounding_mode={mode!r}")
    _binary("Div")(b, node)


def _reduce(op: str) -> Callable[[Builder, fx.Node], None]:
    def fn(b: Builder, node: fx.Node) -> None:
        x = _a(node)[0]
        rank = len(b.info(x).shape or ())
        dims = _a(node)[1] if len(_a(node)) > 1 else _k(node).get("dim")
        keep = _a(node)[2] if len(_a(node)) > 2 else _k(node).get("keepdim", False)
        if _k(node).get("dtype") is not None:
            raise Skip("a reduction with a dtype")
        axes = (
            list(range(rank))
            if dims in (None, [])
            else [_axis(int(d), rank) for d in (dims if isinstance(dims, list | tuple) else [dims])]
        )
        _result(b, node, op, [b.value(x), b.ints(axes)], keepdims=int(bool(keep)))

    return fn


def _amax(b: Builder, node: fx.Node) -> None:
    _reduce("ReduceMax")(b, node)


def _cast(b: Builder, node: fx.Node) -> None:
    x = _a(node)[0]
    dtype, _ = _out(b, node)
    if dtype is None:
        raise Skip("a dtype Linnet lacks")
    src = b.value(x)
    if b.info(x).dtype == dtype:
        b.names[node] = src
        return
    _result(b, node, "Cast", [src], to=_onnx_dtype(dtype))


def _identity(b: Builder, node: fx.Node) -> None:
    _alias(b, node, _a(node)[0])


def _reshape(b: Builder, node: fx.Node) -> None:
    x = _a(node)[0]
    _, shape = _out(b, node)
    if b.info(x).shape == shape:
        _alias(b, node, x)
        return
    if not all(isinstance(d, int) for d in shape):
        target = _shape_value(b, node, shape)
    else:
        target = b.ints(_static(shape))
    _result(b, node, "Reshape", [b.value(x), target])


def _shape_value(b: Builder, node: fx.Node, shape: Sequence[DimLike]) -> str:
    """A 1-D i64 value holding `shape`, symbolic extents read from the inputs' shapes."""
    parts: list[str] = []
    for d in shape:
        if isinstance(d, int):
            parts.append(b.ints([d]))
            continue
        src = _input_axis(b, d)
        if src is None:
            raise Skip(f"an extent `{d}` no input carries")
        name, axis = src
        rank = len(b.graph.value_info[name].shape or ())
        whole = b.emit("Shape", [name], "i64", (rank,))
        parts.append(b.emit("Gather", [whole, b.ints([axis])], "i64", (1,), {"axis": 0}))
    if len(parts) == 1:
        return parts[0]
    return b.emit("Concat", parts, "i64", (len(parts),), {"axis": 0})


def _input_axis(b: Builder, dim: DimLike) -> tuple[str, int] | None:
    for info in b.graph.inputs:
        for axis, d in enumerate(info.shape or ()):
            if d == dim:
                return info.name, axis
    return None


def _permute(b: Builder, node: fx.Node) -> None:
    x = _a(node)[0]
    rank = len(b.info(x).shape or ())
    perm = [_axis(int(p), rank) for p in _a(node)[1]]
    if perm == list(range(rank)):
        _alias(b, node, x)
        return
    _result(b, node, "Transpose", [b.value(x)], perm=perm)


def _transpose(b: Builder, node: fx.Node) -> None:
    x = _a(node)[0]
    rank = len(b.info(x).shape or ())
    a, c = _axis(int(_a(node)[1]), rank), _axis(int(_a(node)[2]), rank)
    perm = list(range(rank))
    perm[a], perm[c] = perm[c], perm[a]
    if a == c:
        _alias(b, node, x)
        return
    _result(b, node, "Transpose", [b.value(x)], perm=perm)


def _t(b: Builder, node: fx.Node) -> None:
    x = _a(node)[0]
    if len(b.info(x).shape or ()) < 2:
        _alias(b, node, x)
        return
    _result(b, node, "Transpose", [b.value(x)], perm=[1, 0])


def _unsqueeze(b: Builder, node: fx.Node) -> None:
    _, shape = _out(b, node)
    axis = _axis(int(_a(node)[1]), len(shape))
    _result(b, node, "Unsqueeze", [b.value(_a(node)[0]), b.ints([axis])])


def _squeeze(b: Builder, node: fx.Node) -> None:
    x = _a(node)[0]
    shape = b.info(x).shape or ()
    dims = _a(node)[1] if len(_a(node)) > 1 else None
    if dims is None:
        axes = [i for i, d in enumerate(shape) if d == 1]
    else:
        listed = dims if isinstance(dims, list | tuple) else [dims]
        axes = [_axis(int(d), len(shape)) for d in listed]
        axes = [a for a in axes if shape[a] == 1]
    if not axes:
        _alias(b, node, x)
        return
    _result(b, node, "Squeeze", [b.value(x), b.ints(axes)])


def _expand(b: Builder, node: fx.Node) -> None:
    x = _a(node)[0]
    _, shape = _out(b, node)
    if b.info(x).shape == shape:
        _alias(b, node, x)
        return
    target = (
        b.ints(_static(shape))
        if all(isinstance(d, int) for d in shape)
        else _shape_value(b, node, shape)
    )
    _result(b, node, "Expand", [b.value(x), target])


def _slice(b: Builder, node: fx.Node) -> None:
    x = _a(node)[0]
    shape = b.info(x).shape or ()
    args = list(_a(node)) + [None] * 5
    dim = int(args[1] or 0)
    start = args[2] if args[2] is not None else 0
    end = args[3] if args[3] is not None else 2**63 - 1
    step = int(args[4] or 1)
    axis = _axis(dim, len(shape))
    if not isinstance(start, int) or not isinstance(end, int):
        raise Skip("slice bounds that depend on a dynamic dim")
    extent = shape[axis]
    if start == 0 and step == 1 and (end >= 2**62 or (isinstance(extent, int) and end >= extent)):
        _alias(b, node, x)
        return
    _result(
        b,
        node,
        "Slice",
        [
            b.value(x),
            b.ints([start]),
            b.ints([min(end, 2**63 - 1)]),
            b.ints([axis]),
            b.ints([step]),
        ],
    )


def _select(b: Builder, node: fx.Node) -> None:
    x = _a(node)[0]
    rank = len(b.info(x).shape or ())
    axis = _axis(int(_a(node)[1]), rank)
    index = int(_a(node)[2])
    _result(b, node, "Gather", [b.value(x), b.const(np.array(index, dtype=np.int64))], axis=axis)


def _cat(b: Builder, node: fx.Node) -> None:
    parts = [p for p in _a(node)[0] if isinstance(p, fx.Node)]
    _, shape = _out(b, node)
    dim = int(_a(node)[1]) if len(_a(node)) > 1 else int(_k(node).get("dim", 0))
    axis = _axis(dim, len(shape))
    names = [b.value(p) for p in parts if 0 not in (b.info(p).shape or ())]
    if len(names) == 1:
        b.names[node] = names[0]
        return
    _result(b, node, "Concat", names, axis=axis)


def _split(b: Builder, node: fx.Node) -> None:
    x = _a(node)[0]
    shape = b.info(x).shape or ()
    vals = node.meta.get("val")
    if not isinstance(vals, list | tuple):
        raise Skip("a split without known pieces")
    dim = int(_a(node)[2]) if len(_a(node)) > 2 else int(_k(node).get("dim", 0))
    axis = _axis(dim, len(shape))
    sizes = [int(v.shape[axis]) for v in vals]
    outs = []
    for i, v in enumerate(vals):
        outs.append(f"{node.name}__{i}")
        b.graph.value_info[outs[-1]] = TensorInfo(outs[-1], linnet_dtype(v.dtype), b.shape_of(v))
    b.graph.nodes.append(
        Node(
            "Split",
            "",
            node.name,
            (b.value(x), b.ints(sizes)),
            tuple(outs),
            {"axis": axis},
            OPSET,
            b.scope,
        )
    )
    b.names[node] = outs


def _getitem(b: Builder, node: fx.Node) -> None:
    src, index = _a(node)[0], _a(node)[1]
    names = b.names.get(src)
    if not isinstance(names, list) or not isinstance(index, int):
        raise Skip("an item of a value that is not a list of tensors")
    b.names[node] = names[index]


def _linear(b: Builder, node: fx.Node) -> None:
    x, w = _a(node)[0], _a(node)[1]
    bias = _a(node)[2] if len(_a(node)) > 2 else None
    _linnet(b, node, "linear", [b.value(x), b.value(w), b.value(bias) if bias is not None else ""])


def _addmm(b: Builder, node: fx.Node) -> None:
    bias, x, w = _a(node)[0], _a(node)[1], _a(node)[2]
    beta = _k(node).get("beta", 1)
    alpha = _k(node).get("alpha", 1)
    _result(b, node, "Gemm", [b.value(x), b.value(w), b.value(bias)], alpha=float(alpha),
            beta=float(beta))  # fmt: skip


def _matmul(b: Builder, node: fx.Node) -> None:
    _result(b, node, "MatMul", [b.value(_a(node)[0]), b.value(_a(node)[1])])


def _embedding(b: Builder, node: fx.Node) -> None:
    w, ids = _a(node)[0], _a(node)[1]
    if b.info(ids).shape == ():
        _result(b, node, "Gather", [b.value(w), b.value(ids)], axis=0)
        return
    _linnet(b, node, "lookup", [b.value(w), b.value(ids)])


def _softmax(b: Builder, node: fx.Node) -> None:
    x = _a(node)[0]
    rank = len(b.info(x).shape or ())
    axis = _axis(int(_a(node)[1]), rank)
    src = b.value(x)
    dtype, _ = _out(b, node)
    src = _cast_to(b, src, dtype)
    _result(b, node, "Softmax", [src], axis=axis)


def _layer_norm(b: Builder, node: fx.Node) -> None:
    args = list(_a(node)) + [None] * 5
    x, shape, w, bias = args[0], args[1], args[2], args[3]
    eps = float(args[4] if args[4] is not None else _k(node).get("eps", 1e-5))
    if len(shape) != 1:
        raise Skip("layer norm over more than the last axis")
    _linnet(b, node, "layer_norm", [b.value(x), b.value(w) if w is not None else "",
            b.value(bias) if bias is not None else ""], eps=eps)  # fmt: skip


def _rms_norm(b: Builder, node: fx.Node) -> None:
    args = list(_a(node)) + [None] * 4
    x, shape, w, eps = args[0], args[1], args[2], args[3]
    if len(shape) != 1 or w is None:
        raise Skip("RMS norm over more than the last axis, or without a weight")
    if eps is None:
        eps = float(torch.finfo(torch.float32).eps)
    _linnet(b, node, "rms_norm", [b.value(x), b.value(w)], eps=float(eps))


def _gelu(b: Builder, node: fx.Node) -> None:
    approx = _k(node).get("approximate", _a(node)[1] if len(_a(node)) > 1 else "none")
    _linnet(b, node, "gelu" if approx == "tanh" else "gelu_erf", [b.value(_a(node)[0])])


def _sdpa(b: Builder, node: fx.Node) -> None:
    args = list(_a(node)) + [None] * 6
    q, k, v = args[0], args[1], args[2]
    mask = args[3] if args[3] is not None else _k(node).get("attn_mask")
    dropout = args[4] if args[4] is not None else _k(node).get("dropout_p", 0.0)
    causal = args[5] if args[5] is not None else _k(node).get("is_causal", False)
    scale = _k(node).get("scale")
    if _k(node).get("enable_gqa"):
        raise Skip("attention with enable_gqa")
    if dropout:
        raise Skip("attention with dropout")
    qi, ki = b.info(q), b.info(k)
    qs, ks = qi.shape or (), ki.shape or ()
    rank = len(ks)
    if rank < 2 or len(qs) != rank:
        raise Skip("attention operands of different ranks")
    dtype = qi.dtype
    perm = list(range(rank))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    kt = b.emit("Transpose", [b.value(k)], dtype, (*ks[:-2], ks[-1], ks[-2]), {"perm": perm})
    score_shape = (*qs[:-1], ks[-2])
    scores = b.emit("MatMul", [b.value(q), kt], dtype, score_shape)
    if scale is None:
        head = qs[-1]
        if not isinstance(head, int):
            raise Skip("a symbolic head size")
        scale = 1.0 / math.sqrt(head)
    np_dtype = _NUMPY[dtype or "f32"]
    scaled = b.emit("Mul", [scores, b.const(np.array(scale, dtype=np_dtype))], dtype, score_shape)
    if causal:
        rows, cols = qs[-2], ks[-2]
        if not isinstance(rows, int) or not isinstance(cols, int):
            raise Skip("a causal mask over a symbolic length")
        tri = np.tril(np.ones((rows, cols), dtype=bool), cols - rows)
        mask_name: str | None = b.const(tri)
        mask_dtype: str | None = "bool"
    elif mask is not None:
        mask_name, mask_dtype = b.value(mask), b.info(mask).dtype
    else:
        mask_name = mask_dtype = None
    if mask_name is not None:
        if mask_dtype == "bool":
            zero = b.const(np.array(0.0, dtype=np_dtype))
            fill = b.const(np.array(-np.inf, dtype=np_dtype))
            mshape = b.graph.value_info[mask_name].shape if mask_name in b.graph.value_info else (
                tuple(b.graph.constants[mask_name].shape))  # fmt: skip
            additive = b.emit("Where", [mask_name, zero, fill], dtype, mshape or ())
        else:
            additive = mask_name
        scaled = b.emit("Add", [scaled, additive], dtype, score_shape)
    probs = b.emit("Softmax", [scaled], dtype, score_shape, {"axis": rank - 1})
    _result(b, node, "MatMul", [probs, b.value(v)])


def _conv(b: Builder, node: fx.Node) -> None:
    key = _key(node)
    args = list(_a(node)) + [None] * 9
    x, w, bias = args[0], args[1], args[2]
    if key.startswith("convolution"):
        stride, padding, dilation, transposed, _, groups = args[3:9]
        if transposed:
            raise Skip("transposed convolution")
    else:
        stride, padding, dilation, groups = args[3], args[4], args[5], args[6]
    ws = b.info(w).shape or ()
    spatial = len(ws) - 2
    stride = _per_axis(stride if stride is not None else 1, spatial)
    dilation = _per_axis(dilation if dilation is not None else 1, spatial)
    if isinstance(padding, str):
        raise Skip(f"padding={padding!r}")
    pads = _per_axis(padding if padding is not None else 0, spatial)
    inputs = [b.value(x), b.value(w)] + ([b.value(bias)] if bias is not None else [])
    _result(b, node, "Conv", inputs, strides=stride, pads=pads + pads, dilations=dilation,
            group=int(groups or 1), kernel_shape=_static(ws[2:]))  # fmt: skip


def _per_axis(value: Any, n: int) -> list[int]:
    if isinstance(value, int):
        return [value] * n
    values = [int(v) for v in value]
    return values * n if len(values) == 1 else values


def _max_pool(b: Builder, node: fx.Node) -> None:
    args = list(_a(node)) + [None] * 6
    x, kernel, stride, padding, dilation, ceil = args[:6]
    n = len(kernel)
    k = _per_axis(kernel, n)
    s = _per_axis(stride if stride else kernel, n)
    p = _per_axis(padding if padding is not None else 0, n)
    d = _per_axis(dilation if dilation is not None else 1, n)
    _result(b, node, "MaxPool", [b.value(x)], kernel_shape=k, strides=s, pads=p + p,
            dilations=d, ceil_mode=int(bool(ceil)))  # fmt: skip


def _avg_pool(b: Builder, node: fx.Node) -> None:
    args = list(_a(node)) + [None] * 7
    x, kernel, stride, padding, ceil, include, divisor = args[:7]
    if divisor is not None:
        raise Skip("average pooling with a divisor_override")
    n = len(kernel)
    k = _per_axis(kernel, n)
    s = _per_axis(stride if stride else kernel, n)
    p = _per_axis(padding if padding is not None else 0, n)
    _result(b, node, "AveragePool", [b.value(x)], kernel_shape=k, strides=s, pads=p + p,
            ceil_mode=int(bool(ceil)), count_include_pad=int(include is None or bool(include)))  # fmt: skip


def _adaptive_avg_pool(b: Builder, node: fx.Node) -> None:
    x = _a(node)[0]
    size = [int(s) for s in _a(node)[1]]
    shape = b.info(x).shape or ()
    spatial = shape[-len(size) :]
    if all(s == 1 for s in size):
        _result(b, node, "GlobalAveragePool", [b.value(x)])
        return
    if not all(isinstance(e, int) and e % s == 0 for e, s in zip(spatial, size, strict=True)):
        raise Skip("adaptive pooling whose windows differ in size")
    k = [e // s for e, s in zip(_static(spatial), size, strict=True)]
    _result(
        b, node, "AveragePool", [b.value(x)], kernel_shape=k, strides=k, pads=[0] * (2 * len(k))
    )


def _batch_norm(b: Builder, node: fx.Node) -> None:
    args = list(_a(node)) + [None] * 8
    key = _key(node)
    if key.startswith("_native_batch_norm_legit_no_training"):
        x, w, bias, mean, var, _, eps = args[:7]
    else:
        x, w, bias, mean, var, training, _, eps = args[:8]
        if training:
            raise Skip("batch norm in training mode")
    vals = node.meta.get("val")
    first = vals[0] if isinstance(vals, list | tuple) else vals
    if not isinstance(first, torch.Tensor):
        raise Skip("batch norm without a known result")
    dtype = linnet_dtype(first.dtype)
    shape = b.shape_of(first)
    c = (b.info(x).shape or (None, None))[1]
    np_dtype = _NUMPY[dtype or "f32"]
    ones = w is None and b.const(np.ones(tuple(_static([c])), dtype=np_dtype))
    zeros = bias is None and b.const(np.zeros(tuple(_static([c])), dtype=np_dtype))
    name = b.emit("BatchNormalization", [b.value(x), ones or b.value(w), zeros or b.value(bias),
                  b.value(mean), b.value(var)], dtype, shape, {"epsilon": float(eps or 1e-5)},
                  out=node.name)  # fmt: skip
    b.names[node] = [name, "", ""] if isinstance(vals, list | tuple) else name


def _where(b: Builder, node: fx.Node) -> None:
    cond, x, y = _a(node)[0], _a(node)[1], _a(node)[2]
    dtype, _ = _out(b, node)
    _result(b, node, "Where", [b.value(cond), _cast_to(b, _operand_like(b, node, x, dtype), dtype),
            _cast_to(b, _operand_like(b, node, y, dtype), dtype)])  # fmt: skip


def _masked_fill(b: Builder, node: fx.Node) -> None:
    x, mask, value = _a(node)[0], _a(node)[1], _a(node)[2]
    dtype, _ = _out(b, node)
    fill = _operand_like(b, node, value, dtype)
    _result(b, node, "Where", [b.value(mask), fill, b.value(x)])


def _flatten(b: Builder, node: fx.Node) -> None:
    _reshape(b, node)


def _clamp(b: Builder, node: fx.Node) -> None:
    args = list(_a(node)) + [None] * 3
    x, lo, hi = args[0], args[1], args[2]
    dtype, _ = _out(b, node)
    _result(b, node, "Clip", [b.value(x), "" if lo is None else _operand_like(b, node, lo, dtype),
            "" if hi is None else _operand_like(b, node, hi, dtype)])  # fmt: skip


def _hardtanh(b: Builder, node: fx.Node) -> None:
    args = list(_a(node)) + [None] * 3
    lo = -1.0 if args[1] is None else args[1]
    hi = 1.0 if args[2] is None else args[2]
    dtype, _ = _out(b, node)
    _result(b, node, "Clip", [b.value(args[0]), _operand_like(b, node, lo, dtype),
            _operand_like(b, node, hi, dtype)])  # fmt: skip


def _leaky_relu(b: Builder, node: fx.Node) -> None:
    slope = _a(node)[1] if len(_a(node)) > 1 else 0.01
    _result(b, node, "LeakyRelu", [b.value(_a(node)[0])], alpha=float(slope))


def _fill_like(value: float) -> Callable[[Builder, fx.Node], None]:
    def fn(b: Builder, node: fx.Node) -> None:
        dtype, shape = _out(b, node)
        if not all(isinstance(d, int) for d in shape):
            raise Skip("a filled tensor of a symbolic shape")
        _result(b, node, "Identity", [b.const(np.full(shape, value, dtype=_NUMPY[dtype or "f32"]))])

    return fn


def _rsub(b: Builder, node: fx.Node) -> None:
    """`other - x` (`torch.rsub`, what `1 - mask` exports as)."""
    x, other = _a(node)[0], _a(node)[1]
    dtype, _ = _out(b, node)
    _result(b, node, "Sub", [_operand_like(b, node, other, dtype), _cast_to(b, b.value(x), dtype)])


def _index(b: Builder, node: fx.Node) -> None:
    """`x[idx...]` with index tensors (None for a whole axis) -> `linnet::index`."""
    x, indices = _a(node)[0], list(_a(node)[1])
    while indices and indices[-1] is None:
        indices.pop()
    first = 0
    while first < len(indices) and indices[first] is None:
        first += 1
    tensors = indices[first:]
    if not tensors or any(not isinstance(t, fx.Node) for t in tensors):
        raise Skip("index tensors on axes that are not consecutive")
    if any(b.info(t).dtype == "bool" for t in tensors):
        raise Skip("a boolean mask index (a data-dependent shape)")
    _linnet(b, node, "index", [b.value(x), *(b.value(t) for t in tensors)], first=first)


def _ne(b: Builder, node: fx.Node) -> None:
    """`x != y` as `Not(Equal(x, y))` (ONNX has no not-equal)."""
    x, y = _a(node)[0], _a(node)[1]
    want = _common_dtype(b, node)
    xs = _cast_to(b, _operand_like(b, node, x, want), want)
    ys = _cast_to(b, _operand_like(b, node, y, want), want)
    _, shape = _out(b, node)
    same = b.emit("Equal", [xs, ys], "bool", shape)
    _result(b, node, "Not", [same])


def _cumsum(b: Builder, node: fx.Node) -> None:
    x = _a(node)[0]
    if _k(node).get("dtype") is not None:
        raise Skip("a running sum with a dtype")
    rank = len(b.info(x).shape or ())
    axis = _axis(int(_a(node)[1]), rank)
    dtype, _ = _out(b, node)
    src = _cast_to(b, b.value(x), dtype)
    _result(b, node, "CumSum", [src, b.const(np.array(axis, dtype=np.int64))])


def _gather(b: Builder, node: fx.Node) -> None:
    """`torch.gather(x, dim, index)`: ONNX `GatherElements`."""
    x, dim, index = _a(node)[0], _a(node)[1], _a(node)[2]
    rank = len(b.info(x).shape or ())
    _result(b, node, "GatherElements", [b.value(x), b.value(index)], axis=_axis(int(dim), rank))


def _argmax(b: Builder, node: fx.Node) -> None:
    args = [*_a(node), None, None]
    x, dim, keep = args[0], args[1], args[2]
    if dim is None:
        raise Skip("an argmax over the flattened tensor")
    rank = len(b.info(x).shape or ())
    axis = _axis(int(dim), rank)
    _result(b, node, "ArgMax", [b.value(x)], axis=axis, keepdims=int(bool(keep)))


def _sym_size(b: Builder, node: fx.Node) -> None:
    """An extent read as a number: nothing to emit; the nodes that take it (`view`,
    `expand`) read their result shapes from `meta["val"]`, where it is a generic.
    A node reading it as a tensor is refused (`Builder.value`)."""
    b.names[node] = ("extent", node.name)


Handler = Callable[[Builder, fx.Node], None]

ATEN: dict[str, Handler] = {
    "add.Tensor": _binary("Add"),
    "add.Scalar": _binary("Add"),
    "sub.Tensor": _binary("Sub"),
    "sub.Scalar": _binary("Sub"),
    "rsub.Scalar": _rsub,
    "mul.Tensor": _binary("Mul"),
    "mul.Scalar": _binary("Mul"),
    "div.Tensor": _div,
    "div.Scalar": _div,
    "div.Tensor_mode": _div,
    "pow.Tensor_Scalar": _pow,
    "pow.Tensor_Tensor": _pow,
    "maximum.default": _binary("Max"),
    "remainder.Scalar": _binary("Mod"),
    "remainder.Tensor": _binary("Mod"),
    "minimum.default": _binary("Min"),
    "eq.Tensor": _binary("Equal"),
    "eq.Scalar": _binary("Equal"),
    "lt.Tensor": _binary("Less"),
    "lt.Scalar": _binary("Less"),
    "le.Tensor": _binary("LessOrEqual"),
    "le.Scalar": _binary("LessOrEqual"),
    "gt.Tensor": _binary("Greater"),
    "gt.Scalar": _binary("Greater"),
    "ge.Tensor": _binary("GreaterOrEqual"),
    "ge.Scalar": _binary("GreaterOrEqual"),
    "__and__.Tensor": _binary("And"),
    "logical_and.default": _binary("And"),
    "bitwise_and.Tensor": _binary("And"),
    "__or__.Tensor": _binary("Or"),
    "logical_or.default": _binary("Or"),
    "logical_not.default": _unary("Not"),
    "bitwise_not.default": _unary("Not"),
    "neg.default": _unary("Neg"),
    "abs.default": _unary("Abs"),
    "exp.default": _unary("Exp"),
    "log.default": _unary("Log"),
    "sqrt.default": _unary("Sqrt"),
    "rsqrt.default": _rsqrt,
    "reciprocal.default": _unary("Reciprocal"),
    "sin.default": _unary("Sin"),
    "cos.default": _unary("Cos"),
    "tanh.default": _unary("Tanh"),
    "erf.default": _unary("Erf"),
    "sigmoid.default": _unary("Sigmoid"),
    "relu.default": _unary("Relu"),
    "relu_.default": _unary("Relu"),
    "silu.default": _linnet_unary("silu"),
    "silu_.default": _linnet_unary("silu"),
    "gelu.default": _gelu,
    "hardtanh.default": _hardtanh,
    "leaky_relu.default": _leaky_relu,
    "clamp.default": _clamp,
    "mean.dim": _reduce("ReduceMean"),
    "mean.default": _reduce("ReduceMean"),
    "sum.dim_IntList": _reduce("ReduceSum"),
    "sum.default": _reduce("ReduceSum"),
    "amax.default": _amax,
    "to.dtype": _cast,
    "to.dtype_layout": _cast,
    "to.device": _cast,
    "_to_copy.default": _cast,
    "type_as.default": _cast,
    "clone.default": _identity,
    "contiguous.default": _identity,
    "alias.default": _identity,
    "detach.default": _identity,
    "lift_fresh_copy.default": _identity,
    "dropout.default": _identity,
    "view.default": _reshape,
    "reshape.default": _reshape,
    "_unsafe_view.default": _reshape,
    "flatten.using_ints": _flatten,
    "unflatten.int": _reshape,
    "permute.default": _permute,
    "transpose.int": _transpose,
    "t.default": _t,
    "unsqueeze.default": _unsqueeze,
    "squeeze.dim": _squeeze,
    "squeeze.dims": _squeeze,
    "squeeze.default": _squeeze,
    "expand.default": _expand,
    "slice.Tensor": _slice,
    "select.int": _select,
    "cat.default": _cat,
    "split.Tensor": _split,
    "split_with_sizes.default": _split,
    "chunk.default": _split,
    "getitem": _getitem,
    "<built-in function getitem>": _getitem,
    "linear.default": _linear,
    "addmm.default": _addmm,
    "matmul.default": _matmul,
    "bmm.default": _matmul,
    "mm.default": _matmul,
    "embedding.default": _embedding,
    "softmax.int": _softmax,
    "_softmax.default": _softmax,
    "layer_norm.default": _layer_norm,
    "rms_norm.default": _rms_norm,
    "scaled_dot_product_attention.default": _sdpa,
    "conv1d.default": _conv,
    "conv2d.default": _conv,
    "conv3d.default": _conv,
    "convolution.default": _conv,
    "max_pool1d.default": _max_pool,
    "max_pool2d.default": _max_pool,
    "max_pool3d.default": _max_pool,
    "avg_pool1d.default": _avg_pool,
    "avg_pool2d.default": _avg_pool,
    "avg_pool3d.default": _avg_pool,
    "adaptive_avg_pool1d.default": _adaptive_avg_pool,
    "adaptive_avg_pool2d.default": _adaptive_avg_pool,
    "batch_norm.default": _batch_norm,
    "_native_batch_norm_legit_no_training.default": _batch_norm,
    "where.self": _where,
    "index.Tensor": _index,
    "ne.Scalar": _ne,
    "ne.Tensor": _ne,
    "cumsum.default": _cumsum,
    "gather.default": _gather,
    "argmax.default": _argmax,
    "masked_fill.Scalar": _masked_fill,
    "zeros_like.default": _fill_like(0.0),
    "ones_like.default": _fill_like(1.0),
    "sym_size.int": _sym_size,
}
"""Every ATen operator the importer maps, keyed without the `aten.` prefix."""
