"""`linnet onnx` (language.md 18.3): one entry as ONNX text that `onnx.parser` reads and that runs.

The seed command of the issue is run exactly as written, as a process, on
examples/01-llama; its output must parse, pass `onnx.checker`, follow the
graph contract and compute what the NumPy reference computes with random
weights bound by name. Errors in the bindings exit 1 naming the generic,
malformed command lines exit 2.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from backend_cases import assert_close

from linnet.cli import USAGE, main
from linnet.ir.interp import run_function
from linnet.onnx import model_from_text
from linnet.pipeline import load_entry
from linnet.target import Target

ROOT = Path(__file__).resolve().parents[2]
LLAMA = "examples/01-llama/src/lib.linnet"
SEED = (
    "linnet onnx --std stdlib --entry forward --bind Vocab=11 --bind H=8 --bind Heads=2 "
    "--bind KvHeads=1 --bind Inner=16 --bind Layers=2 --bind Batch=1 --bind MaxSeq=8 "
    "--bind T=f32 --bind B=2 --bind S=5 examples/01-llama/src/lib.linnet"
)
GENERICS = {"Vocab": 11, "H": 8, "Heads": 2, "KvHeads": 1, "Inner": 16, "Layers": 2,
            "Batch": 1, "MaxSeq": 8, "T": "f32", "B": 2, "S": 5}  # fmt: skip


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["--no-color", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _linnet() -> list[str]:
    script = Path(sys.executable).parent / "linnet"
    return [str(script)] if script.exists() else [sys.executable, "-m", "linnet"]


def test_the_seed_command_prints_a_model_that_runs(tmp_path: Path) -> None:
    args = SEED.split()[1:]
    done = subprocess.run(
        [*_linnet(), *args], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "NO_COLOR": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    (tmp_path / "model.onnx.txt").write_text(done.stdout)
    model = model_from_text((tmp_path / "model.onnx.txt").read_text())
    onnx.checker.check_model(model, full_check=True)
    assert model.graph.name == "main" and model.opset_import[0].version == 20
    names = [i.name for i in model.graph.input]
    assert names[0] == "tokens" and all(n.startswith("param") for n in names[1:])
    assert [o.name for o in model.graph.output] == ["output0"]
    assert not model.graph.initializer
    props = {p.key: p.value for p in model.metadata_props}
    assert props["linnet.path.param0"] == "model.embed_tokens.weight"

    import onnxruntime as ort

    fn = load_entry(ROOT / LLAMA, Target(entry="forward", generics=GENERICS, std=ROOT / "stdlib"))
    rng = np.random.default_rng(0)
    feeds: dict[str, np.ndarray] = {"tokens": rng.integers(0, 11, (2, 5)).astype(np.int32)}
    weights = {}
    for info in model.graph.input[1:]:
        shape = [d.dim_value for d in info.type.tensor_type.shape.dim]
        feeds[info.name] = rng.normal(0, 0.3, shape).astype(np.float32)
        weights[props[f"linnet.path.{info.name}"]] = feeds[info.name]
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (logits,) = session.run(None, feeds)
    (expected,), _ = run_function(fn.function, weights, {}, [feeds["tokens"]])
    assert logits.shape == (2, 5, 11)
    assert_close(logits, expected, "f32", scale=4.0)


def test_stateful_entries_of_the_llama(capsys: pytest.CaptureFixture[str]) -> None:
    binds = [a for k, v in GENERICS.items() if k not in ("B", "S") for a in ("--bind", f"{k}={v}")]
    status, out, err = run(
        capsys,
        "onnx",
        "--std",
        str(ROOT / "stdlib"),
        "--entry",
        "decode",
        *binds,
        str(ROOT / LLAMA),
    )
    assert (status, err) == (0, "")
    model = model_from_text(out)
    onnx.checker.check_model(model, full_check=True)
    inputs = [i.name for i in model.graph.input]
    assert inputs[:2] == ["token", "position"]
    states = [n for n in inputs if n.startswith("state")]
    outputs = [o.name for o in model.graph.output]
    assert len(states) == 4 and outputs[0] == "output0"
    assert sorted(outputs[1:]) == sorted(f"next_{n}" for n in states)
    props = {p.key: p.value for p in model.metadata_props}
    assert props["linnet.state.state0"] == props["linnet.next_state.next_state0"]
    assert props["linnet.state.state0"].endswith("k_cache")


def test_output_file_provider_and_fused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    binds = [a for k, v in GENERICS.items() for a in ("--bind", f"{k}={v}")]
    target = tmp_path / "llama.onnx"
    status, out, err = run(
        capsys, "onnx", "--std", str(ROOT / "stdlib"), *binds, "--fused", "--provider", "cpu",
        "--output", str(target), str(ROOT / LLAMA),
    )  # fmt: skip
    assert (status, out, err) == (0, "", "")
    model = onnx.load(str(target))
    assert any(n.op_type == "SimplifiedLayerNormalization" for n in model.graph.node)


def test_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    llama = str(ROOT / LLAMA)
    std = str(ROOT / "stdlib")
    status, out, err = run(capsys, "onnx", "--std", std, "--bind", "Vocab=11", llama)
    assert status == 1 and out == "" and "missing generic" in err
    binds = [a for k, v in GENERICS.items() if k != "S" for a in ("--bind", f"{k}={v}")]
    status, _, err = run(capsys, "onnx", "--std", std, *binds, llama)
    assert status == 1 and "`S`" in err
    # (the head size is the generic HeadDim, H / Heads by default: Heads need not divide H)
    bad = [
        a for k, v in {**GENERICS, "Heads": 3, "KvHeads": 2}.items() for a in ("--bind", f"{k}={v}")
    ]
    status, _, err = run(capsys, "onnx", "--std", std, *bad, llama)
    assert status == 1 and "Heads % KvHeads == 0" in err
    status, _, err = run(capsys, "onnx", "--provider", "tpu", llama)
    assert status == 2 and "`--provider` takes `cpu` or `cuda`" in err and USAGE in err
    status, _, err = run(capsys, "onnx", llama, llama)
    assert status == 2 and "exactly one file" in err
    broken = tmp_path / "broken.linnet"
    broken.write_text("module broken\npub entry f() -> f32 { return x }\n")
    status, out, err = run(capsys, "onnx", str(broken))
    assert status == 1 and out == "" and "error" in err


def test_usage_lists_the_command() -> None:
    assert "onnx [--entry NAME]" in USAGE
