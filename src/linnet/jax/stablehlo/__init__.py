"""StableHLO text of a Linnet entry (`linnet stablehlo`) and the XLA executable made from it.

- `export_stablehlo(fn)` -> `StableHLO`: the MLIR text of one lowered entry with
  static shapes and the contract in the module's attributes (`linnet.*`);
- `StableHLO.executable()` parses that text back (the MLIR bindings of jaxlib)
  and wraps it as a `jax.export.Exported`, which XLA compiles and runs.
"""

from __future__ import annotations

from linnet.jax.stablehlo.export import Contract, StableHLO, export_stablehlo, parse_contract

__all__ = ["Contract", "StableHLO", "export_stablehlo", "parse_contract"]
