"""Readable local names in imported source (`linnet.sourcegen.names.plan_local_names`).

Exporters name values after the modules that made them (TorchScript:
`/model/layers.0/self_attn/q_proj/MatMul_output_0`; dynamo: ATen op names
plus the module path on the node). The importer names a local after the
module whose result it holds (`q_proj`, `out` for a layer's result, `logits`
for a named graph output), never after a layer number, and never like a
member it would shadow. Checked on sample names, on a hand-made graph
against ONNX Runtime, and on GPT-2 (TorchScript export) and Llama (dynamo
export) against PyTorch.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
from import_support import check_logits, close, imported, run_imported, run_onnxruntime

from linnet.sourcegen.graph import Node
from linnet.sourcegen.names import module_path, output_name, plan_local_names, shorter_name

if TYPE_CHECKING:
    from torch_exports import TorchExport

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

# Translator names the readable names replace on the common paths.
OPERATOR_NAMES = re.compile(r"\blet (product|gathered|gelu|silu)(_\d+)?\b")


def test_module_paths_from_scopes_and_torchscript_names() -> None:
    assert module_path("model.layers.0.self_attn.q_proj", "node_linear", "linear") == (
        "model", "layers", "0", "self_attn", "q_proj",
    )  # fmt: skip
    legacy = "/transformer/h.0/attn/c_attn/Gemm"
    assert module_path("", legacy, legacy + "_output_0") == (
        "transformer", "h", "0", "attn", "c_attn",
    )  # fmt: skip
    assert module_path("", "", "/model/norm/Mul_1_output_0") == ("model", "norm")
    # Exporter-invented scopes and plain names carry no path.
    assert module_path("_empty_nn_module_stack_from_metadata_hook", "n", "val_0") == ()
    assert module_path("", "Relu_3", "y") == ()


def test_output_names_and_shorter_names() -> None:
    assert output_name("logits") == "logits"
    assert output_name("hidden_states") == "hidden_states"
    for generated in ("output_0", "val_12", "/model/Add_output_0", "onnx::MatMul_5", "Y", "sum"):
        assert output_name(generated) == "", generated
    assert shorter_name("q_proj") == "q" and shorter_name("act_fn") == "act"
    assert shorter_name("ln_1") == ""


def _node(op: str, name: str, ins: list[str], outs: list[str], scope: str = "") -> Node:
    return Node(op, "", name, tuple(ins), tuple(outs), scope=scope)


def test_plan_names_values_that_leave_their_module() -> None:
    """TorchScript names: a value read outside its module is named after the module;
    one read only inside keeps the translator's name; a layer's result is `out`;
    a module handing out two values names neither after itself."""
    n = [
        _node("MatMul", "/m/layers.0/attn/q_proj/MatMul", ["x", "w"],
              ["/m/layers.0/attn/q_proj/MatMul_output_0"]),
        _node("Reshape", "/m/layers.0/attn/Reshape", ["/m/layers.0/attn/q_proj/MatMul_output_0"],
              ["/m/layers.0/attn/Reshape_output_0"]),
        _node("Softmax", "/m/layers.0/attn/Softmax", ["/m/layers.0/attn/Reshape_output_0"],
              ["/m/layers.0/attn/Softmax_output_0"]),
        _node("Add", "/m/layers.0/Add", ["x", "/m/layers.0/attn/Softmax_output_0"],
              ["/m/layers.0/Add_output_0"]),
        _node("Cos", "/m/rotary/Cos", ["p"], ["/m/rotary/Cos_output_0"]),
        _node("Sin", "/m/rotary/Sin", ["p"], ["/m/rotary/Sin_output_0"]),
        _node("Mul", "/m/layers.1/Mul", ["/m/layers.0/Add_output_0", "/m/rotary/Cos_output_0"],
              ["/m/layers.1/Mul_output_0"]),
        _node("Mul", "/m/layers.1/Mul_1", ["/m/layers.1/Mul_output_0", "/m/rotary/Sin_output_0"],
              ["logits"]),
    ]  # fmt: skip
    plan = plan_local_names(n, ["logits"])
    assert plan == {
        "/m/layers.0/attn/q_proj/MatMul_output_0": "q_proj",
        "/m/layers.0/attn/Softmax_output_0": "attn",
        "/m/layers.0/Add_output_0": "out",
        "logits": "logits",
    }


def test_plan_names_from_dynamo_scopes() -> None:
    n = [
        _node("Gather", "node_embedding", ["w", "ids"], ["embedding"], "model.embed_tokens"),
        _node("MatMul", "node_linear", ["embedding", "wq"], ["linear"],
              "model.layers.0.self_attn.q_proj"),
        _node("Reshape", "node_view", ["linear", "s"], ["view"], "model.layers.0.self_attn"),
        _node("Mul", "node_silu", ["view", "view"], ["silu"], "model.layers.0.mlp.act_fn"),
        _node("Add", "node_add_7", ["silu", "embedding"], ["add_7"], "model.layers.0"),
        _node("MatMul", "node_linear_9", ["add_7", "wo"], ["output_0"], "lm_head"),
    ]  # fmt: skip
    plan = plan_local_names(n, ["output_0"])
    assert plan == {
        "embedding": "embed_tokens",
        "linear": "q_proj",
        "view": "self_attn",
        "silu": "act",
        "add_7": "out",
        "output_0": "lm_head",
    }


def test_torchscript_names_in_a_small_graph(tmp_path: Path) -> None:
    """Two identical layers named the TorchScript way become one method whose
    locals carry module names (no layer number, no shadowed member), and the
    import computes what ONNX Runtime computes."""
    rng = np.random.default_rng(3)
    nodes, inits = [], []
    hidden = "x"
    for layer in range(2):
        p = f"/enc/layers.{layer}"
        w1, w2 = f"enc.layers.{layer}.fc.weight", f"enc.layers.{layer}.proj.weight"
        for name in (w1, w2):
            inits.append(numpy_helper.from_array(rng.standard_normal((8, 8)).astype("f4"), name))
        nodes += [
            helper.make_node("MatMul", [hidden, w1], [f"{p}/fc/MatMul_output_0"],
                             name=f"{p}/fc/MatMul"),
            helper.make_node("Relu", [f"{p}/fc/MatMul_output_0"], [f"{p}/act/Relu_output_0"],
                             name=f"{p}/act/Relu"),
            helper.make_node("MatMul", [f"{p}/act/Relu_output_0", w2],
                             [f"{p}/proj/MatMul_output_0"], name=f"{p}/proj/MatMul"),
            helper.make_node("Add", [hidden, f"{p}/proj/MatMul_output_0"],
                             [f"{p}/Add_output_0"], name=f"{p}/Add"),
        ]  # fmt: skip
        hidden = f"{p}/Add_output_0"
    nodes.append(helper.make_node("Identity", [hidden], ["features"], name="/Identity"))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])
    y = helper.make_tensor_value_info("features", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "g", [x], [y], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    result = imported(model, tmp_path)
    text = result.source
    method = _layer_method(text)
    assert re.search(r"\blet act = relu\(", method) and "return out" in method, text
    # `fc` and `proj` are members of the layer block: a local of that name would
    # shadow them, so those keep the translator's names.
    assert not re.search(r"\blet (fc|proj)\b", method), text
    assert not re.search(r"layers_\d", text), text
    feeds = {"x": rng.standard_normal((3, 8)).astype("f4")}
    (expected,) = run_onnxruntime(model, feeds)
    (actual,) = run_imported(result, [feeds["x"]])
    close(actual, expected)


def _layer_method(text: str) -> str:
    return text.split("pub fn forward", 1)[1].split("\n    }\n", 1)[0]


def test_gpt2_torchscript_export_reads_with_module_names(
    gpt2_torchscript: TorchExport, tmp_path: Path
) -> None:
    result = imported(gpt2_torchscript.path, tmp_path / "out", "gpt2")
    text = result.source
    method = _layer_method(text)
    for name in ("c_attn", "c_proj", "c_fc", "act", "out"):
        assert re.search(rf"\blet {name}\b", method), (name, text)
    for name in ("wte", "wpe", "ln_f", "logits"):
        assert re.search(rf"\blet {name}\b", text), (name, text)
    assert "return logits" in text
    assert not re.search(r"\blet (gathered|gelu)", method), text
    assert not re.search(r"\bh_\d", text), text
    check_logits(result, gpt2_torchscript.model, batch=3, lengths=(5,), mask=True)


@pytest.mark.slow
def test_llama_dynamo_export_reads_with_module_names(
    llama_dynamo: TorchExport, tmp_path: Path
) -> None:
    result = imported(llama_dynamo.path, tmp_path / "out", "llama")
    text = result.source
    method = _layer_method(text)
    for name in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"):
        assert re.search(rf"\blet {name}\[", method), (name, text)
    assert re.search(r"\blet act = silu\(", method) and "return out" in method, text
    assert not OPERATOR_NAMES.search(text), text
    assert not re.search(r"\blet (input_layernorm|mlp|self_attn)\b", method), text
    assert "let embed_tokens" in text and "return logits" in text
    check_logits(result, llama_dynamo.model, batch=2, lengths=(5,))


def _scoped(node: onnx.NodeProto, scope: str) -> onnx.NodeProto:
    entry = node.metadata_props.add()
    entry.key = "pkg.torch.onnx.name_scopes"
    entry.value = repr(["", scope, node.name])
    return node


def test_folded_weights_are_named_for_the_layout_they_are_read_in(tmp_path: Path) -> None:
    """A generated initializer read as a `MatMul` matrix is `[in, out]`, the transpose
    of what `nn.Linear` stores: it is `<module>.weight_t`, so the original checkpoint
    cannot bind to it by name; a `Gemm` with `transB=1` reads `[out, in]`: `weight`."""
    rng = np.random.default_rng(5)
    arrays = {
        name: rng.standard_normal((6, 6)).astype("f4") for name in ("val_1", "val_2", "val_3")
    }
    nodes = [
        _scoped(helper.make_node("MatMul", ["x", "val_1"], ["a"], name="node_mm"), "enc.fc"),
        _scoped(helper.make_node("Gemm", ["a", "val_2"], ["b"], name="node_g1", transB=1), "enc.g"),
        _scoped(helper.make_node("Gemm", ["b", "val_3"], ["y"], name="node_g2"), "enc.h"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    inits = [numpy_helper.from_array(a, n) for n, a in arrays.items()]
    graph = helper.make_graph(nodes, "g", [x], [y], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    result = imported(model, tmp_path)
    expected = {"enc.fc.weight_t": "val_1", "enc.g.weight": "val_2", "enc.h.weight_t": "val_3"}
    assert result.parameters == expected, result.parameters
    feeds = {"x": rng.standard_normal((2, 6)).astype("f4")}
    (actual,) = run_imported(result, [feeds["x"]])
    close(actual, run_onnxruntime(model, feeds)[0])
