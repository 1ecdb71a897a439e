"""Capture a `torch.nn.Module` with `torch.export` and fold what depends on no input.

Stage: the torch importer's first step (`linnet.torch.importer.api.export_linnet`
runs it). In: a module and example inputs. Out: a `Capture`: the exported
program (ATen ops, not decomposed, so `linear`, `layer_norm`,
`scaled_dot_product_attention`, `embedding`, `softmax`, `gelu` and `silu` stay
whole), the state_dict paths of its parameters and persistent buffers, and the
values of every node computed only from constants and non-persistent buffers
(position ranges, causal masks, rotary tables), evaluated once here with the
captured ATen ops on the example's device. Folding never reads an input or a
weight, so the folded values hold for every call with these static shapes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import fx

from linnet.errors import LinnetError
from linnet.records import field, record

FOLD_LIMIT = 1 << 22
"""Elements above which a node's value is not folded (it is translated instead)."""

_NEVER_FOLDED = ("rand", "randn", "randint", "bernoulli", "dropout", "normal", "uniform")


@record(eq=False)
class Capture:
    """An exported program with its weights' paths and its folded values."""

    program: Any  # torch.export.ExportedProgram
    weights: dict[str, str]  # placeholder name -> state_dict path
    tensors: dict[str, torch.Tensor]  # state_dict path -> value
    folded: dict[fx.Node, Any] = field(default_factory=dict)
    inputs: list[str] = field(default_factory=list)  # user input placeholder names
    dims: dict[str, str] = field(default_factory=dict)  # symbol (`s0`) -> generic name
    bounds: dict[str, tuple[int, int | None]] = field(default_factory=dict)  # generic -> range


def capture(
    module: torch.nn.Module,
    example_inputs: Sequence[Any],
    dynamic: Any = None,
) -> Capture:
    """Export `module` on `example_inputs` (with torch.export's `dynamic_shapes`,
    or per input a mapping axis -> name) and fold its constant subgraphs."""
    shapes, names = _dynamic_shapes(module, example_inputs, dynamic)
    try:
        program = torch.export.export(
            module.eval(), tuple(example_inputs), dynamic_shapes=shapes, strict=False
        )
    except Exception as exc:  # torch reports unsupported Python and guards many ways
        raise LinnetError(f"torch.export could not capture the module: {exc}") from None
    sig = program.graph_signature
    weights: dict[str, str] = {}
    tensors: dict[str, torch.Tensor] = {}
    state = program.state_dict
    constant_inputs: dict[str, torch.Tensor] = {}
    for spec in sig.input_specs:
        kind = spec.kind.name
        arg = getattr(spec.arg, "name", None)
        if arg is None:
            continue
        if kind == "PARAMETER" or (kind == "BUFFER" and spec.persistent):
            assert spec.target is not None
            weights[arg] = spec.target
            tensors[spec.target] = state[spec.target]
        elif kind in ("BUFFER", "CONSTANT_TENSOR"):
            assert spec.target is not None
            value = program.constants.get(spec.target)
            if value is None:
                value = state.get(spec.target)
            if not isinstance(value, torch.Tensor):
                raise LinnetError(f"constant `{spec.target}` is not a tensor")
            constant_inputs[arg] = value
    result = Capture(program, weights, tensors)
    result.inputs = list(sig.user_inputs)
    result.folded = _fold(program.graph_module.graph, constant_inputs)
    result.dims = _symbols(program, names)
    result.bounds = _bounds(shapes)
    return result


def _bounds(shapes: Any) -> dict[str, tuple[int, int | None]]:
    """Each `torch.export.Dim` of `shapes` given a range (`Dim("S", min=4, max=64)`):
    its name -> (min, max or None), what the imported entry's `where` clause states."""
    out: dict[str, tuple[int, int | None]] = {}
    todo = [shapes]
    while todo:
        item = todo.pop()
        if isinstance(item, Mapping):
            todo.extend(item.values())
        elif isinstance(item, list | tuple):
            todo.extend(item)
        elif hasattr(item, "min") and hasattr(item, "max") and hasattr(item, "__name__"):
            low, high = item.min, item.max
            top = int(high) if isinstance(high, int) and high < 2**62 else None
            out[str(item.__name__)] = (int(low) if isinstance(low, int) else 0, top)
    return out


