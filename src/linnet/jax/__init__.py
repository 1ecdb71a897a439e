"""The JAX backend: Linnet models as `jax.numpy` source, StableHLO, and XLA executables.

Importing `linnet` never imports jax; importing `linnet.jax` does.
"""

from __future__ import annotations
