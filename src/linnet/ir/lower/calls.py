"""Calls to Core IR: `fn` inlined, `op` kept as a `call` region, methods on block instances.

Stage: lowering. In: a `Call` node and its `CallInfo` (callee, generic
substitution in the caller's terms, one argument per parameter). Out: an LV.

- The callee's generics are evaluated under the caller's concrete generics
  (5.6: `CallInfo.subst` is written in the caller's terms); a method also sees
  its block instance's generics (12.3). Defaults of omitted parameters are
  lowered in the callee's context (7.7).
- `fn` (and a module-level `entry` called like one) is inlined (11.1).
- `op` becomes a `call` op named `module::name` / `module::Block.method`
  (section 19), whose operands are the flattened arguments of every parameter
  in order (defaults included, `none` contributing nothing) and whose region
  is the inlined canonical body; a backend may replace the region with a
  native kernel (1.2 "Canonical bodies"). The body is lowered once per
  signature and cloned for later calls with the same one (`reuse`). An `op` whose footprint assigns
  state is inlined instead, so state updates stay in program order (12.6).
- Inside index notation a call whose arguments vary over index axes is
  applied elementwise: its parameters are scalars (8.3 bodies are scalar), so
  the inlined body broadcasts over those axes; such calls are always inlined,
  since the op's native kernel would expect scalars.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from linnet.check.decls import FnInfo, PreludeFn
from linnet.check.dims import Symbol
from linnet.check.program import CallInfo
from linnet.check.types import DTypeVar
from linnet.errors import InternalError
from linnet.ir.bind import BlockInstance
from linnet.ir.core import Region, Value
from linnet.ir.env import Env
from linnet.ir.lower.context import Frame, Lowerer, local_value, not_supported
from linnet.ir.lower.reuse import signature_key
from linnet.ir.lower.values import LV, AxisKey, BlockRef, IxVal, flatten, rebuild
from linnet.ir.size_decisions import mark
from linnet.syntax import ast

if TYPE_CHECKING:
    from linnet.ir.lower.index import IndexScope


def lower_call(lw: Lowerer, fr: Frame, call: ast.Call) -> LV:
    from linnet.ir.lower.exprs import lower_expr

    info = lw.program.calls.get(call)
    if info is None:
        raise InternalError("call without checker information")
    callee = info.callee
    if isinstance(callee, PreludeFn):
        from linnet.ir.lower.prelude import lower_prelude

        return lower_prelude(lw, fr, call, info)
    instance = _receiver(lw, fr, info, callee)
    env = callee_env(fr, info, callee, instance)
    args = [None if a is None else lower_expr(lw, fr, a) for a in info.args]
    frame = Frame(callee, env, instance)
    if any(isinstance(a, IxVal) and a.axes for a in args):
        return _elementwise_call(lw, fr, frame, args)
    for param, arg in zip(callee.params, args, strict=True):
        if arg is None:
            if param.default is None:
                raise InternalError(f"no argument for `{param.name}` of {callee!r}")
            arg = lower_expr(lw, frame, param.default)
        frame.locals[param] = local_value(lw, frame, _plain(arg), param.type)
    if callee.kind == "op" and not lw.program.state_footprint(callee).writes:
        return _op_call(lw, frame)
    if callee in lw.program.grad_clauses:  # inlined, the clause would be lost
        raise not_supported(f"a gradient clause on `{callee.name}`, which assigns state,", fr)
    params = tuple(frame.locals[p] for p in callee.params)
    return lw.inlines.lower(lw, frame, params, lambda: inline(lw, frame))


def _plain(lv: LV) -> LV:
    """An index value without axes is just its scalar value."""
    return lv.value if isinstance(lv, IxVal) and not lv.axes else lv


def _receiver(lw: Lowerer, fr: Frame, info: CallInfo, callee: FnInfo) -> BlockInstance | None:
    """The block instance a method runs on: the receiver's, or the caller's own (12.3)."""
    if callee.block is None:
        return None
    if info.receiver is None:
        return fr.instance
    from linnet.ir.lower.exprs import lower_expr

    saved = fr.ix
    fr.ix = None
    try:
        target = lower_expr(lw, fr, info.receiver)
    finally:
        fr.ix = saved
    if not isinstance(target, BlockRef):
        raise InternalError(f"method receiver lowered to {target!r}")
    return target.instance


def callee_env(fr: Frame, info: CallInfo, callee: FnInfo, instance: BlockInstance | None) -> Env:
    """The callee's concrete generics: its block instance's, then its own from `subst`."""
    base = instance.env if instance is not None else None
    env = Env() if base is None else Env(base.dims, base.packs, base.dtypes)
    subst = info.subst
    for g in callee.generics:
        key = g.key
        if isinstance(key, DTypeVar):
            dtype = subst.dtypes.get(key)
            if dtype is None:
                raise InternalError(f"generic `{g.name}` unbound in a call of {callee!r}")
            env.bind(key, fr.env.dtype(dtype))
        elif isinstance(key, Symbol) and key.is_pack:
            items = subst.packs.get(key)
            if items is None:
                raise InternalError(f"generic `{g.name}` unbound in a call of {callee!r}")
            env.bind(key, fr.env.shape(items))
        else:
            d = subst.dims.get(key)
            if d is None:
                raise InternalError(f"generic `{g.name}` unbound in a call of {callee!r}")
            env.bind(key, fr.env.extent(d))
    return env


def inline(lw: Lowerer, frame: Frame) -> LV:
    """The callee's body lowered in place (11.1); its `return` value is the call's value."""
    from linnet.ir.lower.stmts import lower_body

    fn = frame.fn
    assert fn is not None
    result = lower_body(lw, frame, fn.decl.body)
    if result is None:
        raise InternalError(f"{fn!r} returned no value where one is used")
    return lw.materialize(result, fn.result, frame.env)


def call_generics(frame: Frame) -> dict[str, object]:
    """The `call` op's `generics` attr: block generics, then the op's own, by name."""
    fn = frame.fn
    assert fn is not None
    generics = list(fn.block.generics) if fn.block is not None else []
    generics += fn.generics
    return {g.name: frame.env.value_of(g.key) for g in generics}


def _op_call(lw: Lowerer, frame: Frame) -> LV:
    """An `op` kept by identity: a `call` whose region is the canonical body (11.1)."""
    fn = frame.fn
    assert fn is not None
    params = tuple(frame.locals[p] for p in fn.params)
    operands = flatten(params)
    key = signature_key(frame, params)
    kept = lw.regions.get(key)
    if kept is not None:  # the same op, generics and argument types: a clone (reuse)
        region, result = kept
        values = _call(lw, frame, operands, region, result)
        attach_kernel(lw, frame)
        return rebuild(result, iter(values))
    noted_from = mark()
    outer = lw.push([v.type for v in operands])
    region_args = iter(lw.b.args)
    for p, lv in zip(fn.params, params, strict=True):
        frame.locals[p] = rebuild(lv, region_args)
    try:
        result = inline(lw, frame)
        results = flatten(result)
    finally:
        inner = lw.pop(outer)
    region = lw.regions.put(key, inner.finish(results), result)
    lw.regions.keep_noted(key, noted_from)
    values = _call(lw, frame, operands, region, result)
    attach_kernel(lw, frame)
    return rebuild(result, iter(values))


def _call(
    lw: Lowerer, frame: Frame, operands: list[Value], region: Region, result: LV
) -> tuple[Value, ...]:
    """The `call` op, with the op's gradient clause as its second region when it has one."""
    fn = frame.fn
    assert fn is not None
    generics = call_generics(frame)
    clause = lw.program.grad_clauses.get(fn)
    if clause is None:
        return lw.b.call(fn.qualified_name, operands, region, generics)
    from linnet.ir.lower.gradient import gradient_region

    gradient, wrt = gradient_region(lw, frame, operands, region.results, clause)
    return lw.b.call(fn.qualified_name, operands, region, generics, gradient=gradient, wrt=wrt)


