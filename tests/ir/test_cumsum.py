"""`cumsum` (language-extensions section 5) in the reference interpreter and from source.

The reference (`backend_cases.cumsum_reference`) sums exactly: Python integers wrapped to
the dtype's width, f64 for floats. The linnet.torch and ONNX tests of the op are in
tests/torch/test_torch_cumsum.py and tests/onnx/test_export_cumsum.py; here the
interpreter, and the source path (checker, lowering) on both backends with the gradient.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from backend_cases import CUMSUM_DTYPES, CUMSUM_SHAPE, check_cumsum, cumsum_data, cumsum_op

from linnet.ir.interp import run_function


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("dtype", CUMSUM_DTYPES)
def test_interpreter(dtype: str, axis: int) -> None:
    x = cumsum_data(dtype, axis)
    (y,), _ = run_function(cumsum_op(dtype, axis), {}, {}, [x])
    check_cumsum(y, x, axis, dtype)


SOURCE = """module running

pub entry running<R: Dim, C: Dim, T: Numeric>(x: Tensor[R, C; T]) -> Tensor[R, C; T] {
    return cumsum(x, axis = -1)
}

pub entry starts<S: Dim>(lengths: Tensor[S; i64]) -> Tensor[S; i64] {
    return cumsum(lengths, axis = 0) - lengths
}
"""


@pytest.mark.parametrize("dtype", ["i8", "i32", "u16", "f32", "f64"])
def test_source_on_every_backend(dtype: str) -> None:
    import linnet.torch as lt
    from linnet.onnx import export_function
    from linnet.torch.dtypes import to_numpy, to_torch

    x = cumsum_data(dtype, 1)
    fn = lt.load_function(SOURCE, "running")
    check_cumsum(to_numpy(fn(to_torch(x, dtype, "cpu")), dtype), x, 1, dtype)
    generics = {"R": CUMSUM_SHAPE[0], "C": CUMSUM_SHAPE[1], "T": dtype}
    session = export_function(SOURCE, "running", generics=generics).session()
    (y,) = session.run(None, {session.get_inputs()[0].name: x})
    check_cumsum(y, x, 1, dtype)


def test_exclusive_starts_from_source() -> None:
    import linnet.torch as lt

    lengths = np.array([3, 0, 5, 2], np.int64)
    fn = lt.load_function(SOURCE, "starts")
    assert fn(torch.from_numpy(lengths)).tolist() == [0, 3, 3, 8]


def test_gradient_is_the_reverse_running_sum() -> None:
    """d/dx of sum(w * cumsum(x)) is cumsum of w taken from the other end."""
    import linnet.torch as lt

    fn = lt.load_function(SOURCE, "running")
    x = torch.randn(2, 6, dtype=torch.float64, requires_grad=True)
    w = torch.randn(2, 6, dtype=torch.float64)
    (fn(x) * w).sum().backward()
    expected = np.flip(np.cumsum(np.flip(w.numpy(), -1), -1), -1)
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-12)
