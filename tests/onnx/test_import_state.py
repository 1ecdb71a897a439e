"""State members through `import_onnx`: an exported model's KV caches come back as `state`.

A Linnet export reads a state member as a graph input `state<N>` and returns
its new value as an output `next_state<N>`, with `linnet.state.*` /
`linnet.next_state.*` metadata naming its path. Imported, those are `state`
members of the blocks at their original paths, read where the graph read
them and assigned where it made the new value; the entry's results are only
the `output<N>` ones.

- The examples' cached entries (01-llama and GPT-2 `prefill` and `decode`),
  exported with seeded weights and imported one entry per file: the same
  parameter and state paths, and the imported `prefill` followed by several
  imported `decode` steps (the state carried by each `linnet.torch` module,
  handed from the prefill module to the decode module by path) give the
  logits and caches of the example itself on `linnet.torch`.
- Hand-built models (onnx.helper): a state read and written, read only,
  written only, rank 0, two states swapped, a result that is the old value;
  ONNX Runtime on the same graph, fed the state by hand, is the reference.
  Malformed metadata is a `LinnetError` naming the problem.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from import_support import EXAMPLE_SIZES, PROMPT, STDLIB, imported, load_imported, run_onnxruntime
from import_support import ExampleImports as Case
from onnx import TensorProto, helper

from linnet.errors import LinnetError

torch = pytest.importorskip("torch")
lt = pytest.importorskip("linnet.torch")

Array = np.ndarray[Any, Any]
STEPS = 3


CACHED_ENTRIES = ("prefill", "decode")


@pytest.fixture(scope="module", params=sorted(EXAMPLE_SIZES))
def case(request: pytest.FixtureRequest, example_imports: Any) -> Case:
    """One example: seeded weights, its entries exported and imported (shared with
    test_import_roundtrip_read.py); the tests here read `prefill` and `decode`."""
    return example_imports(request.param, True)


def test_state_members_come_back_at_their_paths(case: Case) -> None:
    for entry in CACHED_ENTRIES:
        result, exported = case.results[entry], case.exported[entry]
        state_paths = {io.path for io in exported.inputs if io.role == "state"}
        state_paths |= {io.path for io in exported.outputs if io.role == "next_state"}
        params = case.params(entry)
        assert state_paths, entry
        assert set(result.state) == state_paths, entry
        assert set(result.parameters) == params, entry
        text = result.source
        assert "state k_cache: Tensor[" in text and "state v_cache: Tensor[" in text
        assert "state0" not in text and "next_state" not in text  # no state inputs or results
        for path in state_paths:
            assert any(path in n for n in result.notes), path
        # The state is no entry input and no result: one logits result.
        module = load_imported(result)
        assert sorted(module.linnet_model.live_tensors(module.present_paths, "state")) == sorted(
            state_paths
        )


def test_imported_prefill_then_decode_matches_the_example(case: Case) -> None:
    reference = lt.load(case.source, generics=case.generics, weights=case.weights, std_root=STDLIB)
    prefill, decode = load_imported(case.results["prefill"]), load_imported(case.results["decode"])
    vocab = int(case.generics["Vocab"])  # type: ignore[call-overload]
    tokens = np.random.default_rng(11).integers(0, vocab, (1, PROMPT + STEPS)).astype(np.int32)
    with torch.no_grad():
        start = torch.tensor(0, dtype=torch.int32)
        expected = reference.run_entry("prefill", [torch.from_numpy(tokens[:, :PROMPT]), start])
        actual = prefill.run_entry("prefill", [torch.from_numpy(tokens[:, :PROMPT]), start])
        _close(actual, expected)
        paths = sorted(case.results["prefill"].state)
        for path in paths:
            _close(prefill.tensor(path), reference.tensor(path))
            assert prefill.tensor(path).abs().sum() > 0, path  # the prompt was written
            decode.tensor(path).copy_(prefill.tensor(path))
        for step in range(PROMPT, PROMPT + STEPS):
            token = torch.from_numpy(tokens[:, step])
            position = torch.tensor(step, dtype=torch.int32)
            expected = reference.run_entry("decode", [token, position])
            actual = decode.run_entry("decode", [token, position])
            _close(actual, expected)
        for path in paths:
            _close(decode.tensor(path), reference.tensor(path))


def _close(actual: Any, expected: Any) -> None:
    a, e = actual.detach().numpy(), expected.detach().numpy()
    assert a.shape == e.shape
    np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- hand-built models


def _model(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    metadata: dict[str, str],
) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "state", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    helper.set_model_props(model, metadata)
    onnx.checker.check_model(model)
    return model


def _f32(name: str, *shape: int) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def _accumulator() -> onnx.ModelProto:
    """`acc.total` read and written, `table.bias` read only, `last` written only."""
    nodes = [
        helper.make_node("Add", ["x", "state0"], ["next_state0"]),
        helper.make_node("Add", ["state0", "state1"], ["sum"]),
        helper.make_node("Mul", ["sum", "x"], ["output0"]),
        helper.make_node("Neg", ["x"], ["next_state2"]),
    ]
    return _model(
        nodes,
        [_f32("x", 2, 3), _f32("state0", 2, 3), _f32("state1", 2, 3)],
        [_f32("output0", 2, 3), _f32("next_state0", 2, 3), _f32("next_state2", 2, 3)],
        {
            "linnet.state.state0": "acc.total",
            "linnet.state.state1": "table.bias",
            "linnet.next_state.next_state0": "acc.total",
            "linnet.next_state.next_state2": "last",
        },
    )


def test_read_written_read_only_and_write_only_state(tmp_path: Path) -> None:
    model = _accumulator()
    result = imported(model, tmp_path)
    text = result.source
    assert result.state == ["acc.total", "last", "table.bias"]
    assert "state total: Tensor[2, 3; f32]" in text and "state bias: Tensor[2, 3; f32]" in text
    assert "state last: Tensor[2, 3; f32]" in text
    assert "-> Tensor[2, 3; f32]" in text  # one result: output0
    assert "last = " in text  # a root member is assigned in the entry
    assert "acc.write_total(" in text  # a sub block's member through its own method
    note = next(n for n in result.notes if n.startswith("restored state members"))
    assert "`acc.total` (read and written)" in note and "`table.bias` (read)" in note
    assert "`last` (written)" in note

    module = load_imported(result)
    rng = np.random.default_rng(3)
    bias = rng.normal(size=(2, 3)).astype(np.float32)
    module.tensor("table.bias").copy_(torch.from_numpy(bias))
    total = np.zeros((2, 3), np.float32)
    for _ in range(3):
        x = rng.normal(size=(2, 3)).astype(np.float32)
        expected = run_onnxruntime(model, {"x": x, "state0": total, "state1": bias})
        with torch.no_grad():
            out = module.run_entry(result.entry, [torch.from_numpy(x)])
        np.testing.assert_allclose(out.numpy(), expected[0], rtol=1e-6)
        total = expected[1]
        np.testing.assert_allclose(module.tensor("acc.total").numpy(), total, rtol=1e-6)
        np.testing.assert_allclose(module.tensor("last").numpy(), expected[2], rtol=1e-6)
        np.testing.assert_array_equal(module.tensor("table.bias").numpy(), bias)


def test_old_values_are_read_before_the_writes(tmp_path: Path) -> None:
    """Two states swapped and a result that is a state's old value: the writes come last."""
    nodes = [
        helper.make_node("Identity", ["state0"], ["output0"]),
        helper.make_node("Identity", ["state1"], ["next_state0"]),
        helper.make_node("Add", ["state0", "x"], ["next_state1"]),
        helper.make_node(
            "Constant", [], ["one"], value=helper.make_tensor("one", TensorProto.INT64, [], [1])
        ),
        helper.make_node("Add", ["steps", "one"], ["next_steps"]),
    ]
    graph_inputs = [
        _f32("x", 4),
        _f32("state0", 4),
        _f32("state1", 4),
        helper.make_tensor_value_info("steps", TensorProto.INT64, []),
    ]
    model = _model(
        nodes,
        graph_inputs,
        [
            _f32("output0", 4),
            _f32("next_state0", 4),
            _f32("next_state1", 4),
            helper.make_tensor_value_info("next_steps", TensorProto.INT64, []),
        ],
        {
            "linnet.state.state0": "pair.a",
            "linnet.state.state1": "pair.b",
            "linnet.state.steps": "steps",
            "linnet.next_state.next_state0": "pair.a",
            "linnet.next_state.next_state1": "pair.b",
            "linnet.next_state.next_steps": "steps",
        },
    )
    result = imported(model, tmp_path)
    module = load_imported(result)
    a, b = np.zeros(4, np.float32), np.zeros(4, np.float32)
    steps = np.array(0, np.int64)
    rng = np.random.default_rng(4)
    for _ in range(4):
        x = rng.normal(size=4).astype(np.float32)
        out, a, b, steps = run_onnxruntime(
            model, {"x": x, "state0": a, "state1": b, "steps": steps}
        )
        with torch.no_grad():
            actual = module.run_entry(result.entry, [torch.from_numpy(x)])
        np.testing.assert_array_equal(actual.numpy(), out)
        np.testing.assert_array_equal(module.tensor("pair.a").numpy(), a)
        np.testing.assert_array_equal(module.tensor("pair.b").numpy(), b)
        assert module.tensor("steps").numpy().tolist() == [int(steps)]  # rank 0: Tensor[1]
    assert int(steps) == 4


