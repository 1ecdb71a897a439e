"""`linnet inspect --ir` and `linnet torch` (language.md 18.3): one entry, every generic bound.

The language.md 1.5 example (`spec_tiny`) is compiled from the command line
and compared with the same stages called through `linnet.pipeline`; errors
in the bindings exit 1 naming the generic, malformed command lines exit 2.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from linnet.cli import USAGE, main
from linnet.ir.printer import print_function
from linnet.pipeline import load_entry
from linnet.target import Target

VALID = Path(__file__).resolve().parent / "conformance" / "valid"
TINY = VALID / "spec_tiny.linnet"
BINDS = ["--bind", "H=4", "--bind", "Inner=8", "--bind", "Depth=2", "--bind", "Classes=3"]
GENERICS = {"H": "4", "Inner": "8", "Depth": "2", "Classes": "3", "B": "2"}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["--no-color", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_inspect_ir_of_the_tiny_example(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "inspect", "--ir", *BINDS, "--bind", "B=2", str(TINY))
    assert (status, err) == (0, "")
    expected = print_function(load_entry(TINY, Target(generics=GENERICS)).function)
    assert out == expected
    lines = out.splitlines()
    assert lines[0] == "entry forward(%0 x: f32[2,4]) -> (f32[2,3])"
    params = [line.split("{path=")[1].split("}")[0] for line in lines if "= param {" in line]
    assert params == [
        "input.weight", "input.bias", "hidden.0.weight", "hidden.0.bias",
        "hidden.1.weight", "hidden.1.bias", "output.weight", "output.bias",
    ]  # fmt: skip
    # The op `dense` stays a call region with its canonical body; its sum is a contraction.
    assert out.count("callee=examples.tiny::dense") == 4 and "contract" in out
    assert lines[-1].startswith("  return %")


def test_inspect_ir_options(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(
        capsys, "inspect", "--ir", "--optionals", "absent", "--entry", "forward", "--root", "Mlp",
        *BINDS, "--bind", "B=1", "--bind", "T=f64", str(TINY),
    )  # fmt: skip
    assert status == 0
    assert "bias" not in out and "f64[1,4]" in out.splitlines()[0]
    status, plain, _ = run(
        capsys, "inspect", "--ir", "--no-optimize", *BINDS, "--bind=B=2", str(TINY)
    )
    status2, optimized, _ = run(capsys, "inspect", "--ir", *BINDS, "--bind=B=2", str(TINY))
    assert status == status2 == 0
    assert len(optimized.splitlines()) < len(plain.splitlines())


def test_module_level_entries(capsys: pytest.CaptureFixture[str]) -> None:
    losses = VALID / "spec_losses.linnet"
    status, out, _ = run(
        capsys, "inspect", "--ir", "--entry", "spread", "--bind", "N=5", str(losses)
    )
    assert status == 0 and out.startswith("entry spread(%0 x: f32[5]) -> (f32[])")
    status, _, err = run(capsys, "inspect", "--ir", "--bind", "N=5", str(losses))
    assert status == 1
    assert "several entries (`mean_abs_error`, `spread`); choose one with --entry" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (BINDS, "missing generic `B` for entry `forward`"),
        ([*BINDS[2:], "--bind", "B=2"], "missing generic `H` for block `Mlp`"),
        ([*BINDS, "--bind", "B=2", "--bind", "Q=1"], "unknown generic `Q`"),
        ([*BINDS, "--bind", "B=2", "--entry", "backward"], "has no entry `backward`"),
        ([*BINDS, "--bind", "B=2", "--root", "Nope"], "no block named `Nope`"),
        (["--bind", "H=x", *BINDS[2:], "--bind", "B=2"], "generic `H` of block `Mlp` is a `Dim`"),
        ([*BINDS[:-2], "--bind", "Classes=3", "--bind", "B=2", "--bind", "T=i32"], "must be Float"),
    ],
)
def test_binding_errors_exit_1_naming_the_generic(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    for command in (["inspect", "--ir"], ["torch"]):
        status, out, err = run(capsys, *command, *argv, str(TINY))
        assert (status, out) == (1, "")
        assert err.startswith("linnet: ") and message in err, err


def test_where_clauses_are_evaluated(capsys: pytest.CaptureFixture[str]) -> None:
    grouped = VALID / "spec_grouped.linnet"
    status, _, err = run(capsys, "inspect", "--ir", "--bind", "H=6", "--bind", "B=1", str(grouped))
    assert status == 1 and "H % 4 == 0" in err
    status, out, _ = run(capsys, "inspect", "--ir", "--bind", "H=8", "--bind", "B=1", str(grouped))
    assert status == 0 and "f32[1,4,2]" in out.splitlines()[0]


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["inspect", "--ir", "--bind", "H", str(TINY)], "`--bind H` is not of the form G=VALUE"),
        (["inspect", "--ir", "--bind", "H=1", "--bind", "H=2", str(TINY)], "gives `H` twice"),
        (["inspect", "--parameters", "--bind", "H=1", str(TINY)], "`--bind` is only valid with"),
        (["inspect", "--ast", "--entry", "f", str(TINY)], "`--entry` is only valid with"),
        (["inspect", "--ir", "--optionals", "maybe", str(TINY)], "`--optionals` takes"),
        (["inspect", "--ir", "--parameters", str(TINY)], "exactly one of"),
        (["torch", "--bind", "H=1"], "`torch` takes exactly one file"),
        (["torch", "--no-optimize", str(TINY)], "unknown option `--no-optimize` for `torch`"),
        (["plan"], "`plan` takes exactly one file"),
    ],
)
def test_usage_errors_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], problem: str
) -> None:
    status, out, err = run(capsys, *argv)
    assert (status, out) == (2, "")
    first, rest = err.split("\n", 1)
    assert problem in first and rest == "\n" + USAGE


def test_source_errors_exit_1_with_diagnostics(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.linnet"
    bad.write_text("module m\n\npub entry f(x: f32) -> f32 {\n    return y\n}\n", encoding="utf-8")
    for command in (["inspect", "--ir"], ["torch"]):
        status, out, err = run(capsys, *command, str(bad))
        assert (status, out) == (1, "") and "error E1201" in err


def test_torch_prints_python_that_compiles(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "torch", *BINDS, "--bind", "B=2", str(TINY))
    assert (status, err) == (0, "")
    code = compile(out, "<linnet torch>", "exec")
    assert "entry" in code.co_names
    assert "def entry(W, S, H, x):" in out and "W['hidden.1.weight']" in out


def test_check_and_inspect_ir_import_no_framework(tmp_path: Path) -> None:
    """`linnet check` loads neither NumPy nor torch; `inspect --ir` loads NumPy but not torch."""
    probe = (
        "import sys, io, contextlib\n"
        "from linnet.cli import main\n"
        "args = sys.argv[1:]\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    status = main(args)\n"
        "print(status, sorted(m for m in ('torch', 'numpy') if m in sys.modules))\n"
    )

    def heavy(*argv: str) -> str:
        result = subprocess.run(
            [sys.executable, "-c", probe, *argv], capture_output=True, text=True, check=True,
            cwd=tmp_path,
        )  # fmt: skip
        return result.stdout.strip()

    assert heavy("check", str(TINY)) == "0 []"
    assert heavy("inspect", "--ir", *BINDS, "--bind", "B=2", str(TINY)) == "0 ['numpy']"


def test_torch_without_pytorch_is_a_clear_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    status, out, err = run(capsys, "torch", *BINDS, "--bind", "B=2", str(TINY))
    assert (status, out) == (1, "")
    assert (
        err
        == "linnet: `linnet torch` needs PyTorch: install it with `pip install 'linnet-lang[torch]'`\n"
    )


PACKS = """\
module m