def attach_kernel(lw: Lowerer, frame: Frame) -> None:
    """Give the `call` op just added its kernel reference (language-extensions 0.5, 4.4)."""
    fn = frame.fn
    assert fn is not None
    binding = lw.program.kernel_refs.get(fn.decl)
    if binding is None:
        return
    from linnet.ir.kernel_instance import instantiate, kernel_attrs

    instance = instantiate(lw.program, binding, frame.env)
    if instance is None:
        return
    op = lw.b.ops[-1]
    op.attrs["kernel"] = kernel_attrs(instance)
    op.attrs["kernel_instance"] = instance


def _elementwise_call(lw: Lowerer, fr: Frame, frame: Frame, args: list[LV | None]) -> LV:
    """A call in index notation with per-element arguments: the body broadcasts (8.3)."""
    from linnet.ir.lower import index
    from linnet.ir.lower.exprs import lower_expr

    ix = fr.ix
    assert ix is not None
    fn = frame.fn
    assert fn is not None
    union = ix.sorted([k for a in args if isinstance(a, IxVal) for k in a.axes])
    for param, arg in zip(fn.params, args, strict=True):
        if arg is None:
            if param.default is None:
                raise InternalError(f"no argument for `{param.name}` of {fn!r}")
            arg = lower_expr(lw, frame, param.default)
        if isinstance(arg, IxVal):
            arg = index.align(lw, ix, arg, union)
        frame.locals[param] = local_value(lw, frame, arg, param.type)
    result = inline(lw, frame)
    return _over(lw, fr, ix, result, union)


def _over(lw: Lowerer, fr: Frame, ix: IndexScope, result: LV, union: tuple[AxisKey, ...]) -> LV:
    """The call's result as index values over `union` (each broadcast to its full extent)."""
    from linnet.ir.lower import index

    if isinstance(result, Value):
        return index.complete(lw, ix, result, union)
    if isinstance(result, tuple):
        return tuple(_over(lw, fr, ix, r, union) for r in result)
    raise not_supported("a call in index notation returning a non-tensor value", fr)