def _with_metadata(model: onnx.ModelProto, metadata: dict[str, str]) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.metadata_props[:]
    helper.set_model_props(out, metadata)
    return out


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ({"linnet.state.cache": "acc.total"}, "`linnet.state.cache` names no graph input"),
        (
            {"linnet.next_state.state0": "acc.total"},
            "`linnet.next_state.state0` names no graph output",
        ),
        (
            {"linnet.state.state0": "acc.total", "linnet.state.state1": "acc.total"},
            "graph inputs `state0` and `state1` both claim the state `acc.total`",
        ),
        ({"linnet.state.state0": ""}, "gives no state path"),
        (
            {"linnet.state.state0": "w", "linnet.path.state1": "w"},
            "`w` is both a parameter and a state member",
        ),
    ],
)
def test_malformed_state_metadata_is_refused(
    metadata: dict[str, str], message: str, tmp_path: Path
) -> None:
    model = _with_metadata(_accumulator(), metadata)
    with pytest.raises(LinnetError, match=message.replace("(", r"\(")):
        imported(model, tmp_path)
    assert not (tmp_path / "model.linnet").exists()


def test_state_whose_new_value_has_another_shape_is_refused(tmp_path: Path) -> None:
    nodes = [helper.make_node("Concat", ["state0", "x"], ["next_state0"], axis=0)]
    model = _model(
        nodes,
        [_f32("x", 1, 3), _f32("state0", 2, 3)],
        [_f32("next_state0", 3, 3)],
        {"linnet.state.state0": "cache", "linnet.next_state.next_state0": "cache"},
    )
    with pytest.raises(LinnetError, match=r"state `cache`: graph input `state0` is Tensor\[2, 3"):
        imported(model, tmp_path)


