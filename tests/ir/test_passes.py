"""Golden tests of the Core IR passes (one golden file per case in passes_golden/).

Each case builds a small function, runs one pass (or `optimize`), verifies the
result, compares the printed IR before and after with the golden file, and
runs both versions on random inputs through the reference interpreter: a pass
must never change what a function computes. Set LINNET_UPDATE_GOLDEN=1 to
rewrite the golden files, then review the diff.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from linnet.ir.core import Builder, Function, TensorType, Value, numpy_dtype
from linnet.ir.interp import run_function
from linnet.ir.passes import (
    PIPELINE,
    cse,
    dce,
    fold,
    optimize,
    rounds_mirrored,
    rounds_recorded,
    simplify_ops,
)
from linnet.ir.passes.fold import FOLD_LIMIT
from linnet.ir.printer import print_function
from linnet.ir.verify import verify

GOLDEN = Path(__file__).parent / "passes_golden"
F4 = TensorType((4,), "f32")
F23 = TensorType((2, 3), "f32")


def check_golden(name: str, before: Function, after: Function) -> None:
    text = f"# before\n{print_function(before)}# after\n{print_function(after)}"
    path = GOLDEN / f"{name}.ir"
    if os.environ.get("LINNET_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"{path} differs; rerun with LINNET_UPDATE_GOLDEN=1 to update"


def random_inputs(fn: Function, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = []
    for _, value in fn.inputs:
        t = value.type
        if t.dtype == "bool":
            arrays.append(rng.random(t.shape) > 0.5)
        elif t.dtype.startswith(("i", "u")):
            arrays.append(rng.integers(1, 4, size=t.shape).astype(numpy_dtype(t.dtype)))
        else:
            arrays.append(rng.uniform(0.5, 2.0, size=t.shape).astype(numpy_dtype(t.dtype)))
    return arrays


def same_results(
    before: Function, after: Function, params: dict[str, np.ndarray] | None = None
) -> None:
    for seed in range(3):
        inputs = random_inputs(before, seed)
        expected, _ = run_function(before, params or {}, {}, inputs)
        got, _ = run_function(after, params or {}, {}, inputs)
        for e, g in zip(expected, got, strict=True):
            assert e.dtype == g.dtype and e.shape == g.shape
            assert np.array_equal(e, g, equal_nan=True)


def run_pass(
    name: str, build: Callable[[], Function], apply: Callable[[Function], Function]
) -> Function:
    before = build()
    verify(before)
    after = apply(before)
    verify(after)
    verify(before)  # the input is left intact
    check_golden(name, before, after)
    same_results(before, after)
    return after


def fold_case() -> Function:
    b = Builder.for_function([("x", F4), ("flag", TensorType((), "bool"))])
    x, flag = b.args
    two = b.const(2.0, "f32")
    six = b.binary("mul", two, b.const(3.0, "f32"))
    ramp = b.cast(b.const([1, -2, 3, -4], "i32"), "f32")  # folds through the cast
    scaled = b.binary("add", b.binary("mul", x, six), ramp)
    big = b.broadcast(two, (FOLD_LIMIT + 1,))  # too large to materialise: kept
    total = b.reduce(big, "sum", (0,))
    (picked,) = b.if_(
        b.const(True, "bool"), lambda rb, _: [rb.unary("neg", scaled)], lambda rb, _: [x]
    )
    (kept,) = b.if_(flag, lambda rb, _: [scaled], lambda rb, _: [x])  # runtime condition: kept
    return b.finish_function("fold", [picked, kept, b.binary("add", total, b.const(1.0, "f32"))])


def test_fold() -> None:
    run_pass("fold", fold_case, lambda fn: dce(fold(fn)))


def test_fold_leaves_failing_ops_for_run_time() -> None:
    b = Builder()
    table = b.const([1.0, 2.0], "f32")
    good = b.gather(table, b.const(1, "i32"), axis=0)
    bad = b.gather(table, b.const(5, "i32"), axis=0)
    folded = fold(b.finish_function("f", [good, bad]))
    kinds = [op.kind for op in folded.body.ops]
    assert kinds == ["const", "const", "const", "const", "gather"]
    assert folded.body.ops[2].attrs["value"] == np.float32(2.0)


def cse_case() -> Function:
    b = Builder.for_function([("x", F23), ("y", F23)])
    x, y = b.args
    a1 = b.binary("add", x, y)
    a2 = b.binary("add", x, y)
    swapped = b.binary("add", y, x)  # different operand order: not merged
    c1 = b.const([1.0, 2.0, 3.0], "f32")
    c2 = b.const([1.0, 2.0, 3.0], "f32")
    c3 = b.const([1.0, 2.0, 4.0], "f32")
    s1 = b.reduce(a1, "sum", (0,))
    s2 = b.reduce(a2, "max", (0,))  # different attrs: not merged
    p1 = b.param("w", F23)
    p2 = b.param("w", F23)

    def then(rb: Builder, _: tuple[Value, ...]) -> list[Value]:
        inner = rb.binary("add", x, y)  # reuses the enclosing a1
        return [rb.binary("mul", inner, rb.binary("mul", x, x))]

    def other(rb: Builder, _: tuple[Value, ...]) -> list[Value]:
        return [rb.binary("mul", x, x)]  # not merged with the sibling's x*x

    (branch,) = b.if_(b.reduce(b.binary("gt", x, y), "any", (0, 1)), then, other)

    def body(rb: Builder, args: tuple[Value, ...]) -> list[Value]:
        # a call body reads only its arguments: the enclosing const is not reused,
        # but the body's own duplicate is
        one = rb.const([1.0, 2.0, 3.0], "f32")
        return [rb.binary("add", rb.binary("add", args[0], one), rb.const([1.0, 2.0, 3.0], "f32"))]

    (called,) = b.call("std.test::g", [a1], body)
    out = b.binary("add", b.binary("add", s1, s2), b.binary("add", c1, c2))
    return b.finish_function("cse", [out, swapped, c3, a2, b.binary("sub", p1, p2), branch, called])


def test_cse() -> None:
    before = cse_case()
    params = {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}
    after = cse(before)
    verify(after)
    check_golden("cse", before, after)
    same_results(before, after, params)


def dce_case() -> Function:
    b = Builder.for_function([("x", F4), ("n", TensorType((), "i64"))])
    x, n = b.args
    dead = b.unary("exp", x)
    b.binary("mul", dead, dead)
    used_inside = b.unary("sqrt", x)  # only read inside a kept region
    b.while_(
        [b.const(0, "i64")],
        lambda rb, c: [rb.binary("lt", c[0], n)],
        lambda rb, c: [rb.binary("add", c[0], rb.const(1, "i64"))],
    )

    def body(rb: Builder, args: tuple[Value, ...]) -> list[Value]:
        rb.unary("log", args[0])  # dead inside the region
        return [rb.binary("add", args[0], used_inside)]

    (called,) = b.call("std.test::f", [x], body)
    cached = b.unary("neg", x)
    return b.finish_function("dce", [called], {"cache": cached})


def test_dce() -> None:
    after = run_pass("dce", dce_case, dce)
    assert [op.kind for op in after.body.ops] == ["sqrt", "call", "neg"]


def simplify_case() -> Function:
    b = Builder.for_function([("x", F23)])
    (x,) = b.args
    same = b.reshape(b.broadcast(b.cast(x, "f32"), (2, 3)), (2, 3))
    ident = b.permute(b.slice(same, (0, 0), (2, 9), (1, 1)), (0, 1))
    twice = b.reshape(b.reshape(ident, (3, 2)), (6,))
    turned = b.permute(b.permute(b.reshape(twice, (1, 2, 3)), (2, 0, 1)), (1, 2, 0))
    whole = b.reduce(b.concat([turned], axis=0), "sum", ())
    part = b.slice(x, (0, 1), (2, 3), (1, 1))  # a real slice: kept
    return b.finish_function("simplify", [whole, part])


def test_simplify() -> None:
    after = run_pass("simplify", simplify_case, lambda fn: dce(simplify_ops(fn)))
    assert [op.kind for op in after.body.ops] == ["reshape", "slice"]


def test_optimize_reaches_a_fixed_point() -> None:
    def build() -> Function:
        b = Builder.for_function([("x", F23)])
        (x,) = b.args
        scale = b.binary("div", b.const(1.0, "f32"), b.unary("sqrt", b.const(4.0, "f32")))
        y1 = b.binary("mul", b.reshape(x, (2, 3)), scale)
        y2 = b.binary("mul", b.permute(x, (0, 1)), scale)
        b.unary("exp", y2)
        return b.finish_function("optimize", [b.binary("add", y1, y2)])

    after = run_pass("optimize", build, lambda fn: optimize(fn, check=True))
    assert optimize(after) is after  # nothing left to do: the same object comes back
    for _name, run in PIPELINE:
        assert run(after)[1] is False


def test_mirrored_rounds_skip_only_the_confirming_round() -> None:
    """A dynamic export's check lowering runs the passes for the rounds that changed
    something in the traced one: the same graph, without the round that confirms it."""

    def build() -> Function:
        b = Builder.for_function([("x", F23)])
        (x,) = b.args
        scale = b.binary("div", b.const(1.0, "f32"), b.unary("sqrt", b.const(4.0, "f32")))
        y = b.binary("mul", b.reshape(b.reshape(x, (3, 2)), (2, 3)), scale)
        return b.finish_function("mirrored", [b.binary("add", y, b.permute(x, (0, 1)))])

    with rounds_recorded() as rounds:
        full = optimize(build())
    ((_, count),) = rounds.changed
    assert count >= 1
    with rounds_mirrored(rounds):
        mirrored = optimize(build())
    assert print_function(mirrored) == print_function(full)
    call, _ = rounds.changed[0]
    rounds.changed[0] = (call, count - 1)
    with rounds_mirrored(rounds):  # a round fewer than recorded: not the fixed point
        short = optimize(build())
        past = optimize(build())  # a call past the recorded ones runs to its fixed point
    assert print_function(past) == print_function(full)
    assert print_function(short) != print_function(full)
    same_results(build(), short)


@pytest.mark.parametrize("seed", range(5))
def test_optimize_preserves_random_chains(seed: int) -> None:
    """Random mixes of foldable, duplicate, trivial and dead ops compute the same after optimize."""
    rng = np.random.default_rng(seed)
    b = Builder.for_function([("x", F23), ("y", F23)])
    pool: list[Value] = [*list(b.args), b.const(rng.uniform(0.5, 2, size=(2, 3)), "f32")]
    for _ in range(25):
        choice = rng.integers(0, 5)
        a = pool[rng.integers(0, len(pool))]
        c = pool[rng.integers(0, len(pool))]
        if choice == 0:
            pool.append(b.binary(str(rng.choice(["add", "mul", "max", "sub"])), a, c))
        elif choice == 1:
            pool.append(b.reshape(b.reshape(a, (3, 2)), (2, 3)))
        elif choice == 2:
            pool.append(b.permute(b.permute(a, (1, 0)), (1, 0)))
        elif choice == 3:
            pool.append(b.unary("tanh", a))
        else:
            pool.append(b.binary("add", a, b.const(float(rng.uniform()), "f32")))
    fn = b.finish_function("chain", [pool[-1], pool[-2]])
    optimized = optimize(fn, check=True)
    assert len(optimized.body.ops) <= len(fn.body.ops)
    same_results(fn, optimized)
