"""`one_torch_thread`: one torch thread while a package's tests run (restored after).

A package's conftest imports it (`from one_torch_thread import one_torch_thread`),
which makes it an autouse fixture there. The models of those tests are tiny: a call
takes a millisecond on one thread, while torch's default of one thread per core spins
against every other process on a shared machine and makes each call hundreds of
times slower.
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
