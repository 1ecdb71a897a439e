"""`op` call regions lowered once per signature and cloned (linnet.ir.lower.reuse).

The reference is the same lowering with the cache switched off: every region
lowered afresh. After `optimize` both must print the same IR, op for op, and
compute the same values; regions that read a param (a method `op` of a block)
or that differ in argument types or generics must never be shared.
"""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from lower_support import bound, execute, lowered, t, weights

from linnet.ir.core import Function, Region
from linnet.ir.interp import run_function
from linnet.ir.lower import reuse
from linnet.ir.lower.context import Frame, Lowerer
from linnet.ir.lower.values import LV
from linnet.ir.passes import optimize
from linnet.ir.printer import print_function
from linnet.ir.regions import region_free_values, walk
from linnet.ir.verify import verify
from linnet.pipeline import check_program, lower
from linnet.target import Target, resolve

ROOT = Path(__file__).resolve().parents[2]
LLAMA = ROOT / "examples" / "01-llama" / "src" / "lib.linnet"
SMALL = {"Vocab": 32, "H": 16, "Heads": 4, "KvHeads": 2, "Inner": 24, "Layers": 3}


class Uncached(reuse.RegionCache):
    """The cache switched off: every `op` region is lowered, none is settled."""

    def get(self, key: Hashable) -> tuple[Region, LV] | None:
        return None

    def put(self, key: Hashable, region: Region, result: LV) -> Region:
        return region


def llama(entry: str, generics: dict[str, object]) -> Function:
    program = check_program(LLAMA)
    given = {**SMALL, "Batch": 2, "MaxSeq": 16, "T": "f32", **generics}
    resolved = resolve(program, Target(entry=entry, generics=given))
    assert resolved.model is not None
    fn = lower(
        resolved.model,
        entry,
        resolved.input_types,
        resolved.present,
        generics=resolved.entry_generics,
    )
    verify(fn)
    return fn


class NotReplayed(reuse.InlineCache):
    """The method cache switched off: every method body is inlined afresh."""

    def key(self, lw: Lowerer, frame: Frame, params: tuple[LV, ...]) -> Hashable | None:
        return None


def switch_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("linnet.ir.lower.context.RegionCache", Uncached)
    monkeypatch.setattr("linnet.ir.lower.context.InlineCache", NotReplayed)


@pytest.mark.parametrize(
    ("entry", "generics"), [("prefill", {"S": 5}), ("decode", {}), ("forward", {"B": 2, "S": 3})]
)
def test_llama_lowers_to_the_same_ir_with_and_without_the_caches(
    monkeypatch: pytest.MonkeyPatch, entry: str, generics: dict[str, object]
) -> None:
    replays = []
    real = reuse.InlineCache._replay

    def counting(self: reuse.InlineCache, *args: Any) -> LV:
        replays.append(args[1].instance.dotted)
        return real(self, *args)

    monkeypatch.setattr(reuse.InlineCache, "_replay", counting)
    cached = llama(entry, generics)
    # Layers 1 and 2 replay layer 0's body (state writes of the cache included).
    assert {"model.layers.1", "model.layers.2"} <= set(replays)
    assert "model.layers.0" not in replays  # the first is inlined (its linears may replay)
    calls = [op for op in walk(cached.body) if op.kind == "call"]
    assert calls and all(op.regions[0].settled for op in calls)
    switch_off(monkeypatch)
    fresh = llama(entry, generics)
    assert not any(op.regions[0].settled for op in walk(fresh.body) if op.kind == "call")
    fast, reference = optimize(cached, check=True), optimize(fresh, check=True)
    assert print_function(fast) == print_function(reference)
    assert list(cached.state_updates) == list(fresh.state_updates)
    # Clones share no value: each op defines its own.
    defined = [v for op in walk(fast.body) for v in op.results]
    assert len(defined) == len(set(defined))


def test_settled_regions_are_left_alone_by_the_passes() -> None:
    fn = llama("prefill", {"S": 3})
    regions = [op.regions[0] for op in walk(fn.body) if op.kind == "call"]
    fast = optimize(fn)
    kept = {id(op.regions[0]) for op in walk(fast.body) if op.kind == "call"}
    assert kept <= {id(r) for r in regions}  # the very same region objects
    assert all(not region_free_values(r) for r in regions)


