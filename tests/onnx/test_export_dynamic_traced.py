"""Dynamic exports by tracing (`linnet.ir.dynamic_traced`) give what the sampler gives.

The examples' entries with dynamic `S` (and `B, S`) are exported twice: by the
traced path (one traced lowering and one check lowering) and by the sampler
alone (`lower_traced` made to decline); the ONNX files must be byte for byte the
same. A lowering that drops a trace where no hook sees it (here: every
`reshape`/`broadcast` shape made plain ints, as a NumPy round trip would) is
caught by the check lowering and exported by the sampler, and runs right at
sizes other than the samples: a size baked at the sample would fail there.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from import_support import EXAMPLE_SIZES

import linnet.ir.core
import linnet.ir.dynamic_traced
import linnet.pipeline
from linnet.onnx.export.api import export_function, export_model
from linnet.onnx.runtime.exported import ExportedSession

ROOT = Path(__file__).resolve().parents[2]
ENTRIES = (
    ("prefill", {"S": 4}, ["S"]),
    ("forward", {"B": 2, "S": 4}, ["B", "S"]),
    ("decode_slots", {"M": 2}, ["M"]),
    ("hidden_packed", {"P": 6}, ["P"]),
)
CASES = [(example, *entry) for example in sorted(EXAMPLE_SIZES) for entry in ENTRIES]
CASES.append(("gpt2", "generate", {"S": 3, "Steps": 4}, ["S"]))  # a scan over the steps


def _source(example: str) -> Path:
    return ROOT / "examples" / example / "src" / "lib.linnet"


@pytest.mark.parametrize(
    ("example", "name", "own", "dynamic"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES]
)
def test_the_traced_export_is_the_sampled_export_byte_for_byte(
    example: str,
    name: str,
    own: dict[str, int],
    dynamic: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    generics = {**EXAMPLE_SIZES[example], **own}
    lowered: list[object] = []
    lower = linnet.pipeline.lower

    def counted(*args: Any, **kwargs: Any) -> Any:
        lowered.append(kwargs.get("generics"))
        return lower(*args, **kwargs)

    monkeypatch.setattr(linnet.pipeline, "lower", counted)
    traced = export_model(_source(example), generics=generics, entry=name, dynamic=dynamic)
    assert len(lowered) == 2  # traced, then checked
    monkeypatch.setattr(linnet.ir.dynamic_traced, "lower_traced", lambda *_: "declined")
    sampled = export_model(_source(example), generics=generics, entry=name, dynamic=dynamic)
    assert len(lowered) > 4  # the sampler's grid
    assert traced.model.SerializeToString() == sampled.model.SerializeToString()


def test_a_size_the_lowering_bakes_is_caught_and_computed_at_every_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = """module m
pub entry f<N: Dim, M: Dim>(x: Tensor[N, M; f32]) -> Tensor[N * M; f32] {
    return reshape(x, [N * M])
}"""

    def plain(values: Sequence[int] | Any, what: str) -> tuple[int, ...]:
        return tuple(int.__int__(v) for v in values)  # the trace dropped, no hook told

    monkeypatch.setattr(linnet.ir.core, "_ints", plain)
    exported = export_function(source, "f", generics={}, dynamic=["N", "M"])
    session = ExportedSession(exported)
    for n, m in [(1, 1), (2, 9), (5, 7), (6, 4)]:
        x = np.arange(n * m, dtype=np.float32).reshape(n, m)
        (y,) = session.run({"x": x})
        np.testing.assert_array_equal(y, x.reshape(-1))


def test_sizes_used_as_numbers_are_traced_and_right_at_every_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`20 - N` as a float and `N * M - 1` as an i32 scalar are constants of the traced
    lowering: their traces make them computed in the graph, not the sample's values."""
    import linnet.ir.dynamic

    source = """module m
pub entry f<N: Dim, M: Dim>(x: Tensor[N, M; f32]) -> Tensor[N, M; f32] {
    let last = cast<i32>(N * M - 1)
    let y[i, j] = x[i, j] * cast<f32>(20 - N) + cast<f32>(last)
    return y
}"""
    methods: list[str] = []
    lower_dynamic = linnet.ir.dynamic.lower_dynamic

    def recorded(*args: Any, **kwargs: Any) -> Any:
        fn, dims = lower_dynamic(*args, **kwargs)
        methods.append(dims.method)
        return fn, dims

    monkeypatch.setattr(linnet.ir.dynamic, "lower_dynamic", recorded)
    session = ExportedSession(export_function(source, "f", generics={}, dynamic=["N", "M"]))
    assert methods == ["traced"]
    for n, m in [(1, 1), (3, 8), (17, 2)]:
        x = np.ones((n, m), np.float32)
        (y,) = session.run({"x": x})
        np.testing.assert_array_equal(y, np.full((n, m), (20 - n) + (n * m - 1), np.float32))
