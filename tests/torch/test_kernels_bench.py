"""bench/kernels.py runs (small inputs): each kernel equals its body and the table is printed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

BENCH = Path(__file__).resolve().parents[2] / "bench" / "kernels.py"


def test_bench_smoke() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH), "--small", "--rounds", "1"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    rows = [line.split() for line in out.splitlines() if line.endswith("interpreter")]
    assert [r[0] + " " + r[1] for r in rows] == ["row softmax", "matmul 33x40", "histogram 500"]