def _dynamic_shapes(
    module: torch.nn.Module, example_inputs: Sequence[Any], dynamic: Any
) -> tuple[Any, list[dict[int, str]]]:
    """torch.export's `dynamic_shapes` from `dynamic`; a per-input mapping of axis to a
    plain name becomes a `torch.export.Dim` of that name."""
    if dynamic is None:
        return None, []
    if not isinstance(dynamic, Sequence) or isinstance(dynamic, str | bytes):
        return dynamic, []
    if len(dynamic) != len(example_inputs):
        raise LinnetError(
            f"`dynamic` gives {len(dynamic)} entries for {len(example_inputs)} example inputs"
        )
    made: dict[str, Any] = {}
    shapes: list[Any] = []
    names: list[dict[int, str]] = []
    for spec in dynamic:
        names.append({})
        if spec is None:
            shapes.append(None)
            continue
        if not isinstance(spec, Mapping):
            raise LinnetError("each `dynamic` entry is None or a mapping axis -> dim name")
        axes: dict[int, Any] = {}
        for axis, dim in spec.items():
            if isinstance(dim, str):
                names[-1][int(axis)] = dim
                if dim not in made:
                    made[dim] = torch.export.Dim(dim)
                dim = made[dim]
            else:
                names[-1][int(axis)] = str(getattr(dim, "__name__", ""))
            axes[int(axis)] = dim
        shapes.append(axes)
    if _varargs(module):
        return (tuple(shapes),), names  # `forward(*inputs)` takes one tuple argument
    return tuple(shapes), names


def _varargs(module: torch.nn.Module) -> bool:
    import inspect

    try:
        params = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        return False
    return len(params) == 1 and params[0].kind is inspect.Parameter.VAR_POSITIONAL


def _symbols(program: Any, names: list[dict[int, str]]) -> dict[str, str]:
    """Each symbol of a user input's shape (`s0`) -> its generic name: the name the
    caller gave that axis (`dynamic=[{0: "batch"}]`), else the torch Dim's name, else
    the symbol itself."""
    out: dict[str, str] = {}
    user = list(program.graph_signature.user_inputs)
    placeholders = {n.name: n for n in program.graph_module.graph.nodes if n.op == "placeholder"}
    for position, name in enumerate(user):
        val = placeholders[name].meta.get("val")
        given = names[position] if position < len(names) else {}
        for axis, d in enumerate(getattr(val, "shape", ())):
            if not isinstance(d, torch.SymInt):
                continue
            sym = str(d.node.expr)
            if sym.isidentifier() and sym not in out:
                out[sym] = given.get(axis, sym)
    return out


def _fold(graph: fx.Graph, constants: dict[str, torch.Tensor]) -> dict[fx.Node, Any]:
    """The value of every node computed from constants alone (see the module docstring)."""
    values: dict[fx.Node, Any] = {}
    for node in graph.nodes:
        if node.op == "placeholder":
            if node.name in constants:
                values[node] = constants[node.name]
            continue
        if node.op != "call_function":
            continue
        name = str(node.target)
        if any(word in name for word in _NEVER_FOLDED):
            continue
        deps = node.all_input_nodes
        if any(d not in values for d in deps):
            continue
        if _symbolic(node):
            continue
        args = fx.node.map_arg(node.args, lambda n: values[n])
        kwargs = fx.node.map_arg(node.kwargs, lambda n: values[n])
        try:
            value = node.target(*args, **kwargs)
        except Exception:  # an op that cannot run eagerly here: translated instead
            continue
        if isinstance(value, torch.Tensor) and value.numel() > FOLD_LIMIT:
            continue
        values[node] = value
    return values


def _symbolic(node: fx.Node) -> bool:
    """Whether the node's value depends on a dynamic dim (its shape has a symbol)."""
    val = node.meta.get("val")
    vals = val if isinstance(val, list | tuple) else [val]
    for v in vals:
        if isinstance(v, torch.SymInt | torch.SymFloat | torch.SymBool):
            return True
        if isinstance(v, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in v.shape):
            return True
    return False
