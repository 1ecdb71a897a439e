"""Which dtype runs where in exported graphs, and the bf16-on-CPU error.

ONNX Runtime has no bf16 contractions or reductions: a bf16 model computes
those in f32 between casts; its CPU provider has no bf16 arithmetic at all, so
a bf16 model there is one clear `LinnetError` (`check_provider`) instead of
ONNX Runtime's "Could not find an implementation" on some node. f16 models
run on the CPU (contractions and sums in f32) and match the reference within
f16 precision; 8- and 16-bit integer arithmetic runs in i32.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from backend_cases import assert_close
from export_support import check, run_onnx, validate

from linnet.errors import LinnetError
from linnet.ir.core import Builder, TensorType
from linnet.ir.interp import run_function
from linnet.onnx import check_provider, export_ir, export_model

MLP = """\
module mlp

use std.nn.linear::{Linear}
use std.nn.norm::{RmsNorm}
use std.nn.softmax::{softmax}

pub block Mlp<H: Dim, T: Float> {
    sub up: Linear<H, H, T>
    sub norm: RmsNorm<H, T>

    pub entry forward<B: Dim>(x: Tensor[B, H; T]) -> Tensor[B, H; T] {
        let y = norm.forward(up.forward(x))
        let total[b] = sum[h] y[b, h]
        return softmax(y) + reshape(total, [B, 1])
    }
}
"""


def _weights(dtype: str) -> dict[str, np.ndarray]:
    from linnet.ir.core import numpy_dtype

    rng = np.random.default_rng(3)
    shapes = {"up.weight": (4, 4), "up.bias": (4,), "norm.weight": (4,)}
    return {p: rng.uniform(-1, 1, s).astype(numpy_dtype(dtype)) for p, s in shapes.items()}


def _inputs_of(node_type: str, model: onnx.ModelProto) -> list[str]:
    return [name for n in model.graph.node if n.op_type == node_type for name in n.input]


def _producers(model: onnx.ModelProto) -> dict[str, onnx.NodeProto]:
    return {out: n for n in model.graph.node for out in n.output}


def test_bf16_contractions_and_reductions_run_in_f32() -> None:
    exported = export_model(MLP, generics={"H": 4, "T": "bf16", "B": 2}, std_root=_std())
    validate(exported)
    producers = _producers(exported.model)
    for op_type in ("Gemm", "MatMul", "ReduceSum", "ReduceMax"):
        for name in _inputs_of(op_type, exported.model):
            node = producers.get(name)
            if node is not None and node.op_type == "Cast":  # the f32 operand of the kernel
                assert node.attribute[0].i == onnx.TensorProto.FLOAT
    assert any(n.op_type == "Gemm" for n in exported.model.graph.node)


def test_bf16_model_on_the_cpu_is_a_clear_error() -> None:
    exported = export_model(MLP, generics={"H": 4, "T": "bf16", "B": 2}, std_root=_std())
    with pytest.raises(LinnetError, match=r"CPU provider has no bf16 arithmetic.*T=f16 or T=f32"):
        check_provider(exported.model, "cpu")
    with pytest.raises(LinnetError, match="computes in bf16"):
        exported.session("cpu")
    check_provider(exported.model, "cuda")  # the CUDA provider has the kernels
    with pytest.raises(LinnetError, match="unknown ONNX Runtime provider `tpu`"):
        check_provider(exported.model, "tpu")


def test_a_bf16_cast_inside_an_f32_model_counts_too() -> None:
    b = Builder.for_function([("x", TensorType((3,), "f32"))])
    rounded = b.cast(b.cast(b.args[0], "bf16"), "f32")
    exported = export_ir(b.finish_function("f", [rounded]))
    with pytest.raises(LinnetError, match="Cast"):
        check_provider(exported.model, "cpu")


def test_f16_model_runs_on_the_cpu() -> None:
    weights = _weights("f16")
    exported = export_model(
        MLP, generics={"H": 4, "T": "f16", "B": 2}, weights=weights, std_root=_std()
    )
    validate(exported)
    x = np.random.default_rng(0).uniform(-1, 1, (2, 4)).astype(np.float16)
    (actual,), _ = run_onnx(exported, [x])
    (expected,), _ = run_function(exported.function, weights, {}, [x])
    assert_close(actual, expected, "f16", scale=4.0)
    producers = _producers(exported.model)
    gemm_inputs = _inputs_of("Gemm", exported.model)[:2]
    assert all(producers[name].op_type == "Cast" for name in gemm_inputs)  # f32 on the CPU


def test_f16_contractions_stay_f16_for_cuda() -> None:
    exported = export_model(
        MLP, generics={"H": 4, "T": "f16", "B": 2}, std_root=_std(), provider="cuda"
    )
    producers = _producers(exported.model)
    assert not any(
        name in producers and producers[name].op_type == "Cast"
        for name in _inputs_of("Gemm", exported.model)[:2]
    )
    assert {p.key: p.value for p in exported.model.metadata_props}["linnet.provider"] == "cuda"


@pytest.mark.parametrize("dtype", ["i8", "u16"])
def test_small_integer_arithmetic_runs_in_i32(dtype: str) -> None:
    from linnet.ir.core import numpy_dtype

    t = TensorType((6,), dtype)
    b = Builder.for_function([("a", t), ("b", t)])
    fn = b.finish_function("f", [b.binary("mul", *b.args), b.binary("max", *b.args)])
    info = np.iinfo(numpy_dtype(dtype))
    a = np.array([info.min, info.max, 3, 100, 7, info.max // 2], numpy_dtype(dtype))
    exported = check(fn, [a, a[::-1].copy()])
    casts = [n for n in exported.model.graph.node if n.op_type == "Cast"]
    assert {c.attribute[0].i for c in casts} >= {onnx.TensorProto.INT32}


def _std() -> Path:
    return Path(__file__).resolve().parents[2] / "stdlib"


def test_cast_dtype_exports_an_f32_checkpoint_as_bf16() -> None:
    weights = _weights("f32")
    generics = {"H": 4, "T": "bf16", "B": 2}
    with pytest.raises(LinnetError):
        export_model(MLP, generics=generics, weights=weights, std_root=_std())
    exported = export_model(
        MLP, generics=generics, weights=weights, cast_dtype=True, std_root=_std()
    )
    assert {t.data_type for t in exported.model.graph.initializer} == {onnx.TensorProto.BFLOAT16}
    validate(exported)
    import ml_dtypes

    stored = exported.model.graph.initializer[0]
    raw = np.frombuffer(stored.raw_data, np.uint16).view(ml_dtypes.bfloat16).reshape(stored.dims)
    path = next(io.path for io in exported.inputs if io.name == stored.name)
    np.testing.assert_array_equal(raw, weights[path or ""].astype(ml_dtypes.bfloat16))


def test_bf16_graphs_compute_the_reference_values() -> None:
    """bf16 graphs (made for the CUDA provider) run in onnx's own reference evaluator.

    ONNX Runtime's CPU provider cannot run them, so `onnx.reference` (which has
    bf16 through ml_dtypes) is the independent runtime here.
    """
    import ml_dtypes
    from onnx.reference import ReferenceEvaluator

    t = TensorType((3, 4), "bf16")
    b = Builder.for_function([("a", t), ("b", t)])
    a, c = b.args
    outs = [
        b.binary("add", a, c),
        b.binary("mul", a, c),
        b.binary("div", a, c),
        b.binary("rem", a, c),
        b.binary("max", a, c),
        b.unary("exp", a),
        b.unary("rsqrt", c),
        b.unary("neg", a),
        b.reduce(a, "sum", (1,)),
        b.reduce(a, "max", (0,)),
        b.contract(a, c, lhs_contract=(1,), rhs_contract=(1,)),
        b.select(b.binary("lt", a, c), a, c),
        b.cast(a, "i32"),
        b.cast(b.cast(a, "f64"), "bf16"),
        b.cast(b.iota(4, "i32"), "bf16"),
    ]
    fn = b.finish_function("f", outs)
    rng = np.random.default_rng(0)
    x = rng.uniform(-2, 2, (3, 4)).astype(ml_dtypes.bfloat16)
    y = rng.uniform(0.5, 2, (3, 4)).astype(ml_dtypes.bfloat16)
    exported = export_ir(fn, provider="cuda")
    validate(exported)
    got = ReferenceEvaluator(exported.model).run(None, {"a": x, "b": y})
    expected, _ = run_function(fn, {}, {}, [x, y])
    for actual, wanted, value in zip(got, expected, fn.results, strict=True):
        assert_close(np.asarray(actual), wanted, value.type.dtype)
