"""The compiled libraries every kernel test runs on: the vector build (`-march=native`), the
AVX2 build (`-mno-avx512f`) and the portable loops (`-DLINNET_SCALAR`)."""

from __future__ import annotations

import pytest

from linnet import native
from linnet.native.kernels import Kernels


@pytest.fixture(scope="module", params=["native", "avx2", "scalar"])
def library(request: pytest.FixtureRequest) -> Kernels:
    found = native.kernels(request.param)
    if found is None:
        pytest.skip(f"no native kernels: {native.status(request.param).reason}")
    if request.param == "scalar":
        assert found.path == "scalar"
    if request.param == "avx2" and found.path != "avx2":
        pytest.skip(f"this CPU has no AVX2 (the library compiled {found.path})")
    return found
