"""Front-end speed: lexing+parsing and full checking, against CPython's `ast.parse`.

Prints one table, every figure measured in this run:
- lines/s for lex+parse and for full checking (load, resolve, types, shapes,
  proofs) of a generated program, beside `ast.parse` of a Python file with the
  same number of lines (a yardstick: a mature parser written in C);
- the whole-process time of `linnet check` on a model file, as a ratio to a bare
  `python -c pass`, and whether the check imported any framework.

Usage: python bench/frontend.py [--lines 20000] [--repeat 3]
Aims (issue: the language front end): checking >= 20,000 lines/s;
`linnet check` of a model < 5x a bare interpreter start.
"""

from __future__ import annotations

import argparse
import ast
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from generated import linnet_program, python_program

from linnet.pipeline import check_source
from linnet.source import SourceFile
from linnet.syntax.parser import parse

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "examples" / "tiny" / "src" / "lib.linnet"


def best_of(repeat: int, run: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def process_time(argv: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    text = linnet_program(args.lines)
    lines = text.count("\n")
    py_text = python_program(lines)
    py_lines = py_text.count("\n")

    program = check_source(text, "generated.linnet")
    errors = [d for d in program.diagnostics if d.is_error]
    if errors:
        sys.exit(f"the generated program has {len(errors)} errors, first: {errors[0].message}")

    parse_s = best_of(args.repeat, lambda: parse(SourceFile("generated.linnet", text)))
    check_s = best_of(args.repeat, lambda: check_source(text, "generated.linnet"))
    py_s = best_of(args.repeat, lambda: ast.parse(py_text))

    bare = process_time([sys.executable, "-c", "pass"], args.repeat * 3)
    # The console script is what users run; `python -m linnet` adds runpy's imports.
    script = Path(sys.executable).with_name("linnet")
    launcher = [str(script)] if script.exists() else [sys.executable, "-m", "linnet"]
    check_cmd = [*launcher, "check", str(MODEL)]
    whole = process_time(check_cmd, args.repeat * 3)
    probe = (
        f"import sys, runpy; sys.argv = ['linnet', 'check', {str(MODEL)!r}]\n"
        "try:\n    runpy.run_module('linnet', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "print(sorted(m for m in ('torch', 'onnx', 'onnxruntime', 'jax') if m in sys.modules))"
    )
    imported = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()

    rows = [
        (
            "lex + parse (linnet)",
            f"{lines:,}",
            f"{parse_s * 1e3:8.1f} ms",
            f"{lines / parse_s:>10,.0f}",
        ),
        (
            "full check (linnet)",
            f"{lines:,}",
            f"{check_s * 1e3:8.1f} ms",
            f"{lines / check_s:>10,.0f}",
        ),
        (
            "ast.parse (CPython, yardstick)",
            f"{py_lines:,}",
            f"{py_s * 1e3:8.1f} ms",
            f"{py_lines / py_s:>10,.0f}",
        ),
    ]
    print(f"{'stage':34} {'lines':>8} {'time':>11} {'lines/s':>10}")
    for name, n, t, rate in rows:
        print(f"{name:34} {n:>8} {t:>11} {rate}")
    print()
    print(f"parse speed vs ast.parse:  {(lines / parse_s) / (py_lines / py_s):.2f}x")
    print(f"check speed vs ast.parse:  {(lines / check_s) / (py_lines / py_s):.2f}x")
    print(f"check aim (>= 20,000 lines/s): {'met' if lines / check_s >= 20_000 else 'NOT met'}")
    print()
    print(f"`python -c pass`:              {bare * 1e3:7.1f} ms")
    print(f"`linnet check {MODEL.relative_to(ROOT)}`: {whole * 1e3:7.1f} ms")
    print(f"ratio (aim < 5x):              {whole / bare:7.2f}x")
    print(f"frameworks imported by check:  {imported}")


if __name__ == "__main__":
    main()
