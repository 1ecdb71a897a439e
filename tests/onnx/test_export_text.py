"""The ONNX text form: what `linnet onnx` prints reads back with `onnx.parser` unchanged.

Round trips over every construct the exporter emits: constants of every
dtype (bf16 and f16 bit patterns, NaN and infinities, signed zero, u64 and
i64 extremes, empty and rank-0 tensors), `Loop` and `If` bodies reading
outer values, metadata, and embedded initializers.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from export_support import ALL, normalized, run_onnx

from linnet.errors import LinnetError
from linnet.ir.core import Builder, TensorType, numpy_dtype
from linnet.onnx import export_ir, model_from_text, model_to_text

SPECIALS = {
    "f32": [0.1, 1e-5, -0.0, np.inf, -np.inf, np.nan, 3.4028235e38, 1e-45, 1 / 3],
    "f64": [9.210340371976184, 0.1, 1e-300, np.nan, -np.inf, -0.0],
    "f16": [0.1, 65504, np.inf, np.nan, -0.0, 6e-8],
    "bf16": [0.1, 3.0, np.inf, -np.inf, -0.0],
}


def _values(dtype: str) -> np.ndarray:
    if dtype in SPECIALS:
        return np.array(SPECIALS[dtype], numpy_dtype(dtype))
    if dtype == "bool":
        return np.array([True, False])
    info = np.iinfo(numpy_dtype(dtype))
    return np.array([info.min, info.max, 0, 1], numpy_dtype(dtype))


def _bits(array: np.ndarray) -> bytes:
    return array.tobytes()


@pytest.mark.parametrize("dtype", [*ALL, "bf16"])
def test_constants_of_every_dtype_round_trip(dtype: str) -> None:
    b = Builder.for_function([])
    values = _values(dtype)
    outs = [b.const(values, dtype), b.const(values[0], dtype), b.const(values[:0], dtype)]
    exported = export_ir(b.finish_function("consts", outs))
    text = exported.text()
    reparsed = model_from_text(text)
    assert normalized(reparsed) == normalized(exported.model)
    assert model_to_text(reparsed) == text
    tensors = [onnx.numpy_helper.to_array(n.attribute[0].t) for n in reparsed.graph.node
               if n.op_type == "Constant"]  # fmt: skip
    if dtype == "bf16":
        tensors = [t.view(ml_dtypes.bfloat16) if t.dtype != ml_dtypes.bfloat16 else t
                   for t in tensors]  # fmt: skip
    assert _bits(tensors[0]) == _bits(values)


def test_loop_if_metadata_and_initializers_round_trip() -> None:
    t = TensorType((3,), "f32")
    b = Builder.for_function([("x.in", t), ("n", TensorType((), "i32"))])
    x, n = b.args
    w = b.param("layers.0.weight", t)
    s = b.state("cache", t)
    (i, acc) = b.while_(
        [b.const(0, "i32"), x],
        lambda inner, v: [inner.binary("lt", v[0], n)],
        lambda inner, v: [
            inner.binary("add", v[0], inner.const(1, "i32")),
            inner.binary("add", inner.binary("mul", v[1], w), s),
        ],
    )
    (y,) = b.if_(
        b.binary("gt", i, b.const(1, "i32")),
        lambda inner, _: [inner.unary("neg", acc)],
        lambda inner, _: [acc],
    )
    fn = b.finish_function("f", [y], {"cache": y})
    weights = {"layers.0.weight": np.array([0.5, 1.0, 2.0], np.float32)}
    for exported in (export_ir(fn), export_ir(fn, weights=weights)):
        text = exported.text()
        assert "Loop" in text and "If" in text and "linnet.state.state0" in text
        reparsed = model_from_text(text)
        assert normalized(reparsed) == normalized(exported.model)
        onnx.checker.check_model(reparsed, full_check=True)
    # the parsed text runs and gives the same numbers as the model it came from
    exported.model.CopyFrom(model_from_text(exported.text()))
    state = {"cache": np.array([1.0, 0.0, -1.0], np.float32)}
    results, new_state = run_onnx(exported, [np.ones(3, np.float32), np.array(3, np.int32)],
                                  None, state)  # fmt: skip
    assert results[0].shape == (3,) and "cache" in new_state


def test_text_errors() -> None:
    with pytest.raises(LinnetError, match="does not parse"):
        model_from_text("<ir_version: 10> main () => () { y = }")
    b = Builder.for_function([])
    exported = export_ir(b.finish_function("f", [b.param("w", TensorType((2,), "f32"))]),
                         weights={"w": np.zeros(2, np.float32)})  # fmt: skip
    exported.model.graph.initializer[0].data_location = onnx.TensorProto.EXTERNAL
    with pytest.raises(LinnetError, match="external file"):
        exported.text()
