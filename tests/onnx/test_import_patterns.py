"""Pattern recovery of layer norm, eager attention and causal-mask subgraphs.

Each recovery is checked end to end: the imported source calls the standard
op (and says so in `notes`), and computes what ONNX Runtime computes on the
original graph (hand-built graphs) or what PyTorch computes (exported
transformers models). Each has a variant with another constant that must
stay as written, still matching ONNX Runtime.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
import pytest
from import_support import check_logits, close, imported, run_imported, run_onnxruntime
from onnx import TensorProto, helper

if TYPE_CHECKING:
    from torch_exports import TorchExport

F32 = TensorProto.FLOAT
I64 = TensorProto.INT64


def _const(name: str, value: object, dtype: int = F32) -> onnx.NodeProto:
    arr = np.asarray(value, dtype=np.float32 if dtype == F32 else np.int64)
    return helper.make_node(
        "Constant", [], [name], value=helper.make_tensor(name, dtype, arr.shape, arr.reshape(-1))
    )


def _model(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    output: str,
    out_shape: list[object],
    initializers: list[onnx.TensorProto] = (),  # type: ignore[assignment]
    value_info: list[onnx.ValueInfoProto] = (),  # type: ignore[assignment]
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        inputs,
        [helper.make_tensor_value_info(output, F32, out_shape)],
        initializer=list(initializers),
        value_info=list(value_info),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


# ---------------------------------------------------------------- layer norm


def _layer_norm_model(square: str, divide: str, affine: str, exponent: float = 2.0):
    """`x: [B, S, 8]` through a spelled-out layer norm (eps 1e-5) over the last axis."""
    rng = np.random.default_rng(7)
    w = helper.make_tensor("w", F32, [8], rng.normal(1.0, 0.3, 8).astype(np.float32))
    b = helper.make_tensor("b", F32, [8], rng.normal(0.0, 0.3, 8).astype(np.float32))
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["mean"], axes=[-1]),
        helper.make_node("Sub", ["x", "mean"], ["d"]),
    ]
    if square == "pow":
        nodes += [_const("two", exponent), helper.make_node("Pow", ["d", "two"], ["sq"])]
    else:
        nodes.append(helper.make_node("Mul", ["d", "d"], ["sq"]))
    nodes += [
        helper.make_node("ReduceMean", ["sq"], ["var"], axes=[-1]),
        _const("eps", 1e-5),
        helper.make_node("Add", ["var", "eps"], ["ve"]),
        helper.make_node("Sqrt", ["ve"], ["std"]),
    ]
    if divide == "div":
        nodes.append(helper.make_node("Div", ["d", "std"], ["n"]))
    else:
        nodes += [
            helper.make_node("Reciprocal", ["std"], ["inv"]),
            helper.make_node("Mul", ["d", "inv"], ["n"]),
        ]
    last = "n"
    if "w" in affine:
        nodes.append(helper.make_node("Mul", [last, "w"], ["nw"]))
        last = "nw"
    if "b" in affine:
        nodes.append(helper.make_node("Add", [last, "b"], ["y"]))
        last = "y"
    nodes.append(helper.make_node("Identity", [last], ["out"]))
    inits = [t for t, used in ((w, "w" in affine), (b, "b" in affine)) if used]
    x = helper.make_tensor_value_info("x", F32, ["B", "S", 8])
    return _model(nodes, [x], "out", ["B", "S", 8], inits)


@pytest.mark.parametrize(
    ("square", "divide", "affine"),
    [
        ("pow", "div", "wb"),
        ("mul", "reciprocal", "wb"),
        ("pow", "div", "w"),
        ("pow", "reciprocal", "b"),
        ("mul", "div", ""),
    ],
)
def test_spelled_out_layer_norm_becomes_the_std_call(
    square: str, divide: str, affine: str, tmp_path: Path
) -> None:
    model = _layer_norm_model(square, divide, affine)
    result = imported(model, tmp_path)
    assert "layer_norm(" in result.source, result.source
    assert "rsqrt" not in result.source and "sqrt(" not in result.source
    assert any("recovered `layer_norm`" in n for n in result.notes), result.notes
    x = np.random.default_rng(1).normal(0.0, 2.0, (2, 3, 8)).astype(np.float32)
    (expected,) = run_onnxruntime(model, {"x": x})
    (actual,) = run_imported(result, [x])
    close(actual, expected, rtol=1e-5, atol=1e-5)


def _unoptimized_onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[object]:
    """ONNX Runtime without graph rewrites: its layer-norm fusion does not check
    the exponent, so the optimised session would compute a layer norm here."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return list(session.run(None, feeds))


