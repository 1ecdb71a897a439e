"""The `linnet` command line (language.md 18): exit statuses, messages and each command.

Commands run in-process through `main(argv)` with pytest's captured streams;
two real subprocesses check the console script and that `linnet check` imports
no framework.
"""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from linnet import cli
from linnet.cli import _COMMANDS, COMMAND_HELP, EXIT_INTERNAL, USAGE, check_summary, main
from linnet.commands.init import package_name
from linnet.errors import LinnetError

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "examples" / "tiny" / "src" / "lib.linnet"

GOOD = """\
module demo

pub fn scale<N: Dim>(x: Tensor[N; f32]) -> Tensor[N; f32] {
    return x * 2.0
}
"""

UNFORMATTED = """\
module demo
pub fn scale<N: Dim>(x: Tensor[N; f32])->Tensor[N; f32] {
  return x*2.0
}
"""

SYNTAX_ERROR = "module demo\n\npub fn scale(x: f32) -> f32 {\n    return x +\n}\n"

WARNING = """\
module demo

pub fn scale(x: f32) -> f32 {
    let unused = x
    return x
}
"""


@pytest.fixture(autouse=True)
def inside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LINNET_TRACEBACK", raising=False)
    monkeypatch.setenv("LINNET_STD", str(tmp_path / "std"))
    (tmp_path / "std").mkdir()
    yield


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# -- global behaviour (18, 18.1) -------------------------------------------------------


def test_no_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys) == (2, "", f"linnet: no command given\n\n{USAGE}")


@pytest.mark.parametrize("argv", [["-h"], ["--help"], ["help"], ["--no-color", "-h"]])
def test_help_prints_usage_on_stdout(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    assert run(capsys, *argv) == (0, USAGE, "")


@pytest.mark.parametrize("command", sorted(COMMAND_HELP))
def test_every_command_has_its_own_help(capsys: pytest.CaptureFixture[str], command: str) -> None:
    """`linnet CMD --help`, `CMD -h` and `help CMD` print that command's usage, not the global one."""
    for argv in ([command, "--help"], [command, "-h"], ["help", command]):
        status, out, err = run(capsys, *argv)
        assert (status, err) == (0, "")
        assert out == COMMAND_HELP[command] and out.startswith(f"usage: linnet {command}")
    # Every option the command accepts is documented in its help.
    spec = _COMMANDS[command]
    for option in spec.flags | spec.valued:
        assert option in COMMAND_HELP[command], (command, option)


def test_every_command_is_listed_in_command_help() -> None:
    assert set(COMMAND_HELP) == set(_COMMANDS)


@pytest.mark.parametrize("argv", [["-V"], ["--version"], ["--no-color", "check", "-V"]])
def test_version(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    assert run(capsys, *argv) == (0, "linnet 0.1.0\n", "")


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["frobnicate"], "unknown command `frobnicate`"),
        (["check"], "`check` needs at least one path"),
        (["lint", "--no-color"], "`lint` needs at least one path"),
        (["check", "--fast", "x.linnet"], "unknown option `--fast` for `check`"),
        (["check", "x.linnet", "--std"], "option `--std` needs a value"),
        (["check", "--std=", "x.linnet"], "option `--std` needs a value"),
        (["fmt"], "`fmt` needs a path, or `-` for stdin"),
        (["fmt", "-", "a.linnet"], "`fmt -` reads stdin and cannot be mixed with paths"),
        (["fmt", "--json", "a.linnet"], "unknown option `--json` for `fmt`"),
        (["inspect", "a.linnet"], "`inspect` needs exactly one of --parameters, --tokens, --ast"),
        (["inspect", "--tokens", "--ast", "a.linnet"], "exactly one of"),
        (["inspect", "--tokens", "--json", "a.linnet"], "`--json` is only valid with"),
        (["inspect", "--parameters", "a.linnet", "b.linnet"], "`inspect` takes exactly one file"),
        (["init", "a", "b"], "`init` takes at most one directory"),
        (["spec-test"], "`spec-test` takes exactly one directory"),
    ],
)
def test_usage_errors_exit_2_with_message_and_usage(
    capsys: pytest.CaptureFixture[str], argv: list[str], problem: str
) -> None:
    status, out, err = run(capsys, *argv)
    assert status == 2 and out == ""
    first, rest = err.split("\n", 1)
    assert first.startswith("linnet: ") and problem in first
    assert rest == "\n" + USAGE


