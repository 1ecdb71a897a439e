"""ONNX exports with dynamic entry generics (`export_model(dynamic=[...])`, `linnet onnx --dynamic`).

The Llama and GPT-2 examples' `forward<B, S>` are exported once with `B` and
`S` dynamic (plain and with ONNX Runtime's fused kernels), saved to one file,
and run through `ExportedSession` at three batch sizes times three sequence
lengths against `linnet.torch` on the same weights; the file imports back as
`forward<B: Dim, S: Dim>` and the imported source computes the same logits.
`load_model` serves every size of such an entry with one session. The
`where` clauses on dynamic generics are checked at run time, inputs that
disagree on a generic are refused, and what cannot be dynamic (a size that is
no polynomial, a name that is no entry Dim generic) is a LinnetError.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from import_support import EXAMPLE_SIZES, STDLIB, close, example_weights, run_imported

from linnet.cli import main
from linnet.errors import LinnetError
from linnet.onnx.export.api import export_function, export_model
from linnet.onnx.importer.api import import_onnx
from linnet.onnx.runtime.exported import ExportedSession
from linnet.onnx.runtime.model import load_model

torch = pytest.importorskip("torch")
lt = pytest.importorskip("linnet.torch")

ROOT = Path(__file__).resolve().parents[2]
BATCHES = (1, 2, 3)
LENGTHS = (1, 4, 11)


def _source(example: str) -> Path:
    return ROOT / "examples" / example / "src" / "lib.linnet"


def _tokens(vocab: int, batch: int, length: int) -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(batch * 100 + length)
    return rng.integers(0, vocab, size=(batch, length)).astype(np.int32)


@pytest.fixture(scope="module", params=sorted(EXAMPLE_SIZES))
def example(request: pytest.FixtureRequest) -> tuple[str, dict[str, object], dict[str, Any]]:
    name = str(request.param)
    generics = EXAMPLE_SIZES[name]
    return name, generics, example_weights(name, generics, seed=3)


@pytest.mark.parametrize("fused", [False, True], ids=["standard", "fused"])
def test_one_file_runs_every_batch_and_length_like_linnet_torch(
    example: tuple[str, dict[str, object], dict[str, Any]], fused: bool, tmp_path: Path
) -> None:
    name, generics, weights = example
    exported = export_model(
        _source(name),
        generics=generics,
        weights=weights,
        entry="forward",
        std_root=STDLIB,
        fused=fused,
        dynamic=["B", "S"],
    )
    graph = exported.model.graph
    dims = [d.dim_param or d.dim_value for d in graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["B", "S"]
    out_dims = [d.dim_param or d.dim_value for d in graph.output[0].type.tensor_type.shape.dim]
    assert out_dims == ["B", "S", generics["Vocab"]]
    path = exported.save(tmp_path / "forward.onnx")
    session = ExportedSession(path)
    reference = lt.load(_source(name), generics=generics, weights=weights, std_root=STDLIB)
    vocab = int(str(generics["Vocab"]))
    for batch in BATCHES:
        for length in LENGTHS:
            tokens = _tokens(vocab, batch, length)
            (logits,) = session.run({"tokens": tokens})
            with torch.no_grad():
                expected = reference.forward(torch.from_numpy(tokens)).numpy()
            close(logits, expected)


def test_a_dynamic_export_imports_back_with_its_generics(
    example: tuple[str, dict[str, object], dict[str, Any]], tmp_path: Path
) -> None:
    name, generics, weights = example
    exported = export_model(
        _source(name),
        generics=generics,
        weights=weights,
        entry="forward",
        std_root=STDLIB,
        dynamic=["B", "S"],
    )
    result = import_onnx(exported.model, output=tmp_path / "m.linnet", weights=tmp_path / "w")
    assert re.search(r"entry forward<B: Dim, S: Dim>\(tokens: Tensor\[B, S; i32\]\)", result.source)
    session = ExportedSession(exported)
    vocab = int(str(generics["Vocab"]))
    for batch, length in [(1, 3), (2, 7)]:
        tokens = _tokens(vocab, batch, length)
        (expected,) = session.run({"tokens": tokens})
        (actual,) = run_imported(result, [tokens])
        close(actual, expected)


def test_load_model_serves_every_size_with_one_session() -> None:
    generics = EXAMPLE_SIZES["gpt2"]
    weights = example_weights("gpt2", generics, seed=4)
    model = load_model(_source("gpt2"), generics=generics, weights=weights, std_root=STDLIB)
    reference = lt.load(_source("gpt2"), generics=generics, weights=weights, std_root=STDLIB)
    vocab = int(str(generics["Vocab"]))
    for batch, length in [(1, 1), (3, 5), (2, 16)]:
        tokens = _tokens(vocab, batch, length)
        logits = model.run_entry("forward", [tokens])
        with torch.no_grad():
            expected = reference.forward(torch.from_numpy(tokens)).numpy()
        close(logits, expected)
    assert len(model.sessions) == 1
    assert model.dynamic_entries == ["forward"]
    with pytest.raises(LinnetError, match=r"constraint S <= Positions does not hold .*S=17"):
        model.run_entry("forward", [np.zeros((1, 17), np.int32)])
    # The entries that write the cache in place keep one session per shape, and still run.
    model.run_entry("prefill", [np.zeros((1, 3), np.int32), np.int32(0)])
    model.run_entry("decode", [np.zeros((1,), np.int32), np.int32(3)])
    assert model.dynamic_entries == ["forward"]


def test_load_model_without_dynamic_sessions_makes_one_per_shape() -> None:
    generics = EXAMPLE_SIZES["gpt2"]
    weights = example_weights("gpt2", generics, seed=5)
    model = load_model(
        _source("gpt2"), generics=generics, weights=weights, std_root=STDLIB, dynamic=False
    )
    reference = lt.load(_source("gpt2"), generics=generics, weights=weights, std_root=STDLIB)
    vocab = int(str(generics["Vocab"]))
    for batch, length in [(1, 2), (2, 3)]:
        tokens = _tokens(vocab, batch, length)
        with torch.no_grad():
            expected = reference.forward(torch.from_numpy(tokens)).numpy()
        close(model.run_entry("forward", [tokens]), expected)
    assert len(model.sessions) == 2
    assert model.dynamic_entries == []
    assert [s.contract.result_types[0].shape[:2] for s in model.sessions] == [(1, 2), (2, 3)]


def test_where_clauses_and_shared_generics_are_checked_at_run_time() -> None:
    generics = EXAMPLE_SIZES["gpt2"]
    exported = export_model(
        _source("gpt2"), generics=generics, entry="forward", std_root=STDLIB, dynamic=["B", "S"]
    )
    session = ExportedSession(exported)
    tokens = np.zeros((2, 17), np.int32)
    with pytest.raises(LinnetError, match=r"constraint S <= Positions does not hold for B=2, S=17"):
        session.sizes({"tokens": tokens})
    pair = export_function(
        """module m
