"""`linnet torch` prints a module that runs on its own (`linnet.torch.standalone`).

The printed source is written to a file and imported by a fresh Python
process (nothing of the generating process is shared: no globals, no
constants bound behind its back), which runs it on weights and inputs from
an `.npz` file; its results must equal `linnet.torch.load(...)` on the same
weights (the GPT-2 and Llama examples, through the CLI) or the in-process
generated function (a hand-built function with every kind of global: a
large constant, a bf16 one, non-finite values, a fallback kernel).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from linnet.cli import main
from linnet.ir.bind import bind
from linnet.ir.core import Builder, TensorType, numpy_dtype
from linnet.pipeline import check_paths
from linnet.torch.codegen import CompiledFunction
from linnet.torch.standalone import standalone_source

lt = pytest.importorskip("linnet.torch")

ROOT = Path(__file__).resolve().parents[2]
STDLIB = ROOT / "stdlib"
EXAMPLES = {
    "gpt2": {"Batch": 1, "Vocab": 40, "Positions": 16, "H": 16, "Heads": 2, "Layers": 2},
    "01-llama": {"Vocab": 61, "H": 32, "Heads": 4, "KvHeads": 2, "Inner": 48, "Layers": 2,
                 "Batch": 1, "MaxSeq": 12, "T": "f32"},
}  # fmt: skip

RUNNER = """
import importlib.util, sys
import numpy as np
import torch

spec = importlib.util.spec_from_file_location("generated", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
data = np.load(sys.argv[2])
W = {k[2:]: torch.from_numpy(data[k]) for k in data.files if k.startswith("w:")}
inputs = [torch.from_numpy(data[f"i:{n}"]) for n in range(sum(k.startswith("i:") for k in data.files))]
results, state = module.run(W, {}, *inputs)
np.savez(sys.argv[3], *[r.to(torch.float32).numpy() if r.dtype == torch.bfloat16 else r.numpy() for r in results])
"""


def run_standalone(
    tmp_path: Path, source: str, weights: dict[str, Any], inputs: list[np.ndarray[Any, Any]]
) -> list[np.ndarray[Any, Any]]:
    module = tmp_path / "generated.py"
    module.write_text(source, encoding="utf-8")
    data = tmp_path / "data.npz"
    arrays = {f"w:{k}": v for k, v in weights.items()}
    arrays.update({f"i:{n}": v for n, v in enumerate(inputs)})
    np.savez(data, **arrays)  # type: ignore[arg-type]
    out = tmp_path / "out.npz"
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, str(module), str(data), str(out)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    loaded = np.load(out)
    return [loaded[f"arr_{n}"] for n in range(len(loaded.files))]


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_the_printed_module_of_an_example_runs_on_its_own(
    example: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    generics = {**EXAMPLES[example], "B": 2, "S": 5}
    source = ROOT / "examples" / example / "src" / "lib.linnet"
    binds = [f"--bind={k}={v}" for k, v in generics.items()]
    status = main(["--no-color", "torch", "--std", str(STDLIB), "--entry", "forward", *binds,
                   str(source)])  # fmt: skip
    printed = capsys.readouterr().out
    assert status == 0
    used = set(re.findall(r"\b_(?:c|iota|k)\d+\b", printed))
    defined = set(re.findall(r"^(_(?:c|iota|k)\d+) = ", printed, re.MULTILINE))
    assert used == defined  # every global the code reads is defined in the module
    if example == "gpt2":
        assert "natives.layer_norm(" in printed and "# std.nn.activations::gelu" in printed
    assert "natives.attention(" in printed and "def run(W, S, *inputs):" in printed

    root = {k: v for k, v in generics.items() if k not in ("B", "S")}
    model = bind(check_paths([source], STDLIB), generics=root)
    rng = np.random.default_rng(0)
    weights = {
        path: (rng.standard_normal(t.type.shape) * 0.3).astype(numpy_dtype(t.type.dtype))
        for path, t in model.tensors.items()
        if t.kind != "state"
    }
    tokens = rng.integers(0, int(str(generics["Vocab"])), size=(2, 5)).astype(np.int32)
    (actual,) = run_standalone(tmp_path, printed, weights, [tokens])
    reference = lt.load(source, generics=root, weights=weights, std_root=STDLIB)
    with torch.no_grad():
        expected = reference.run_entry("forward", [torch.from_numpy(tokens)]).numpy()
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)


def test_every_kind_of_global_is_written_out(tmp_path: Path) -> None:
    """A large constant (base64 bytes), a bf16 one, non-finite values, a fallback kernel."""
    b = Builder.for_function(
        [
            ("x", TensorType((40,), "f32")),
            ("n", TensorType((40,), "i32")),
            ("d", TensorType((40,), "i32")),
        ]
    )
    x, n, d = b.args
    table = b.const(np.linspace(-3.0, 5.0, 40).astype(np.float32), "f32")
    odd = b.const(np.array([np.inf, -np.inf, 1.5, -0.0], np.float32), "f32")
    small = b.const(np.array([[1, -2], [3, 4]], np.int64), "i64")
    half = b.const(np.arange(40, dtype=np.float32) / 7, "bf16")
    mixed = b.binary("add", b.binary("mul", x, table), b.cast(half, "f32"))
    quotient = b.binary("div", n, d)  # integer division by a runtime divisor: a fallback kernel
    bounded = b.binary("min", odd, b.const(np.float32(2.0), "f32"))
    fn = b.finish_function("mix", [mixed, quotient, bounded, small])
    compiled = CompiledFunction(fn, torch.device("cpu"), hoist_weights=True)
    source = standalone_source(compiled.generated, "a test")
    assert "_bytes(" in source and "ops.kernel_for('div'" in source
    rng = np.random.default_rng(1)
    inputs = [
        rng.standard_normal(40).astype(np.float32),
        rng.integers(-50, 50, 40).astype(np.int32),
        rng.integers(-3, 4, 40).astype(np.int32),  # zeros and -1 included: guarded
    ]
    actual = run_standalone(tmp_path, source, {}, inputs)
    expected, _ = compiled({}, {}, [torch.from_numpy(a) for a in inputs])
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        np.testing.assert_array_equal(a, e.numpy())
