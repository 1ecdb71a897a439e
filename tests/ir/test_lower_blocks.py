"""Blocks lowered and run: params by path, sub arrays, optional children, state (language.md 12, 13).

Each model is bound with concrete generics, lowered with the set of paths
a checkpoint would provide, verified, and run with random weights against a
NumPy f64 reference. State is carried between calls by feeding each call's
`state_updates` into the next.
"""

from __future__ import annotations

import numpy as np
import pytest
from lower_support import bound, close, execute, kinds, lowered, t, weights

from linnet.errors import LinnetError
from linnet.ir.interp import run_function
from linnet.ir.lower import lower_program

rng = np.random.default_rng(3)

DENSE = """
module t

pub op dense<*Lead: Shape, In: Dim, Out: Dim, T: Float>(
    x: Tensor[*Lead, In; T],
    weight: Tensor[Out, In; T],
    bias: Tensor[Out; T]? = none,
) -> Tensor[*Lead, Out; T] {
    let y[*l, o] = sum[i] x[*l, i] * weight[o, i]
    return match bias {
        some(b) => y + b
        none => y
    }
}

pub block Dense<In: Dim, Out: Dim, T: Float = f32> {
    param weight: Tensor[Out, In; T]
    param bias: Tensor[Out; T]? = none

    pub fn forward<*Lead: Shape>(x: Tensor[*Lead, In; T]) -> Tensor[*Lead, Out; T] {
        return dense(x, weight, bias)
    }
}

pub block Mlp<H: Dim, Inner: Dim, Depth: Dim, Classes: Dim, T: Float = f32> {
    sub input: Dense<H, Inner, T>
    sub hidden: [Dense<Inner, Inner, T>; Depth]
    sub output: Dense<Inner, Classes, T>

    pub entry forward<B: Dim>(x: Tensor[B, H; T]) -> Tensor[B, Classes; T] {
        var h = max(input.forward(x), 0.0)
        static for layer in hidden {
            h = max(layer.forward(h), 0.0)
        }
        return output.forward(h)
    }
}
"""


def _dense(w: dict[str, np.ndarray], name: str, x: np.ndarray, present: set[str]) -> np.ndarray:
    y = x @ w[f"{name}.weight"].astype(np.float64).T
    if f"{name}.bias" in present:
        y = y + w[f"{name}.bias"]
    return y


@pytest.mark.parametrize("with_bias", [True, False])
def test_mlp_paths_and_optional_biases(with_bias: bool) -> None:
    model = bound(DENSE, {"H": 4, "Inner": 6, "Depth": 2, "Classes": 3})
    assert list(model.tensors) == [
        "input.weight", "input.bias", "hidden.0.weight", "hidden.0.bias",
        "hidden.1.weight", "hidden.1.bias", "output.weight", "output.bias",
    ]  # fmt: skip
    w = weights(model, rng)
    present = {p for p in w if with_bias or not p.endswith("bias")}
    fn = lowered(model, "forward", [t((5, 4))], present)
    calls = [op for op in fn.body.ops if op.kind == "call"]
    assert [op.attrs["callee"] for op in calls] == ["t::dense"] * 4
    assert all(len(op.operands) == (3 if with_bias else 2) for op in calls)
    x = rng.standard_normal((5, 4)).astype(np.float32)
    (y,), _ = execute(fn, [x], {p: w[p] for p in present})
    h = np.maximum(_dense(w, "input", x, present), 0)
    for i in range(2):
        h = np.maximum(_dense(w, f"hidden.{i}", h, present), 0)
    close(y, _dense(w, "output", h, present), rtol=1e-4)


TOWER = """
module t

pub block Scale<H: Dim> {
    param gain: Tensor[H; f32]

    pub fn forward<B: Dim>(x: Tensor[B, H; f32]) -> Tensor[B, H; f32] {
        return x * gain
    }
}

pub block Tower<H: Dim, Depth: Dim> {
    sub stem: Scale<H>
    sub stages: [Scale<H>; Depth]
    sub extra: Scale<H>? = none

    pub entry forward<B: Dim>(x: Tensor[B, H; f32]) -> Tensor[B, H; f32] {
        var y = stem.forward(x)
        static for stage in stages {
            y = stage.forward(y)
        }
        return match extra {
            some(last) => last.forward(y)
            none => y
        }
    }
}
"""


