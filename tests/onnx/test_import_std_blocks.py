"""Imported projections and norms are declared as the standard library's blocks.

A generated block holding exactly the params of `std.nn.linear::Linear`
(`weight [Out, In]`, optional `bias [Out]`) or `std.nn.norm::RmsNorm`
(`weight [H]`), read only as that block's `forward` reads them, is declared
`sub q_proj: Linear<In, Out, T>` and called `q_proj.forward(x)`, as
examples/01-llama writes it. The parameter paths do not change.

- examples/01-llama exported and imported (`example_imports`): every projection
  and norm is a std block, the paths and bytes are the example's, and the
  imported `forward` gives the example's logits on `linnet.torch`;
- a small Linnet model with a `Linear` and an `rms_norm` of a given eps,
  exported and imported: the eps of `RmsNorm.forward` folds, another keeps the
  generated block (checked against the model itself on `linnet.torch`);
- hand-built ONNX graphs, checked against ONNX Runtime: a weight also read by
  something else than `linear`, and a `Gemm` with `transB=0` (a square
  `[In, Out]` matrix, which `Linear` would read transposed), keep their
  generated blocks; a block type named `Linear` does not collide with the import.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from import_support import (
    EXAMPLE_ENTRIES,
    PROMPT,
    STDLIB,
    imported,
    load_imported,
    run_imported,
    run_onnxruntime,
)
from onnx import TensorProto, helper, numpy_helper

from linnet.onnx import export_model

torch = pytest.importorskip("torch")
lt = pytest.importorskip("linnet.torch")

Array = np.ndarray[Any, Any]

LLAMA_PROJECTIONS = {
    "self_attn.q_proj": "Linear<32, 32, f32>",
    "self_attn.k_proj": "Linear<32, 16, f32>",
    "self_attn.v_proj": "Linear<32, 16, f32>",
    "self_attn.o_proj": "Linear<32, 32, f32>",
    "mlp.gate_proj": "Linear<32, 48, f32>",
    "mlp.up_proj": "Linear<32, 48, f32>",
    "mlp.down_proj": "Linear<48, 32, f32>",
    "input_layernorm": "RmsNorm<32, f32>",
    "post_attention_layernorm": "RmsNorm<32, f32>",
}
"""The layer members of examples/01-llama at `EXAMPLE_SIZES` and their std block types."""


@pytest.mark.parametrize("entry", sorted(EXAMPLE_ENTRIES))
def test_llama_projections_and_norms_are_std_blocks(example_imports: Any, entry: str) -> None:
    case = example_imports("01-llama")
    result = case.results[entry]
    text = result.source
    assert "use std.nn.linear::{Linear}" in text
    assert "use std.nn.norm::{RmsNorm}" in text
    for path, std_type in LLAMA_PROJECTIONS.items():
        member = path.rsplit(".", 1)[-1]
        assert f"sub {member}: {std_type}" in text, (entry, path)
        assert f"{path}.forward(" in text, (entry, path)
    assert "sub lm_head: Linear<32, 61, f32>" in text and "lm_head.forward(" in text
    assert "sub norm: RmsNorm<32, f32>" in text and "model.norm.forward(" in text
    # Nothing is left calling the functions on the params, nor declaring their blocks.
    assert not re.search(r"\blinear\(|\brms_norm\(|block QProj|param weight: Tensor\[32; ", text)
    # The token embedding reads negative ids from the end (`select`), which
    # `Embedding` does not: it stays a generated block read by index.
    assert "model.embed_tokens.weight[" in text
    notes = result.notes
    assert "22 projections as std `Linear` blocks" in notes
    assert "7 norms as std `RmsNorm` blocks" in notes
    # The paths and bytes are the example's.
    assert set(result.parameters) == case.params(entry)
    module = load_imported(result)
    for path in case.params(entry):
        np.testing.assert_array_equal(module.tensor(path).detach().numpy(), case.weights[path])


def test_llama_with_std_blocks_gives_the_example_s_logits(example_imports: Any) -> None:
    case = example_imports("01-llama")
    reference = lt.load(case.source, generics=case.generics, weights=case.weights, std_root=STDLIB)
    module = load_imported(case.results["forward"])
    tokens = torch.from_numpy(np.random.default_rng(3).integers(0, 61, (1, PROMPT)).astype("i4"))
    with torch.no_grad():
        actual = module.run_entry("forward", [tokens]).numpy()
        expected = reference.run_entry("forward", [tokens]).numpy()
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)


_TINY = """module tiny

