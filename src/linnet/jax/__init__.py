"""The JAX backend: Linnet models as `jax.numpy` source, StableHLO text and XLA executables.

Importing `linnet` never imports jax; importing `linnet.jax` does.

- `load_source(source, generics=..., weights=...)` -> `LinnetJaxFunction`:
  one entry as generated `jax.numpy` source under `jax.jit`, differentiable
  with `jax.grad` / `jax.vjp` (`f.apply(parameters, *inputs)`), `while` as
  `lax.while_loop`; `f.generated_source()` (what `linnet jax` prints).
- `load(...)`: the same entry as its StableHLO text (`linnet stablehlo`),
  parsed back and compiled by XLA once per input types; not differentiable.
- `load_model(...)` -> `JaxModel`: every entry of the root block over one copy
  of the weights, state kept on the device and donated to XLA between calls;
  `mesh=` shards weights and caches over several devices (XLA partitions).
- `load_nnx(...)` / `to_nnx(fn_or_model)` -> Flax NNX modules nested after
  the blocks (`nnx.Param`, `Buffer`, `StateVar`), whose calls run the
  generated source with the modules' current values (`linnet.jax.flax_nnx`;
  importing those two imports flax).
- `export_stablehlo(fn)`: the StableHLO text and contract of a lowered function.
- `import_stablehlo(text, params, output=...)` and `export_linnet(fn, params,
  example_inputs, output=...)`: StableHLO text, or a JAX function captured
  with `jax.export`, back to checked Linnet source (`linnet.jax.importer`).
- `linnet.jax.train` (SFT with optax, checkpoints, LoRA, FSDP over a mesh),
  `linnet.jax.dpo` and `linnet.jax.grpo` (sampling with `linnet.serve.Engine`,
  which runs a `load_model` model too): training, on `linnet.train`'s data and
  losses (imported on their own: they need optax, and torch for the data side).

Stateful entries are called `f(*inputs, state=mapping)` and return
`(result, new_state)`. Numerics follow the shared contract (architecture.md
"Backends"), tested against the NumPy reference interpreter op by op: every
Linnet dtype is native to XLA; 64-bit dtypes run inside a scoped
`jax.enable_x64(True)` (`linnet.jax.dtypes`), never by flipping the global flag.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from linnet.jax.load import LinnetJaxFunction, load, load_source
from linnet.jax.model import JaxModel, load_model
from linnet.jax.stablehlo import export_stablehlo

if TYPE_CHECKING:
    from linnet.jax.flax_nnx import load_nnx, to_nnx


def import_stablehlo(text: str, params: Any = None, **options: Any) -> Any:
    """StableHLO text as Linnet source (`linnet.jax.importer.api.import_stablehlo`).

    Imported on first use: the importer's translators live with the ONNX importer.
    """
    from linnet.jax.importer.api import import_stablehlo as run

    return run(text, params, **options)


def export_linnet(fn: Any, params: Any, example_inputs: Any, **options: Any) -> Any:
    """A JAX function as Linnet source (`linnet.jax.importer.api.export_linnet`)."""
    from linnet.jax.importer.api import export_linnet as run

    return run(fn, params, example_inputs, **options)


__all__ = [
    "JaxModel",
    "LinnetJaxFunction",
    "export_linnet",
    "export_stablehlo",
    "import_stablehlo",
    "load",
    "load_model",
    "load_nnx",
    "load_source",
    "to_nnx",
]


def __getattr__(name: str) -> Any:
    """`load_nnx` and `to_nnx` import flax on first use: the rest of the backend needs only jax."""
    if name in ("load_nnx", "to_nnx"):
        from linnet.jax import flax_nnx

        return getattr(flax_nnx, name)
    raise AttributeError(f"module 'linnet.jax' has no attribute {name!r}")
