"""Every code block of docs/ and the README runs, so the documentation cannot rot.

Each page runs top to bottom in a fresh folder, its blocks in order:
- ```sh: run with bash (`set -e`) in the page's folder; `linnet` and `python` are this
  venv's. A following ```text block is the output that command must print (compared
  line by line, trailing blanks ignored).
- ```python: executed in one namespace per page (the page's own text, our documentation,
  not user input), in the page's folder.
- ```linnet: a whole module, checked; with `file=PATH` it is also written there first
  (the tutorial builds its package this way). `expect=E2107` says the block is a
  deliberate mistake and must give exactly that error.
- ```sh no-run: the set-up commands that cannot run inside the test suite (`make test`
  would run itself); only the commands in NO_RUN may appear there.
- ```text and ```toml not preceded by a command are shown, not run; ```toml with
  `file=PATH` is written there.
The folder holds `examples/` and `stdlib/` (links to the repository's), so pages may use
the examples by their repository paths.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]
NO_RUN = {
    "make demo",
    "make test",
    "make test-slow",
    "make lock",
    "make lock-upgrade",
    "make bench",
}
NO_RUN_PREFIXES = ("pip install ", "git clone ", "cd ")
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)


@dataclass
class Block:
    lang: str
    options: dict[str, str]
    flags: set[str]
    text: str
    line: int


def blocks(page: Path) -> list[Block]:
    found = []
    content = page.read_text(encoding="utf-8")
    for m in FENCE.finditer(content):
        words = m.group(1).split()
        lang = words[0] if words else ""
        options = dict(w.split("=", 1) for w in words[1:] if "=" in w)
        flags = {w for w in words[1:] if "=" not in w}
        found.append(Block(lang, options, flags, m.group(2), content.count("\n", 0, m.start()) + 1))
    return found


def _env() -> dict[str, str]:
    env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    env["LINNET_PROGRESS"] = "0"
    env["NO_COLOR"] = "1"
    return env


def _same_output(got: str, expected: str) -> bool:
    def lines(s: str) -> list[str]:
        return [ln.rstrip() for ln in s.strip("\n").splitlines()]

    return lines(got) == lines(expected)


def _check_linnet(path: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "linnet", "check", "--no-color", str(path)],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
    )


def run_page(page: Path, folder: Path) -> None:
    for name in ("examples", "stdlib"):
        (folder / name).symlink_to(ROOT / name)
    namespace: dict[str, object] = {"__name__": "__docs__"}
    last_output: str | None = None
    where = f"{page.relative_to(ROOT)}"
    old_cwd = Path.cwd()
    os.chdir(folder)
    try:
        for block in blocks(page):
            at = f"{where}:{block.line}"
            if block.lang == "sh" and "no-run" in block.flags:
                for cmd in filter(None, (c.split("#")[0].strip() for c in block.text.splitlines())):
                    assert cmd in NO_RUN or cmd.startswith(NO_RUN_PREFIXES), f"{at}: `{cmd}`"
                last_output = None
            elif block.lang == "sh":
                done = subprocess.run(
                    ["bash", "-e", "-c", block.text],
                    cwd=folder,
                    env=_env(),
                    capture_output=True,
                    text=True,
                )
                expect_fail = "fails" in block.flags
                assert (done.returncode != 0) == expect_fail, (
                    f"{at}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
                )
                last_output = done.stdout + (done.stderr if expect_fail else "")
            elif block.lang == "text" and last_output is not None:
                assert _same_output(last_output, block.text), (
                    f"{at}: the command printed\n{last_output}\nthe page says\n{block.text}"
                )
                last_output = None
            elif block.lang == "python":
                code = compile(block.text, at, "exec")
                exec(code, namespace)  # our own documentation's code, not user input
                last_output = None
            elif block.lang == "linnet":
                target = Path(block.options.get("file", f"_block_{block.line}.linnet"))
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(block.text, encoding="utf-8")
                done = _check_linnet(target, folder)
                expected = block.options.get("expect")
                if expected is None:
                    assert done.returncode == 0, f"{at}:\n{done.stdout}{done.stderr}"
                else:
                    codes = re.findall(r"^error (E\d+):", done.stdout + done.stderr, re.M)
                    assert codes == [expected], f"{at}: expected one {expected}, got {codes}"
                last_output = None
            elif block.lang in ("toml", "json") and "file" in block.options:
                target = Path(block.options["file"])
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(block.text, encoding="utf-8")
                last_output = None
            else:
                last_output = None
    finally:
        os.chdir(old_cwd)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_page_runs(page: Path, tmp_path: Path) -> None:
    run_page(page, tmp_path)


def test_every_page_has_code_and_links_resolve() -> None:
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        assert "../shared" not in text, f"{page}: points outside the repository"
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
            assert (page.parent / target).exists(), f"{page}: broken link {target}"


def test_blocks_parse() -> None:
    assert shutil.which("bash")
    page = ROOT / "docs" / "tutorial.md"
    langs = {b.lang for b in blocks(page)}
    assert {"sh", "python", "linnet"} <= langs