use std.nn.linear::{Linear}
use std.nn.norm::{rms_norm}

pub block Norm {
    param weight: Tensor[4; f32]
}

pub block Model {
    sub proj: Linear<4, 3, f32>
    sub norm: Norm

    pub entry forward(x: Tensor[2, 4; f32]) -> Tensor[2, 3; f32] {
        return proj.forward(rms_norm(x, norm.weight, EPS))
    }
}
"""


@pytest.mark.parametrize(
    ("eps", "folds", "bias"), [("1e-5", True, False), ("1e-6", False, False), ("1e-5", True, True)]
)
def test_biased_linear_and_rms_norm_of_an_exported_model(
    eps: str, folds: bool, bias: bool, tmp_path: Path
) -> None:
    """Linnet's exporter adds a `Linear`'s bias after its `Gemm`: it folds back too."""
    source = tmp_path / "tiny.linnet"
    source.write_text(_TINY.replace("EPS", eps))
    rng = np.random.default_rng(8)
    weights = {
        "proj.weight": rng.normal(size=(3, 4)).astype(np.float32),
        "norm.weight": rng.normal(size=4).astype(np.float32),
    }
    if bias:
        weights["proj.bias"] = rng.normal(size=3).astype(np.float32)
    exported = export_model(source, generics={}, weights=weights, std_root=STDLIB)
    result = imported(exported.model, tmp_path / "out")
    text = result.source
    assert "sub proj: Linear<4, 3, f32>" in text and "proj.forward(" in text
    assert "proj.bias" not in text and "+" not in text, text
    assert "1 projection as std `Linear` block" in result.notes
    if folds:
        assert "sub norm: RmsNorm<4, f32>" in text and "norm.forward(" in text
        assert "rms_norm(" not in text
    else:
        assert "RmsNorm" not in text and "rms_norm(x, norm.weight, 1e-6)" in text
        assert "param weight: Tensor[4; f32]" in text
    assert set(result.parameters) == set(weights)
    x = rng.normal(size=(2, 4)).astype(np.float32)
    reference = lt.load(source, weights=weights, std_root=STDLIB)
    with torch.no_grad():
        expected = reference.run_entry("forward", [torch.from_numpy(x)]).numpy()
    np.testing.assert_allclose(run_imported(result, [x])[0], expected, rtol=1e-5, atol=1e-6)


def _gemm_model(
    weight: Array, trans_b: int, weight_name: str, reread: bool, bias: bool = False
) -> onnx.ModelProto:
    """`y = Gemm(x, weight[, proj.bias])`; with `reread`, also `z = y @ weight` (the
    weight read twice)."""
    rows = weight.shape[0] if trans_b else weight.shape[1]
    inits = {weight_name: weight}
    if bias:
        inits["proj.bias"] = np.random.default_rng(1).normal(size=rows).astype(np.float32)
    nodes = [helper.make_node("Gemm", ["x", *inits], ["y"], transB=trans_b)]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, rows])]
    if reread:
        nodes.append(helper.make_node("MatMul", ["y", weight_name], ["z"]))
        outputs = [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, weight.shape[1]])]
    graph = helper.make_graph(
        nodes,
        "gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        outputs,
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize(
    ("shape", "trans_b", "reread", "bias", "folds"),
    [
        ((3, 4), 1, False, False, True),  # `linear(x, proj.weight)` only: a std block
        ((3, 4), 1, False, True, True),  # `linear(x, proj.weight, some(proj.bias))`
        ((4, 4), 1, True, False, False),  # the weight is also read by a matmul
        ((4, 4), 0, False, False, False),  # `[In, Out]`: not `Linear`'s orientation
        ((4, 4), 0, False, True, False),
    ],
    ids=["linear", "linear-bias", "weight-read-twice", "trans-b-0", "trans-b-0-bias"],
)
def test_hand_built_gemm(
    shape: tuple[int, int], trans_b: int, reread: bool, bias: bool, folds: bool, tmp_path: Path
) -> None:
    weight = np.random.default_rng(6).normal(size=shape).astype(np.float32)
    model = _gemm_model(weight, trans_b, "proj.weight", reread, bias)
    result = imported(model, tmp_path)
    text = result.source
    assert ("Linear<" in text) is folds, text
    assert ("proj.forward(" in text) is folds, text
    if folds:
        assert "sub proj: Linear<4, 3, f32>" in text and "block Proj" not in text
    else:
        assert "block Proj {" in text and "param weight: Tensor[4, 4; f32]" in text
        assert not any("std `Linear`" in note for note in result.notes)
    if reread:
        assert "linear(x, proj.weight)" in text
    assert set(result.parameters) == ({"proj.weight", "proj.bias"} if bias else {"proj.weight"})
    x = np.random.default_rng(7).normal(size=(2, 4)).astype(np.float32)
    (expected,) = run_onnxruntime(model, {"x": x})
    np.testing.assert_allclose(run_imported(result, [x])[0], expected, rtol=1e-5, atol=1e-5)


def test_an_added_value_that_is_not_a_bias_stays_an_addition(tmp_path: Path) -> None:
    """`Gemm(x, w, transB=1) + c` with `c` of shape `[1]` (not one value per output)."""
    rng = np.random.default_rng(9)
    inits = {"proj.weight": rng.normal(size=(3, 4)).astype(np.float32),
             "proj.shift": rng.normal(size=1).astype(np.float32)}  # fmt: skip
    nodes = [
        helper.make_node("Gemm", ["x", "proj.weight"], ["g"], transB=1),
        helper.make_node("Add", ["g", "proj.shift"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "shifted",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    result = imported(model, tmp_path)
    assert "Linear<" not in result.source and "+ proj.shift" in result.source, result.source
    x = rng.normal(size=(2, 4)).astype(np.float32)
    (expected,) = run_onnxruntime(model, {"x": x})
    np.testing.assert_allclose(run_imported(result, [x])[0], expected, rtol=1e-5, atol=1e-5)


def test_a_block_type_named_linear_does_not_collide(tmp_path: Path) -> None:
    """`linear.weight` names a block type `Linear`; the std block is imported under an alias."""
    weight = np.random.default_rng(9).normal(size=(3, 4)).astype(np.float32)
    model = _gemm_model(weight, 1, "linear.weight", reread=False)
    result = imported(model, tmp_path)
    text = result.source
    assert "use std.nn.linear::{Linear as StdLinear}" in text
    assert "sub linear: StdLinear<4, 3, f32>" in text and "linear.forward(x)" in text
    x = np.random.default_rng(2).normal(size=(2, 4)).astype(np.float32)
    (expected,) = run_onnxruntime(model, {"x": x})
    np.testing.assert_allclose(run_imported(result, [x])[0], expected, rtol=1e-5, atol=1e-5)


def test_the_folded_eps_is_the_std_default() -> None:
    """`RmsNorm.forward` calls `rms_norm` with its default eps; the importer folds only that."""
    from linnet.sourcegen.std_blocks import RMS_NORM_EPS

    norm = (STDLIB / "nn" / "norm.linnet").read_text()
    rms = norm[norm.index("pub op rms_norm") :]
    default = re.search(r"eps: f32 = ([0-9.e+-]+)", rms)
    assert default is not None and float(default.group(1)) == RMS_NORM_EPS
    block = norm[norm.index("pub block RmsNorm") :]
    assert "return rms_norm(x, weight)\n" in block
