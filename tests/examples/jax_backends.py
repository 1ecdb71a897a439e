"""Backends of the example tests on JAX: `linnet.jax.load_model` and `load_source`.

Both follow the examples' `Backend` protocol (`forward`, `prefill`, `decode`,
`reset`; examples/01-llama/demo.py), so the same greedy loop drives
transformers' references and the JAX backend:

- `JaxModelBackend`: every entry on XLA from its StableHLO text, one copy of
  the weights, state kept on the device and donated between calls;
- `JaxSourceBackend`: one `load_source` function per entry (generated
  `jax.numpy` under `jax.jit`), the state passed in and taken back explicitly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import linnet.jax as lj


def as_numpy(value: Any) -> np.ndarray:
    return np.asarray(value, dtype=np.float32)


class JaxModelBackend:
    def __init__(self, source: Path, config: Mapping[str, object], weights: Any, **kw: Any) -> None:
        self.model = lj.load_model(source, generics=dict(config), weights=weights, **kw)

    def call(self, entry: str, inputs: Sequence[Any]) -> np.ndarray:
        return as_numpy(self.model.run_entry(entry, list(inputs)))

    def forward(self, tokens: np.ndarray) -> np.ndarray:
        return self.call("forward", [tokens])

    def prefill(self, tokens: np.ndarray, start: int) -> np.ndarray:
        return self.call("prefill", [tokens, start])

    def decode(self, token: np.ndarray, position: int) -> np.ndarray:
        return self.call("decode", [token, position])

    def reset(self) -> None:
        self.model.reset_state()


class JaxSourceBackend:
    def __init__(
        self,
        source: Path,
        config: Mapping[str, object],
        weights: Any,
        entries: Sequence[str] = ("forward", "prefill", "decode"),
        **kw: Any,
    ) -> None:
        self.entries = {
            name: lj.load_source(source, generics=dict(config), weights=weights, entry=name, **kw)
            for name in entries
        }
        self.state: dict[str, Any] | None = None

    def call(self, entry: str, inputs: Sequence[Any]) -> np.ndarray:
        fn = self.entries[entry]
        if entry == "forward":
            return as_numpy(fn(*inputs))
        result, self.state = fn(*inputs, state=self.state)
        return as_numpy(result)

    def forward(self, tokens: np.ndarray) -> np.ndarray:
        return self.call("forward", [tokens])

    def prefill(self, tokens: np.ndarray, start: int) -> np.ndarray:
        return self.call("prefill", [tokens, start])

    def decode(self, token: np.ndarray, position: int) -> np.ndarray:
        return self.call("decode", [token, position])

    def reset(self) -> None:
        self.state = None


class JaxNnxBackend:
    """`linnet.jax.load_nnx`: the entries as methods of the root NNX module, state in its
    `StateVar`s between calls."""

    def __init__(self, source: Path, config: Mapping[str, object], weights: Any, **kw: Any) -> None:
        self.module = lj.load_nnx(source, generics=dict(config), weights=weights, **kw)

    def call(self, entry: str, inputs: Sequence[Any]) -> np.ndarray:
        return as_numpy(self.module.run_entry(entry, *inputs))

    def forward(self, tokens: np.ndarray) -> np.ndarray:
        return self.call("forward", [tokens])

    def prefill(self, tokens: np.ndarray, start: int) -> np.ndarray:
        return self.call("prefill", [tokens, start])

    def decode(self, token: np.ndarray, position: int) -> np.ndarray:
        return self.call("decode", [token, position])

    def reset(self) -> None:
        self.module.reset_state()
