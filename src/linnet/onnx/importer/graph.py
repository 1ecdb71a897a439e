"""ONNX model -> importer graph, and the registry of ONNX operator translators.

Stage: the ONNX importer's first step (`linnet.onnx.importer.api.import_onnx`
runs it). In: a `ModelProto`. Out: a framework-neutral
`linnet.sourcegen.graph.Graph`: shape inference has run (so intermediate
values carry types), initializers are NumPy arrays, `Constant` nodes are
folded into compile-time values, attributes are plain Python values, the
`linnet.path.*` metadata of a model exported by Linnet becomes the graph's
parameter paths, and opset versions are recorded per domain. Reading a
protobuf executes nothing.

The translator registry (`REGISTRY`, decorator `translator`) is keyed by
`(domain, op_type)`, with `""` for the default `ai.onnx` domain. Translators
live in `linnet.onnx.importer.ops` (one module per operator family) and follow
the interface documented in `linnet.sourcegen.translate`:

    from linnet.onnx.importer.graph import translator
    from linnet.sourcegen.translate import Context

    @translator("Neg")
    def neg(ctx: Context) -> None:
        x = ctx.need(0)
        ctx.output(0, ctx.let(build.unary("-", ctx.ref(x)), x.shape, x.dtype, "neg"))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from linnet.errors import LinnetError
from linnet.sourcegen.graph import DimLike, Graph, Node, TensorInfo
from linnet.sourcegen.patterns.emit import install as install_patterns
from linnet.sourcegen.translate import Registry, Translator

__all__ = ["DTYPES", "REGISTRY", "onnx_graph", "translator"]

REGISTRY = Registry("onnx")
"""Every ONNX operator translator, keyed by (domain, op_type)."""
install_patterns(REGISTRY)


def translator(*ops: str, domain: str = "") -> Callable[[Translator], Translator]:
    """Register a translator for `ops` of `domain` (`""` is `ai.onnx`)."""
    return REGISTRY.register(*ops, domain=domain)


DTYPES: dict[int, str] = {
    TensorProto.FLOAT: "f32",
    TensorProto.DOUBLE: "f64",
    TensorProto.FLOAT16: "f16",
    TensorProto.BFLOAT16: "bf16",
    TensorProto.INT8: "i8",
    TensorProto.INT16: "i16",
    TensorProto.INT32: "i32",
    TensorProto.INT64: "i64",
    TensorProto.UINT8: "u8",
    TensorProto.UINT16: "u16",
    TensorProto.UINT32: "u32",
    TensorProto.UINT64: "u64",
    TensorProto.BOOL: "bool",
}
"""ONNX element types with a Linnet dtype; others (strings, complex, 8-bit floats) have none."""

_DEFAULT_DOMAINS = ("", "ai.onnx")


def onnx_graph(model: onnx.ModelProto) -> Graph:
    """The importer graph of `model` (shape inference must already have run)."""
    opsets = {_domain(o.domain): int(o.version) for o in model.opset_import}
    paths = {
        p.key.removeprefix("linnet.path."): p.value
        for p in model.metadata_props
        if p.key.startswith("linnet.path.")
    }
    graph = _graph(model.graph, opsets)
    _constant_weights(graph)
    graph.paths = paths
    graph.state, graph.next_state = _state_paths(model, graph)
    graph.paths.update(graph.state)
    return graph


def _constant_weights(graph: Graph) -> None:
    """Weights an exporter wrote as `Constant` nodes (a conv kernel, a projection
    matrix) become stored tensors like initializers, so they are members named after
    the node that reads them (`conv1.weight`, not `constant_17`): float tensors of
    more than one element read only as a weight or bias operand."""
    from linnet.sourcegen.layout import operand_role

    readers: dict[str, list[tuple[Node, int]]] = {}
    for node in graph.nodes:
        for i, name in enumerate(node.inputs):
            if name in graph.constants:
                readers.setdefault(name, []).append((node, i))
    for name, uses in readers.items():
        arr = graph.constants[name]
        if arr.dtype.kind != "f" or arr.size <= 1 or name in graph.initializers:
            continue
        if all(operand_role(node, i) is not None for node, i in uses):
            graph.initializers[name] = graph.constants.pop(name)


def _state_paths(model: onnx.ModelProto, graph: Graph) -> tuple[dict[str, str], dict[str, str]]:
    """`linnet.state.<input>` and `linnet.next_state.<output>` metadata, checked.

    A Linnet export reads a state member as a graph input `state<N>` and
    returns its new value as an output `next_state<N>` (12.6); both name the
    member's path. Metadata that cannot describe such a model (a name that is
    no input or output, two inputs or outputs for one path, a state whose value
    before and after the call differ in type) is refused here, with the key.
    """
    reads: dict[str, str] = {}
    writes: dict[str, str] = {}
    for p in model.metadata_props:
        for prefix, table in (("linnet.state.", reads), ("linnet.next_state.", writes)):
            if p.key.startswith(prefix):
                table[p.key.removeprefix(prefix)] = p.value
    inputs = {info.name: info for info in graph.inputs}
    outputs = {info.name: info for info in graph.outputs}
    for table, known, what in ((reads, inputs, "input"), (writes, outputs, "output")):
        owner: dict[str, str] = {}
        for name, path in table.items():
            kind = "linnet.state" if table is reads else "linnet.next_state"
            if name not in known:
                raise LinnetError(
                    f"metadata `{kind}.{name}` names no graph {what} (the {what}s are "
                    + ", ".join(f"`{n}`" for n in known)
                    + ")"
                )
            if not path:
                raise LinnetError(f"metadata `{kind}.{name}` gives no state path")
            if path in owner:
                raise LinnetError(
                    f"graph {what}s `{owner[path]}` and `{name}` both claim the state `{path}`"
                )
            owner[path] = name
            if path in graph.paths.values():
                raise LinnetError(f"`{path}` is both a parameter and a state member")
    for table, known in ((reads, inputs), (writes, outputs)):
        for name, path in table.items():
            info = known[name]
            if info.shape is None or not all(isinstance(d, int) for d in info.shape):
                raise LinnetError(
                    f"state `{path}`: graph {'input' if table is reads else 'output'} `{name}` "
                    f"is {_type_text(info)}; a state member needs a fixed size on every axis "
                    "(export with every generic bound)"
                )
    for name, path in writes.items():
        before = next((inputs[n] for n, p in reads.items() if p == path), None)
        after = outputs[name]
        if before is not None and (before.dtype, before.shape) != (after.dtype, after.shape):
            raise LinnetError(
                f"state `{path}`: graph input `{before.name}` is {_type_text(before)} but "
                f"output `{name}` is {_type_text(after)}; the value after the call must have "
                "the type of the value before it"
            )
    return reads, writes


def _type_text(info: TensorInfo) -> str:
    dims = (
        "?" if info.shape is None else ", ".join("?" if d is None else str(d) for d in info.shape)
    )
    return f"Tensor[{dims}; {info.dtype or '?'}]"


def _graph(g: onnx.GraphProto, opsets: dict[str, int]) -> Graph:
    initializers: dict[str, np.ndarray] = {}
    for init in g.initializer:
        if init.data_location != TensorProto.EXTERNAL and not _stripped(init):
            initializers[init.name] = _array(init)
        else:
            # Payload attached later (memory-mapped): a placeholder of the right type.
            initializers[init.name] = _placeholder(init)
    for sparse in g.sparse_initializer:
        raise LinnetError(f"sparse initializer `{sparse.values.name}` is not supported")
    value_info: dict[str, TensorInfo] = {}
    for vi in list(g.value_info) + list(g.output) + list(g.input):
        value_info[vi.name] = _info(vi)
    nodes: list[Node] = []
    constants: dict[str, np.ndarray] = {}
    for n in g.node:
        domain = _domain(n.domain)
        attrs = {a.name: _attr(a, opsets) for a in n.attribute}
        node = Node(
            op=n.op_type,
            domain=domain,
            name=n.name,
            inputs=tuple(n.input),
            outputs=tuple(n.output),
            attrs=attrs,
            opset=opsets.get(domain, 0),
            scope=_scope(n),
        )
        folded = _constant_value(node) if domain == "" and n.op_type == "Constant" else None
        if folded is not None and len(node.outputs) == 1:
            constants[node.outputs[0]] = folded
            continue
        nodes.append(node)
    graph = Graph(
        name=g.name,
        inputs=[_info(vi) for vi in g.input if vi.name not in initializers],
        outputs=[_info(vi) for vi in g.output],
        nodes=nodes,
        initializers=initializers,
        value_info=value_info,
        constants=constants,
        opsets=dict(opsets),
    )
    return graph


def _scope(n: onnx.NodeProto) -> str:
    """The module path an exporter recorded for the node (torch.onnx's `name_scopes`)."""
    for p in n.metadata_props:
        if p.key == "pkg.torch.onnx.name_scopes":
            import ast as pyast

            try:
                scopes = pyast.literal_eval(p.value)
            except (ValueError, SyntaxError):
                return ""
            if isinstance(scopes, list) and len(scopes) >= 2 and isinstance(scopes[-2], str):
                return scopes[-2]
    return ""


def _domain(domain: str) -> str:
    return "" if domain in _DEFAULT_DOMAINS else domain


def _stripped(tensor: onnx.TensorProto) -> bool:
    return any(e.key == "location" and e.value == "stripped" for e in tensor.external_data)


def _placeholder(tensor: onnx.TensorProto) -> np.ndarray:
    from linnet.ir.core import numpy_dtype

    if tensor.data_type not in DTYPES:
        name = TensorProto.DataType.Name(tensor.data_type)
        raise LinnetError(f"tensor `{tensor.name}` has element type {name}, which Linnet lacks")
    shape = tuple(int(d) for d in tensor.dims)
    dtype = numpy_dtype(DTYPES[tensor.data_type])
    return np.lib.stride_tricks.as_strided(np.zeros(1, dtype), shape, (0,) * len(shape))


def array_of(tensor: onnx.TensorProto) -> np.ndarray:
    """A stored tensor's value (raw or typed fields), as a NumPy array."""
    return _array(tensor)


def _array(tensor: onnx.TensorProto) -> np.ndarray:
    if tensor.data_type not in DTYPES:
        name = TensorProto.DataType.Name(tensor.data_type)
        raise LinnetError(f"tensor `{tensor.name}` has element type {name}, which Linnet lacks")
    arr = numpy_helper.to_array(tensor)
    if tensor.data_type == TensorProto.BFLOAT16 and arr.dtype.name != "bfloat16":
        import ml_dtypes

        arr = arr.astype(ml_dtypes.bfloat16)
    return arr if arr.flags.c_contiguous else arr.copy(order="C")  # keeps 0-d arrays 0-d


def _info(vi: onnx.ValueInfoProto) -> TensorInfo:
    t = vi.type
    if not t.HasField("tensor_type"):
        return TensorInfo(vi.name, None, None)
    tt = t.tensor_type
    dtype = DTYPES.get(tt.elem_type)
    if not tt.HasField("shape"):
        return TensorInfo(vi.name, dtype, None)
    dims: list[DimLike] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return TensorInfo(vi.name, dtype, tuple(dims))


def _attr(a: onnx.AttributeProto, opsets: dict[str, int]) -> Any:
    kind = a.type
    A = onnx.AttributeProto
    if kind == A.FLOAT:
        return float(a.f)
    if kind == A.INT:
        return int(a.i)
    if kind == A.STRING:
        return a.s.decode("utf-8", "replace")
    if kind == A.TENSOR:
        return _array_or_none(a.t)
    if kind == A.GRAPH:
        return _graph(a.g, opsets)
    if kind == A.FLOATS:
        return [float(x) for x in a.floats]
    if kind == A.INTS:
        return [int(x) for x in a.ints]
    if kind == A.STRINGS:
        return [s.decode("utf-8", "replace") for s in a.strings]
    if kind == A.TENSORS:
        return [_array_or_none(t) for t in a.tensors]
    if kind == A.GRAPHS:
        return [_graph(g, opsets) for g in a.graphs]
    if kind == A.SPARSE_TENSOR:
        return None
    if kind == A.TYPE_PROTO:
        return None
    return None


def _array_or_none(tensor: onnx.TensorProto) -> np.ndarray | None:
    try:
        return _array(tensor)
    except LinnetError:
        return None


def _constant_value(node: Node) -> np.ndarray | None:
    """The value of a `Constant` node (ONNX Constant, every attribute form)."""
    attrs = node.attrs
    if "value" in attrs:
        value = attrs["value"]
        return value if isinstance(value, np.ndarray) else None
    if "value_float" in attrs:
        return np.array(attrs["value_float"], dtype=np.float32)
    if "value_floats" in attrs:
        return np.array(attrs["value_floats"], dtype=np.float32)
    if "value_int" in attrs:
        return np.array(attrs["value_int"], dtype=np.int64)
    if "value_ints" in attrs:
        return np.array(attrs["value_ints"], dtype=np.int64)
    return None