pub entry mix<B: Dim, S: Dim>(x: Tensor[B, S; f32], y: Tensor[B, S; f32]) -> Tensor[S, B; f32]
where S >= 2 {
    let z[s, b] = x[b, s] * y[b, s]
    return z
}""",
        "mix",
        generics={},
        dynamic=["B", "S"],
    )
    session = ExportedSession(pair)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (z,) = session.run({"x": x, "y": x})
    np.testing.assert_array_equal(z, (x * x).T)
    with pytest.raises(LinnetError, match=r"input `y` axis 0 is 3, but `B` is 2 from input `x`"):
        session.run({"x": x, "y": np.zeros((3, 3), np.float32)})
    with pytest.raises(LinnetError, match=r"constraint S >= 2 does not hold for B=2, S=1"):
        session.run({"x": x[:, :1], "y": x[:, :1]})


def test_rational_sizes_are_computed_and_unfit_ones_refused() -> None:
    halves = export_function(
        """module m
pub entry fold<N: Dim>(x: Tensor[N; f32]) -> Tensor[N / 2; f32] where N % 2 == 0 {
    let pairs = reshape(x, [N / 2, 2])
    let y[i] = pairs[i, 0] + pairs[i, 1]
    return y
}""",
        "fold",
        generics={},
        dynamic=["N"],
    )
    session = ExportedSession(halves)
    for n in (2, 10, 40):
        x = np.arange(n, dtype=np.float32)
        (y,) = session.run({"x": x})
        np.testing.assert_array_equal(y, x[0::2] + x[1::2])
    with pytest.raises(LinnetError, match="N % 2 == 0 does not hold"):
        session.run({"x": np.zeros(3, np.float32)})
    square = export_function(
        """module m
