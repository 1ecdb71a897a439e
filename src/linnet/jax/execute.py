"""Run one lowered function on JAX: as jitted generated source or as StableHLO on XLA.

Stage: the JAX backend's runners, below the loaders. In: a lowered,
optimised `Function`. Out:

- `SourceRunner`: the generated `jax.numpy` source under `jax.jit`, called as
  `run(weights, state, inputs) -> (results, new state)`; differentiable
  (`remat=`: each layer under `jax.checkpoint`, `linnet.jax.remat`);
- `StableHLORunner` (`load`): the entry's StableHLO text (`linnet.jax.stablehlo`),
  parsed back and compiled by XLA through `jax.export`, called the same way;
- `XlaRunner` (`load_model`): the same lean program jitted directly, which
  compiles what the text holds without exporting and parsing it on the way.

The two XLA runners take `donate_state=True` to donate the state arguments so XLA
may update them in place (only the state members the function assigns, whose old
values are dead after the call), and refuse differentiation with a `LinnetError`.

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
from linnet.jax.stablehlo.export import (
    Contract,
    StableHLO,
    argument_types,
    contract_of,
    export_stablehlo,
    flat_function,
    jit_shardings,
    tensor_types,
)

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


def donated_arguments(contract: Contract) -> tuple[int, ...]:
    """The positions of `@main`'s state arguments the entry assigns: each buffer becomes
    the next state's (the other state and every weight stay the caller's)."""
    first_state = len(contract.inputs) + len(contract.params)
    return tuple(
        first_state + index
        for index, path in enumerate(contract.state)
        if path in contract.next_state
    )


class _FlatRunner:
    """Calls a jitted `@main` (flat arguments in the contract's order) with weights,
    state and inputs by name; what both XLA runners share."""

    contract: Contract
    x64: bool
    _jitted: Callable[..., Any]

    def __call__(
        self, weights: Mapping[str, Any], state: Mapping[str, Any], inputs: Sequence[Any]
    ) -> Outputs:
        contract = self.contract
        args = [
            *inputs,
            *(weights[p] for p in contract.params),
            *(state[p] for p in contract.state),
        ]
        with x64_scope(self.x64):
            flat = self._jitted(*args)
        results = list(flat[: contract.results])
        updates = dict(zip(contract.next_state, flat[contract.results :], strict=True))
        return results, updates


class XlaRunner(_FlatRunner):
    """One function's lean generated program jitted straight to XLA (`load_model`).

    The same program `StableHLORunner` exports (`generate(..., share_layers=True)`,
    the flat `@main` of the StableHLO contract), traced and compiled by `jax.jit`
    itself on the first call, as a hand-written JAX model is: no `jax.export`, no
    text printed and parsed back, no `Exported.call` lowered again inside the jit.
    XLA compiles the same StableHLO; `text` exports it on demand (what
    `JaxModel.stablehlo_text` shows). Gradients are refused as for `StableHLORunner`.
    """

    def __init__(
        self,
        fn: Function,
        *,
        donate_state: bool = False,
        sharding: Callable[[str | None, TensorType], Any] | None = None,
    ) -> None:
        self.function = fn
        self.sharding = sharding
        self.generated: Generated = generate(fn, share_layers=True)
        self.x64 = self.generated.x64
        self.contract = contract_of(fn)
        types = argument_types(fn, self.contract, tensor_types(fn))
        main = flat_function(self.generated, self.contract)

        def call(*args: Any) -> Any:
            return main(*_refuse_gradients(args))

        self._jitted = jax.jit(
            call,
            keep_unused=True,
            donate_argnums=donated_arguments(self.contract) if donate_state else (),
            **jit_shardings(self.contract, types, sharding),
        )
        self._stablehlo: StableHLO | None = None

    @property
    def stablehlo(self) -> StableHLO:
        """The StableHLO module XLA compiles for this function (exported on first use)."""
        if self._stablehlo is None:
            self._stablehlo = export_stablehlo(
                self.function, self.generated, sharding=self.sharding
            )
        return self._stablehlo

    @property
    def text(self) -> str:
        return self.stablehlo.text


class StableHLORunner(_FlatRunner):
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
        self.contract = self.stablehlo.contract
        self.x64 = self.stablehlo.x64
        exported = self.stablehlo.executable()

        def call(*args: Any) -> Any:
            return exported.call(*_refuse_gradients(args))

        donated = donated_arguments(self.contract) if donate_state else ()
        with x64_scope(self.x64):
            self._jitted = jax.jit(call, donate_argnums=donated)

    @property
    def text(self) -> str:
        return self.stablehlo.text


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
