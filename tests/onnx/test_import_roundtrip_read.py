"""A Linnet export imported back reads like the example it came from.

examples/01-llama and examples/gpt2, exported with `export_model` (the
default `natives=True`: std calls as standard ONNX ops or their canonical
bodies inlined) one entry at a time and imported with `import_onnx`:

- the source calls the standard library where the example does: `RmsNorm`
  and `Linear` blocks or `layer_norm`, `rope`, `silu` or `gelu`, `attention` or
  `grouped_attention` (with `causal_mask` in `forward`), `write_span` for
  the KV caches; nothing of those bodies is left spelled out;
- the identical layers are one layer method called in a `static for`;
- with `natives=False` too (every std call as its canonical body);
- the parameter paths and bytes are the example's, and on `linnet.torch` the
  imported `forward` gives the example's logits, the imported `prefill` then
  several `decode` steps (state handed over by path) the example's logits
  and caches (1e-5 relative).

Then hand-built chains in the exporter's spellings with one constant or
attribute changed, which must stay as written (checked against ONNX Runtime).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from import_support import (
    EXAMPLE_ENTRIES,
    EXAMPLE_SIZES,
    PROMPT,
    STDLIB,
    imported,
    load_imported,
    run_imported,
    run_onnxruntime,
)
from import_support import ExampleImports as Case
from onnx import TensorProto, helper, numpy_helper

torch = pytest.importorskip("torch")
lt = pytest.importorskip("linnet.torch")

Array = np.ndarray[Any, Any]
STEPS = 4

# What each example writes as a std call or std block, per entry; and what must not be left.
CALLS = {
    "01-llama": ("RmsNorm<", "Linear<", "rope(", "silu(", "grouped_attention("),
    "gpt2": ("layer_norm(", "linear(", "gelu(", "attention("),
}
SPELLED_OUT = ("batched_matmul(", "softmax(", "sqrt(", "broadcast_to(", "= max(", "-1e30")


@pytest.fixture(
    scope="module",
    params=[(folder, natives) for folder in sorted(EXAMPLE_SIZES) for natives in (True, False)],
    ids=lambda p: f"{p[0]}-{'natives' if p[1] else 'bodies'}",
)
def case(request: pytest.FixtureRequest, example_imports: Any) -> Case:
    """`natives=True` (the default: standard ONNX ops where they exist) and
    `natives=False` (every std call as its canonical body)."""
    folder, natives = request.param
    return example_imports(folder, natives)


def _entry_body(text: str, entry: str) -> str:
    start = text.index(f"pub entry {entry}(")
    return text[start:]


@pytest.mark.parametrize("entry", sorted(EXAMPLE_ENTRIES))
def test_imported_source_uses_the_std_calls_of_the_example(case: Case, entry: str) -> None:
    text = case.results[entry].source
    for call in CALLS[case.folder]:
        assert call in text, (entry, call)
    assert "exp(" not in text and "tanh(" not in text  # activations and softmax folded
    for spelled in SPELLED_OUT:
        assert spelled not in text, (entry, spelled)
    if entry == "forward":
        assert "causal_mask<5, 5>()" in text
    else:
        assert text.count("write_span(") == 2  # k and v, once in the layer method
        assert "write_k_cache(" in text and "write_v_cache(" in text
    notes = "\n".join(case.results[entry].notes)
    for what in ("linear", "attention"):
        assert f"recovered `{what}`" in notes or f"recovered `grouped {what}`" in notes


@pytest.mark.parametrize("entry", sorted(EXAMPLE_ENTRIES))
def test_identical_layers_are_one_method_in_a_static_for(case: Case, entry: str) -> None:
    text = case.results[entry].source
    layers = "model.layers" if case.folder == "01-llama" else "transformer.h"
    body = _entry_body(text, entry)
    assert f"in {layers} {{" in body and "static for" in body
    assert "hidden = " in body and ".forward(hidden" in body
    assert f"{layers}[" not in body  # no layer spelled out in the entry
    assert text.count("pub fn forward(") == 1
    layers_count = int(case.generics["Layers"])  # type: ignore[call-overload]
    assert f"; {layers_count}]" in text


@pytest.mark.parametrize("entry", sorted(EXAMPLE_ENTRIES))
def test_parameter_paths_and_bytes_are_the_example_s(case: Case, entry: str) -> None:
    result = case.results[entry]
    assert set(result.parameters) == case.params(entry)
    module = load_imported(result)
    for path in case.params(entry):
        np.testing.assert_array_equal(module.tensor(path).detach().numpy(), case.weights[path])


def _close(actual: Any, expected: Any) -> None:
    a, e = actual.detach().numpy(), expected.detach().numpy()
    assert a.shape == e.shape
    np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(e).max())))


def _tokens(case: Case, count: int) -> Array:
    vocab = int(case.generics["Vocab"])  # type: ignore[call-overload]
    return np.random.default_rng(13).integers(0, vocab, (1, count)).astype(np.int32)


def test_imported_forward_matches_the_example(case: Case) -> None:
    reference = lt.load(case.source, generics=case.generics, weights=case.weights, std_root=STDLIB)
    module = load_imported(case.results["forward"])
    tokens = torch.from_numpy(_tokens(case, PROMPT))
    with torch.no_grad():
        _close(module.run_entry("forward", [tokens]), reference.run_entry("forward", [tokens]))


def test_imported_prefill_then_decode_matches_the_example(case: Case) -> None:
    reference = lt.load(case.source, generics=case.generics, weights=case.weights, std_root=STDLIB)
    prefill, decode = load_imported(case.results["prefill"]), load_imported(case.results["decode"])
    tokens = _tokens(case, PROMPT + STEPS)
    paths = sorted(case.results["prefill"].state)
    assert paths
    with torch.no_grad():
        start = torch.tensor(0, dtype=torch.int32)
        prompt = torch.from_numpy(tokens[:, :PROMPT])
        _close(prefill.run_entry("prefill", [prompt, start]),
               reference.run_entry("prefill", [prompt, start]))  # fmt: skip
        for path in paths:
            decode.tensor(path).copy_(prefill.tensor(path))
        for step in range(PROMPT, PROMPT + STEPS):
            args = [torch.from_numpy(tokens[:, step]), torch.tensor(step, dtype=torch.int32)]
            _close(decode.run_entry("decode", args), reference.run_entry("decode", args))
        for path in paths:
            _close(decode.tensor(path), reference.tensor(path))


# ---------------------------------------------------------------- exact structure


def _const(name: str, value: Any, dtype: Any = np.float32) -> onnx.NodeProto:
    return helper.make_node(
        "Constant", [], [name], value=numpy_helper.from_array(np.asarray(value, dtype), name)
    )


def _model(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    output: onnx.ValueInfoProto,
    inits: dict[str, Array],
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "chain",
        inputs,
        [output],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _f32(name: str, *shape: int) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def _rms_model(divisor: float, eps: float) -> onnx.ModelProto:
    """The exporter's `rms_norm` over x: [2, 3, 8] with the given divisor and eps."""
    nodes = [
        _const("row", [2, 3, 1, 8], np.int64),
        _const("col", [2, 3, 8, 1], np.int64),
        _const("ms", [2, 3], np.int64),
        _const("inv", [2, 3, 1], np.int64),
        _const("h", divisor),
        _const("eps", eps),
        helper.make_node("Reshape", ["x", "row"], ["xr"]),
        helper.make_node("Reshape", ["x", "col"], ["xc"]),
        helper.make_node("MatMul", ["xr", "xc"], ["sq"]),
        helper.make_node("Reshape", ["sq", "ms"], ["sq2"]),
        helper.make_node("Div", ["sq2", "h"], ["mean"]),
        helper.make_node("Add", ["mean", "eps"], ["shifted"]),
        helper.make_node("Sqrt", ["shifted"], ["root"]),
        helper.make_node("Reciprocal", ["root"], ["rinv"]),
        helper.make_node("Reshape", ["rinv", "inv"], ["rinv2"]),
        helper.make_node("Mul", ["x", "rinv2"], ["n"]),
        helper.make_node("Mul", ["n", "w"], ["y"]),
    ]
    w = np.linspace(0.5, 1.5, 8, dtype=np.float32)
    return _model(nodes, [_f32("x", 2, 3, 8)], _f32("y", 2, 3, 8), {"w": w})


