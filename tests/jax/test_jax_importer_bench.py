"""bench/jax_importer.py runs: a function that imports and matches, one refused, the summary."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jax")

BENCH = Path(__file__).resolve().parents[2] / "bench" / "jax_importer.py"


def test_bench_smoke() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH), "--only", "layer+rms norm", "lexsort"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    lines = out.splitlines()
    assert any(
        line.startswith("| layer+rms norm | match |") and "rms_norm" in line for line in lines
    ), out
    assert any(
        line.startswith("| lexsort | refused |") and "stablehlo.sort" in line for line in lines
    ), out
    assert "| 2 | 1 | 1 | 1 |" in out, out