OPS = """
module t

pub op scaled<N: Dim, *S: Shape>(x: Tensor[*S; f32]) -> Tensor[*S; f32] {
    return x * cast<f32>(N) + x
}

pub block Cell<D: Dim> {
    param w: Tensor[D; f32]

    pub op step(x: Tensor[D; f32]) -> Tensor[D; f32] {
        return x * w
    }
}

pub block Stack<D: Dim, L: Dim> {
    sub cells: [Cell<D>; L]

    pub entry forward(x: Tensor[D; f32], y: Tensor[2, D; f32]) -> Tensor[D; f32] {
        var h = x
        static for cell in cells {
            h = cell.step(h)
        }
        let a = scaled<2>(h)
        let b = scaled<3>(h)
        let c = scaled<2>(y)
        return a + b + c[0] + scaled<2>(a)
    }
}
"""


def test_regions_reading_params_or_of_other_signatures_are_not_shared() -> None:
    model = bound(OPS, {"D": 3, "L": 3}, root="Stack")
    fn = lowered(model, "forward", [t((3,)), t((2, 3))])
    calls = [op for op in fn.body.ops if op.kind == "call"]
    steps = [op for op in calls if op.attrs["callee"] == "t::Cell.step"]
    # Each layer's `step` reads its own `w`: lowered every time, never settled.
    read = [{v.name for v in region_free_values(op.regions[0])} for op in steps]
    assert read == [{"cells.0.w"}, {"cells.1.w"}, {"cells.2.w"}]
    assert not any(op.regions[0].settled for op in steps)
    scaled = [op for op in calls if op.attrs["callee"] == "t::scaled"]
    assert [op.attrs["generics"]["N"] for op in scaled] == [2, 3, 2, 2]
    assert all(op.regions[0].settled for op in scaled)
    assert scaled[0].regions[0] is not scaled[3].regions[0]  # a clone, not the same region
    assert scaled[0].regions[0].args[0] is not scaled[3].regions[0].args[0]
    rng = np.random.default_rng(0)
    w = weights(model, rng)
    x = rng.standard_normal(3).astype(np.float32)
    y = rng.standard_normal((2, 3)).astype(np.float32)
    (out,), _ = execute(fn, [x, y], params=w)
    h = x.astype(np.float64)
    for i in range(3):
        h = h * w[f"cells.{i}.w"]
    a = 3 * h
    expected: Any = a + 4 * h + 3 * y[0] + 3 * a
    np.testing.assert_allclose(out, expected, rtol=1e-5)
    (again,), _ = run_function(optimize(fn), w, {}, [x, y])
    np.testing.assert_array_equal(out, again)


DENSE = """
module t

pub block Dense<In: Dim, Out: Dim> {
    param weight: Tensor[Out, In; f32]
    param bias: Tensor[Out; f32]? = none

    pub fn forward<B: Dim>(x: Tensor[B, In; f32]) -> Tensor[B, Out; f32] {
        let y[b, o] = sum[i] x[b, i] * weight[o, i]
        return match bias {
            some(c) => y + c
            none => y
        }
    }
}

pub block Mlp<H: Dim, Depth: Dim> {
    sub hidden: [Dense<H, H>; Depth]

    pub entry forward<B: Dim>(x: Tensor[B, H; f32]) -> Tensor[B, H; f32] {
        var h = x
        static for layer in hidden {
            h = max(layer.forward(h), 0.0)
        }
        return h
    }
}
"""


def test_a_layer_without_its_optional_bias_is_not_a_replay_of_one_with_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = bound(DENSE, {"H": 3, "Depth": 4}, root="Mlp")
    rng = np.random.default_rng(1)
    w = weights(model, rng)
    present = set(w) - {"hidden.1.bias"}
    x = rng.standard_normal((2, 3)).astype(np.float32)
    fn = lowered(model, "forward", [t((2, 3))], present)
    read = [op.attrs["path"] for op in fn.body.ops if op.kind == "param"]
    assert "hidden.1.bias" not in read
    assert {"hidden.0.bias", "hidden.2.bias", "hidden.3.bias"} <= set(read)
    (out,), _ = execute(fn, [x], {p: w[p] for p in present})
    h = x.astype(np.float64)
    for i in range(4):
        h = h @ w[f"hidden.{i}.weight"].T.astype(np.float64)
        if i != 1:
            h = h + w[f"hidden.{i}.bias"]
        h = np.maximum(h, 0.0)
    np.testing.assert_allclose(out, h, rtol=1e-5, atol=1e-6)
    switch_off(monkeypatch)
    fresh = lowered(model, "forward", [t((2, 3))], present)
    assert print_function(optimize(fn)) == print_function(optimize(fresh))
