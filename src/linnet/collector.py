"""Python's cyclic garbage collector paused while a phase builds a large object graph.

Stage: a utility of the stages that lower or trace a whole model at once
(`linnet.onnx.export_model`'s lowering and graph, `linnet.ir.dynamic`'s samples,
the JAX backend's first call of an entry). They allocate hundreds of thousands
of small objects (Core IR ops and values, traced JAX values) that all stay
alive until the phase ends, so a collection of the
oldest generation finds no garbage, yet scans the whole heap again (a heap that
holds jax's and torch's modules): a third of a 22-layer export's time, and most
of `linnet.jax.load_model`'s lowering of a Llama entry. What became garbage in
the meantime is collected when the collector is back on.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic collector off for the block (back on after it, if it was on)."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