pub entry total<*S: Shape, T: Float>(x: Tensor[*S, 2; T]) -> Tensor[*S; T] {
    let t[*s] = sum[j] x[*s, j]
    return t
}
"""


@pytest.mark.parametrize(
    ("binds", "input_type"),
    [
        (["S=", "T=f32"], "f32[2]"),
        (["S=3,4", "T=f16"], "f16[3,4,2]"),
        (["S=5", "T=bf16"], "bf16[5,2]"),
    ],
)
def test_pack_and_dtype_bindings(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, binds: list[str], input_type: str
) -> None:
    source = tmp_path / "packs.linnet"
    source.write_text(PACKS, encoding="utf-8")
    argv = [arg for bind in binds for arg in ("--bind", bind)]
    status, out, err = run(capsys, "inspect", "--ir", *argv, str(source))
    assert (status, err) == (0, "")
    assert out.splitlines()[0].startswith(f"entry total(%0 x: {input_type}) -> (")


HUGE = 2**40
POSITIONS = """\
module positions

pub block Positions<N: Dim> {
    param w: Tensor[N; f32]

    pub entry forward(x: Tensor[N; f32]) -> Tensor[N; f32] {
        return x + w + cast<f32>(iota<i32>(N))
    }
}
"""


def test_huge_dimensions_print_as_torch_and_are_refused_by_onnx_by_name(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Printing source allocates nothing (an iota of 2**40 would be 4 TiB); ONNX indexes in i32."""
    source = tmp_path / "positions.linnet"
    source.write_text(POSITIONS, encoding="utf-8")
    status, out, err = run(capsys, "torch", "--bind", f"N={HUGE}", str(source))
    assert (status, err) == (0, "")
    assert "def entry(W, S, H, x):" in out
    _, small, _ = run(capsys, "torch", "--bind", "N=4", str(source))
    assert out.replace(str(HUGE), "4") == small  # the same source as for a small extent
    status, out, err = run(capsys, "onnx", "--bind", f"N={HUGE}", str(source))
    assert (status, out) == (1, "")
    assert err == (
        f"linnet: cannot export entry `forward` to ONNX: input `x` has extent {HUGE} "
        f"(axis 0 of f32[{HUGE}]), past the i32 range (at most 2147483647) the exported graph "
        "indexes in\n"
    )
    status, _, err = run(capsys, "onnx", "--bind", f"N={2**31 - 1}", str(source))
    assert status == 0, err  # the largest extent that fits: printed as text, nothing allocated


@pytest.mark.slow
def test_huge_llama_hidden_size(capsys: pytest.CaptureFixture[str]) -> None:
    llama = Path(__file__).resolve().parent.parent / "examples" / "01-llama" / "src" / "lib.linnet"
    binds = [
        f"--bind={g}" for g in (
            "Vocab=11", "Heads=2", "KvHeads=1", "Inner=16", "Layers=2", "Batch=1", "MaxSeq=8",
            f"H={HUGE}",
        )
    ]  # fmt: skip
    status, out, err = run(capsys, "torch", "--entry", "decode", *binds, str(llama))
    assert (status, err) == (0, "") and "def entry(" in out
    status, out, err = run(capsys, "onnx", "--entry", "decode", *binds, str(llama))
    assert (status, out) == (1, "")
    assert "param `model.embed_tokens.weight` has extent 1099511627776" in err