@pytest.mark.parametrize(("divisor", "recovered"), [(8.0, True), (7.0, False)])
def test_rms_norm_in_the_exporter_s_spelling(
    divisor: float, recovered: bool, tmp_path: Path
) -> None:
    model = _rms_model(divisor, 1e-6)
    result = imported(model, tmp_path)
    assert ("rms_norm(x, w, 1e-6)" in result.source) is recovered, result.source
    x = np.random.default_rng(1).normal(size=(2, 3, 8)).astype(np.float32)
    (expected,) = run_onnxruntime(model, {"x": x})
    np.testing.assert_allclose(run_imported(result, [x])[0], expected, rtol=1e-5, atol=1e-6)


def _layer_norm_model(mean_divisor: float) -> onnx.ModelProto:
    """The exporter's `layer_norm(x [2, 3, 8], w, some(b))`: centring, then the `rms_norm` chain."""
    rms = _rms_model(8.0, 1e-5)
    nodes = [
        _const("axes", [-1], np.int64),
        _const("mean_div", mean_divisor),
        helper.make_node("ReduceSum", ["x", "axes"], ["total"], keepdims=0),
        helper.make_node("Div", ["total", "mean_div"], ["mean"]),
        helper.make_node("Reshape", ["mean", "inv"], ["mean_r"]),
        helper.make_node("Sub", ["x", "mean_r"], ["d"]),
    ]
    for node in rms.graph.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        copy.input[:] = ["d" if i == "x" else "mean2" if i == "mean" else i for i in node.input]
        copy.output[:] = ["mean2" if o == "mean" else "yw" if o == "y" else o for o in node.output]
        nodes.append(copy)
    # The shape constants come first (the centring reads `inv`).
    nodes = [n for n in nodes if n.op_type == "Constant"] + [
        n for n in nodes if n.op_type != "Constant"
    ]
    nodes.append(helper.make_node("Add", ["yw", "b"], ["y"]))
    inits = {"w": np.linspace(0.5, 1.5, 8, dtype=np.float32), "b": np.full(8, 0.25, np.float32)}
    return _model(nodes, [_f32("x", 2, 3, 8)], _f32("y", 2, 3, 8), inits)