def test_no_color_is_accepted_anywhere(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    write(tmp_path / "bad.linnet", SYNTAX_ERROR)
    for argv in (["--no-color", "check", "bad.linnet"], ["check", "bad.linnet", "--no-color"]):
        status, _out, err = run(capsys, *argv)
        assert status == 1 and "\x1b[" not in err and "error E1101" in err


def test_double_dash_ends_options(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, _out, err = run(capsys, "check", "--", "--weird.linnet")
    assert status == 1 and "cannot read `--weird.linnet`" in err


def test_a_missing_file_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "check", "missing.linnet")
    assert (status, out) == (1, "")
    assert err == "linnet: cannot read `missing.linnet`: no such file or directory\n"


def test_linnet_errors_print_their_message(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: object, **kwargs: object) -> object:
        raise LinnetError("the checkpoint does not match")

    monkeypatch.setattr("linnet.pipeline.check_paths", refuse)
    assert run(capsys, "check", "x.linnet") == (1, "", "linnet: the checkpoint does not match\n")


def test_internal_errors_ask_for_a_report_without_a_traceback(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def crash(*args: object, **kwargs: object) -> object:
        raise ValueError("boom")

    monkeypatch.setattr("linnet.pipeline.check_paths", crash)
    status, out, err = run(capsys, "check", "my model.linnet")
    assert (status, out) == (EXIT_INTERNAL, "")
    assert err.startswith("linnet: internal error: ValueError: boom\n")
    assert "report it" in err and "issue tracker" in err
    assert "linnet check 'my model.linnet'" in err  # the command line, shell-quoted
    assert "LINNET_TRACEBACK=1" in err and "Traceback" not in err

    monkeypatch.setenv("LINNET_TRACEBACK", "1")
    status, _out, err = run(capsys, "check", "x.linnet")
    assert status == EXIT_INTERNAL and "Traceback (most recent call last)" in err


# -- check / lint ----------------------------------------------------------------------


def test_check_syntax_errors_on_stderr(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    write(tmp_path / "src" / "bad.linnet", SYNTAX_ERROR)
    status, out, err = run(capsys, "check", "src")
    assert (status, out) == (1, "")
    assert err.startswith("error E1101: ")
    assert f"  --> {Path('src') / 'bad.linnet'}:5:1\n" in err


def test_check_json_on_stdout_only(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    write(tmp_path / "bad.linnet", SYNTAX_ERROR)
    status, out, err = run(capsys, "check", "--json", "bad.linnet")
    assert (status, err) == (1, "")
    assert out.endswith("}\n") and out.count("\n") == 1
    document = json.loads(out)
    assert document["version"] == 1
    assert document["summary"]["errors"] == len(document["diagnostics"]) >= 1
    assert document["diagnostics"][0]["location"]["file"] == "bad.linnet"


@pytest.mark.parametrize("command", ["check", "lint"])
def test_check_json_when_the_check_cannot_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str
) -> None:
    (tmp_path / "empty").mkdir()
    cases = {
        "missing.linnet": "cannot read `missing.linnet`: no such file",
        "empty": "no .linnet files in `empty`",
    }
    for path, message in cases.items():
        status, out, err = run(capsys, command, "--json", path)
        assert (status, err) == (1, "")
        assert out.endswith("}\n") and out.count("\n") == 1
        document = json.loads(out)
        assert document["version"] == 1 and document["diagnostics"] == []
        assert document["summary"] == {"errors": 1, "warnings": 0}
        assert document["error"].startswith(message), document["error"]
    # without --json the same failures stay one line on stderr
    status, out, err = run(capsys, command, "missing.linnet")
    assert (status, out) == (1, "") and err.startswith("linnet: cannot read `missing.linnet`")


def test_check_a_valid_file_prints_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    write(tmp_path / "good.linnet", GOOD)
    assert run(capsys, "check", "good.linnet") == (0, "", "")
    status, out, _ = run(capsys, "check", "--json", "good.linnet")
    assert status == 0 and json.loads(out)["summary"] == {"errors": 0, "warnings": 0}


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_check_prints_a_summary_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """On a terminal `check` ends with one line on stdout; redirected, it prints nothing."""
    write(tmp_path / "good.linnet", GOOD)
    write(tmp_path / "more" / "also.linnet", GOOD)
    write(tmp_path / "bad.linnet", "module bad\n\npub fn f() -> f32 {\n    return y\n}\n")
    for argv, status, line in [
        (["check", "good.linnet", "more"], 0, "checked 2 files: no errors\n"),
        (["check", "bad.linnet"], 1, "checked 1 file: 1 error\n"),
        (["check", "--json", "good.linnet"], 0, ""),
    ]:
        out = _Terminal()
        monkeypatch.setattr(sys, "stdout", out)
        monkeypatch.setattr(sys, "stderr", io.StringIO())
        assert main(argv) == status
        text = out.getvalue()
        assert text.endswith(line) if line else not text.startswith("checked")


def test_check_summary_counts() -> None:
    assert check_summary(1, 0, 0) == "checked 1 file: no errors"
    assert check_summary(3, 2, 1) == "checked 3 files: 2 errors, 1 warning"
    assert check_summary(2, 0, 3) == "checked 2 files: 3 warnings"


def test_warnings_fail_only_under_strict_and_lint(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    write(tmp_path / "w.linnet", WARNING)
    status, _out, err = run(capsys, "check", "w.linnet")
    assert status == 0 and err.startswith("warning W1002")
    assert run(capsys, "check", "--strict", "w.linnet") == (1, "", err)
    assert run(capsys, "lint", "w.linnet") == (1, "", err)


def test_check_uses_the_std_option(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    write(tmp_path / "mystd" / "util.linnet", "module std.util\n\npub const TWO = 2\n")
    write(tmp_path / "main.linnet", "module main\n\nuse std.util\n")
    status, _out, err = run(capsys, "check", "main.linnet")
    assert status == 1 and "E1202" in err  # LINNET_STD points at an empty std
    status, _out, err = run(capsys, "check", "--std", "mystd", "main.linnet")
    assert "E1202" not in err


# -- fmt -------------------------------------------------------------------------------


def test_fmt_check_reports_and_writes_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write(tmp_path / "a.linnet", UNFORMATTED)
    assert run(capsys, "fmt", "--check", "a.linnet") == (1, "", "would reformat a.linnet\n")
    assert path.read_text() == UNFORMATTED


def test_fmt_rewrites_in_place_atomically(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write(tmp_path / "a.linnet", UNFORMATTED)
    path.chmod(0o640)
    inode = path.stat().st_ino
    status, _out, err = run(capsys, "fmt", "a.linnet")
    assert status == 0 and err == "reformatted a.linnet\n"
    formatted = path.read_text()
    assert formatted != UNFORMATTED and formatted.endswith("}\n")
    assert path.stat().st_ino != inode  # replaced by a rename, not rewritten in place
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.linnet", "std"]  # no temp file left
    # Formatting is idempotent: a second run and --check find nothing to do.
    assert run(capsys, "fmt", "a.linnet") == (0, "", "")
    assert run(capsys, "fmt", "--check", "a.linnet") == (0, "", "")


def test_fmt_leaves_files_with_syntax_errors_untouched(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = write(tmp_path / "d" / "bad.linnet", SYNTAX_ERROR)
    other = write(tmp_path / "d" / "ok.linnet", UNFORMATTED)
    status, _out, err = run(capsys, "fmt", "d")
    assert status == 1 and "error E1101" in err
    assert bad.read_text() == SYNTAX_ERROR
    assert other.read_text() != UNFORMATTED  # the other file is still formatted


def test_fmt_keeps_the_original_when_the_rename_fails(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path / "a.linnet", UNFORMATTED)

    def fail(*args: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", fail)
    status, _out, err = run(capsys, "fmt", "a.linnet")
    assert status == 1 and err == "linnet: cannot write `a.linnet`: Permission denied\n"
    assert path.read_text() == UNFORMATTED
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.linnet", "std"]


def test_fmt_follows_symlinks(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = write(tmp_path / "real.linnet", UNFORMATTED)
    link = tmp_path / "link.linnet"
    link.symlink_to(target)
    assert run(capsys, "fmt", "link.linnet")[0] == 0
    assert link.is_symlink() and target.read_text() != UNFORMATTED


def test_fmt_stdin(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    def feed(text: str) -> None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))

    feed(UNFORMATTED)
    status, formatted, err = run(capsys, "fmt", "-")
    assert (status, err) == (0, "") and formatted != UNFORMATTED
    feed(formatted)
    assert run(capsys, "fmt", "-") == (0, formatted, "")
    feed(formatted)
    assert run(capsys, "fmt", "--check", "-") == (0, "", "")
    feed(UNFORMATTED)
    assert run(capsys, "fmt", "--check", "-") == (1, "", "would reformat <stdin>\n")
    feed(SYNTAX_ERROR)
    status, out, err = run(capsys, "fmt", "-")
    assert (status, out) == (1, "") and "<stdin>:5:1" in err


# -- inspect ---------------------------------------------------------------------------


def test_inspect_parameters_text_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "inspect", "--parameters", str(TINY))
    assert (status, err) == (0, "")
    assert out.startswith("tiny::Dense<In, Out, T>\n  param weight: Tensor[Out, In; T]\n")
    assert "  param bias: Tensor[Out; T]?\n" in out
    assert "tiny::Mlp<H, Inner, Depth, Classes, T>\n" in out
    assert "  param hidden[*].weight: Tensor[Inner, Inner; T] x Depth\n" in out
    assert "\n\ntiny::Mlp" in out  # one empty line between blocks

    status, out, err = run(capsys, "inspect", "--parameters", "--json", str(TINY))
    assert (status, err) == (0, "")
    document = json.loads(out)
    assert document["version"] == 1
    mlp = document["blocks"][1]
    assert (mlp["name"], mlp["module"]) == ("Mlp", "tiny")
    assert mlp["generics"] == ["H", "Inner", "Depth", "Classes", "T"]
    assert {
        "path": "hidden[*].bias",
        "kind": "param",
        "dtype": "T",
        "shape": ["Inner"],
        "repeat": ["Depth"],
        "optional": True,
    } in mlp["entries"]


def test_inspect_parameters_reports_errors(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    write(tmp_path / "bad.linnet", SYNTAX_ERROR)
    status, out, err = run(capsys, "inspect", "--parameters", "bad.linnet")
    assert (status, out) == (1, "") and "error E1101" in err


def test_inspect_tokens_and_ast(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    write(tmp_path / "good.linnet", GOOD)
    status, out, err = run(capsys, "inspect", "--tokens", "good.linnet")
    assert (status, err) == (0, "")
    assert out.splitlines()[0].startswith("1:1 ") and "'module'" in out.splitlines()[0]
    status, out, err = run(capsys, "inspect", "--ast", "good.linnet")
    assert (status, err) == (0, "") and "scale" in out
    status, _out, err = run(capsys, "inspect", "--ast", ".")
    assert status == 1 and "is a directory" in err


# -- init (4.7) ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("directory", "name"),
    [
        ("speech-tools", "speech_tools"),
        ("my model.v2", "my_model_v2"),
        ("_private", "_private"),
        ("2d", "model"),
        ("std", "model"),
        ("crate", "model"),
        ("block", "model"),
        ("modèle", "model"),
    ],
)
def test_init_name_sanitising(tmp_path: Path, directory: str, name: str) -> None:
    assert package_name(tmp_path / directory) == name


def test_init_creates_a_package_that_checks(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status, out, err = run(capsys, "init", "my-model")
    assert (status, err) == (0, "")
    assert out == "created package `my_model` in my-model\n"
    assert (tmp_path / "my-model" / "linnet.toml").read_text() == (
        '[package]\nname = "my_model"\nversion = "0.1.0"\nlanguage = "0.1"\n\n[dependencies]\n'
    )
    lib = (tmp_path / "my-model" / "src" / "lib.linnet").read_text()
    assert lib.startswith("module my_model\n") and "pub fn " in lib
    assert run(capsys, "check", "my-model") == (0, "", "")
    assert run(capsys, "fmt", "--check", "my-model") == (0, "", "")


def test_init_defaults_to_the_current_directory_and_keeps_lib(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = tmp_path / "here"
    write(here / "src" / "lib.linnet", "module mine\n")
    monkeypatch.chdir(here)
    status, out, _ = run(capsys, "init")
    assert status == 0 and "`here`" in out
    assert (here / "src" / "lib.linnet").read_text() == "module mine\n"
    assert (here / "linnet.toml").is_file()


def test_init_refuses_an_existing_manifest(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    write(tmp_path / "p" / "linnet.toml", "# mine\n")
    status, out, err = run(capsys, "init", "p")
    assert (status, out) == (1, "")
    assert err == f"linnet: `{Path('p') / 'linnet.toml'}` already exists; nothing was written\n"
    assert (tmp_path / "p" / "linnet.toml").read_text() == "# mine\n"
    assert not (tmp_path / "p" / "src").exists()


def test_init_where_no_folder_can_be_made(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    write(tmp_path / "file.txt", "a file\n")
    status, out, err = run(capsys, "init", str(Path("file.txt") / "sub"))
    assert (status, out) == (1, "")
    assert err.startswith(f"linnet: cannot create the folder `{Path('file.txt') / 'sub' / 'src'}`")


# -- spec-test (wiring; the harness itself is in test_spec_test.py) ---------------------


def test_spec_test_output_and_status(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    write(suite / "invalid" / "no_module.linnet", "fn f() {}\n")
    write(suite / "invalid" / "wrong.linnet", SYNTAX_ERROR)
    write(
        suite / "manifest.toml",
        "version = 1\n"
        '[[case]]\nfile = "invalid/no_module.linnet"\nexpect = "error"\ncode = "E1102"\n'
        '[[case]]\nfile = "invalid/wrong.linnet"\nexpect = "error"\ncode = "E2103"\n',
    )
    status, out, err = run(capsys, "spec-test", "suite")
    assert (status, err) == (1, "")
    lines = out.splitlines()
    assert lines[0].startswith("FAIL invalid/wrong.linnet: expected only E2103, got E1101 at ")
    assert lines[1:] == ["2 cases, 1 failed"]
    status, _out, err = run(capsys, "spec-test", "nowhere")
    assert status == 1 and err == "linnet: `nowhere` is not a directory\n"


# -- real processes --------------------------------------------------------------------


def test_check_imports_no_framework(tmp_path: Path) -> None:
    source = write(tmp_path / "good.linnet", GOOD)
    probe = (
        "import sys, runpy\n"
        f"sys.argv = ['linnet', 'check', {str(source)!r}]\n"
        "try:\n    runpy.run_module('linnet', run_name='__main__')\n"
        "except SystemExit as exit:\n    status = exit.code\n"
        "heavy = sorted(m for m in ('torch', 'onnx', 'onnxruntime', 'jax', 'numpy') if m in sys.modules)\n"
        "print(status, heavy)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    assert result.stdout.strip() == "0 []", result.stderr


def test_console_script_and_module_entry_point(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("linnet")
    for command in ([str(script)], [sys.executable, "-m", "linnet"]):
        result = subprocess.run([*command, "--version"], capture_output=True, text=True)
        assert (result.returncode, result.stdout) == (0, "linnet 0.1.0\n")
        result = subprocess.run(command, capture_output=True, text=True)
        assert result.returncode == 2 and result.stderr.startswith("linnet: no command given")


def test_main_reads_sys_argv(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["linnet", "--version"])
    assert cli.main() == 0 and capsys.readouterr().out == "linnet 0.1.0\n"
