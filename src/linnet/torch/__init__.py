"""The PyTorch backend: run Linnet models and functions as `torch.nn.Module`s.

Importing `linnet` never imports torch; importing `linnet.torch` does.

- `load(source, generics=..., weights=...)` -> `LinnetModule` (`forward`,
  `run_entry`, `reset_state`, `generated_source`); `compile=True` runs
  generated straight-line source instead of interpreting the IR,
  `trainable=True` makes params `nn.Parameter`s.
- `load_function(source, name)` -> `LinnetFunction` for a module-level entry.
- `export_linnet(module, example_inputs, output=...)` -> `ImportResult`: a
  `torch.nn.Module` captured with torch.export, imported back to Linnet
  (`linnet.torch.importer`).
- `generate_source(fn)` -> the Python source the generator writes for one
  lowered Core IR function (what `linnet torch` prints).

Numerics follow the shared contract (architecture.md "Backends"), checked
against the NumPy reference interpreter: integers exact, f32 within 1e-5
relative. Which dtype runs where: every dtype runs natively in torch except
`u16`/`u32`/`u64`, held in wider signed storage (`linnet.torch.dtypes`); bf16
and f16 arithmetic runs in torch's own kernels (f32 internally on CPU).
"""

from __future__ import annotations

from typing import Any

import torch

from linnet.ir.core import Function
from linnet.torch.function import LinnetFunction, load_function
from linnet.torch.load import load
from linnet.torch.module import LinnetModule


def export_linnet(module: torch.nn.Module, example_inputs: Any, **options: Any) -> Any:
    """Import `module` as Linnet source (`linnet.torch.importer.api.export_linnet`)."""
    from linnet.torch.importer.api import export_linnet as run

    return run(module, example_inputs, **options)


def generate_source(fn: Function, *, device: torch.device | str = "cpu") -> str:
    """The Python source `compile=True` generates for a lowered, optimised function."""
    from linnet.torch.codegen import generate

    return generate(fn, torch.device(device), hoist_weights=True).source


__all__ = [
    "LinnetFunction",
    "LinnetModule",
    "export_linnet",
    "generate_source",
    "load",
    "load_function",
]
