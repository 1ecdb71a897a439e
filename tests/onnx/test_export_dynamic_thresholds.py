"""Dynamic exports of programs that compare a dynamic size with a constant.

`linnet.ir.dynamic` lowers an entry at a few sample sizes; a size comparison
(`if N > 4`, `select(N > 4, ...)`, `min(N, 8)`, `N / 4`, `N % 8`, the clamp
of `x[0:8]`, and the same on a runtime scalar made from `N`, which the
constant folder decides) is folded there. Each program below computed wrong numbers on
the other side of its threshold before the sampler recorded such decisions;
now every size either matches the NumPy interpreter (`linnet.ir.interp`, the
entry lowered at that size) or is refused loudly: a LinnetError from
`ExportedSession` naming the dimension and the operator, and an ONNX Runtime
error from the bare session (the guard is in the graph).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from linnet.errors import LinnetError
from linnet.ir.core import TensorType
from linnet.ir.interp import run_function
from linnet.onnx import load_model
from linnet.onnx.export.api import export_function
from linnet.onnx.runtime.exported import ExportedSession
from linnet.pipeline import check_program, lower_module_entry, optimize

SIZES = (*range(1, 13), 16)

PROGRAMS: dict[str, tuple[str, str]] = {
    # name: (body of `entry f<N: Dim>(x: Tensor[N; f32]) -> Tensor[N; f32]`, operator)
    "if": ("let y = if N > 4 { x * 2.0 } else { x + 1.0 }\n    return y", ">"),
    "select": ("let y[i] = select(N > 4, x[i] * 2.0, x[i] + 1.0)\n    return y", ">"),
    "equal": ("let y = if N == 1 { x * 0.0 } else { x }\n    return y", "=="),
    "min": ("let y[i] = x[i] * cast<f32>(min(N, 8))\n    return y", "min"),
    "max": ("let y[i] = x[i] * cast<f32>(max(3, N))\n    return y", "max"),
    "floor": ("let y[i] = x[i] * cast<f32>(N / 4)\n    return y", "/"),
    "mod": ("let y[i] = x[i] * cast<f32>(N % 8)\n    return y", "%"),
    # The slice's type `Tensor[min(8, N)]` decides the same: the guard names the slice.
    "clamp": ("let y[i] = x[i] + sum[j] x[0:8][j]\n    return y", "slice"),
    # Runtime scalars made from a size: the constant folder decides them.
    "folded_gt": (
        "let n = cast<i32>(N)\n    let y[i] = select(n > 4, x[i] * 2.0, x[i] + 1.0)\n    return y",
        "gt",
    ),
    "folded_min": (
        "let n = min(cast<i32>(N), 8)\n    let y[i] = x[i] * cast<f32>(n)\n    return y",
        "min",
    ),
    "folded_div": ("let y[i] = x[i] * cast<f32>(cast<i32>(N) / 4)\n    return y", "div"),
    "folded_shr": ("let y[i] = x[i] * cast<f32>(shr(cast<i32>(N), 2))\n    return y", "shr"),
}

TYPE_MIN = """module m
fn ones<M: Dim>(x: Tensor[M; f32]) -> f32 {
    let k = fill<f32>([min(M, 8)], 1.0)
    return sum[i] k[i]
}
pub entry f<N: Dim>(x: Tensor[N; f32]) -> Tensor[N; f32] {
    let y[i] = x[i] * ones(x)
    return y
}"""


def _source(body: str) -> str:
    return f"module m\npub entry f<N: Dim>(x: Tensor[N; f32]) -> Tensor[N; f32] {{\n    {body}\n}}"


def _reference(source: str, n: int, x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The entry lowered at `N = n` and run by the NumPy interpreter."""
    program = check_program(source)
    types = [TensorType((n,), "f32")]
    fn = optimize(lower_module_entry(program, "m", "f", types, generics={"N": n}))
    (result,), _ = run_function(fn, {}, {}, [x])
    return result


