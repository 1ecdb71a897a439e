"""One lowered Core IR function as StableHLO MLIR text, with its calling contract.

Stage: the JAX backend's exporter. In: a lowered, optimised `Function`
(static shapes). Out: `StableHLO`: the text of an MLIR module whose
`@main` takes and returns flat tensors, plus the `Contract` that says what
each one is. The module is obtained by tracing the generated `jax.numpy`
source (`linnet.jax.codegen`) with `jax.export` at the entry's static
types, so XLA receives exactly what `load_source` computes.

The contract (the same one the ONNX graph follows, architecture.md "Backends"):

- arguments: the entry's inputs in order, then every param and buffer the
  entry reads (in order of first read), then every state member it reads or
  assigns (state in);
- results: the entry's results in order (a tuple result is one per element),
  then the new value of every state member the entry assigns (next state);
- the module's attributes record it: `linnet.entry` (the entry's name),
  `linnet.inputs` (input names), `linnet.params` (param/buffer paths),
  `linnet.state` (state-in paths), `linnet.results` (the number of results)
  and `linnet.next_state` (next-state paths), arrays of strings and an
  integer that any MLIR reader can get back (`parse_contract`).

The text parses with the MLIR Python bindings that ship with jaxlib;
`StableHLO.executable()` does so and serialises the parsed module into a
`jax.export.Exported`, so what runs on XLA is the text itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
from jax._src.interpreters import mlir as jax_mlir
from jaxlib.mlir import ir

from linnet.errors import InternalError
from linnet.ir.core import Function, TensorType, numpy_dtype
from linnet.ir.regions import paths_read, walk
from linnet.jax.codegen import Generated, generate
from linnet.jax.dtypes import x64_scope
from linnet.records import record


@record(frozen=True)
class Contract:
    """What the flat arguments and results of `@main` are (see the module docstring)."""

    entry: str
    inputs: tuple[str, ...]
    params: tuple[str, ...]
    state: tuple[str, ...]
    results: int
    next_state: tuple[str, ...]


@record(eq=False)
class StableHLO:
    """The StableHLO text of one entry, its contract and argument types."""

    text: str
    contract: Contract
    argument_types: tuple[TensorType, ...]
    x64: bool
    exported: Any  # jax.export.Exported traced from the generated source

    def executable(self) -> Any:
        """A `jax.export.Exported` whose module is `self.text`, parsed back (not the trace)."""
        module = ir.Module.parse(self.text, jax_mlir.make_ir_context())
        parsed = parse_contract(module)
        if parsed != self.contract:
            raise InternalError("the StableHLO text lost its linnet.* contract attributes")
        bytecode = jax_mlir.module_to_bytecode(module)
        return dataclasses.replace(self.exported, mlir_module_serialized=bytecode)


def contract_of(fn: Function) -> Contract:
    """The contract of `fn` (see the module docstring)."""
    weights = _first_reads(fn)
    state = list(dict.fromkeys([*paths_read(fn, "state"), *fn.state_updates]))
    return Contract(
        fn.name,
        tuple(name for name, _ in fn.inputs),
        tuple(weights),
        tuple(state),
        len(fn.results),
        tuple(fn.state_updates),
    )


def _first_reads(fn: Function) -> list[str]:
    """Param and buffer paths in order of first read."""
    seen: dict[str, None] = {}
    for op in walk(fn.body):
        if op.kind in ("param", "buffer"):
            seen.setdefault(str(op.attrs["path"]), None)
    return list(seen)


def flat_function(generated: Generated, contract: Contract) -> Any:
    """`@main`'s Python form: flat arguments in, flat results out."""
    n_inputs, n_params = len(contract.inputs), len(contract.params)

    def main(*args: Any) -> tuple[Any, ...]:
        inputs = args[:n_inputs]
        weights = dict(zip(contract.params, args[n_inputs : n_inputs + n_params], strict=True))
        state = dict(zip(contract.state, args[n_inputs + n_params :], strict=True))
        results, updates = generated.entry(weights, state, *inputs)
        return (*results, *(updates[p] for p in contract.next_state))

    return main


def argument_types(
    fn: Function, contract: Contract, tensors: dict[str, TensorType]
) -> tuple[TensorType, ...]:
    """The types of `@main`'s arguments; `tensors` maps weight and state paths to types."""
    inputs = [v.type for _, v in fn.inputs]
    return (*inputs, *(tensors[p] for p in (*contract.params, *contract.state)))


