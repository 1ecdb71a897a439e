"""bench/jax_backend.py runs (tiny model): every path, each in its own process, gives the same
greedy tokens; the table prints with each contender's peak memory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "jax_backend.py"


@pytest.mark.slow
def test_bench_smoke() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH), "--small", "--rounds", "1", "--new", "4", "--prompt", "4"],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    ).stdout
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    names = [r.split("|")[1].strip() for r in rows[2:]]
    assert names[0].startswith("linnet jax") and names[1].startswith("hand-written")
    assert len(names) == 4 and all(float(r.split("|")[7]) > 0 for r in rows[2:])
    assert "# greedy tokens equal on all 4 paths: True" in out
