"""`cumsum` exported as ONNX `CumSum` (through a wider dtype where ONNX Runtime has no
kernel), run in ONNX Runtime, against the exact reference and the interpreter."""

from __future__ import annotations

import pytest
from backend_cases import CUMSUM_DTYPES, check_cumsum, cumsum_data, cumsum_op
from export_support import check, run_onnx

from linnet.errors import LinnetError
from linnet.onnx import check_provider, export_ir

ON_CPU = [d for d in CUMSUM_DTYPES if d != "bf16"]


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("dtype", ON_CPU)
def test_cumsum(dtype: str, axis: int) -> None:
    x = cumsum_data(dtype, axis)
    fn = cumsum_op(dtype, axis)
    (y,), _ = run_onnx(export_ir(fn), [x])
    check_cumsum(y, x, axis, dtype)
    check(fn, [x], scale=float(x.shape[axis]))  # validated, and equal to the interpreter


def test_bf16_on_the_cpu_provider_is_refused_by_name() -> None:
    """ONNX Runtime's CPU provider has no bf16 arithmetic: `check_provider` says so."""
    with pytest.raises(LinnetError, match="bf16"):
        check_provider(export_ir(cumsum_op("bf16", 0)).model, "cpu")