pub entry flat<N: Dim>(x: Tensor[N, N; f32]) -> Tensor[N * N; f32] {
    return reshape(x, [N * N])
}""",
        "flat",
        generics={},
        dynamic=["N"],
    )  # N^2 needs the finer grid: the multilinear fit fails its check first
    dims = [d.dim_param for d in square.model.graph.output[0].type.tensor_type.shape.dim]
    assert dims == ["N^2"]
    for n in (1, 3, 12):
        x = np.arange(n * n, dtype=np.float32).reshape(n, n)
        (y,) = ExportedSession(square).run({"x": x})
        np.testing.assert_array_equal(y, x.reshape(-1))
    with pytest.raises(LinnetError, match=r"dynamic N: .* is no polynomial in N"):
        export_function(
            """module m
pub entry odd<N: Dim>(x: Tensor[N; f32]) -> Tensor[(N + 1) / 2; f32] {
    return x[0:N:2]
}""",
            "odd",
            generics={},
            dynamic=["N"],
        )


def test_names_that_cannot_be_dynamic_are_refused() -> None:
    generics = EXAMPLE_SIZES["gpt2"]
    with pytest.raises(LinnetError, match=r"dynamic `Vocab` is no generic of entry `forward`"):
        export_model(
            _source("gpt2"), generics=generics, entry="forward", std_root=STDLIB, dynamic=["Vocab"]
        )


def test_the_cli_exports_dynamic_axes(capsys: pytest.CaptureFixture[str]) -> None:
    binds = [f"--bind={k}={v}" for k, v in EXAMPLE_SIZES["gpt2"].items()]
    argv = ["--no-color", "onnx", "--std", str(STDLIB), "--entry", "forward", *binds]
    status = main([*argv, "--dynamic", "B,S", str(_source("gpt2"))])
    out = capsys.readouterr().out
    assert status == 0
    assert "int32[B,S] tokens" in out
    assert '"linnet.dynamic": "B,S"' in out


def test_prefill_with_a_dynamic_length_matches_the_static_exports() -> None:
    """`write_span`'s `N - 1` is a constant that varies with `S`: computed in the graph."""
    generics = EXAMPLE_SIZES["01-llama"]
    weights = example_weights("01-llama", generics, seed=5)
    common = {"weights": weights, "entry": "prefill", "std_root": STDLIB}
    dynamic = ExportedSession(
        export_model(_source("01-llama"), generics=generics, dynamic=["S"], **common)
    )
    state = {
        value.name: np.random.default_rng(7).normal(size=value.shape).astype(np.float32)
        for value in dynamic.session.get_inputs()
        if value.name.startswith("state")
    }
    vocab = int(str(generics["Vocab"]))
    for length, start in [(1, 0), (4, 2), (9, 3)]:
        static = export_model(_source("01-llama"), generics={**generics, "S": length}, **common)
        feeds = {"tokens": _tokens(vocab, 1, length), "start": np.array(start, np.int32), **state}
        expected = static.session().run(None, feeds)
        actual = dynamic.run(feeds)
        for a, e in zip(actual, expected, strict=True):
            close(a, e)
