"""Pattern recovery of layer norm, eager attention, causal-mask subgraphs and fully masked rows.

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


# ---------------------------------------------------------------- fully masked rows


def _padded_attention_model(
    fill: float, guarded: bool, shared: bool, negated: bool = False
) -> onnx.ModelProto:
    """Attention over `[B, 2, S, 4]` with a boolean mask input (true = attend) turned
    additive: `Where(mask, 0, fill)`, `[B, 1, S, S]` per row or `[S, S]` shared;
    `guarded` adds PyTorch's `Where(IsNaN(p), 0, p)`; `negated` writes
    `Where(Not(mask), fill, 0)`."""
    where = ["hidden", "fill", "zf"] if negated else ["mask", "zf", "fill"]
    nodes = [
        _const("zf", 0.0),
        _const("fill", fill),
        helper.make_node("Not", ["mask"], ["hidden"]),
        helper.make_node("Where", where, ["bias"]),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["qk"]),
        _const("scale", 0.5),
        helper.make_node("Mul", ["qk", "scale"], ["scores"]),
        helper.make_node("Add", ["scores", "bias"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["p"], axis=-1),
    ]
    probs = "p"
    if guarded:
        nodes += [
            helper.make_node("IsNaN", ["p"], ["nan"]),
            helper.make_node("Where", ["nan", "zf", "p"], ["p_safe"]),
        ]
        probs = "p_safe"
    nodes.append(helper.make_node("MatMul", [probs, "v"], ["out"]))
    shape = ["B", 2, "S", 4]
    inputs = [helper.make_tensor_value_info(n, F32, shape) for n in ("q", "k", "v")]
    mask_shape: list[object] = ["S", "S"] if shared else ["B", 1, "S", "S"]
    inputs.append(helper.make_tensor_value_info("mask", TensorProto.BOOL, mask_shape))
    return _model(nodes, inputs, "out", shape)


def _padded_feeds(shared: bool) -> dict[str, np.ndarray]:
    """Scores of spread ~+-40 (`s - 1e9` rounds to multiples of 64 in f32: a fill that
    does not absorb the scores shows), and a
    causal mask whose query rows 0 and 1 see no key (row 1 of the batch, or all rows
    when shared): a left-padded sequence."""
    rng = np.random.default_rng(5)
    q, k, v = (rng.normal(0.0, s, (2, 2, 5, 4)).astype(np.float32) for s in (6.0, 6.0, 1.0))
    causal = np.tril(np.ones((5, 5), dtype=bool))
    padded = causal.copy()
    padded[:, :2] = False
    if shared:
        mask = padded
    else:
        mask = np.stack([causal, padded])[:, None]
    return {"q": q, "k": k, "v": v, "mask": mask}


def _check_padded(model: onnx.ModelProto, shared: bool, tmp_path: Path) -> tuple[str, np.ndarray]:
    """The import against ONNX Runtime on every row (NaN where ONNX Runtime gives NaN)."""
    result = imported(model, tmp_path)
    feeds = _padded_feeds(shared)
    (expected,) = run_onnxruntime(model, feeds)
    (actual,) = run_imported(result, list(feeds.values()))
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5, equal_nan=True)
    return result.source + "\n" + "\n".join(result.notes), expected


@pytest.mark.parametrize("shared", [False, True])
def test_guarded_minus_inf_mask_zeroes_rows_that_see_no_key(shared: bool, tmp_path: Path) -> None:
    text, expected = _check_padded(_padded_attention_model(-np.inf, True, shared), shared, tmp_path)
    assert not np.isnan(expected).any() and np.all(expected[-1, :, :2] == 0.0)
    call = "attention(" if shared else "attention_rows("
    assert call in text and "softmax(" not in text, text
    assert "let visible[" in text and "select(visible[" in text, text
    assert "gives zeros, as the graph's NaN guard does" in text


@pytest.mark.parametrize(("shared", "negated"), [(False, False), (True, True)])
def test_unguarded_minus_inf_mask_gives_nan_on_rows_that_see_no_key(
    shared: bool, negated: bool, tmp_path: Path
) -> None:
    model = _padded_attention_model(-np.inf, False, shared, negated)
    text, expected = _check_padded(model, shared, tmp_path)
    assert np.isnan(expected[-1, :, :2]).all() and not np.isnan(expected[:, :, 2:]).any()
    assert ("attention(" if shared else "attention_rows(") in text and "softmax(" not in text, text
    assert "let visible[" in text and "gives NaN, as the graph's softmax does" in text


@pytest.mark.parametrize("fill", [float(np.finfo(np.float32).min), -1e30])
def test_an_absorbing_finite_mask_is_std_attention_as_it_is(fill: float, tmp_path: Path) -> None:
    """`s + fill` rounds to `fill`: a row that sees no key is uniform, as std's -1e30."""
    text, expected = _check_padded(_padded_attention_model(fill, False, False), False, tmp_path)
    np.testing.assert_allclose(expected[1, :, 0], expected[1, :, 1], rtol=1e-6)
    assert "attention_rows(" in text and "any[" not in text and "select(" not in text, text