def _check_every_size(source: str, operator: str) -> tuple[list[int], list[int]]:
    """Sizes served (matching the interpreter) and refused (loudly, by both sessions)."""
    exported = export_function(source, "f", generics={}, dynamic=["N"])
    checked = ExportedSession(exported)
    bare = exported.session()
    served, refused = [], []
    for n in SIZES:
        x = np.linspace(1.0, 2.0, n, dtype=np.float32)
        expected = _reference(source, n, x)
        try:
            (actual,) = checked.run({"x": x})
        except LinnetError as exc:
            message = str(exc)
            assert "`N`" in message or "N=" in message, message
            assert f"`{operator}`" in message, message
            with pytest.raises(Exception, match="linnet guard"):
                bare.run(None, {"x": x})
            refused.append(n)
            continue
        np.testing.assert_allclose(actual, expected, rtol=1e-6)
        (raw,) = bare.run(None, {"x": x})
        np.testing.assert_allclose(raw, expected, rtol=1e-6)
        served.append(n)
    return served, refused


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_a_folded_size_comparison_never_gives_wrong_numbers(name: str) -> None:
    body, operator = PROGRAMS[name]
    served, refused = _check_every_size(_source(body), operator)
    assert 5 in served  # the first sample size is always served
    assert refused, "every program here has sizes on the other side of its threshold"


def test_a_clamp_inside_a_called_functions_type_is_guarded() -> None:
    served, refused = _check_every_size(TYPE_MIN, "min")
    assert 5 in served and 12 in refused


def _guard_texts(source: str) -> list[str]:
    exported = export_function(source, "f", generics={}, dynamic=["N"])
    props = sorted(
        (p.key, p.value) for p in exported.model.metadata_props if p.key.startswith("linnet.where.")
    )
    return [json.loads(value)["text"] for _, value in props]


@pytest.mark.parametrize(
    ("body", "text"),
    [
        ("let y = if N - 2 > 2 { x * 2.0 } else { x + 1.0 }", "N - 2 > 2 (`>`, `N - 2 > 2` at"),
        ("let y = if 10 - N > 2 { x * 2.0 } else { x + 1.0 }", "-N + 10 > 2 (`>`"),
        ("let y = if 2 * N - 3 < 20 { x * 2.0 } else { x + 1.0 }", "2*N - 3 < 20 (`<`"),
        ("let y = x + sum[j] x[0:8][j]", "N <= 8 (`slice`, `x[0:8]` at"),
    ],
    ids=["minus", "negated", "scaled", "slice"],
)
def test_guard_texts_read_like_source(body: str, text: str) -> None:
    (shown,) = _guard_texts(_source(f"{body}\n    return y"))
    assert shown.startswith(text), shown
    assert "+ -" not in shown


def test_guards_true_at_every_size_are_left_out() -> None:
    """`N >= 0` (a truncating division's operand, the start of `x[0:8]`) always holds."""
    texts = _guard_texts(_source(PROGRAMS["folded_div"][0]))
    assert [t.split(" (")[0] for t in texts] == ["N / 4 == 1", "N / 4 == 1"]
    assert len(_guard_texts(_source(PROGRAMS["clamp"][0]))) == 1


def test_a_threshold_the_samples_straddle_is_refused_at_export() -> None:
    source = _source("let y = if N > 5 { x * 2.0 } else { x + 1.0 }\n    return y")
    with pytest.raises(LinnetError, match=r"`>` .* N") as caught:
        export_function(source, "f", generics={}, dynamic=["N"])
    assert "bound" in str(caught.value)


def test_sizes_that_decide_nothing_export_without_guards() -> None:
    source = _source("let y[i] = x[i] * cast<f32>(N * 2 - 1)\n    return y")
    exported = export_function(source, "f", generics={}, dynamic=["N"])
    assert not any(p.key.startswith("linnet.where.") for p in exported.model.metadata_props)
    served, refused = _check_every_size(source, "none")
    assert refused == [] and served == list(SIZES)


