"""A kernel bound to concrete generics at one op call (language-extensions 0.5, 4.4, 4.5).

Stage: lowering. In: the `call` op of an `op` whose checked kernel reference
is in `CheckedProgram.kernel_refs`, and the op's concrete generics (`Env`).
Out: the call op's `kernel` attr, `{name, generics}` as section 0.5 lists it,
and a `KernelInstance` under `kernel_instance` that backends with a kernel
runtime (Triton in `linnet.torch.triton_kernels`, Pallas in
`linnet.jax.pallas`) generate their code from: the kernel's checked syntax
tree, its generics as values, the evaluated grid and hints, the concrete
parameter and result types, and whether its `where` clause holds (K8: a
launch-time condition, never an obligation at the op).

The op's body stays the `call` op's region: every backend without a kernel
runtime, and every launch whose conditions fail, runs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from linnet.check.dims import Symbol
from linnet.check.types import DTypeVar
from linnet.errors import InternalError, LinnetError
from linnet.ir.core import TensorType
from linnet.ir.env import Env
from linnet.records import record

if TYPE_CHECKING:
    from linnet.check.kernel_info import KernelBinding, KernelInfo
    from linnet.check.program import CheckedProgram

_RELATIONS = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


@record(frozen=True, eq=False)
class KernelInstance:
    """One instantiation of a kernel: everything a kernel generator needs."""

    name: str  # `module::kernel`
    kernel: KernelInfo
    program: CheckedProgram
    env: Env  # the kernel's own generics, bound
    generics: dict[str, object]  # by name, as users write them
    grid: tuple[int, ...]
    warps: int | None
    stages: int | None
    params: tuple[TensorType | None, ...]  # None for a scalar parameter
    scalar_dtypes: tuple[str | None, ...]  # the dtype of each scalar parameter
    results: tuple[TensorType, ...]
    where_holds: bool

    @property
    def key(self) -> str:
        """A stable identity of the instantiation (the kernel and its generics)."""
        args = ",".join(f"{k}={v}" for k, v in self.generics.items())
        return f"{self.name}<{args}>"

    def __repr__(self) -> str:
        return f"KernelInstance({self.key})"


def instantiate(
    program: CheckedProgram, binding: KernelBinding, op_env: Env
) -> KernelInstance | None:
    """Bind the kernel's generics under the op's concrete generics (KB2).

    None when a generic evaluates to something a launch cannot use (a negative
    extent): the op's body runs then.
    """
    kernel = binding.kernel
    subst = binding.subst
    env = Env()
    generics: dict[str, object] = {}
    try:
        for g in kernel.generics:
            key = g.key
            if isinstance(key, DTypeVar):
                dt = subst.dtypes.get(key)
                if dt is None:
                    return None
                value: object = op_env.dtype(dt)
                env.bind(key, op_env.dtype(dt))
            else:
                assert isinstance(key, Symbol)
                d = subst.dims.get(key)
                if d is None:
                    return None
                value = op_env.dim(d)
                env.bind(key, op_env.dim(d))
            generics[g.name] = value
        grid = tuple(env.dim(d) for d in kernel.grid if d is not None)
        params: list[TensorType | None] = []
        scalars: list[str | None] = []
        for p in kernel.params:
            t = env.tensor_type(p.type)
            if p.kind == "memory":
                params.append(t)
                scalars.append(None)
            else:
                params.append(None)
                scalars.append(t.dtype)
        results = tuple(env.tensor_type(r.type) for r in kernel.results)
        holds = all(_RELATIONS[c.rel](env.dim(c.lhs), env.dim(c.rhs)) for c in kernel.where)
    except (LinnetError, InternalError):
        return None
    if len(grid) != len(kernel.grid) or any(size < 0 for size in grid):
        return None
    return KernelInstance(
        name=kernel.qualified_name,
        kernel=kernel,
        program=program,
        env=env,
        generics=generics,
        grid=grid,
        warps=kernel.warps,
        stages=kernel.stages,
        params=tuple(params),
        scalar_dtypes=tuple(scalars),
        results=results,
        where_holds=holds,
    )


def kernel_attrs(instance: KernelInstance) -> dict[str, object]:
    """The call op's `kernel` attr (section 0.5): `{name, generics}`."""
    return {"name": instance.name, "generics": dict(instance.generics)}
