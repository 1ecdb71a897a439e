"""The plan means the program: language.md examples run from their plan JSON against NumPy.

`plan_eval.Materializer` evaluates a plan document element by element (it
reads only the JSON); each test compares its results with the same
computation written directly in NumPy (f64). Optional members, sub arrays,
state across calls, loops, index notation, slicing, enums and calls with
substitutions are all exercised, with and without optimisation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from plan_eval import Materializer

from linnet.pipeline import check_paths
from linnet.plan import build_plan

VALID = Path(__file__).resolve().parent / "conformance" / "valid"
RNG = np.random.default_rng(7)
ALL_OPTIONS = [
    {"optimize": True},
    {"optimize": False},
    {"optimize": True, "numerics": "exact"},
]


def plan(name: str, **options: Any) -> dict[str, Any]:
    program = check_paths([VALID / f"{name}.linnet"])
    assert not program.has_errors
    return build_plan(program, **options)


def rand(*shape: int) -> np.ndarray[Any, Any]:
    return RNG.standard_normal(shape)


@pytest.mark.parametrize("options", ALL_OPTIONS)
@pytest.mark.parametrize("biases", [(), ("input", "hidden.1", "output"), ("hidden.0",)])
def test_tiny_mlp(options: dict[str, Any], biases: tuple[str, ...]) -> None:
    h, inner, depth, classes, batch = 4, 5, 2, 3, 2
    weights = {"input.weight": rand(inner, h), "output.weight": rand(classes, inner)}
    for i in range(depth):
        weights[f"hidden.{i}.weight"] = rand(inner, inner)
    sizes = {"input": inner, "hidden.0": inner, "hidden.1": inner, "output": classes}
    for name in biases:
        weights[f"{name}.bias"] = rand(sizes[name])
    x = rand(batch, h)
    generics = {"H": h, "Inner": inner, "Depth": depth, "Classes": classes, "B": batch}
    got = Materializer(plan("spec_tiny", **options), weights).call(
        "examples.tiny::Mlp.forward", [x], generics
    )

    def dense(v: np.ndarray[Any, Any], name: str) -> np.ndarray[Any, Any]:
        y = v @ weights[f"{name}.weight"].T
        return y + weights[f"{name}.bias"] if f"{name}.bias" in weights else y

    expected = np.maximum(dense(x, "input"), 0.0)
    for i in range(depth):
        expected = np.maximum(dense(expected, f"hidden.{i}"), 0.0)
    expected = dense(expected, "output")
    np.testing.assert_allclose(got, expected, rtol=1e-12)


@pytest.mark.parametrize("extra", [False, True])
def test_tower_optional_child(extra: bool) -> None:
    h, depth = 3, 3
    weights = {"stem.gain": rand(h), **{f"stages.{i}.gain": rand(h) for i in range(depth)}}
    if extra:
        weights["extra.gain"] = rand(h)
    x = rand(2, h)
    got = Materializer(plan("spec_tower"), weights).call(
        "examples.tower::Tower.forward", [x], {"H": h, "Depth": depth, "B": 2}
    )
    expected = x * weights["stem.gain"]
    for i in range(depth):
        expected = expected * weights[f"stages.{i}.gain"]
    if extra:
        expected = expected * weights["extra.gain"]
    np.testing.assert_allclose(got, expected, rtol=1e-12)


@pytest.mark.parametrize("options", ALL_OPTIONS)
def test_horner_static_range(options: dict[str, Any]) -> None:
    x, coeffs = rand(5), rand(4)
    got = Materializer(plan("spec_horner", **options), {}).call(
        "examples.horner::horner", [x, coeffs], {"N": 5, "Degree": 4}
    )
    np.testing.assert_allclose(got, np.polyval(coeffs[::-1], x), rtol=1e-12)


def test_while_loop_carries_values() -> None:
    x = np.array([8.0, -3.0, 2.0])
    current, steps = Materializer(plan("spec_loops"), {}).call(
        "examples.loops::halve_until", [x, np.float64(1.5), np.int64(10)], {"N": 3}
    )
    expected, count = x.copy(), 0
    while True:
        expected, count = expected * 0.5, count + 1
        if not (expected.max() > 1.5 and count < 10):
            break
    np.testing.assert_allclose(current, expected)
    assert steps == count == 3


def test_state_persists_between_calls() -> None:
    materializer = Materializer(plan("spec_memory"), {})
    slots, d = 3, 2
    generics = {"Slots": slots, "D": d}
    values = [rand(d), rand(d)]
    table = np.zeros((slots, d))
    for at, value in enumerate(values):
        got = materializer.call("examples.memory::Agent.step", [value, np.int32(at)], generics)
        table[at] = value
        np.testing.assert_allclose(got, table.sum(axis=0) + table[0])
    np.testing.assert_allclose(materializer.state["memory.slots"], table)
    assert materializer.state["memory.writes"].tolist() == [2]


def test_algebra_index_notation() -> None:
    m = Materializer(plan("spec_algebra"), {})
    a, b = rand(2, 3), rand(3, 4)
    np.testing.assert_allclose(
        m.call("examples.algebra::matmul", [a, b], {"M": 2, "K": 3, "N": 4, "T": "f32"}), a @ b
    )
    a3, b3 = rand(2, 2, 3), rand(2, 3, 4)
    np.testing.assert_allclose(
        m.call("examples.algebra::batched", [a3, b3], {"Batch": (2,), "M": 2, "K": 3, "N": 4}),
        a3 @ b3,
    )
    sq = rand(3, 3)
    np.testing.assert_allclose(m.call("examples.algebra::trace", [sq], {"N": 3}), np.trace(sq))
    u, v = rand(2), rand(3)
    np.testing.assert_allclose(
        m.call("examples.algebra::outer", [u, v], {"P": 2, "Q": 3}), np.outer(u, v)
    )
    np.testing.assert_allclose(m.call("examples.algebra::swap_axes", [b], {"P": 3, "Q": 4}), b.T)
    scores, labels = rand(3, 4), np.array([3, 0, 2], dtype=np.int32)
    np.testing.assert_allclose(
        m.call("examples.algebra::pick", [scores, labels], {"B": 3, "V": 4}),
        scores[np.arange(3), labels],
    )
    keep = m.call("examples.algebra::lower_triangle", [], {"S": 3})
    assert keep.dtype == np.bool_ and (keep == np.tril(np.ones((3, 3), dtype=bool))).all()
    np.testing.assert_allclose(
        m.call("examples.algebra::row_peak", [scores], {"R": 3, "C": 4}), scores.max(axis=1)
    )
    assert m.call("examples.algebra::any_negative", [np.array([1.0, -2.0])], {"N": 2})
    assert not m.call("examples.algebra::any_negative", [np.array([1.0, 2.0])], {"N": 2})


def test_slices_and_runtime_indices() -> None:
    m = Materializer(plan("spec_slices"), {})
    x = rand(2, 6)
    front, back = m.call("examples.slices::front_back", [x], {"B": 2, "D": 3})
    np.testing.assert_allclose(front, x[:, :3])
    np.testing.assert_allclose(back, x[:, 3:])
    lanes = rand(2, 3, 4)
    np.testing.assert_allclose(
        m.call("examples.slices::odd_lanes", [lanes], {"Lead": (2, 3), "D": 2}), lanes[..., 1::2]
    )
    np.testing.assert_allclose(m.call("examples.slices::last", [x[0]], {"N": 6}), x[0, -1])
    np.testing.assert_allclose(m.call("examples.slices::window", [x], {"R": 2, "C": 6}), x[:, 1:3])
    row, col, one = m.call(
        "examples.slices::row_col", [x, np.int64(1), np.int32(4)], {"R": 2, "C": 6}
    )
    np.testing.assert_allclose(row, x[1])
    np.testing.assert_allclose(col, x[:, 4])
    np.testing.assert_allclose(one, x[1, 4])


def test_constants_and_enum_match() -> None:
    x = rand(2, 3, 4)
    got = Materializer(plan("spec_settings"), {}).call(
        "examples.settings::pool", [x], {"B": 2, "N": 3, "H": 4}
    )
    np.testing.assert_allclose(got, x.mean(axis=1) + 1e-05 * 0.5)
    tiled = Materializer(plan("spec_settings"), {}).call(
        "examples.settings::tile", [x[0, 0]], {"H": 4}
    )
    np.testing.assert_allclose(tiled, np.tile(x[0, 0], (4, 1)))


def test_tuples_and_module_entries() -> None:
    m = Materializer(plan("spec_losses"), {})
    guess, truth = rand(2, 3), rand(2, 3)
    np.testing.assert_allclose(
        m.call("examples.losses::mean_abs_error", [guess, truth], {"B": 2, "N": 3}),
        np.abs(guess - truth).mean(),
    )
    x = rand(5)
    np.testing.assert_allclose(m.call("examples.losses::spread", [x], {"N": 5}), np.ptp(x))


def test_optional_arguments_and_defaults() -> None:
    x, b = rand(2, 3), rand(3)
    got = Materializer(plan("spec_optionals"), {}).call(
        "examples.optionals::twice", [x, b], {"Lead": (2,), "H": 3}
    )
    np.testing.assert_allclose(got, x + b)


def test_blocks_reshape_and_permute() -> None:
    x = rand(2, 8)
    scale = rand(4)
    got = Materializer(plan("spec_grouped"), {"groups.scale": scale}).call(
        "examples.grouped::Encoder.forward", [x], {"H": 8, "B": 2}
    )
    np.testing.assert_allclose(got, x.reshape(2, 4, 2) * scale[None, :, None])
    y = rand(3, 16)
    got = Materializer(plan("spec_groups"), {}).call(
        "examples.groups::eight_groups", [y], {"Rows": 3, "C": 2}
    )
    np.testing.assert_allclose(got, y.reshape(3, 8, 2).transpose(1, 0, 2))


def test_prelude_functions() -> None:
    m = Materializer(plan("spec_prelude_use"), {})
    x = rand(2, 3)
    np.testing.assert_allclose(
        m.call("examples.prelude_use::relu", [x], {"S": (2, 3), "T": "f32"}), np.maximum(x, 0)
    )
    cube = rand(2, 3, 4)
    np.testing.assert_allclose(
        m.call("examples.prelude_use::flatten", [cube], {"B": 2, "S": 3, "H": 4}),
        cube.reshape(6, 4),
    )
    np.testing.assert_allclose(
        m.call("examples.prelude_use::tile_rows", [x[0]], {"R": 4, "H": 3}), np.tile(x[0], (4, 1))
    )
    a, b = rand(2, 2), rand(2, 3)
    np.testing.assert_allclose(
        m.call("examples.prelude_use::join_last", [a, b], {"S": (2,), "A": 2, "B": 3}),
        np.concatenate([a, b], axis=-1),
    )
    scores = rand(3, 3)
    np.testing.assert_allclose(
        m.call("examples.prelude_use::masked_scores", [scores], {"S": 3}),
        np.where(np.tril(np.ones((3, 3), dtype=bool)), scores, -1e9),
    )
    ints = np.array([0x1234, -5, 1 << 60], dtype=np.int64)
    masked = ints & 255
    expected = ((masked << 8) | (ints >> 56)) ^ (ints & 0xFF)
    np.testing.assert_array_equal(
        m.call("examples.prelude_use::low_bits", [ints], {"N": 3}), expected
    )
    np.testing.assert_allclose(m.call("examples.prelude_use::scaled", [x[0]], {"N": 3}), x[0] * 3.0)
