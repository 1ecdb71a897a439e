"""bench/torch_backend.py runs (tiny model): its outputs agree with eager and it prints the table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "torch_backend.py"


def test_bench_smoke() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH), "--small", "--rounds", "2", "--threads", "1"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    assert [r.split("|")[1].strip() for r in rows[2:]] == ["eager", "interpreted", "generated"]