def test_state_with_a_symbolic_extent_is_refused(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])
    cache = helper.make_tensor_value_info("state0", TensorProto.FLOAT, ["batch", 3])
    after = helper.make_tensor_value_info("next_state0", TensorProto.FLOAT, ["batch", 3])
    model = _model(
        [helper.make_node("Add", ["x", "state0"], ["next_state0"])],
        [x, cache],
        [after],
        {"linnet.state.state0": "cache", "linnet.next_state.next_state0": "cache"},
    )
    with pytest.raises(LinnetError, match="needs a fixed size on every axis"):
        imported(model, tmp_path)


def test_layer_state_moves_into_the_outlined_layer_method(tmp_path: Path) -> None:
    """Three layers `h = tanh(h * scale + memory)`, each keeping its `h` in its `memory`."""
    nodes: list[onnx.NodeProto] = []
    inputs, outputs, metadata = [_f32("x", 2, 4)], [_f32("output0", 2, 4)], {}
    scales = [np.linspace(0.5, 1.5, 4, dtype=np.float32) * (i + 1) for i in range(3)]
    hidden = "x"
    for i in range(3):
        nodes.append(
            helper.make_node(
                "Constant", [], [f"param{i}"], value=onnx.numpy_helper.from_array(scales[i])
            )
        )
        inputs.append(_f32(f"state{i}", 2, 4))
        metadata[f"linnet.state.state{i}"] = metadata[f"linnet.next_state.next_state{i}"] = (
            f"layers.{i}.memory"
        )
        nodes += [
            helper.make_node("Mul", [hidden, f"param{i}"], [f"scaled{i}"]),
            helper.make_node("Add", [f"scaled{i}", f"state{i}"], [f"sum{i}"]),
            helper.make_node("Tanh", [f"sum{i}"], [f"h{i}"]),
        ]
        hidden = f"h{i}"
    nodes.append(helper.make_node("Identity", [hidden], ["output0"]))
    for i in range(3):
        nodes.append(helper.make_node("Identity", [f"h{i}"], [f"next_state{i}"]))
        outputs.append(_f32(f"next_state{i}", 2, 4))
    model = _model(nodes, inputs, outputs, metadata)
    for i in range(3):  # the scales as stored weights at their paths
        init = onnx.numpy_helper.from_array(scales[i], f"param{i}")
        model.graph.initializer.append(init)
        model.metadata_props.add(key=f"linnet.path.param{i}", value=f"layers.{i}.scale")
    del model.graph.node[0:9:4]  # the Constant nodes
    result = imported(model, tmp_path)
    text = result.source
    assert "static for layer in layers" in text and "layers: [Layer; 3]" in text
    assert "state memory: Tensor[2, 4; f32]" in text
    method = text[text.index("pub fn forward") : text.index("pub fn write_memory")]
    assert "write_memory(" in method  # the layer's write is in the layer's method
    assert set(result.parameters) == {f"layers.{i}.scale" for i in range(3)}
    module = load_imported(result)
    state = [np.zeros((2, 4), np.float32) for _ in range(3)]
    rng = np.random.default_rng(6)
    for _ in range(3):
        x = rng.normal(size=(2, 4)).astype(np.float32)
        feeds = {"x": x, **{f"state{i}": state[i] for i in range(3)}}
        out, *state = run_onnxruntime(model, feeds)
        with torch.no_grad():
            actual = module.run_entry(result.entry, [torch.from_numpy(x)])
        np.testing.assert_allclose(actual.numpy(), out, rtol=1e-6, atol=1e-6)
        for i in range(3):
            np.testing.assert_allclose(
                module.tensor(f"layers.{i}.memory").numpy(), state[i], rtol=1e-6, atol=1e-6
            )
