"""Struct construction values (language-extensions 2) on every backend, against NumPy.

A struct value lowers to the tuple of its fields; an entry returning one gives the fields
in declaration order: Python backends a tuple, nested as declared (`linnet.ir.results`),
ONNX one output per leaf, depth first.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import linnet.torch as lt
from linnet.onnx import export_function

SOURCE = (Path(__file__).parents[1] / "conformance/valid/x_struct_examples.linnet").read_text()
MORE = (Path(__file__).parents[1] / "conformance/valid/x_struct_more.linnet").read_text()
X = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)


def _reference() -> tuple[np.ndarray, np.ndarray, int]:
    center = X.sum(0) / np.float32(4)
    spread = np.abs(X - center).max(0)
    return center, spread, 4


@pytest.mark.parametrize("compile", [False, True])
def test_torch(compile: bool) -> None:
    center, spread, count = _reference()
    got = lt.load_function(SOURCE, "describe", compile=compile)(torch.from_numpy(X))
    assert isinstance(got, tuple) and len(got) == 3
    np.testing.assert_allclose(got[0].numpy(), center, rtol=1e-6)
    np.testing.assert_allclose(got[1].numpy(), spread, rtol=1e-6)
    assert got[2].item() == count and got[2].dtype == torch.int64
    clipped = lt.load_function(SOURCE, "clipped_spread", compile=compile)(torch.from_numpy(X))
    np.testing.assert_allclose(clipped.numpy(), np.clip(spread, -1.0, 2.0) * count, rtol=1e-6)


def test_onnx_outputs_are_the_fields_in_order() -> None:
    center, spread, count = _reference()
    exported = export_function(SOURCE, "describe", generics={"R": 4, "N": 3})
    assert [str(io.type) for io in exported.outputs] == ["f32[3]", "f32[3]", "i64[]"]
    got = exported.session().run(None, {"x": X})
    np.testing.assert_allclose(got[0], center, rtol=1e-6)
    np.testing.assert_allclose(got[1], spread, rtol=1e-6)
    assert int(got[2]) == count


def test_nested_structs_tuples_and_vars() -> None:
    x = torch.tensor([1.0, -2.0, 3.0])
    (values, (scale_first, scale_second)), product = lt.load_function(MORE, "boxed")(x)
    torch.testing.assert_close(values, x)
    assert (scale_first.item(), scale_second.item(), product.item()) == (0.5, 2.0, 1.0)
    exported = export_function(MORE, "boxed", generics={"N": 3})
    flat = exported.session().run(None, {"x": x.numpy()})
    assert [float(np.asarray(v).reshape(-1)[0]) for v in flat[1:]] == [0.5, 2.0, 1.0]
