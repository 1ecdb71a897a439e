"""`stablehlo.sort` and `stablehlo.scatter` in the forms `jnp` writes them, as ONNX `TopK`
and `ScatterND` (which the ONNX translators write as comprehensions).

Stage: the StableHLO importer's second step (op mappings, merged in
`ops.OPS`).

- **sort**: `jnp.sort`, `jnp.argsort` and `lax.top_k` sort one array along
  one axis, stably, with a comparator that is `<` (ascending) or `>`
  (descending) of the two elements, after JAX's NaN and `-0.0`
  canonicalisation; `argsort` and `top_k` sort an `iota` along with it to
  get the positions. That is a `TopK` of the whole axis (`largest` for
  descending), whose ties keep index order as a stable sort does. NaN is not
  ordered last as JAX orders it. Sorts of several keys, or of another array by
  these keys, are refused by name.
- **scatter**: `x.at[idx].set(v)` / `.add(v)` / `.mul` / `.max` / `.min`
  indexing the leading axes of `x` with whole trailing windows: a
  `ScatterND` with that reduction. JAX drops out-of-range indices; the
  import assumes indices are in range (negative ones wrap, as `jnp` has
  already made them non-negative). Scatters into other axes
  (`x.at[:, j]`) or with partial windows are refused by name.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo as shlo

from linnet.jax.importer.builder import Builder, Ref
from linnet.jax.importer.op_support import Handler, arg, onnx_dtype, result_type
from linnet.sourcegen.builder import Skip
from linnet.sourcegen.graph import Node, TensorInfo

__all__ = ["SORT_SCATTER", "scatter", "sort"]


def sort(b: Builder, op: Any) -> list[Ref]:
    if len(op.operands) > 2:
        raise Skip("a sort of several arrays (lexicographic keys) is not imported")
    dtype, shape = result_type(op, 0)
    if dtype == "bool" or not shape:
        raise Skip(f"a sort of {dtype} scalars or booleans is not imported")
    axis = int(ir.IntegerAttr(op.attributes["dimension"]).value) % len(shape)
    descending = _order(op.regions[0].blocks[0])
    if len(op.operands) == 2 and not _is_iota(b, arg(b, op, 1), shape, axis):
        raise Skip("a sort of one array by another's keys is not imported (only argsort)")
    x = b.full(arg(b, op, 0))
    values, indices = b.fresh("sorted"), b.fresh("order")
    k = b.ints([shape[axis]])
    node = Node(
        "TopK",
        "",
        values,
        (x, k),
        (values, indices),
        {"axis": axis, "largest": int(descending), "sorted": 1}
        | ({"_where": b.where} if b.where else {}),
        18,
    )
    b.graph.nodes.append(node)
    b.graph.value_info[values] = TensorInfo(values, dtype, shape)
    b.graph.value_info[indices] = TensorInfo(indices, "i64", shape)
    b.producers[values] = b.producers[indices] = node
    out: list[Ref] = [values]
    if len(op.operands) == 2:
        index_type, _ = result_type(op, 1)
        assert index_type is not None
        if index_type == "i64":
            out.append(indices)
        else:
            to = {"to": onnx_dtype(index_type)}
            out.append(b.emit("Cast", [indices], index_type, shape, to))
    return out


def _order(block: Any) -> bool:
    """Whether a sort comparator orders descending (`>`); Skip for any other comparator."""
    ops = [o.operation for o in block.operations]
    ret = ops[-1]
    compare = _owner(ret.operands[0]) if len(ret.operands) == 1 else None
    if compare is None or compare.name != "stablehlo.compare":
        raise Skip("a sort comparator other than `<` or `>` is not imported")
    direction = shlo.ComparisonDirectionAttr(compare.attributes["comparison_direction"]).value
    left, right = _args(compare.operands[0], block), _args(compare.operands[1], block)
    if direction not in ("LT", "GT") or {frozenset(left), frozenset(right)} != {
        frozenset({0}),
        frozenset({1}),
    }:
        raise Skip("a sort comparator other than `<` or `>` of one key is not imported")
    swapped = left == {1}
    return (direction == "GT") != swapped


def _args(v: Any, block: Any) -> set[int]:
    """The comparator arguments a value in its region depends on."""
    v = v.maybe_downcast()
    if isinstance(v, ir.BlockArgument):
        return {int(v.arg_number)} if v.owner == block else set()
    owner = _owner(v)
    if owner is None:
        return set()
    out: set[int] = set()
    for operand in owner.operands:
        out |= _args(operand, block)
    return out


def _owner(v: Any) -> Any:
    v = v.maybe_downcast()
    return v.owner if isinstance(v, ir.OpResult) else None


def _is_iota(b: Builder, ref: Ref, shape: tuple[int, ...], axis: int) -> bool:
    arr = b.constant_of(ref)
    if arr is None:
        return False
    want = np.arange(shape[axis]).reshape([-1 if a == axis else 1 for a in range(len(shape))])
    return bool(np.array_equal(np.broadcast_to(arr, shape), np.broadcast_to(want, shape)))


_REDUCTIONS = {
    "stablehlo.add": "add",
    "stablehlo.multiply": "mul",
    "stablehlo.maximum": "max",
    "stablehlo.minimum": "min",
}


def scatter(b: Builder, op: Any) -> list[Ref]:
    if len(op.operands) != 3:
        raise Skip("a scatter into several arrays at once is not imported")
    dtype, shape = result_type(op)
    dims = shlo.ScatterDimensionNumbers(op.attributes["scatter_dimension_numbers"])
    if list(dims.input_batching_dims) or list(dims.scatter_indices_batching_dims):
        raise Skip("a batched scatter is not imported")
    indices, updates = b.full(arg(b, op, 1)), b.full(arg(b, op, 2))
    idx_shape, upd_shape = b.shape(indices), b.shape(updates)
    vector_dim = int(dims.index_vector_dim)
    if vector_dim == len(idx_shape):
        depth, batch = 1, idx_shape
    elif vector_dim == len(idx_shape) - 1:
        depth, batch = idx_shape[-1], idx_shape[:-1]
    else:
        raise Skip("scatter indices whose index vectors are not the last axis are not imported")
    leading = list(range(depth))
    window = list(range(len(batch), len(batch) + len(shape) - depth))
    if (
        list(dims.scattered_dims_to_operand_dims) != leading
        or list(dims.inserted_window_dims) != leading
        or list(dims.update_window_dims) != window
        or upd_shape != (*batch, *shape[depth:])
    ):
        raise Skip(
            "only scatters into the leading axes with whole trailing windows are imported "
            "(`x.at[i].set(v)`, `x.at[idx].add(v)`)"
        )
    reduction = _reduction(op.regions[0].blocks[0])
    if b.dtype(indices) != "i64":
        indices = b.emit("Cast", [indices], "i64", idx_shape, {"to": onnx_dtype("i64")})
    if vector_dim == len(idx_shape):
        idx_shape = (*idx_shape, 1)
        indices = b.emit("Reshape", [indices, b.ints(idx_shape)], "i64", idx_shape)
    if not batch:  # one index vector (`x.at[i]`): a batch of one, as ScatterND reads it
        idx_shape, upd_shape = (1, *idx_shape), (1, *upd_shape)
        indices = b.emit("Reshape", [indices, b.ints(idx_shape)], "i64", idx_shape)
        updates = b.emit("Reshape", [updates, b.ints(upd_shape)], b.dtype(updates), upd_shape)
    data = b.full(arg(b, op, 0))
    return [b.emit("ScatterND", [data, indices, updates], dtype, shape, {"reduction": reduction})]


def _reduction(block: Any) -> str:
    """`none` for a region returning the update, else the binary op combining the two."""
    ops = [o.operation for o in block.operations]
    ret = ops[-1]
    args = list(block.arguments)
    if len(ret.operands) != 1 or len(args) != 2:
        raise Skip("a scatter combining several values is not imported")
    value = ret.operands[0]
    if value == args[1]:
        return "none"
    owner = _owner(value)
    combines = owner is not None and owner.name in _REDUCTIONS and len(ops) == 2
    if combines and set(owner.operands) == set(args):
        return _REDUCTIONS[owner.name]
    raise Skip("a scatter combining values other than by set, add, mul, max or min")


SORT_SCATTER: dict[str, Handler] = {"stablehlo.sort": sort, "stablehlo.scatter": scatter}
