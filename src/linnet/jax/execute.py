"""Run one lowered function on JAX: as jitted generated source or as StableHLO on XLA.

Stage: the JAX backend's runners, below the loaders. In: a lowered,
optimised `Function`. Out:

- `SourceRunner`: the generated `jax.numpy` source under `jax.jit`, called as
  `run(weights, state, inputs) -> (results, new state)`; differentiable
  (`remat=`: each layer under `jax.checkpoint`, `linnet.jax.remat`);
- `StableHLORunner`: the entry's StableHLO text (`linnet.jax.stablehlo`),
  parsed back and compiled by XLA through `jax.export`, called the same way;
  `donate_state=True` donates the state arguments so XLA may update them in
  place (only the state members it assigns, whose old values are dead after
  the call). It refuses differentiation with a `LinnetError`.

Both run inside `x64_scope` when the function has 64-bit dtypes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from linnet.errors import LinnetError
from linnet.ir.core import Function, TensorType, numpy_dtype
from linnet.jax.codegen import Generated, generate
from linnet.jax.dtypes import x64_scope
from linnet.jax.remat import LayerRemat
from linnet.jax.stablehlo.export import StableHLO, export_stablehlo

Outputs = tuple[list[Any], dict[str, Any]]

NOT_DIFFERENTIABLE = (
    "linnet.jax.load runs compiled StableHLO, which is not differentiable; "
    "use linnet.jax.load_source for jax.grad / jax.vjp"
)


class SourceRunner:
    """Generated `jax.numpy` source for one function, jitted (differentiable)."""

    def __init__(self, fn: Function, *, jit: bool = True, remat: LayerRemat | None = None) -> None:
        self.function = fn
        self.generated: Generated = generate(fn, remat)
        self._jitted = jax.jit(self.generated.entry) if jit else self.generated.entry

    @property
    def source(self) -> str:
        return self.generated.source

    def __call__(
        self, weights: Mapping[str, Any], state: Mapping[str, Any], inputs: Sequence[Any]
    ) -> Outputs:
        with x64_scope(self.generated.x64):
            results, updates = self._jitted(dict(weights), dict(state), *inputs)
        return list(results), dict(updates)


@jax.custom_vjp
def _refuse_gradients(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return args


def _refuse_forward(args: tuple[Any, ...]) -> tuple[tuple[Any, ...], None]:
    return args, None


def _refuse_backward(residual: None, cotangents: Any) -> Any:
    raise LinnetError(NOT_DIFFERENTIABLE)


_refuse_gradients.defvjp(_refuse_forward, _refuse_backward)


class StableHLORunner:
    """One function's StableHLO text compiled by XLA (one executable per instance)."""

    def __init__(
        self,
        fn: Function,
        *,
        donate_state: bool = False,
        sharding: Callable[[str | None, TensorType], Any] | None = None,
    ) -> None:
        self.function = fn
        # Alike layers traced and lowered once (linnet.jax.layers): XLA inlines them again.
        self.generated: Generated = generate(fn, share_layers=True)
        self.stablehlo: StableHLO = export_stablehlo(fn, self.generated, sharding=sharding)
        contract = self.stablehlo.contract
        exported = self.stablehlo.executable()
        # Only state the entry assigns is donated: its buffer becomes the next state's.
        first_state = len(contract.inputs) + len(contract.params)
        donated = tuple(
            first_state + index
            for index, path in enumerate(contract.state)
            if path in contract.next_state
        )

        def call(*args: Any) -> Any:
            return exported.call(*_refuse_gradients(args))

        with x64_scope(self.stablehlo.x64):
            self._jitted = jax.jit(call, donate_argnums=donated if donate_state else ())

    @property
    def text(self) -> str:
        return self.stablehlo.text

    def __call__(
        self, weights: Mapping[str, Any], state: Mapping[str, Any], inputs: Sequence[Any]
    ) -> Outputs:
        contract = self.stablehlo.contract
        args = [
            *inputs,
            *(weights[p] for p in contract.params),
            *(state[p] for p in contract.state),
        ]
        with x64_scope(self.stablehlo.x64):
            flat = self._jitted(*args)
        results = list(flat[: contract.results])
        updates = dict(zip(contract.next_state, flat[contract.results :], strict=True))
        return results, updates


def run_function_jax(
    fn: Function,
    inputs: Sequence[np.ndarray],
    weights: Mapping[str, np.ndarray],
    state: Mapping[str, np.ndarray],
    *,
    stablehlo: bool = False,
    jit: bool = True,
) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
    """Run `fn` once on NumPy arrays (tests and tools); NumPy arrays come back.

    `jit=False` runs the generated source op by op (eagerly) instead of compiled.
    """
    runner: SourceRunner | StableHLORunner
    if stablehlo:
        runner = StableHLORunner(fn)
        x64 = runner.stablehlo.x64
    else:
        runner = SourceRunner(fn, jit=jit)
        x64 = runner.generated.x64
    typed = [
        np.asarray(a, numpy_dtype(v.type.dtype))
        for a, (_, v) in zip(inputs, fn.inputs, strict=True)
    ]
    with x64_scope(x64):
        results, updates = runner(weights, state, typed)
        out = [np.asarray(r) for r in results]
        new_state = {p: np.asarray(v) for p, v in updates.items()}
    return out, new_state
