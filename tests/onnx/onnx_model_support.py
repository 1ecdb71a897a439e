"""Helpers for the ONNX Runtime model tests: a small stateful model and its hand-built graph.

`CACHE_SOURCE` is a Linnet block with a param, a KV-cache-like state written
with `std.nn.cache::write_at` and a step counter. `cache_graph` writes the ONNX
graph of its `step` entry by hand, following the exporter's graph contract
(entry inputs, `param<N>`, `state<N>`; `output<N>`, `next_state<N>`; paths in
`metadata_props`), so the runtime's binding and in-place logic are tested
independently of the exporter; the oracle is the NumPy interpreter running the
lowered entry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from linnet.ir.core import Function, TensorType
from linnet.ir.interp import run_function
from linnet.pipeline import bind as bind_root
from linnet.pipeline import check_source, lower, optimize

CACHE_SOURCE = """module cachemodel

use std.nn.cache::{write_at}

pub block Cache<S: Dim, D: Dim>
where S > 0 {
    param w: Tensor[D; f32]
    state cache: Tensor[1, 1, S, D; f32]
    state steps: Tensor[1; i32]

    pub entry step(x: Tensor[1, 1, 1, D; f32], pos: i32) -> Tensor[D; f32] {
        cache = write_at(cache, x * w, pos)
        steps = steps + 1
        let total[d] = sum[s] cache[0, 0, s, d]
        return total
    }
}
"""
S, D = 8, 4
STEP_TYPES = [TensorType((1, 1, 1, D), "f32"), TensorType((), "i32")]


def cache_function() -> Function:
    """The lowered, optimised `step` entry (the oracle's input)."""
    program = check_source(CACHE_SOURCE)
    assert not program.has_errors, program.diagnostics
    model = bind_root(program, generics={"S": S, "D": D})
    return optimize(lower(model, "step", STEP_TYPES, frozenset({"w"})))


def cache_graph(
    *, reread_cache: bool = False, metadata: bool = True, renamed: bool = False
) -> onnx.ModelProto:
    """`step` by hand: `ScatterND` writes the cache, `Add` counts the steps.

    `reread_cache` makes a second node read the old cache (a `ReduceMax` whose
    result is multiplied by zero into the output), so the cache cannot be
    updated in place; `metadata=False` leaves the state paths out of
    `metadata_props` (the runtime then takes them from the function);
    `renamed` makes the scatter write an inner value that an `Identity` names
    `next_state0` (as exporters often name outputs).
    """
    written = "scattered" if renamed else "next_state0"
    nodes = [
        helper.make_node("Mul", ["x", "param0"], ["scaled"]),
        helper.make_node(
            "Cast",
            [
                "pos",
            ],
            ["pos64"],
            to=TensorProto.INT64,
        ),
        helper.make_node("Unsqueeze", ["pos64", "axis0"], ["pos1"]),
        helper.make_node("Concat", ["zeros2", "pos1"], ["index3"], axis=0),
        helper.make_node("Reshape", ["index3", "shape13"], ["index"]),
        helper.make_node("Reshape", ["scaled", "shape1d"], ["update"]),
        helper.make_node("ScatterND", ["state0", "index", "update"], [written]),
        helper.make_node("Add", ["state1", "one"], ["next_state1"]),
        helper.make_node("ReduceSum", [written, "axes012"], ["total"], keepdims=0),
    ]
    if renamed:
        nodes.append(helper.make_node("Identity", ["scattered"], ["next_state0"]))
    if reread_cache:
        nodes += [
            helper.make_node("ReduceMax", ["state0"], ["old_max"], keepdims=0),
            helper.make_node("Mul", ["old_max", "zero"], ["nothing"]),
            helper.make_node("Add", ["total", "nothing"], ["output0"]),
        ]
    else:
        nodes.append(helper.make_node("Identity", ["total"], ["output0"]))
    constants = [
        numpy_helper.from_array(np.array([0], np.int64), "axis0"),
        numpy_helper.from_array(np.array([0, 0], np.int64), "zeros2"),
        numpy_helper.from_array(np.array([1, 3], np.int64), "shape13"),
        numpy_helper.from_array(np.array([1, D], np.int64), "shape1d"),
        numpy_helper.from_array(np.array([0, 1, 2], np.int64), "axes012"),
        numpy_helper.from_array(np.array(1, np.int32), "one"),
        numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
    ]
    graph = helper.make_graph(
        nodes,
        "step",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 1, D]),
            helper.make_tensor_value_info("pos", TensorProto.INT32, []),
            helper.make_tensor_value_info("param0", TensorProto.FLOAT, [D]),
            helper.make_tensor_value_info("state0", TensorProto.FLOAT, [1, 1, S, D]),
            helper.make_tensor_value_info("state1", TensorProto.INT32, [1]),
        ],
        [
            helper.make_tensor_value_info("output0", TensorProto.FLOAT, [D]),
            helper.make_tensor_value_info("next_state0", TensorProto.FLOAT, [1, 1, S, D]),
            helper.make_tensor_value_info("next_state1", TensorProto.INT32, [1]),
        ],
        constants,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 10
    props = {"linnet.path.param0": "w"}
    if metadata:
        props |= {"linnet.state.state0": "cache", "linnet.state.state1": "steps",
                  "linnet.next_state.next_state0": "cache",
                  "linnet.next_state.next_state1": "steps"}  # fmt: skip
    helper.set_model_props(model, props)
    onnx.checker.check_model(model, full_check=True)
    return model


def reference_steps(
    fn: Function, weights: Mapping[str, np.ndarray[Any, Any]], steps: list[tuple[Any, int]]
) -> tuple[list[np.ndarray[Any, Any]], dict[str, np.ndarray[Any, Any]]]:
    """The interpreter's results for consecutive calls from zero state, and the final state."""
    state: dict[str, np.ndarray[Any, Any]] = {
        "cache": np.zeros((1, 1, S, D), np.float32),
        "steps": np.zeros((1,), np.int32),
    }
    outputs = []
    for x, pos in steps:
        results, updates = run_function(fn, weights, state, [x, np.array(pos, np.int32)])
        state = {**state, **updates}
        outputs.append(results[0])
    return outputs, state