def test_load_model_gives_sizes_outside_the_guards_a_session_of_their_own() -> None:
    source = """module g
pub block Gate<H: Dim> {
    param gain: Tensor[H; f32]
    pub entry forward<N: Dim>(x: Tensor[N, H; f32]) -> Tensor[N, H; f32] {
        let y[n, h] = select(N > 4, x[n, h] * gain[h], x[n, h] + gain[h])
        return y
    }
}"""
    gain = np.array([2.0, 3.0], np.float32)
    model = load_model(source, generics={"H": 2}, weights={"gain": gain})
    for n in (6, 2, 5, 4, 9):
        x = np.linspace(1.0, 2.0, 2 * n, dtype=np.float32).reshape(n, 2)
        expected = x * gain if n > 4 else x + gain
        np.testing.assert_allclose(model.run_entry("forward", [x]), expected, rtol=1e-6)
    assert model.dynamic_entries == ["forward"]
    assert len(model.sessions) == 3  # one for N > 4, one each for N = 2 and N = 4


@pytest.mark.parametrize(
    ("body", "operator"),
    [
        ("let n = cast<f32>(N) * 0.3\n    let y[i] = select(n > 1.0, x[i], 0.0)", "gt"),
        ("let y = if N * 0.5 > 2.0 { x * 2.0 } else { x + 1.0 }", ">"),
        ("let y[i] = x[i] * cast<f32>(cast<i32>(cast<f32>(N) * 0.1))", "cast"),
        ("let y[i] = x[i] * cast<f32>(cast<i32>(N) & 3)", "and"),
    ],
    ids=["folded", "literal", "rounded", "bitwise"],
)
def test_a_comparison_of_fractions_that_depend_on_the_size_is_refused(
    body: str, operator: str
) -> None:
    source = _source(f"{body}\n    return y")
    with pytest.raises(LinnetError, match=rf"dynamic N: .*`{operator}`.* depend on the size"):
        export_function(source, "f", generics={}, dynamic=["N"])


def test_a_guard_over_two_dynamic_generics() -> None:
    source = """module m
pub entry f<N: Dim, M: Dim>(x: Tensor[N, M; f32]) -> Tensor[N, M; f32] {
    let y = if N * M > 20 { x * 2.0 } else { x + 1.0 }
    return y
}"""
    exported = export_function(source, "f", generics={}, dynamic=["N", "M"])
    checked, bare = ExportedSession(exported), exported.session()
    for n, m in [(5, 7), (1, 21), (10, 10), (2, 3), (4, 5)]:
        x = np.ones((n, m), np.float32)
        if n * m > 20:
            (y,) = checked.run({"x": x})
            np.testing.assert_array_equal(y, x * 2.0)
            continue
        with pytest.raises(LinnetError, match=r"N\*M > 20 \(`>`.* does not hold for M=\d+, N=\d+"):
            checked.run({"x": x})
        with pytest.raises(Exception, match="linnet guard 0: N\\*M > 20"):
            bare.run(None, {"x": x})