@pytest.mark.parametrize("extra", [True, False])
def test_tower_with_and_without_its_optional_child(extra: bool) -> None:
    model = bound(TOWER, {"H": 3, "Depth": 3})
    assert set(model.optional_subs) == {"extra"}
    assert model.optional_subs["extra"].mandatory == ("extra.gain",)
    w = weights(model, rng)
    present = set(w) if extra else set(w) - {"extra.gain"}
    fn = lowered(model, "forward", [t((2, 3))], present)
    x = rng.standard_normal((2, 3)).astype(np.float32)
    (y,), _ = execute(fn, [x], {p: w[p] for p in present})
    expected = x.astype(np.float64) * w["stem.gain"]
    for i in range(3):
        expected = expected * w[f"stages.{i}.gain"]
    if extra:
        expected = expected * w["extra.gain"]
    close(y, expected)
    program = lower_program(model, {"forward": [t((2, 3))]}, present)
    assert ("extra.gain" in program.params) == extra


GROUPED = """
module t

pub block Grouped<H: Dim, G: Dim>
where
    G > 0,
    H % G == 0
{
    param scale: Tensor[G; f32]

    pub fn forward<B: Dim>(x: Tensor[B, H; f32]) -> Tensor[B, G, H / G; f32] {
        let grouped = reshape(x, [B, G, H / G])
        let out[b, g, k] = grouped[b, g, k] * scale[g]
        return out
    }
}

pub block Encoder<H: Dim>
where H % 4 == 0 {
    sub groups: Grouped<H, 4>

    pub entry forward<B: Dim>(x: Tensor[B, H; f32]) -> Tensor[B, 4, H / 4; f32] {
        return groups.forward(x)
    }
}
"""


def test_block_where_and_sub_generics() -> None:
    model = bound(GROUPED, {"H": 8}, root="Encoder")
    assert model.tensors["groups.scale"].type == t((4,))
    w = weights(model, rng)
    x = rng.standard_normal((2, 8)).astype(np.float32)
    (y,), _ = execute(lowered(model, "forward", [t((2, 8))]), [x], w)
    close(y, x.reshape(2, 4, 2) * w["groups.scale"][None, :, None])


MEMORY = """
module t

pub block Recorder<Slots: Dim, D: Dim> {
    state slots: Tensor[Slots, D; f32]
    state writes: Tensor[1; i64]

    pub fn write(value: Tensor[D; f32], at: i32) -> Tensor[Slots, D; f32] {
        let index = iota<i32>(Slots)
        let updated[s, d] = select(index[s] == at, value[d], slots[s, d])
        slots = updated
        writes = writes + 1
        return slots
    }
}

pub block Agent<Slots: Dim, D: Dim>
where Slots > 0 {
    sub memory: Recorder<Slots, D>

    pub entry step(value: Tensor[D; f32], at: i32) -> Tensor[D; f32] {
        let table = memory.write(value, at)
        let summary[d] = sum[s] table[s, d]
        return summary + memory.slots[0]
    }

    pub entry peek() -> Tensor[Slots, D; f32] {
        return memory.slots
    }
}
"""


def test_state_is_carried_between_calls() -> None:
    model = bound(MEMORY, {"Slots": 3, "D": 2}, root="Agent")
    assert {p: bt.kind for p, bt in model.tensors.items()} == {
        "memory.slots": "state",
        "memory.writes": "state",
    }
    step = lowered(model, "step", [t((2,)), t((), "i32")])
    assert set(step.state_updates) == {"memory.slots", "memory.writes"}
    assert kinds(step).count("state") == 2
    state = {"memory.slots": np.zeros((3, 2), np.float32), "memory.writes": np.zeros(1, np.int64)}
    table = np.zeros((3, 2))
    for at in (0, 2, 0):
        value = rng.standard_normal(2).astype(np.float32)
        (out,), state = execute(step, [value, np.int32(at)], state=state)
        table[at] = value
        close(out, table.sum(axis=0) + table[0])
    assert state["memory.writes"][0] == 3
    peek = lowered(model, "peek", [])
    assert peek.state_updates == {}
    (slots,), _ = execute(peek, [], state=state)
    close(slots, table)


