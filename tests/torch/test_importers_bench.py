"""bench/importers.py runs: a model that imports and matches, one that is refused, the summary."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "importers.py"


def test_bench_smoke() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH), "--only", "linear", "gru"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    lines = out.splitlines()
    assert any(line.startswith("linear") and " match " in line for line in lines), out
    assert any(line.startswith("gru") and "refused" in line and "aten::gru" in line
               for line in lines), out  # fmt: skip
    assert "| 2 | 1 | 1 | 0 | 1 |" in out, out
