"""`cumsum` on the JAX backend (generated source; StableHLO under the slow marker) against the
exact reference of `backend_cases` (Python integers wrapped, f64), every numeric dtype."""

from __future__ import annotations

import pytest
from backend_cases import CUMSUM_DTYPES, check_cumsum, cumsum_data, cumsum_op
from jax_support import MODES, run_jax

pytest.importorskip("jax")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("dtype", CUMSUM_DTYPES)
def test_cumsum(dtype: str, axis: int, mode: str) -> None:
    x = cumsum_data(dtype, axis)
    (y,), _ = run_jax(cumsum_op(dtype, axis), [x], mode)
    check_cumsum(y, x, axis, dtype)
