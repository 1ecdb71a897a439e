"""The state of an ONNX Runtime model: one device buffer per state path, kept between calls.

Stage: the runtime side of `linnet.onnx` (`model.OnnxModel` owns one store, its
entry sessions bind from it). In: the model's state paths and types and the
device. Out: the buffer holding each state now, and a spare per path for the
entries that cannot update a state in place (`_contract.UpdateMode` "swap").

Buffers are zero before the first call (language.md 12.6) and `reset` zeroes
them where they are, so their addresses never change except by a swap: that
is what CUDA graph replays and the in-place KV-cache update rely on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from linnet.errors import LinnetError
from linnet.ir.core import TensorType
from linnet.onnx.runtime.values import Buffer, Device


class StateStore:
    """Current (and spare) buffers by state path; see the module docstring."""

    def __init__(self, types: Mapping[str, TensorType], device: Device) -> None:
        self.types = dict(types)
        self.device = device
        self.current: dict[str, Buffer] = {
            path: Buffer(t, device, zero=True) for path, t in self.types.items()
        }
        self._spare: dict[str, Buffer] = {}
        self.swaps = 0
        """How many swap-mode updates ran (each wrote a whole state buffer in the graph)."""

    def spare(self, path: str) -> Buffer:
        """The second buffer of `path`, made on first use (for swap-mode updates)."""
        found = self._spare.get(path)
        if found is None:
            found = self._spare[path] = Buffer(self.types[path], self.device)
        return found

    def swap(self, path: str) -> None:
        """After a swap-mode run wrote the spare: it becomes the state, the old one the spare."""
        self.current[path], self._spare[path] = self._spare[path], self.current[path]
        self.swaps += 1

    def adopt(self, path: str, buffer: Buffer) -> None:
        """Make `buffer` hold the state of `path` again (a fixed binding), copying the
        current value into it when a swap has moved the state elsewhere."""
        now = self.current[path]
        if now is buffer:
            return
        buffer.value.update_inplace(now.value)
        self._spare[path] = now
        self.current[path] = buffer

    def reset(self) -> None:
        for buffer in self.current.values():
            buffer.zero()

    def snapshot(self) -> dict[str, np.ndarray[Any, Any]]:
        """Host copies of every state by path."""
        return {path: buffer.to_numpy() for path, buffer in self.current.items()}

    def buffer(self, path: str) -> Buffer:
        found = self.current.get(path)
        if found is None:
            known = ", ".join(f"`{p}`" for p in self.current) or "none"
            raise LinnetError(f"the model has no state `{path}` (state: {known})")
        return found
