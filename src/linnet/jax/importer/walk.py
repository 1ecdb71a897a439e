"""The ops of a StableHLO function, in order, through the op mappings (calls inlined).

Stage: the StableHLO importer's second step. In: a `Builder` whose `env`
binds the function's arguments. Out: what the function returns, with every
op mapped (`ops.OPS`) or recorded as `Untranslated` with its `file.py:line`.
`func.call` is inlined (the callee walked with the call's operands), and so is
a `stablehlo.composite` (its decomposition). An op
reading a refused op's result is skipped, and reported only if it has no
mapping itself.

One recovery happens here rather than on the graph, because only the
locations carry it: JAX expands `erf` / `erfc` into a rational
approximation, every op of which carries the primitive's name
(`jit(f)/erfc`). Such a group of ops with one input and one result read
elsewhere becomes `Erf` again (`erfc(x)` as `1 - erf(x)`, and `erfc(-z * c)`
as `1 + erf(z * c)`, the spelling the GELU pattern knows). Any other group
is translated op by op, which computes the same value.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from jaxlib.mlir import ir

from linnet.jax.importer.builder import Builder, Lazy, Ref
from linnet.jax.importer.loops import counted, counted_while
from linnet.jax.importer.mlir import location, primitive
from linnet.jax.importer.ops import OPS, elementwise, result_type
from linnet.sourcegen.builder import Skip, Untranslated

_MAX_DEPTH = 64

_REASONS = {
    "stablehlo.custom_call": "a custom call has no Linnet translation",
    "stablehlo.case": "data-dependent control flow (`lax.cond`, `lax.switch`) is not imported",
    "stablehlo.if": "data-dependent control flow is not imported",
}


def walk_function(
    b: Builder, funcs: dict[str, Any], func: Any, args: list[Ref | None], depth: int = 0
) -> list[Ref | None]:
    """Walk `func` with its arguments bound to `args` (None: a refused value); returns
    what it returns (None where a refused op made the value)."""
    if depth > _MAX_DEPTH:
        raise Skip("calls nested too deep")
    return walk_block(b, funcs, func.regions[0].blocks[0], args, depth)


def walk_block(
    b: Builder, funcs: dict[str, Any], block: Any, args: list[Ref | None], depth: int
) -> list[Ref | None]:
    """`walk_function` on one block (a function's body, a loop's condition or body)."""
    for formal, actual in zip(block.arguments, args, strict=True):
        if actual is not None:
            b.env[formal] = actual
    groups = _erf_groups(block)
    for op in block.operations:
        o = op.operation
        if o.name in ("func.return", "stablehlo.return"):
            return [b.env.get(v) for v in o.operands]
        group = groups.get(_key(o))
        if group is not None:
            if group.last == _key(o):
                _emit_erf(b, group, o)
            continue
        _walk_op(b, funcs, o, depth)
    return []


def _walk_op(b: Builder, funcs: dict[str, Any], o: Any, depth: int) -> None:
    name = str(o.name)
    b.where = location(o)
    label = _label(o)
    mapped = name in OPS or name in _CALLS or name == "stablehlo.while"
    if any(v not in b.env for v in o.operands):
        if not mapped:
            b.untranslated.append(Untranslated(label, name, _reason(o), b.where))
        elif name in _CALLS:
            _report_unmapped(b, funcs, o, depth)
        return  # downstream of a refused op: its cause is reported
    if not mapped:
        b.untranslated.append(Untranslated(label, name, _reason(o), b.where))
        return
    try:
        if name == "stablehlo.while":
            results = _while(b, funcs, o, depth)
        elif name in _CALLS:
            callee = _callee(o)
            if callee not in funcs:
                raise Skip(f"calls `@{callee}`, which the module does not define")
            results = walk_function(
                b, funcs, funcs[callee], [b.env[v] for v in o.operands], depth + 1
            )
        else:
            for i in range(len(o.results)):
                result_type(o, i)  # dynamic shapes and dtypes Linnet lacks refuse the op
            results = list(OPS[name](b, o))
    except Skip as exc:
        b.untranslated.append(Untranslated(label, name, str(exc), b.where))
        return
    for value, ref in zip(o.results, results, strict=False):
        if ref is not None:
            b.env[value] = ref


_TRIPS = 4096
"""The most iterations a loop runs when unrolled at import (the `Loop` translator's own)."""


def _while(b: Builder, funcs: dict[str, Any], o: Any, depth: int) -> list[Ref | None]:
    """`stablehlo.while` as an ONNX `Loop`. A counted loop (`lax.scan`, `fori_loop`)
    goes to `loops.counted_while`, which the translator writes as a runtime `for`;
    any other (`while_loop`) gets a `Loop` whose body runs the loop's body then its
    condition. The `Loop` translator unrolls it when
    every step's condition is known at import time (a counted loop) and refuses it
    otherwise, naming why."""
    from linnet.sourcegen.graph import Graph, Node, TensorInfo

    counter = counted(b, o)
    if counter is not None:
        return counted_while(b, funcs, o, depth, counter)
    carried = [b.full(b.env[v]) for v in o.operands]
    cond_block, body_block = o.regions[0].blocks[0], o.regions[1].blocks[0]
    first = walk_block(b, funcs, cond_block, list(carried), depth + 1)
    if not first or first[0] is None:
        raise Skip("its condition cannot be translated")
    cond0 = b.full(first[0])
    sub = Builder()
    sub._count = b._count
    sub.env = dict(b.env)
    sub.graph.value_info = b.graph.value_info  # one namespace: outer values read inside
    names = [sub.fresh("carried") for _ in carried]
    step, flag = sub.fresh("step"), sub.fresh("going")
    sub.graph.inputs = [TensorInfo(step, "i64", ()), TensorInfo(flag, "bool", ())]
    for name, value in zip(names, carried, strict=True):
        info = TensorInfo(name, b.dtype(value), b.shape(value))
        sub.graph.inputs.append(info)
        sub.graph.value_info[name] = info
    new = walk_block(sub, funcs, body_block, list(names), depth + 1)
    b.untranslated.extend(sub.untranslated)
    if sub.untranslated or any(r is None for r in new):
        b._count = sub._count
        return [None] * len(o.results)
    outs = [sub.full(r) for r in new if r is not None]
    test = walk_block(sub, funcs, cond_block, list(outs), depth + 1)
    b._count = sub._count
    if not test or test[0] is None:
        raise Skip("its condition cannot be translated")
    cond_out = sub.full(test[0])
    sub.graph.outputs = [TensorInfo(n, sub.dtype(n), sub.shape(n)) for n in (cond_out, *outs)]
    sub.graph.constants.update({})
    b.graph.constants.update(sub.graph.constants)
    results = [b.fresh("while") for _ in o.results]
    b.notes.append(
        "a `stablehlo.while` loop"
        + (f" at {b.where}" if b.where else "")
        + " is unrolled at import (every step's condition is known then)"
    )
    for name, value in zip(results, carried, strict=True):
        b.graph.value_info[name] = TensorInfo(name, b.dtype(value), b.shape(value))
    trips = b.const(np.array(_TRIPS, dtype=np.int64))
    body = Graph(
        name="body",
        inputs=sub.graph.inputs,
        outputs=sub.graph.outputs,
        nodes=sub.graph.nodes,
        constants=sub.graph.constants,
        value_info=sub.graph.value_info,
    )
    node = Node(
        "Loop",
        "",
        results[0],
        (trips, cond0, *carried),
        tuple(results),
        {"body": body, **({"_where": b.where} if b.where else {})},
        18,
    )
    b.graph.nodes.append(node)
    for name in results:
        b.producers[name] = node
    return list(results)


_CALLS = {"func.call": "callee", "stablehlo.composite": "decomposition"}
"""Ops walked as their callee: a call, and a composite (`lax.top_k`'s `chlo.top_k`) as
the decomposition it carries."""


def _callee(o: Any) -> str:
    return str(ir.FlatSymbolRefAttr(o.attributes[_CALLS[str(o.name)]]).value)


def _report_unmapped(b: Builder, funcs: dict[str, Any], call: Any, depth: int) -> None:
    """Every unmapped op in a function called on a refused value (refused too, by name)."""
    callee = funcs.get(_callee(call))
    if callee is None or depth > _MAX_DEPTH:
        return
    for op in callee.regions[0].blocks[0].operations:
        o = op.operation
        if o.name in _CALLS:
            _report_unmapped(b, funcs, o, depth + 1)
        elif o.name not in OPS and o.name not in ("func.return", "stablehlo.return"):
            b.untranslated.append(Untranslated(_label(o), str(o.name), _reason(o), location(o)))


def _reason(o: Any) -> str:
    name = str(o.name)
    if name == "stablehlo.custom_call" and "call_target_name" in o.attributes:
        target = ir.StringAttr(o.attributes["call_target_name"]).value
        return f"a custom call (`{target}`) has no Linnet translation"
    return _REASONS.get(name, "no translation for this operator")


def _label(o: Any) -> str:
    if len(o.results):
        return str(o.results[0].get_name())
    return primitive(o) or str(o.name)


def _key(o: Any) -> Any:
    """A stable identity for an op (Python wrappers of one op are not the same object)."""
    return o.results[0] if len(o.results) else id(o)


class _Group:
    def __init__(self, kind: str, x: Any, last: Any, out: Any, size: int) -> None:
        self.kind = kind
        self.x = x
        self.last = last
        self.out = out
        self.size = size


def _erf_groups(block: Any) -> dict[Any, _Group]:
    """The ops of each `erf` / `erfc` expansion JAX wrote (see the module docstring)."""
    by_loc: dict[str, list[Any]] = {}
    for op in block.operations:
        o = op.operation
        kind = primitive(o).rsplit("/", 1)[-1]
        if kind in ("erf", "erfc") and o.name != "stablehlo.constant" and len(o.results) == 1:
            by_loc.setdefault(str(o.location), []).append(o)
    out: dict[Any, _Group] = {}
    ops = [op.operation for op in block.operations]
    for members in by_loc.values():
        kind = primitive(members[0]).rsplit("/", 1)[-1]
        made = {m.results[0] for m in members}
        inputs = {v for m in members for v in m.operands if v not in made and not _is_constant(v)}
        member_keys = {_key(m) for m in members}
        escaping = {v for o in ops if _key(o) not in member_keys for v in o.operands if v in made}
        if len(inputs) != 1 or len(escaping) != 1:
            continue
        last = _key(members[-1])
        group = _Group(kind, next(iter(inputs)), last, next(iter(escaping)), len(members))
        for m in members:
            out[_key(m)] = group
    return out


def _is_constant(v: Any) -> bool:
    v = v.maybe_downcast()
    return isinstance(v, ir.OpResult) and v.owner.name == "stablehlo.constant"


def _emit_erf(b: Builder, group: _Group, last: Any) -> None:
    b.where = location(last)
    x = b.env.get(group.x)
    if x is None:
        return
    t = result_type_of(group.out)
    if t is None:
        return
    dtype, shape = t
    arg: Ref = x
    erfc_of_negated = False
    if group.kind == "erfc":
        z = _negated(b, x)
        if z is not None:
            arg, erfc_of_negated = z, True
    erf = elementwise(b, "Erf", [arg], dtype, shape)
    one = b.const(np.array(1.0, dtype=_np_type(dtype)))
    if group.kind == "erf":
        value: Ref = erf
    elif erfc_of_negated:
        value = elementwise(b, "Add", [one, erf], dtype, shape)
    else:
        value = elementwise(b, "Sub", [one, erf], dtype, shape)
    b.env[group.out] = value
    b.notes.append(
        f"recovered `{group.kind}` from the {group.size} ops JAX expanded it into"
        + (f" at {b.where}" if b.where else "")
    )


def _negated(b: Builder, x: Ref) -> str | None:
    """`z * c` when `x` is `-z * c` or `-z` (`erfc(-y) = 1 + erf(y)`), else None."""
    if isinstance(x, Lazy):
        return None
    node = b.producers.get(x)
    if node is None:
        return None
    if node.op == "Neg":
        return node.inputs[0]
    if node.op != "Mul":
        return None
    for i in (0, 1):
        neg = b.producers.get(node.inputs[i])
        if neg is not None and neg.op == "Neg":
            z, c = neg.inputs[0], node.inputs[1 - i]
            return b.emit("Mul", [z, c], b.dtype(x), b.shape(x))
    return None


def result_type_of(v: Any) -> tuple[str, tuple[int, ...]] | None:
    from linnet.jax.importer.mlir import DYNAMIC, tensor_type

    t = tensor_type(v.type)
    if t is None or t[0] not in ("f16", "bf16", "f32", "f64") or DYNAMIC in t[1]:
        return None
    return str(t[0]), t[1]


def _np_type(dtype: str) -> Any:
    from linnet.jax.importer.mlir import numpy_type

    return numpy_type(dtype)
