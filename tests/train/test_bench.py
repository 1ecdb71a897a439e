"""bench/train.py runs (tiny model): every side's first loss agrees with transformers' and it prints the ratios."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "train.py"


@pytest.mark.slow
def test_bench_smoke() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH), "--small", "--steps", "1", "--warmup", "0"],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    ).stdout
    found = re.search(
        r"first-step loss: linnet ([\d.]+), transformers ([\d.]+), linnet-jax ([\d.]+), "
        r"hand-jax ([\d.]+)",
        out,
    )
    assert found is not None, out
    for side in (1, 3, 4):
        assert float(found.group(side)) == pytest.approx(float(found.group(2)), rel=1e-5)
    names = [line.split()[0] for line in out.splitlines()[-7:]]
    expected = ["linnet", "linnet-jax", "hand-jax", "transformers", "ratio", "jax-ratio"]
    assert names == [*expected, "jax/hand"]