COUNTER = """
module t

pub block Counter<N: Dim> {
    state total: Tensor[N; f32]
    state calls: Tensor[1; i32]

    pub fn bump(x: Tensor[N; f32]) -> Tensor[N; f32] {
        total = total + x
        calls = calls + 1
        return total
    }
}

pub block Looper<N: Dim> {
    sub counter: Counter<N>
    state last: Tensor[N; f32]

    pub entry run(x: Tensor[N; f32], times: i32) -> Tensor[N; f32] {
        var i: i32 = 0
        var seen = x
        while i < times {
            seen = counter.bump(x)
            i = i + 1
        }
        last = seen
        return counter.total
    }

    pub entry maybe(x: Tensor[N; f32], go: bool) -> Tensor[N; f32] {
        let out = if go { counter.bump(x) } else { x }
        return out + counter.total
    }
}
"""


def test_state_assigned_in_a_while_loop_is_carried() -> None:
    model = bound(COUNTER, {"N": 2}, root="Looper")
    fn = lowered(model, "run", [t((2,)), t((), "i32")])
    loop = next(op for op in fn.body.ops if op.kind == "while")
    assert len(loop.operands) == 4  # i, seen, counter.total, counter.calls
    assert set(fn.state_updates) == {"counter.total", "counter.calls", "last"}
    state = {
        "counter.total": np.zeros(2, np.float32),
        "counter.calls": np.zeros(1, np.int32),
        "last": np.zeros(2, np.float32),
    }
    x = np.array([1.0, 2.0], np.float32)
    (total,), state = execute(fn, [x, np.int32(3)], state=state)
    np.testing.assert_array_equal(total, 3 * x)
    np.testing.assert_array_equal(state["last"], 3 * x)
    assert state["counter.calls"][0] == 3
    (total,), state = execute(fn, [x, np.int32(0)], state=state)
    np.testing.assert_array_equal(total, 3 * x)
    np.testing.assert_array_equal(state["last"], x)


def test_state_assigned_in_one_if_branch() -> None:
    model = bound(COUNTER, {"N": 2}, root="Looper")
    fn = lowered(model, "maybe", [t((2,)), t((), "bool")])
    branch = next(op for op in fn.body.ops if op.kind == "if")
    assert len(branch.results) == 3
    state = {"counter.total": np.ones(2, np.float32), "counter.calls": np.zeros(1, np.int32)}
    x = np.array([1.0, 2.0], np.float32)
    (out,), after = execute(fn, [x, np.bool_(True)], state=state)
    np.testing.assert_array_equal(out, (1 + x) + (1 + x))
    assert after["counter.calls"][0] == 1
    (out,), after = execute(fn, [x, np.bool_(False)], state=state)
    np.testing.assert_array_equal(out, x + 1)
    assert after["counter.calls"][0] == 0


LAYERS = """
module t

pub block Cell<D: Dim> {
    param w: Tensor[D; f32]
    state acc: Tensor[D; f32]

    pub op step(x: Tensor[D; f32]) -> Tensor[D; f32] {
        return x * w + acc
    }

    pub fn remember(x: Tensor[D; f32]) -> Tensor[D; f32] {
        acc = acc + x
        return step(x)
    }

    pub op tick(x: Tensor[D; f32]) -> Tensor[D; f32] {
        acc = acc * x
        return acc
    }
}

pub entry double<D: Dim>(x: Tensor[D; f32]) -> Tensor[D; f32] {
    return x + x
}

pub block Stack<D: Dim, L: Dim> {
    sub cells: [Cell<D>; L]

    pub entry forward(x: Tensor[D; f32]) -> Tensor[D; f32] {
        var h = double(x)
        static for cell in cells {
            h = cell.remember(h)
        }
        return h
    }

    pub entry first(x: Tensor[1, D; f32]) -> Tensor[1, D; f32] {
        return reshape(cells[0].step(reshape(x, [D])), [1, D])
    }

    pub entry ticks(x: Tensor[D; f32]) -> Tensor[D; f32] {
        let a = cells[1].tick(x)
        return a + cells[1].tick(x)
    }
}
"""


def test_sub_array_state_ops_and_module_entries() -> None:
    model = bound(LAYERS, {"D": 2, "L": 2}, root="Stack")
    assert list(model.entries) == ["forward", "first", "ticks"]
    w = weights(model, rng)
    fn = lowered(model, "forward", [t((2,))])
    assert [op.attrs["callee"] for op in fn.body.ops if op.kind == "call"] == ["t::Cell.step"] * 2
    state = {f"cells.{i}.acc": np.full(2, i, np.float32) for i in range(2)}
    x = np.array([0.5, -1.0], np.float32)
    (y,), after = execute(fn, [x], w, state)
    h = x.astype(np.float64) * 2
    for i in range(2):
        acc = i + h
        np.testing.assert_allclose(after[f"cells.{i}.acc"], acc, rtol=1e-6)
        h = h * w[f"cells.{i}.w"] + acc
    close(y, h)
    first = lowered(model, "first", [t((1, 2))])
    assert first.state_updates == {}
    (y,), _ = execute(first, [x.reshape(1, 2)], w, state)
    close(y, (x * w["cells.0.w"] + 0).reshape(1, 2))


