"""Kernels through Triton in `linnet.torch` (language-extensions 4.5, 4.6), on the CPU.

The checks run in a subprocess (`triton_kernel_checks.py`) because Triton's
interpreter must be switched on (`TRITON_INTERPRET=1`) before `triton` is
imported. Each kernel (a row softmax, a tiled matmul with a K loop, an atomic
histogram, row norms, two results, a weighted prefix sum in a runtime `for`) is compared with its op's body, run by the NumPy
reference interpreter, on random inputs whose edges the masks guard; the
interpreted runner and generated code both launch the kernel, the exact mode
(`natives=False`) and a failed `where` clause run the body. Skipped without
Triton.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("triton")

CHECKS = Path(__file__).with_name("triton_kernel_checks.py")
SRC = Path(__file__).parents[2] / "src"


@pytest.fixture(scope="module")
def records() -> dict[str, dict[str, Any]]:
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(SRC))
    done = subprocess.run(
        [sys.executable, str(CHECKS)], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return {r["case"]: r for r in json.loads(done.stdout)}


LAUNCHED = [
    ("softmax ragged", 1e-6),
    ("softmax full tile", 1e-6),
    ("matmul ragged", 1e-5),
    ("matmul tiles", 1e-5),
    ("row norms ragged", 1e-6),
    ("row norms negative scale", 0.0),
    ("histogram ragged", 0.0),
    ("histogram one block", 0.0),
    ("two results ragged", 0.0),
    ("running for ragged", 1e-5),  # a runtime `for` in the kernel (B16)
    ("running for one row", 1e-6),
]


@pytest.mark.parametrize(("case", "tolerance"), LAUNCHED)
def test_kernel_equals_body(
    records: dict[str, dict[str, Any]], case: str, tolerance: float
) -> None:
    r = records[case]
    assert r["explain"] is None
    # the kernel ran in both torch paths, never in exact mode
    assert r["launches"] == {"interpreted": 1, "generated": 1, "exact": 0}
    for mode in ("interpreted", "generated", "exact"):
        assert r["diff"][mode] <= tolerance * max(r["scale"], 1.0), (mode, r)


def test_failed_where_runs_the_body(records: dict[str, dict[str, Any]]) -> None:
    r = records["softmax where fails"]
    assert "where" in r["explain"] and "C=100" in r["explain"]
    assert r["launches"] == {"interpreted": 0, "generated": 0, "exact": 0}
    assert max(r["diff"].values()) <= 1e-6


@pytest.mark.parametrize("case", ["matmul gradient", "softmax gradient"])
def test_gradient_is_the_bodys(records: dict[str, dict[str, Any]], case: str) -> None:
    # the kernel runs forward; backward differentiates the op's body (4.5 "Gradients")
    r = records[case]
    assert r["launches"] == 1
    assert r["diff"] <= 1e-5 * max(r["scale"], 1.0)


@pytest.mark.parametrize("mode", ["interpreted", "generated", "exact"])
def test_kernel_forward_clause_backward(records: dict[str, dict[str, Any]], mode: str) -> None:
    # an op with a kernel and a gradient clause (language-extensions 3.3, 4.5): the
    # kernel computes the value (with or without autograd), the clause's
    # straight-through gradient is the backward, not the clip's derivative
    launches = 0 if mode == "exact" else 1
    for case in (f"clause {mode}", f"clause {mode} grad"):
        r = records[case]
        assert r["launches"] == launches, r
        assert r["value"] == 0.0, r
    assert records[f"clause {mode} grad"]["gradient"] == 0.0
