"""One torch thread while the serving tests run (`one_torch_thread`)."""

from __future__ import annotations

from one_torch_thread import one_torch_thread

__all__ = ["one_torch_thread"]
