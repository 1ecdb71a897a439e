"""Counted JAX loops (`lax.scan`, `fori_loop`) import as Linnet runtime `for` loops.

Each function is captured with `jax.export`, imported, and the generated
source runs on `linnet.torch` against JAX itself (1e-5, `jax_import_support.check`).
The source must hold the loop as a `for` (a scan `let ... = for` where JAX
stacks outputs), not unrolled copies of the body.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("torch")

import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from jax_import_support import check, normal  # noqa: E402


def fors(source: str) -> int:
    return len(re.findall(r"\bfor \w+ in \d+\.\.\d+ \{", source))


def test_rnn_cell_over_time_is_a_scan(tmp_path: Path) -> None:
    def rnn(p: Any, xs: Any) -> Any:
        def cell(h: Any, x: Any) -> Any:
            h = jnp.tanh(x @ p["w"] + h @ p["u"] + p["b"])
            return h, h

        return lax.scan(cell, jnp.zeros(5), xs)

    params = {"w": normal(3, 5), "u": normal(5, 5) * 0.5, "b": normal(5)}
    result = check(rnn, params, (normal(7, 3),), tmp_path)
    assert fors(result.source) == 1, result.source
    assert re.search(r"let \w+ = for i in 0\.\.7 \{", result.source), result.source
    assert "yield" in result.source and result.source.count("tanh(") == 1
    assert any("runtime `for` scan" in n for n in result.notes)


def test_cumulative_op_with_a_tuple_carry(tmp_path: Path) -> None:
    def running(p: Any, xs: Any) -> Any:
        def step(carry: Any, x: Any) -> Any:
            total, peak = carry
            total = total + x * p["scale"]
            peak = jnp.maximum(peak, total)
            return (total, peak), (total, peak - total)

        return lax.scan(step, (jnp.zeros(4), jnp.full(4, -1.0)), xs)

    result = check(running, {"scale": normal(4)}, (normal(6, 4),), tmp_path)
    assert fors(result.source) == 1, result.source
    assert re.search(r"let \(\w+, \w+\) = for i in 0\.\.6", result.source), result.source
    assert result.source.count("var ") == 2


def test_fori_loop_is_a_for_statement(tmp_path: Path) -> None:
    def looped(p: Any, x: Any) -> Any:
        body = lambda i, c: jnp.tanh(c * p["w"] + i.astype(jnp.float32))  # noqa: E731
        return lax.fori_loop(2, 9, body, x)

    result = check(looped, {"w": normal(4)}, (normal(3, 4),), tmp_path)
    assert fors(result.source) == 1 and result.source.count("tanh(") == 1, result.source
    # JAX carries its own `i` beside a 0..7 counter: the loop counts like `i`.
    assert "for i in 2..9 {" in result.source and "yield" not in result.source


def test_nested_scans(tmp_path: Path) -> None:
    def table(p: Any, xs: Any) -> Any:
        def outer(c: Any, row: Any) -> Any:
            def inner(d: Any, x: Any) -> Any:
                d = d * 0.5 + x * p["w"]
                return d, d + c

            d, ys = lax.scan(inner, jnp.zeros(()), row)
            return c + d, ys

        return lax.scan(outer, jnp.zeros(()), xs)

    result = check(table, {"w": normal()}, (normal(4, 5),), tmp_path)
    assert fors(result.source) == 2, result.source


def test_a_long_scan_imports_as_a_small_source(tmp_path: Path) -> None:
    """512 steps: unrolled this was over 512 copies of the body; as a loop, one."""

    def smooth(p: Any, xs: Any) -> Any:
        def step(level: Any, x: Any) -> Any:
            level = level * p["decay"] + x * (1.0 - p["decay"])
            return level, level

        return lax.scan(step, jnp.zeros(8), xs)

    result = check(smooth, {"decay": normal(8) * 0.1 + 0.5}, (normal(512, 8),), tmp_path)
    assert fors(result.source) == 1
    assert len(result.source.splitlines()) < 40, result.source


def test_a_reverse_scan_is_a_for_loop(tmp_path: Path) -> None:
    """A reverse scan reads and writes row `n - 1 - i`: one runtime `for` yielding the
    rows, reversed after the loop (not unrolled), equal to JAX."""

    def backwards(p: Any, xs: Any) -> Any:
        step = lambda c, x: (c + x * p["w"], c)  # noqa: E731
        return lax.scan(step, jnp.zeros(3), xs, reverse=True)

    result = check(backwards, {"w": normal(3)}, (normal(4, 3),), tmp_path / "plain")
    assert fors(result.source) == 1 and "yield" in result.source, result.source
    assert any("a reverse scan" in n for n in result.notes), result.notes


def test_a_reverse_rnn_with_two_stacks_and_a_forward_one(tmp_path: Path) -> None:
    """A bidirectional RNN's halves: a forward and a reverse scan over the same
    sequence, each stacking two outputs; 40 steps, still two loops."""

    def bidirectional(p: Any, xs: Any) -> Any:
        def cell(h: Any, x: Any) -> Any:
            h = jnp.tanh(x @ p["w"] + h @ p["u"])
            return h, (h, jnp.sum(h))

        forward = lax.scan(cell, jnp.zeros(4), xs)
        backward = lax.scan(cell, jnp.zeros(4), xs, reverse=True)
        return forward, backward

    params = {"w": normal(3, 4), "u": normal(4, 4) * 0.5}
    result = check(bidirectional, params, (normal(40, 3),), tmp_path)
    assert fors(result.source) == 2, result.source
    assert len(result.source.splitlines()) < 60, result.source
