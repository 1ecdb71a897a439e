"""`cumsum` on linnet.torch (interpreted and generated) against the exact reference."""

from __future__ import annotations

import pytest
from backend_cases import CUMSUM_DTYPES, check_cumsum, cumsum_data, cumsum_op
from torch_support import MODES, run_torch


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("dtype", CUMSUM_DTYPES)
def test_cumsum(dtype: str, axis: int, mode: str) -> None:
    x = cumsum_data(dtype, axis)
    (y,), _ = run_torch(cumsum_op(dtype, axis), [x], mode)
    check_cumsum(y, x, axis, dtype)