@pytest.mark.parametrize("guarded", [False, True])
def test_a_finite_mask_that_keeps_the_scores_stays_as_written(
    guarded: bool, tmp_path: Path
) -> None:
    """`s - 1e9` keeps the scores' differences on a row that sees no key: std would
    average there, so the chain is kept (and still matches ONNX Runtime)."""
    model = _padded_attention_model(-1e9, guarded, False)
    text, expected = _check_padded(model, False, tmp_path)
    assert not np.allclose(expected[1, :, 0], expected[1, :, 1], rtol=1e-3)
    assert "attention_rows(" not in text and "softmax(" in text, text
    assert "kept attention ending at `out` as written: its mask adds -1e+09" in text


def test_left_padded_gpt2_sdpa_export_matches_on_every_position(
    gpt2_torchscript: TorchExport, tmp_path: Path
) -> None:
    """SDPA's TorchScript export: a `-inf` mask behind the NaN guard. Left padding
    leaves the padded positions of row 1 with no key to see: the graph gives zeros
    there, which the import writes after the std call."""
    import torch

    result = imported(gpt2_torchscript.path, tmp_path / "out", "gpt2")
    text = result.source
    # One `visible` row test for the mask both layers read, passed to the layer method.
    assert "attention_rows(" in text and "softmax" not in text, text
    assert text.count("= any[") == 1 and "select(visible[" in text, text
    assert "element.forward(hidden, mask, visible)" in text, text
    assert sum("gives zeros, as the graph's NaN guard does" in n for n in result.notes) == 2
    ids = torch.randint(0, 50, (2, 6), generator=torch.Generator().manual_seed(4))
    mask = torch.ones(2, 6, dtype=torch.int64)
    mask[1, :2] = 0
    with torch.no_grad():
        reference = gpt2_torchscript.model(input_ids=ids, attention_mask=mask, use_cache=False)
    feeds = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
    (expected,) = run_onnxruntime(gpt2_torchscript.path, feeds)
    (actual,) = run_imported(result, list(feeds.values()))
    close(actual, expected, rtol=1e-4, atol=1e-4)
    close(actual, reference.logits.numpy(), rtol=1e-4, atol=1e-4)


def _without_nan_guards(path: Path) -> onnx.ModelProto:
    """The model with every `Where(IsNaN(p), 0, p)` removed: its readers read `p`."""
    model = onnx.load(str(path))
    nodes = list(model.graph.node)
    made = {o: n for n in nodes for o in n.output}
    guards = {
        n.output[0]: made[n.input[0]]
        for n in nodes
        if n.op_type == "Where" and made.get(n.input[0]) and made[n.input[0]].op_type == "IsNaN"
    }
    assert len(guards) == 2
    for n in nodes:
        for i, name in enumerate(n.input):
            if name in guards:
                n.input[i] = guards[name].input[0]
    dropped = {id(g) for g in guards.values()} | {id(made[o]) for o in guards}
    del model.graph.node[:]
    model.graph.node.extend(n for n in nodes if id(n) not in dropped)
    return model


def test_left_padded_gpt2_without_the_nan_guard_gives_nan_as_the_graph_does(
    gpt2_torchscript: TorchExport, tmp_path: Path
) -> None:
    """Unguarded, a `-inf` row with no key is NaN, and the NaN reaches every position of
    that batch row through the next layer's keys; the import computes the same, with one
    `visible` test and one `nan` shared by the layers."""
    model = _without_nan_guards(gpt2_torchscript.path)
    result = imported(model, tmp_path / "out", "gpt2")
    text = result.source
    assert "attention_rows(" in text and "softmax" not in text, text
    assert "element.forward(hidden, mask, nan, visible)" in text, text
    ids = np.random.default_rng(4).integers(0, 50, (2, 6))
    mask = np.ones((2, 6), dtype=np.int64)
    mask[1, :2] = 0
    (expected,) = run_onnxruntime(model, {"input_ids": ids, "attention_mask": mask})
    assert np.isnan(expected[1]).all() and not np.isnan(expected[0]).any()
    (actual,) = run_imported(result, [ids, mask])
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-4, equal_nan=True)