def test_an_op_that_assigns_state_is_inlined() -> None:
    model = bound(LAYERS, {"D": 2, "L": 2}, root="Stack")
    fn = lowered(model, "ticks", [t((2,))])
    assert "call" not in kinds(fn)
    assert set(fn.state_updates) == {"cells.1.acc"}
    acc = np.array([1.0, 2.0], np.float32)
    x = np.array([3.0, -1.0], np.float32)
    state = {"cells.1.acc": acc}
    (y,), after = execute(fn, [x], weights(model, rng), state)
    np.testing.assert_array_equal(y, acc * x + acc * x * x)
    np.testing.assert_array_equal(after["cells.1.acc"], acc * x * x)


def test_program_lists_live_tensors() -> None:
    model = bound(LAYERS, {"D": 2, "L": 3}, root="Stack")
    program = lower_program(model, {"forward": [t((2,))]}, set(model.tensors))
    assert list(program.params) == ["cells.0.w", "cells.1.w", "cells.2.w"]
    assert list(program.state) == ["cells.0.acc", "cells.1.acc", "cells.2.acc"]
    assert program.generics == {"D": 2, "L": 3}
    from linnet.ir.interp import run_entry

    w = weights(model, rng)
    (y,), state = run_entry(program, "forward", w, None, [np.ones(2, np.float32)])
    assert y.shape == (2,)
    assert set(state) == set(program.state)


OPTIONAL_PARAM = """
module t

pub block Affine<H: Dim> {
    param weight: Tensor[H; f32]
    param shift: Tensor[H; f32]? = none
    buffer table: Tensor[2, H; f32]

    pub entry forward<B: Dim>(x: Tensor[B, H; f32]) -> Tensor[B, H; f32] {
        let y = x * weight + table[1]
        return match shift {
            some(s) => y - s
            none => y
        }
    }
}
"""


def test_optional_param_and_buffer() -> None:
    model = bound(OPTIONAL_PARAM, {"H": 3})
    assert model.tensors["table"].kind == "buffer"
    w = weights(model, rng)
    x = rng.standard_normal((2, 3)).astype(np.float32)
    for present in (set(w), set(w) - {"shift"}):
        fn = lowered(model, "forward", [t((2, 3))], present)
        assert "buffer" in kinds(fn)
        (y,), _ = execute(fn, [x], {p: w[p] for p in present})
        expected = x * w["weight"] + w["table"][1]
        if "shift" in present:
            expected = expected - w["shift"]
        np.testing.assert_allclose(y, expected, rtol=1e-6)


def test_lowering_errors_name_the_entry() -> None:
    model = bound(OPTIONAL_PARAM, {"H": 3})
    with pytest.raises(LinnetError, match="no entry `backward`"):
        lowered(model, "backward", [t((2, 3))])
    with pytest.raises(LinnetError, match="input `x`"):
        lowered(model, "forward", [t((2, 4))])


def test_weights_are_read_once_each() -> None:
    model = bound(TOWER, {"H": 2, "Depth": 2})
    fn = lowered(model, "forward", [t((1, 2))])
    params = [op.attrs["path"] for op in fn.body.ops if op.kind == "param"]
    assert sorted(params) == sorted(set(params)) == sorted(model.tensors)
    results, _ = run_function(fn, weights(model, rng), {}, [np.ones((1, 2), np.float32)])
    assert results[0].shape == (1, 2)


def test_pipeline_lower_defaults_to_every_optional_member_present() -> None:
    """`linnet.pipeline.lower` and `lower_entry` share one default: all present."""
    from linnet.ir.lower import lower_entry
    from linnet.pipeline import lower

    model = bound(DENSE, {"H": 4, "Inner": 6, "Depth": 2, "Classes": 3})
    for fn in (lower(model, "forward", [t((5, 4))]), lower_entry(model, "forward", [t((5, 4))])):
        calls = [op for op in fn.body.ops if op.kind == "call"]
        assert [len(op.operands) for op in calls] == [3] * 4  # every bias read
