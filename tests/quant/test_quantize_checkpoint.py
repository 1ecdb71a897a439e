"""`quantize_checkpoint` and `linnet quantize`: names, layouts, copies and refusals.

The quantised tensors must equal `linnet.quant.rtn` on the stored float
weight (itself ONNX Runtime's quantiser, tests/quant/test_layouts.py), sit
under the paths of the std.quant blocks, and everything else must be copied
byte for byte. Bad requests are LinnetErrors naming the tensor or pattern,
and leave no output behind.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from linnet.cli import main
from linnet.errors import LinnetError
from linnet.quant import int4_groups, int8_rows, quantize_checkpoint
from linnet.weights import read_safetensors, save_safetensors

Array = np.ndarray[Any, Any]
ROOT = Path(__file__).resolve().parents[2]


def checkpoint(tmp_path: Path, dtype: Any = np.float32) -> tuple[Path, dict[str, Array]]:
    rng = np.random.default_rng(0)
    arrays = {
        "layers.0.q_proj.weight": rng.standard_normal((8, 64)).astype(dtype),
        "layers.0.q_proj.bias": rng.standard_normal(8).astype(dtype),
        "layers.1.q_proj.weight": rng.standard_normal((4, 64)).astype(dtype),
        "norm.weight": rng.standard_normal(64).astype(dtype),
        "embed.weight": rng.standard_normal((10, 64)).astype(dtype),
    }
    path = tmp_path / "float.safetensors"
    save_safetensors(arrays, path)
    return path, arrays


def test_int4_groups_under_the_block_paths(tmp_path: Path) -> None:
    path, arrays = checkpoint(tmp_path)
    out = tmp_path / "q4.safetensors"
    done = quantize_checkpoint(path, out, patterns=["layers.*.q_proj.weight"], group=32)
    assert done == ["layers.0.q_proj.weight", "layers.1.q_proj.weight"]
    stored = read_safetensors(out)
    for layer in (0, 1):
        prefix = f"layers.{layer}.q_proj"
        packed, scale, zero = int4_groups(arrays[f"{prefix}.weight"], 32)
        np.testing.assert_array_equal(stored[f"{prefix}.weight"], packed)
        np.testing.assert_array_equal(stored[f"{prefix}.scale"], scale)
        np.testing.assert_array_equal(stored[f"{prefix}.zero"], zero)
        assert stored[f"{prefix}.weight"].shape == (arrays[f"{prefix}.weight"].shape[0], 2, 16)
    for name in ("layers.0.q_proj.bias", "norm.weight", "embed.weight"):
        np.testing.assert_array_equal(stored[name], arrays[name])
    assert len(stored) == 3 * 2 + 3


def test_int8_rows_and_a_bf16_source(tmp_path: Path) -> None:
    bf16 = np.dtype(ml_dtypes.bfloat16)
    path, arrays = checkpoint(tmp_path, bf16)
    out = tmp_path / "q8.safetensors"
    quantize_checkpoint(path, out, patterns=["*q_proj.weight", "embed.weight"], bits=8)
    stored = read_safetensors(out)
    q, scale = int8_rows(arrays["embed.weight"].astype(np.float32))
    np.testing.assert_array_equal(stored["embed.weight"], q)
    np.testing.assert_array_equal(stored["embed.scale"], scale)
    assert stored["layers.0.q_proj.bias"].dtype == bf16
    # int4 scales take the weight's dtype unless told otherwise
    quantize_checkpoint(path, out, patterns=["embed.weight"], group=64)
    assert read_safetensors(out)["embed.scale"].dtype == bf16
    quantize_checkpoint(path, out, patterns=["embed.weight"], group=64, dtype="f32")
    assert read_safetensors(out)["embed.scale"].dtype == np.float32


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"patterns": ["nothing.*"]}, "matches no tensor"),
        ({"patterns": ["norm.weight"]}, "only 2-D float linear weights"),
        ({"patterns": ["*.bias"]}, "only `<name>.weight` tensors"),
        ({"patterns": ["embed.weight"], "group": 48}, "does not divide"),
        ({"patterns": ["embed.weight"], "group": 7}, "positive even size"),
        ({"patterns": ["embed.weight"], "bits": 3}, "bits must be 4 or 8"),
        ({"patterns": ["embed.weight"], "method": "gptq"}, "unknown method `gptq`"),
        ({"patterns": ["embed.weight"], "dtype": "i8"}, "scale dtype"),
        ({"patterns": []}, "no patterns"),
    ],
)
def test_refusals_write_nothing(tmp_path: Path, options: dict[str, Any], message: str) -> None:
    path, _ = checkpoint(tmp_path)
    out = tmp_path / "q.safetensors"
    with pytest.raises(LinnetError, match=message):
        quantize_checkpoint(path, out, **options)
    assert not out.exists()


def test_an_existing_target_name_is_refused(tmp_path: Path) -> None:
    arrays = {"a.weight": np.ones((2, 4), np.float32), "a.scale": np.ones(2, np.float32)}
    with pytest.raises(LinnetError, match="already has"):
        quantize_checkpoint(arrays, tmp_path / "q.safetensors", patterns=["a.weight"], bits=8)


def test_cli_quantize(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, arrays = checkpoint(tmp_path)
    out = tmp_path / "cli.safetensors"
    argv = [
        "quantize", str(path), "-o", str(out), "--pattern", "layers.0.*.weight",
        "--pattern", "embed.weight", "--bits", "4", "--group", "16",
    ]  # fmt: skip
    assert main(argv) == 0
    assert "quantised 2 weights to int4" in capsys.readouterr().out
    stored = read_safetensors(out)
    np.testing.assert_array_equal(stored["embed.zero"], int4_groups(arrays["embed.weight"], 16)[2])
    assert main(["quantize", str(path), "-o", str(out), "--pattern", "missing"]) == 1
    assert "matches no tensor" in capsys.readouterr().err
    assert main(["quantize", str(path), "-o", str(out)]) == 2
    assert main(["quantize", str(path), "--pattern", "x", "--bits", "four", "-o", "y"]) == 2


def test_transposed_weights_are_quantised_as_their_out_in_form(tmp_path: Path) -> None:
    """`Conv1D` weights (`[In, Out]`, GPT-2's) named by `transposed` are quantised as the
    `[Out, In]` matrix they hold; a `transposed` glob matching no quantised weight is refused."""
    rng = np.random.default_rng(1)
    conv = rng.standard_normal((64, 24)).astype(np.float32)  # [In, Out]
    path = tmp_path / "conv.safetensors"
    save_safetensors({"h.0.c_fc.weight": conv, "h.0.c_fc.bias": np.ones(24, np.float32)}, path)
    out = tmp_path / "q.safetensors"
    quantize_checkpoint(path, out, patterns=["*.weight"], transposed=["*.c_fc.weight"], bits=8)
    q, scale = int8_rows(np.ascontiguousarray(conv.T))
    stored = read_safetensors(out)
    np.testing.assert_array_equal(stored["h.0.c_fc.weight"], q)
    np.testing.assert_array_equal(stored["h.0.c_fc.scale"], scale)
    with pytest.raises(LinnetError, match=r"c_attn\.weight` matches no quantised weight"):
        quantize_checkpoint(path, tmp_path / "x.safetensors", patterns=["*.weight"],
                            transposed=["h.*.c_attn.weight"])  # fmt: skip
    assert not (tmp_path / "x.safetensors").exists()


def test_cli_quantize_with_the_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--source` writes `quantize_source`'s text and quantises the weights it names (GPT-2's
    Conv1D weights transposed), exactly as the library calls do."""
    import runpy

    from linnet.quant import quantize_source

    gpt2 = ROOT / "examples" / "gpt2"
    sizes = {"Vocab": 16, "Positions": 8, "H": 32, "Heads": 2, "Layers": 1}
    floats = runpy.run_path(str(gpt2 / "make_weights.py"))["make_weights"](sizes, 0)
    path = tmp_path / "gpt2.safetensors"
    save_safetensors(floats, path)
    out, written = tmp_path / "q.safetensors", tmp_path / "q.linnet"
    source = gpt2 / "src" / "lib.linnet"
    argv = ["quantize", str(path), "-o", str(out), "--source", str(source),
            "--source-output", str(written), "--group", "32"]  # fmt: skip
    assert main(argv) == 0
    assert "quantised 4 weights to int4" in capsys.readouterr().out
    rewrite = quantize_source(source.read_text(), group=32)
    assert written.read_text() == rewrite.text
    quantize_checkpoint(path, tmp_path / "lib.safetensors", patterns=rewrite.patterns,
                        transposed=rewrite.transposed, group=32)  # fmt: skip
    assert (tmp_path / "lib.safetensors").read_bytes() == out.read_bytes()
    assert read_safetensors(out)["transformer.h.0.mlp.c_fc.weight"].shape == (128, 1, 16)
    assert main([*argv, "--pattern", "*.weight"]) == 2  # --source names the weights itself
    assert main(argv[:6]) == 2  # no --source-output
    assert main([*argv[:4], "--pattern", "*.weight", "--keep", "c_fc"]) == 2  # no --source
