"""One torch thread while the Triton tests run (restored after).

(This folder is `linnet_triton`, not `triton`: `tests/` is on `sys.path`, and a
folder named `triton` there would pass for OpenAI's Triton package, which torch
and transformers probe for.)

The models here are tiny: a call takes a millisecond on one thread, while
torch's default of one thread per core spins against every other process on
a shared machine and makes each call hundreds of times slower.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True, scope="package")
def one_torch_thread() -> Iterator[None]:
    try:
        import torch
    except ImportError:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