@pytest.mark.parametrize(("divisor", "recovered"), [(8.0, True), (4.0, False)])
def test_layer_norm_in_the_exporter_s_spelling(
    divisor: float, recovered: bool, tmp_path: Path
) -> None:
    model = _layer_norm_model(divisor)
    result = imported(model, tmp_path)
    assert ("layer_norm(x, w, some(b), 1e-5)" in result.source) is recovered, result.source
    x = np.random.default_rng(3).normal(size=(2, 3, 8)).astype(np.float32)
    (expected,) = run_onnxruntime(model, {"x": x})
    np.testing.assert_allclose(run_imported(result, [x])[0], expected, rtol=1e-5, atol=1e-5)


def _write_span_model(clamp: int, limit: int) -> onnx.ModelProto:
    """The exporter's `write_span(cache [1, 2, 6, 4], value [1, 2, 3, 4], at)`."""
    nodes = [
        _const("zero", 0, np.int32),
        _const("one", 1, np.int32),
        _const("s", 6, np.int32),
        _const("n", limit, np.int32),
        _const("last", clamp, np.int32),
        _const("rows", [6, 1], np.int64),
        helper.make_node("Range", ["zero", "s", "one"], ["positions"]),
        helper.make_node("Sub", ["positions", "at"], ["off"]),
        helper.make_node("Max", ["off", "zero"], ["low"]),
        helper.make_node("Min", ["low", "last"], ["source"]),
        helper.make_node("GreaterOrEqual", ["off", "zero"], ["ge"]),
        helper.make_node("Less", ["off", "n"], ["lt"]),
        helper.make_node("And", ["ge", "lt"], ["inside"]),
        helper.make_node("Gather", ["value", "source"], ["taken"], axis=2),
        helper.make_node("Reshape", ["inside", "rows"], ["cond"]),
        helper.make_node("Where", ["cond", "taken", "cache"], ["y"]),
    ]
    at = helper.make_tensor_value_info("at", TensorProto.INT32, [])
    return _model(
        nodes, [_f32("cache", 1, 2, 6, 4), _f32("value", 1, 2, 3, 4), at], _f32("y", 1, 2, 6, 4), {}
    )


