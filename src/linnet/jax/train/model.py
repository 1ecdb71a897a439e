"""A loaded JAX model as training sees it: its parameters, its entries as functions of them, ties.

Stage: the front of `linnet.jax.train`. In: a `LinnetJaxFunction`
(`linnet.jax.load_source`, any entry of the model), a `JaxModel`
(`linnet.jax.load_model`) or a `LoraModel` (`linnet.jax.train.add_lora`).
Out: a `Trainable`:

- `parameters`: every param and buffer by path, the loaded device arrays (for
  a `LoraModel`, the adapters' `lora_A` / `lora_B` too);
- `entry(name)`: `apply(parameters, *inputs)` of that entry as generated
  `jax.numpy` source, the differentiable form (`load_source`), whatever the
  model was loaded as: training a `JaxModel` differentiates its entries
  through their source, not through the compiled StableHLO;
- `kinds`: `param` or `buffer` by path, which the trainable default reads;
- `ties`: each path whose array is another path's (a tied head) mapped to the
  first of its group in path order, so the pair is trained as one parameter.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from linnet.errors import LinnetError
from linnet.ir.bind import BoundModel
from linnet.jax.load import LinnetJaxFunction
from linnet.jax.model import JaxModel

Apply = Callable[..., Any]


@dataclass(frozen=True)
class Trainable:
    """What the training loops read of a model (see the module docstring)."""

    bound: BoundModel
    parameters: dict[str, Any]
    entry: Callable[[str], Apply]
    kinds: dict[str, str]
    ties: dict[str, str]
    adapters: frozenset[str] = frozenset()


class HasTrainable(Protocol):
    def trainable(self) -> Trainable: ...


def as_trainable(model: object) -> Trainable:
    """The `Trainable` of a `LinnetJaxFunction`, `JaxModel` or `LoraModel`."""
    lora = getattr(model, "trainable", None)
    if callable(lora):
        found = lora()
        if isinstance(found, Trainable):
            return found
    if isinstance(model, LinnetJaxFunction | JaxModel):
        if model.model is None:
            raise LinnetError(
                "train: the model is a module-level entry without parameters; "
                "load a block with weights"
            )
        return Trainable(
            bound=model.model,
            parameters=dict(model.parameters),
            entry=entry_functions(model),
            kinds={p: t.kind for p, t in model.model.tensors.items() if p in model.parameters},
            ties=tied_paths(model.parameters),
        )
    raise LinnetError(
        f"train: expected a model from linnet.jax.load_source or load_model, "
        f"got {type(model).__name__}"
    )


def entry_functions(model: LinnetJaxFunction | JaxModel) -> Callable[[str], Apply]:
    """`name -> apply(parameters, *inputs)` over the entries of `model`'s block, as source."""
    bound = model.model
    assert bound is not None
    opened: dict[str, LinnetJaxFunction] = {}

    def entry(name: str) -> Apply:
        found = opened.get(name)
        if found is None:
            if isinstance(model, LinnetJaxFunction) and model.name == name and not model.stablehlo:
                found = model
            elif name in bound.entries:
                found = LinnetJaxFunction(
                    bound.program,
                    bound.entries[name],
                    model=bound,
                    module=bound.program.graph.roots[0],
                    parameters=dict(model.parameters),
                    stablehlo=False,
                )
            else:
                listed = ", ".join(f"`{n}`" for n in bound.entries) or "none"
                raise LinnetError(
                    f"the model has no `{name}` entry, which training needs (entries: {listed}); "
                    "the decoder examples declare loss_packed, log_probs_packed and hidden_packed"
                )
            opened[name] = found
        return found.apply

    return entry


def tied_paths(parameters: Mapping[str, Any]) -> dict[str, str]:
    """Each path that holds the same array as an earlier path (in path order) -> that path."""
    first: dict[int, str] = {}
    ties: dict[str, str] = {}
    for path in sorted(parameters):
        owner = first.setdefault(id(parameters[path]), path)
        if owner != path:
            ties[path] = owner
    return ties
