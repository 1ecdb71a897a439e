"""One torch thread while the Triton tests run (`one_torch_thread`).

This folder is `linnet_triton`, not `triton`: `tests/` is on `sys.path`, and a
folder named `triton` there would pass for OpenAI's Triton package, which torch
and transformers probe for.
"""

from __future__ import annotations

from one_torch_thread import one_torch_thread

__all__ = ["one_torch_thread"]