@pytest.mark.parametrize(("clamp", "limit", "recovered"), [(2, 3, True), (1, 3, False)])
def test_write_span_in_the_exporter_s_spelling(
    clamp: int, limit: int, recovered: bool, tmp_path: Path
) -> None:
    model = _write_span_model(clamp, limit)
    result = imported(model, tmp_path)
    assert ("write_span(cache, value, at)" in result.source) is recovered, result.source
    rng = np.random.default_rng(2)
    cache = rng.normal(size=(1, 2, 6, 4)).astype(np.float32)
    value = rng.normal(size=(1, 2, 3, 4)).astype(np.float32)
    module = load_imported(result)  # `at` is a scalar: run directly (the helper makes arrays)
    for at in (0, 2, 4):
        feeds = {"cache": cache, "value": value, "at": np.array(at, np.int32)}
        (expected,) = run_onnxruntime(model, feeds)
        args = [
            torch.from_numpy(cache),
            torch.from_numpy(value),
            torch.tensor(at, dtype=torch.int32),
        ]
        with torch.no_grad():
            actual = module.run_entry(result.entry, args)
        np.testing.assert_array_equal(actual.numpy(), expected)


def _attention_model(masked: float, trans_b: int) -> onnx.ModelProto:
    """`Where(mask, q @ kT * c, masked)`, softmax, `@ v`, then a `Gemm` projection."""
    nodes = [
        _const("c", 0.5),
        _const("masked", masked),
        _const("flat", [6, 4], np.int64),
        _const("back", [1, 2, 3, 4], np.int64),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"]),
        helper.make_node("Mul", ["scores", "c"], ["scaled"]),
        helper.make_node("Where", ["mask", "scaled", "masked"], ["sel"]),
        helper.make_node("Softmax", ["sel"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["att"]),
        helper.make_node("Reshape", ["att", "flat"], ["rows"]),
        helper.make_node("Gemm", ["rows", "w"], ["proj"], transB=trans_b),
        helper.make_node("Reshape", ["proj", "back"], ["y"]),
    ]
    mask = helper.make_tensor_value_info("mask", TensorProto.BOOL, [3, 3])
    w = np.random.default_rng(4).normal(size=(4, 4)).astype(np.float32)
    return _model(
        nodes,
        [_f32("q", 1, 2, 3, 4), _f32("k", 1, 2, 3, 4), _f32("v", 1, 2, 3, 4), mask],
        _f32("y", 1, 2, 3, 4),
        {"w": w},
    )


@pytest.mark.parametrize(
    ("masked", "trans_b", "attention", "linear"),
    [(-1e30, 1, True, True), (-1e9, 0, False, False)],
)
def test_attention_and_linear_in_the_exporter_s_spelling(
    masked: float, trans_b: int, attention: bool, linear: bool, tmp_path: Path
) -> None:
    model = _attention_model(masked, trans_b)
    result = imported(model, tmp_path)
    text = result.source
    assert ("attention(q, k, v, 0.5, some(mask))" in text) is attention, text
    assert ("linear(" in text) is linear, text
    rng = np.random.default_rng(5)
    q, k, v = (rng.normal(size=(1, 2, 3, 4)).astype(np.float32) for _ in range(3))
    mask = np.array([[1, 0, 1], [1, 1, 0], [0, 1, 1]], bool)
    (expected,) = run_onnxruntime(model, {"q": q, "k": k, "v": v, "mask": mask})
    actual = run_imported(result, [q, k, v, mask])[0]
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)