def test_a_fourth_power_is_not_a_variance(tmp_path: Path) -> None:
    model = _layer_norm_model("pow", "div", "wb", exponent=4.0)
    result = imported(model, tmp_path)
    assert "layer_norm(" not in result.source
    assert not any("layer_norm" in n for n in result.notes)
    x = np.random.default_rng(2).normal(0.0, 1.0, (2, 3, 8)).astype(np.float32)
    (expected,) = _unoptimized_onnxruntime(model, {"x": x})
    (actual,) = run_imported(result, [x])
    close(actual, expected, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- causal masks


def _masked_attention_model(offset: int) -> onnx.ModelProto:
    """Attention over `[B, 2, S, 4]` with the mask `k <= q + offset` built from `Range`s."""
    nodes = [
        helper.make_node("Shape", ["q"], ["qs"], start=2, end=3),
        helper.make_node("Squeeze", ["qs"], ["s"]),
        _const("zero", 0, I64),
        _const("one", 1, I64),
        _const("off", offset, I64),
        _const("ax0", [0], I64),
        _const("ax1", [1], I64),
        helper.make_node("Range", ["zero", "s", "one"], ["r"]),
        helper.make_node("Unsqueeze", ["r", "ax1"], ["rq0"]),
        helper.make_node("Add", ["rq0", "off"], ["rq"]),
        helper.make_node("Unsqueeze", ["r", "ax0"], ["rk"]),
        helper.make_node("LessOrEqual", ["rk", "rq"], ["m"]),
        _const("zf", 0.0),
        _const("ninf", -np.inf),
        helper.make_node("Where", ["m", "zf", "ninf"], ["bias"]),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["qk"]),
        _const("scale", 0.5),
        helper.make_node("Mul", ["qk", "scale"], ["scores"]),
        helper.make_node("Add", ["scores", "bias"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["out"]),
    ]
    shape = ["B", 2, "S", 4]
    inputs = [helper.make_tensor_value_info(n, F32, shape) for n in ("q", "k", "v")]
    value_info = [
        helper.make_tensor_value_info("r", I64, ["S"]),
        helper.make_tensor_value_info("rq0", I64, ["S", 1]),
        helper.make_tensor_value_info("rq", I64, ["S", 1]),
        helper.make_tensor_value_info("rk", I64, [1, "S"]),
        helper.make_tensor_value_info("m", TensorProto.BOOL, ["S", "S"]),
    ]
    return _model(nodes, inputs, "out", shape, value_info=value_info)


def _run_attention(model: onnx.ModelProto, tmp_path: Path) -> str:
    result = imported(model, tmp_path)
    rng = np.random.default_rng(3)
    qkv = [rng.normal(0.0, 1.0, (2, 2, 5, 4)).astype(np.float32) for _ in range(3)]
    (expected,) = run_onnxruntime(model, dict(zip(("q", "k", "v"), qkv, strict=True)))
    (actual,) = run_imported(result, qkv)
    close(actual, expected, rtol=1e-5, atol=1e-5)
    return result.source + "\n".join(result.notes)


def test_a_range_built_causal_mask_becomes_causal_mask(tmp_path: Path) -> None:
    text = _run_attention(_masked_attention_model(0), tmp_path)
    assert "causal_mask<" in text and "attention(" in text, text
    assert "iota" not in text and "select(" not in text  # the construction is gone
    assert "a causal mask" in text


def test_a_shifted_mask_stays_a_mask(tmp_path: Path) -> None:
    text = _run_attention(_masked_attention_model(1), tmp_path)
    assert "attention(" in text and "causal_mask" not in text, text
    assert "iota" in text


# ---------------------------------------------------------------- transformers models


def test_gpt2_eager_torchscript_export_reads_like_gpt2(torch_exports: Any, tmp_path: Path) -> None:
    """Opset 14 spells layer norm out; eager attention casts its probabilities."""
    model = torch_exports.tiny_gpt2(attention="eager")
    path = torch_exports.export_torchscript(model, tmp_path / "gpt2.onnx", opset=14)
    assert any(n.op_type == "Pow" for n in onnx.load(str(path)).graph.node)
    result = imported(path, tmp_path / "out", "gpt2")
    text = result.source
    for call in ("layer_norm(", "attention_rows(", "gelu("):
        assert call in text, call
    assert "softmax" not in text and "batched_matmul" not in text
    assert sum("recovered `layer_norm`" in n for n in result.notes) == 5
    check_logits(result, model, batch=3, lengths=(7, 3), padded=True)


MASK_PARTS = ("iota<i64>(batch)", " & ", "<=")
"""What the spelled-out mask construction reads like (batch indices, and, compare)."""


def _entry(text: str) -> str:
    return text[text.index("pub entry") :]


def test_gpt2_dynamo_export_without_a_padding_mask_is_causal(
    torch_exports: Any, tmp_path: Path
) -> None:
    model = torch_exports.tiny_gpt2(attention="eager")
    path = torch_exports.export_dynamo(model, tmp_path / "gpt2.onnx", max_seq=16)
    result = imported(path, tmp_path / "out", "gpt2")
    text = result.source
    assert "attention(" in text and "causal_mask<seq, seq>()" in text, text
    assert not any(part in _entry(text) for part in MASK_PARTS), text
    assert "layer_norm(" in text and "gelu(" in text
    check_logits(result, model, batch=2, lengths=(7, 2))


def test_llama_dynamo_mask_folds_into_causal_attention(
    llama_dynamo: TorchExport, tmp_path: Path
) -> None:
    """transformers 5 ands the causal mask with an all-true packed-sequence test."""
    assert any(n.op_type == "CumSum" for n in onnx.load(str(llama_dynamo.path)).graph.node)
    result = imported(llama_dynamo.path, tmp_path / "out", "llama")
    text = result.source
    assert "grouped_attention(" in text and "some(causal_mask<seq, seq>())" in text, text
    entry = _entry(text)
    assert not any(part in entry for part in MASK_PARTS), entry
    assert sum("a causal mask" in n for n in result.notes) == 2
    check_logits(result, llama_dynamo.model, batch=2, lengths=(7, 3))
