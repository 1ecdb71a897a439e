"""The Triton generator's text and the launch decisions, without running Triton.

(`test_triton_kernels.py` runs the kernels; these checks need neither Triton nor its
interpreter.)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from linnet.ir.core import Op, TensorType
from linnet.ir.kernel_instance import KernelInstance
from linnet.ir.lower import lower_function
from linnet.ir.passes import optimize
from linnet.pipeline import check_program
from linnet.torch import triton_kernels
from linnet.torch.ops import Context
from linnet.torch.triton_codegen import triton_source

TILES = Path(__file__).parents[2] / "examples" / "kernels" / "tiles.linnet"


def call_of(entry: str, types: list[TensorType]) -> Op:
    program = check_program(TILES.read_text(encoding="utf-8"), None)
    fn = optimize(lower_function(program, program.graph.roots[0], entry, types))
    return next(op for op in fn.body.ops if op.kind == "call")


def test_generated_text() -> None:
    matmul = call_of("product", [TensorType((37, 45), "f32"), TensorType((45, 21), "f32")])
    instance = matmul.attrs["kernel_instance"]
    assert isinstance(instance, KernelInstance)
    assert matmul.attrs["kernel"] == {
        "name": "kernels.tiles::matmul_tiles",
        "generics": {"M": 37, "K": 45, "N": 21, "BM": 16, "BN": 16, "BK": 16},
    }
    assert (instance.grid, instance.warps, instance.stages) == ((3, 2), 4, 2)
    text = triton_source(instance)
    assert "def kernel(a_ptr, b_ptr, c_ptr):" in text
    assert 'tl.dot(ta_, tb_, input_precision="ieee")' in text
    # row-major offsets, each index tile on its own axis; the store is masked
    assert "a_ptr + (((rows_)[:, None]) * 45 + (ks_)[None, :])" in text
    assert "while (k0_ < 45):" in text and "mask=live_)" in text
    histogram = call_of("histogram", [TensorType((300,), "i32")])
    text = triton_source(histogram.attrs["kernel_instance"])  # type: ignore[arg-type]
    assert "tl.atomic_add(counts_ptr + (bucket_), 1, mask=valid_)" in text
    assert "other=(-(1))" in text


def test_launch_decisions(monkeypatch: pytest.MonkeyPatch) -> None:
    cpu = Context(torch.device("cpu"))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    op = call_of("row_softmax", [TensorType((4, 50), "f32")])
    why = triton_kernels.explain(op, cpu)
    if triton_kernels.triton_available():
        assert why is not None and "TRITON_INTERPRET=1" in why
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    wide = call_of("row_softmax", [TensorType((4, 100), "f32")])
    if triton_kernels.triton_available():
        assert "where" in str(triton_kernels.explain(wide, cpu))
        assert triton_kernels.explain(op, cpu) is None


@pytest.mark.parametrize(
    ("word", "dtype", "value"),
    [
        ("store", "f32", None),
        ("atomic_add", "f32", 0.0),
        ("atomic_add", "i32", 0),
        ("atomic_max", "f32", -np.inf),
        ("atomic_min", "f32", np.inf),
        ("atomic_max", "i64", np.iinfo(np.int64).min),
        ("atomic_min", "i32", np.iinfo(np.int32).max),
    ],
)
def test_results_start_at_the_atomic_identity(word: str, dtype: str, value: float | None) -> None:
    buffer = triton_kernels._allocate(word, (3, 2), dtype, torch.device("cpu"))
    assert buffer.shape == (3, 2)
    if value is not None:
        assert bool((buffer == value).all())
