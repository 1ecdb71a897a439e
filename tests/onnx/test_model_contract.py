"""The runtime's graph contract, in-place state updates and the argmax variant.

Everything here runs hand-built graphs that follow the exporter's contract
(`onnx_model_support.cache_graph`) through `EntrySession` and a `StateStore`,
against the NumPy interpreter running the lowered Linnet entry: the binding
and update logic is tested independently of the exporter.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx_model_support import D, S, cache_function, cache_graph, reference_steps

from linnet.errors import LinnetError
from linnet.ir.core import TensorType
from linnet.onnx.runtime.contract import consumers, read_contract, update_mode, with_argmax
from linnet.onnx.runtime.session import EntrySession
from linnet.onnx.runtime.state import StateStore
from linnet.onnx.runtime.values import Device, ortvalue

KINDS = {"w": "param", "cache": "state", "steps": "state"}
STATE_TYPES = {"cache": TensorType((1, 1, S, D), "f32"), "steps": TensorType((1,), "i32")}
WEIGHTS = {"w": np.array([1.0, -2.0, 0.5, 3.0], np.float32)}


def steps_data(n: int) -> list[tuple[np.ndarray, int]]:
    rng = np.random.default_rng(0)
    return [(rng.standard_normal((1, 1, 1, D)).astype(np.float32), (3 * i) % S) for i in range(n)]


def session_for(proto: onnx.ModelProto) -> tuple[EntrySession, StateStore]:
    contract = read_contract(proto, cache_function(), KINDS)
    device = Device()
    weights = {"w": ortvalue(WEIGHTS["w"], "f32", device)}
    session = EntrySession("step", proto, contract, ["CPUExecutionProvider"], device, weights)
    return session, StateStore(STATE_TYPES, device)


def run_steps(
    session: EntrySession, store: StateStore, data: list[tuple[np.ndarray, int]]
) -> list[np.ndarray]:
    out = []
    for x, pos in data:
        inputs = [ortvalue(x, "f32", Device()), ortvalue(np.array(pos, np.int32), "i32", Device())]
        (result,) = session.run(inputs, [TensorType(x.shape, "f32"), TensorType((), "i32")], store)
        assert isinstance(result, np.ndarray)
        out.append(result)
    return out


def test_contract_names_every_input_and_output() -> None:
    contract = read_contract(cache_graph(), cache_function(), KINDS)
    assert contract.inputs == ("x", "pos")
    assert contract.weights == {"param0": "w"}
    assert contract.state_inputs == {"state0": "cache", "state1": "steps"}
    assert contract.results == ("output0",)
    assert contract.state_outputs == {"next_state0": "cache", "next_state1": "steps"}
    assert contract.update_modes == {"cache": "in_place", "steps": "swap"}
    assert not contract.fixed_addresses


def test_an_identity_naming_the_output_is_folded() -> None:
    proto = cache_graph(renamed=True)
    contract = read_contract(proto, cache_function(), KINDS)
    assert contract.update_modes["cache"] == "in_place"
    (writer,) = [n for n in proto.graph.node if "next_state0" in n.output]
    assert writer.op_type == "ScatterND"
    onnx.checker.check_model(proto, full_check=True)
    session, store = session_for(cache_graph(renamed=True))
    data = steps_data(3)
    want, _ = reference_steps(cache_function(), WEIGHTS, data)
    for g, w in zip(run_steps(session, store, data), want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_state_paths_fall_back_to_the_function_order() -> None:
    with_meta = read_contract(cache_graph(), cache_function(), KINDS)
    without = read_contract(cache_graph(metadata=False), cache_function(), KINDS)
    assert without.state_inputs == with_meta.state_inputs
    assert without.state_outputs == with_meta.state_outputs


def test_a_second_reader_of_the_old_state_forbids_aliasing() -> None:
    contract = read_contract(cache_graph(reread_cache=True), cache_function(), KINDS)
    assert contract.update_modes["cache"] == "swap"


def test_a_reader_inside_a_subgraph_counts() -> None:
    graph = cache_graph().graph
    branch = helper.make_graph(
        [helper.make_node("ReduceMax", ["state0"], ["m"], keepdims=0)],
        "branch",
        [],
        [helper.make_tensor_value_info("m", TensorProto.FLOAT, [])],
    )
    graph.node.append(
        helper.make_node("If", ["flag"], ["picked"], then_branch=branch, else_branch=branch)
    )
    readers = consumers(graph, "state0")
    assert [(graph.node[i].op_type, as_data) for i, as_data in readers] == [
        ("ScatterND", True),
        ("If", False),
    ]
    assert update_mode(graph, "next_state0", "state0") == "swap"
    assert update_mode(graph, "next_state0", None) == "overwrite"


@pytest.mark.parametrize("reread", [False, True], ids=["in_place", "swap"])
def test_steps_match_the_interpreter(reread: bool) -> None:
    session, store = session_for(cache_graph(reread_cache=reread))
    data = steps_data(10)
    cache_address = store.current["cache"].address
    got = run_steps(session, store, data)
    want, final = reference_steps(cache_function(), WEIGHTS, data)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    snapshot = store.snapshot()
    np.testing.assert_allclose(snapshot["cache"], final["cache"], rtol=1e-6)
    np.testing.assert_array_equal(snapshot["steps"], [10])
    # the step counter always swaps; the cache swaps only when the old value is reread
    assert store.swaps == (20 if reread else 10)
    assert session.contract.update_modes["cache"] == ("swap" if reread else "in_place")
    # in place the cache never moves; ten swaps bring it back to its first buffer
    assert store.current["cache"].address == cache_address


def test_reset_zeroes_in_place() -> None:
    session, store = session_for(cache_graph())
    run_steps(session, store, steps_data(3))
    address = store.current["cache"].address
    store.reset()
    assert store.current["cache"].address == address
    assert not store.snapshot()["cache"].any()
    assert not store.snapshot()["steps"].any()


def test_keep_on_device_returns_ortvalues() -> None:
    session, store = session_for(cache_graph())
    x, pos = steps_data(1)[0]
    inputs = [ortvalue(x, "f32", Device()), ortvalue(np.array(pos, np.int32), "i32", Device())]
    types = [TensorType(x.shape, "f32"), TensorType((), "i32")]
    (value,) = session.run(inputs, types, store, keep_on_device=True)
    assert not isinstance(value, np.ndarray)
    assert value.shape() == [D]
    np.testing.assert_allclose(value.numpy(), (x * WEIGHTS["w"]).reshape(D), rtol=1e-6)


def test_argmax_variant() -> None:
    proto, contract = with_argmax(
        cache_graph(), read_contract(cache_graph(), cache_function(), KINDS)
    )
    onnx.checker.check_model(proto, full_check=True)
    assert contract.result_types[0] == TensorType((), "i32")
    device = Device()
    weights = {"w": ortvalue(WEIGHTS["w"], "f32", device)}
    session = EntrySession("step", proto, contract, ["CPUExecutionProvider"], device, weights)
    store = StateStore(STATE_TYPES, device)
    data = steps_data(4)
    got = run_steps(session, store, data)
    want, _ = reference_steps(cache_function(), WEIGHTS, data)
    assert [int(g) for g in got] == [int(np.argmax(w)) for w in want]
    assert all(g.dtype == np.int32 for g in got)


def test_argmax_needs_an_axis() -> None:
    contract = read_contract(cache_graph(), cache_function(), KINDS)
    scalar = type(contract)(
        contract.inputs,
        contract.weights,
        contract.state_inputs,
        contract.results,
        (TensorType((), "f32"),),
        contract.state_outputs,
        contract.update_modes,
        contract.checks,
    )
    with pytest.raises(LinnetError, match="needs a first result with an axis"):
        with_argmax(cache_graph(), scalar)


def test_the_contract_carries_the_input_checks() -> None:
    """`pos` writes the cache of `S` positions: the runtime checks it before each run."""
    contract = read_contract(cache_graph(), cache_function(), KINDS)
    (found,) = contract.checks.ranges
    assert (found.name, found.low.value, found.high.value) == ("pos", 0, S - 1)
    assert with_argmax(cache_graph(), contract)[1].checks is contract.checks