def test_two_generics_take_two_lowerings_traced_and_the_sampler_when_a_trace_is_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Sums and products of sizes are traced (`linnet.ir.traced`): one lowering traced, one
    to check it; so is `N / 4` (and `8 / N`, and a slice's clamp), guarded where its
    value holds, and `N % 8`, which is `N` there (tests/ir/test_traced.py: a trace lost hands over to the sampler)."""
    import linnet.pipeline

    calls: list[object] = []
    lower = linnet.pipeline.lower_module_entry

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs.get("generics"))
        return lower(*args, **kwargs)

    monkeypatch.setattr(linnet.pipeline, "lower_module_entry", counted)
    head = "module m\npub entry f<N: Dim, M: Dim>(x: Tensor[N, M; f32])"
    sums = f"{head} -> Tensor[N, M; f32] {{\n    return x * 2.0\n}}"
    export_function(sums, "f", generics={}, dynamic=["N", "M"])
    assert len(calls) == 2  # traced at the first samples, checked where both have moved
    assert calls[0] != calls[1]
    calls.clear()
    products = f"{head} -> Tensor[N * M; f32] {{\n    return reshape(x, [N * M])\n}}"
    exported = export_function(products, "f", generics={}, dynamic=["N", "M"])
    assert len(calls) == 2
    session = ExportedSession(exported)
    for n, m in [(1, 1), (2, 9), (6, 4)]:
        x = np.arange(n * m, dtype=np.float32).reshape(n, m)
        (y,) = session.run({"x": x})
        np.testing.assert_array_equal(y, x.reshape(-1))
    calls.clear()
    floor = f"{head} -> Tensor[N, M; f32] {{\n    return x * cast<f32>(N / 4)\n}}"
    exported = export_function(floor, "f", generics={}, dynamic=["N", "M"])
    assert len(calls) == 2  # `N / 4` is 1 at both lowerings: guarded, 4 <= N < 8
    session = ExportedSession(exported)
    (y,) = session.run({"x": np.ones((7, 2), np.float32)})
    np.testing.assert_array_equal(y, np.ones((7, 2), np.float32))
    with pytest.raises(LinnetError, match="N / 4"):
        session.run({"x": np.ones((8, 2), np.float32)})
    calls.clear()
    remainder = f"{head} -> Tensor[N, M; f32] {{\n    return x * cast<f32>(N % 8)\n}}"
    exported = export_function(remainder, "f", generics={}, dynamic=["N", "M"])
    assert len(calls) == 2  # `N % 8` is `N` below 8: traced, and guarded there
    session = ExportedSession(exported)
    (y,) = session.run({"x": np.ones((3, 2), np.float32)})
    np.testing.assert_array_equal(y, np.full((3, 2), 3.0, np.float32))
    with pytest.raises(LinnetError, match="N % 8"):
        session.run({"x": np.ones((9, 2), np.float32)})
    calls.clear()
    inverse = f"{head} -> Tensor[N, M; f32] where N > 0 {{\n    return x * cast<f32>(8 / N)\n}}"
    exported = export_function(inverse, "f", generics={}, dynamic=["N", "M"])
    assert len(calls) == 2  # `8 / N` is 1 at both lowerings: guarded, 4 < N <= 8
    session = ExportedSession(exported)
    (y,) = session.run({"x": np.ones((8, 2), np.float32)})
    np.testing.assert_array_equal(y, np.ones((8, 2), np.float32))
    with pytest.raises(LinnetError, match="8 / N"):
        session.run({"x": np.ones((4, 2), np.float32)})
    calls.clear()
    clamp = f"{head} -> Tensor[min(N, 8), M; f32] {{\n    return x[0:8]\n}}"
    exported = export_function(clamp, "f", generics={}, dynamic=["N", "M"])
    assert len(calls) == 2  # the slice's clamp `min(N, 8)`: guarded, N <= 8
    session = ExportedSession(exported)
    x = np.arange(14, dtype=np.float32).reshape(7, 2)
    np.testing.assert_array_equal(session.run({"x": x})[0], x)
    with pytest.raises(LinnetError, match="slice"):
        session.run({"x": np.ones((9, 2), np.float32)})


def test_importing_a_guarded_export_states_the_guard(tmp_path: Path) -> None:
    """The round trip itself is tests/onnx/test_import_guarded.py."""
    from linnet.onnx.importer.api import import_onnx

    source = _source("let y = if N > 4 { x * 2.0 } else { x + 1.0 }\n    return y")
    exported = export_function(source, "f", generics={}, dynamic=["N"])
    result = import_onnx(exported.model, output=tmp_path / "m.linnet", weights=tmp_path / "w")
    assert "where N > 4 {" in result.source


def test_a_reused_op_body_notes_its_decisions_at_every_sample() -> None:
    """At N = 5 both calls of `scale` share one kept region (the second is a clone); at
    the other samples they do not: the clone replays what the body decided."""
    source = """module m
op scale<M: Dim>(x: Tensor[M; f32]) -> Tensor[M; f32] {
    return if M > 4 { x * 2.0 } else { x + 1.0 }
}
pub entry f<N: Dim>(x: Tensor[N; f32], y: Tensor[5; f32]) -> Tensor[N; f32] {
    let z = scale(y)
    let w = scale(x)
    let out[i] = w[i] + z[0]
    return out
}"""
    session = ExportedSession(export_function(source, "f", generics={}, dynamic=["N"]))
    y = np.ones(5, np.float32)
    for n in (5, 6, 9):
        x = np.arange(n, dtype=np.float32)
        (out,) = session.run({"x": x, "y": y})
        np.testing.assert_array_equal(out, x * 2.0 + 2.0)
    with pytest.raises(LinnetError, match=r"N > 4 \(`>`"):
        session.run({"x": np.zeros(3, np.float32), "y": y})
