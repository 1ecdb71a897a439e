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


GEMV_BENCH = BENCH.parent / "jax_gemv.py"


def test_gemv_bench_smoke() -> None:
    """bench/jax_gemv.py (tiny shapes): every compile option's product passed its f64 check
    (the bench exits otherwise), each variant has a row per layout, and the default's
    result is its own reference."""
    out = subprocess.run(
        [sys.executable, str(GEMV_BENCH), "--small", "--rounds", "1"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    rows = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith("| 96x64")]
    variants = {r[2].strip() for r in rows}
    assert {"default", "vector width 512"} <= variants and len(rows) == 2 * len(variants)
    assert {r[1].strip() for r in rows} == {"[Out, In]", "[In, Out]"}
    defaults = [r for r in rows if r[2].strip() == "default"]
    assert len(defaults) == 2 and all(r[7].strip() == "bit-identical" for r in defaults)
    assert all(float(r[4]) >= 0 for r in rows)  # a rate is printed (at 0.1 GB/s precision, a busy
    # machine's tiny products can round to 0.0: no timing is asserted)
