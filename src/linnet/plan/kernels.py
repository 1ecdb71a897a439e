"""Kernels in the plan document (language-extensions 0.5).

Stage: a helper of `linnet.plan.document`, `body` and `exprs`. In: checked
kernels and ops with kernel references. Out:

- function records of kind `"kernel"`: `generics`, `constraints`, `params`,
  named `results` (`[{name, type}]`), `grid` (dims), `warps` and `stages`
  (integers or null) and a `body` region whose arguments are the parameters
  then the results (memory is addressed through them);
- on every function record, `kernel`: `{name, generics}` for an op naming a
  kernel (the kernel's generics in its order, written in the op's terms),
  else null;
- body ops `kernel.program_id {axis}`, `kernel.load {components, mask,
  other}` (operands: the parameter, one value per index component, then the
  mask and `other` when given) and `kernel.store {mode: store|add|max|min,
  components, mask}` (operands: the result, the components, the value, the
  mask when given). Nothing here evaluates a dimension: the document stays
  symbolic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from linnet.check.decls import FnInfo, LocalInfo
from linnet.check.dims import Symbol
from linnet.check.kernel_info import KernelInfo
from linnet.check.types import SCALAR_DTYPES, DTypeVar, Type, scalar
from linnet.errors import InternalError
from linnet.plan.values import JSON, ValueEncoder
from linnet.syntax import ast

if TYPE_CHECKING:
    from linnet.check.program import CheckedProgram
    from linnet.plan.body import BodyEncoder
    from linnet.plan.exprs import ExprEncoder, Json

_MODES = {"store": "store", "atomic_add": "add", "atomic_max": "max", "atomic_min": "min"}


def kernel_ref(program: CheckedProgram, values: ValueEncoder, fn: FnInfo) -> JSON:
    """The function record's `kernel` entry: `{name, generics}` or None."""
    binding = program.kernel_refs.get(fn.decl)
    if binding is None:
        return None
    subst = binding.subst
    generics: list[JSON] = []
    for g in binding.kernel.generics:
        key = g.key
        if isinstance(key, DTypeVar):
            generics.append(values.dtype(subst.dtypes[key]))
        else:
            assert isinstance(key, Symbol)
            generics.append(values.dim(subst.dims[key]))
    return {"name": binding.kernel.qualified_name, "generics": generics}


def kernel_record(encoder: BodyEncoder, values: ValueEncoder, k: KernelInfo) -> dict[str, JSON]:
    """The function record of one kernel, its body encoded by `encoder`."""
    args: list[JSON] = []
    for local in [*k.params, *k.results]:
        args.append(encoder._bind(local, encoder._value(local.type, local.name)))
    encoder.stmts(k.decl.body.stmts)
    encoder._emit("return", [], [])
    return {
        "name": k.qualified_name,
        "kind": "kernel",
        "block": None,
        "pub": k.pub,
        "generics": [values.generic(g) for g in k.generics],
        "constraints": [values.constraint(c) for c in k.where],
        "params": [{"name": p.name, "type": values.type_(p.type)} for p in k.params],
        "results": [{"name": r.name, "type": values.type_(r.type)} for r in k.results],
        "grid": [values.dim(d) if d is not None else None for d in k.grid],
        "warps": k.warps,
        "stages": k.stages,
        "states": [],
        "state_writes": [],
        "kernel": None,
        "body": {"args": args, "ops": encoder.ops},
    }


def kernels_referenced(program: CheckedProgram, functions: list[FnInfo]) -> list[KernelInfo]:
    """The kernels the listed ops refer to, in first-reference order."""
    found: dict[KernelInfo, None] = {}
    for fn in functions:
        binding = program.kernel_refs.get(fn.decl)
        if binding is not None:
            found.setdefault(binding.kernel, None)
    return list(found)


def _memory(encoder: ExprEncoder, node: ast.Expr) -> tuple[Json, list[Json]]:
    """The memory value and the component values of `m[c1, ..., cr]`."""
    if not isinstance(node, ast.Index) or not isinstance(node.target, ast.Name):
        raise InternalError(f"`{node.span.text}` is not a checked memory access")
    local = encoder.program.resolutions.get(node.target)
    if not isinstance(local, LocalInfo) or local not in encoder.env:
        raise InternalError(f"`{node.target.ident.name}` is not kernel memory")
    components = [
        encoder.expr(c)
        for c in node.components
        if not isinstance(c, (ast.Slice, ast.EllipsisComponent, ast.PackIndex))
    ]
    return encoder.env[local], components


def builtin_call(encoder: ExprEncoder, e: ast.Call) -> Json | None:
    """`program_id(a)` and `load(...)` in a kernel body; None for any other call."""
    callee = e.callee
    if not isinstance(callee, ast.Name) or callee.ident.name not in ("load", "program_id"):
        return None
    if encoder.program.calls.get(e) is not None:
        return None  # a user function of that name (outside kernels)
    rt: Type = encoder.type_of(e)
    if callee.ident.name == "program_id":
        axis = encoder.program.types.get(e.args[0].value)
        from linnet.check.types import CtIntType

        value = axis.value.as_int() if isinstance(axis, CtIntType) else None
        return encoder._emit1(
            "kernel.program_id", [], scalar(SCALAR_DTYPES["i32"]), {"axis": value}
        )
    memory, components = _memory(encoder, e.args[0].value)
    extra = [encoder.expr(a.value) for a in e.args[1:]]
    attrs: Json = {
        "components": len(components),
        "mask": len(e.args) >= 2,
        "other": len(e.args) == 3,
    }
    return encoder._emit1("kernel.load", [memory, *components, *extra], rt, attrs)


def write_stmt(encoder: BodyEncoder, s: ast.WriteStmt) -> None:
    """A kernel write as `kernel.store {mode}`."""
    memory, components = _memory(encoder, s.target)
    operands = [memory, *components, encoder.expr(s.value)]
    if s.mask is not None:
        operands.append(encoder.expr(s.mask))
    attrs: Json = {
        "mode": _MODES[s.word],
        "components": len(components),
        "mask": s.mask is not None,
    }
    encoder._emit("kernel.store", operands, [], attrs)