def tensor_types(fn: Function) -> dict[str, TensorType]:
    """Every param/buffer/state path `fn` reads or assigns, with its type."""
    found: dict[str, TensorType] = {}
    for op in walk(fn.body):
        if op.kind in ("param", "buffer", "state"):
            found[str(op.attrs["path"])] = op.results[0].type
    for path, value in fn.state_updates.items():
        found.setdefault(path, value.type)
    return found


def jit_shardings(
    contract: Contract,
    types: Sequence[TensorType],
    sharding: Callable[[str | None, TensorType], Any] | None,
) -> dict[str, Any]:
    """`jax.jit`'s `in_shardings` / `out_shardings` for `@main` over a mesh (none without):
    each argument where `sharding(path, type)` puts it (`path` None for an entry input),
    the next state where its state is, the results replicated."""
    if sharding is None:
        return {}
    paths: list[str | None] = [None] * len(contract.inputs)
    paths += [*contract.params, *contract.state]
    ins = tuple(sharding(p, t) for p, t in zip(paths, types, strict=True))
    by_state = dict(zip(contract.state, ins[len(ins) - len(contract.state) :], strict=True))
    replicated = sharding(None, TensorType((), "f32"))
    outs = (*([replicated] * contract.results), *(by_state[p] for p in contract.next_state))
    return {"in_shardings": ins, "out_shardings": outs}


def export_stablehlo(
    fn: Function,
    generated: Generated | None = None,
    *,
    sharding: Callable[[str | None, TensorType], Any] | None = None,
    gradients: Sequence[str] | None = None,
) -> StableHLO:
    """The StableHLO module of `fn` (see the module docstring), for JAX's default backend.

    `sharding(path, type)` gives the `jax.sharding.Sharding` of each argument
    (`path` None for an entry input) when the module is partitioned over a
    mesh: the next state gets its state's sharding, results are replicated,
    and XLA's partitioner (GSPMD) places the rest. `gradients` (a `--grad` export) names
    what each result after the loss is the gradient of: the `linnet.gradients` attribute.
    """
    generated = generated or generate(fn)
    contract = contract_of(fn)
    types = argument_types(fn, contract, tensor_types(fn))
    main = flat_function(generated, contract)
    options: dict[str, Any] = {"keep_unused": True, **jit_shardings(contract, types, sharding)}
    with x64_scope(generated.x64):
        specs = [jax.ShapeDtypeStruct(t.shape, numpy_dtype(t.dtype)) for t in types]  # type: ignore[no-untyped-call]
        exported = jax.export.export(jax.jit(main, **options))(*specs)
    module = ir.Module.parse(exported.mlir_module(), jax_mlir.make_ir_context())
    with module.context:
        attributes = module.operation.attributes
        attributes["linnet.entry"] = ir.StringAttr.get(contract.entry)
        attributes["linnet.inputs"] = _strings(contract.inputs)
        attributes["linnet.params"] = _strings(contract.params)
        attributes["linnet.state"] = _strings(contract.state)
        attributes["linnet.results"] = ir.IntegerAttr.get(
            ir.IntegerType.get_signless(64), contract.results
        )
        attributes["linnet.next_state"] = _strings(contract.next_state)
        if gradients is not None:
            attributes["linnet.gradients"] = _strings(gradients)
    text = str(module.operation.get_asm(enable_debug_info=False))
    return StableHLO(text, contract, types, generated.x64, exported)


def _strings(values: Sequence[str]) -> ir.ArrayAttr:
    return ir.ArrayAttr.get([ir.StringAttr.get(v) for v in values])


def parse_contract(module: ir.Module) -> Contract:
    """The `Contract` recorded in a module's `linnet.*` attributes."""
    attributes = module.operation.attributes

    def strings(key: str) -> tuple[str, ...]:
        return tuple(ir.StringAttr(a).value for a in ir.ArrayAttr(attributes[key]))

    return Contract(
        ir.StringAttr(attributes["linnet.entry"]).value,
        strings("linnet.inputs"),
        strings("linnet.params"),
        strings("linnet.state"),
        ir.IntegerAttr(attributes["linnet.results"]).value,
        strings("linnet.next_state"),
    )
