"""Runtime `for` loops and scans in the plan (language-extensions 0.5, 1): the `for` op's
encoding, and its meaning, through the test materializer (`plan_eval`) on the scan
entries of tests/scan_cases.py against their NumPy references, and on a block whose
scan assigns `state`."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from plan_eval import Materializer
from scan_cases import CASE_IDS, CASES, SOURCE, ScanCase

from linnet.pipeline import check_source
from linnet.plan import build_plan

OPTIONS = [{"optimize": True}, {"optimize": False}]


def _ops(region: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    found = []
    for op in region["ops"]:
        if op["kind"] == kind:
            found.append(op)
        for inner in op["regions"]:
            found.extend(_ops(inner, kind))
    return found


def _plan(source: str, **options: Any) -> dict[str, Any]:
    program = check_source(source)
    assert not program.has_errors
    return build_plan(program, **options)


@pytest.mark.parametrize("options", OPTIONS)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_materialized_scans_match_the_reference(case: ScanCase, options: dict[str, Any]) -> None:
    plan = _plan(SOURCE, **options)
    got = Materializer(plan, {}).call(f"scans::{case.entry}", list(case.inputs), case.generics)
    got = list(got) if isinstance(got, (list, tuple)) else [got]
    # the materializer evaluates in f64 and i64, so values are compared, not dtypes
    expected = case.reference(*case.inputs)
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(
            np.asarray(g, np.float64), np.asarray(e, np.float64), rtol=1e-6, atol=1e-6
        )


BLOCK = """module blk

pub block Acc<D: Dim> {
    param scale: Tensor[D; f32]
    state total: Tensor[D; f32]

    pub entry run<T: Dim>(xs: Tensor[T, D; f32]) -> Tensor[T, D; f32] {
        var h = fill<f32>([D], 0.0)
        let hs = for t in 0..T {
            total = total + xs[t]
            h = h + scale * xs[t]
            yield h + total
        }
        return hs
    }
}
"""


def test_the_for_op_and_state_inside_it() -> None:
    plan = _plan(BLOCK)
    (loop,) = [op for fn in plan["functions"] for op in _ops(fn["body"], "for")]
    assert loop["attrs"]["start"] == 0 and loop["attrs"]["stop"]["name"] == "T"
    counter, carried = loop["regions"][0]["args"]
    assert counter["type"] == {"kind": "scalar", "dtype": "i64"} and carried["name"] == "h"
    assert [r["name"] for r in loop["results"]] == ["h", "hs"]
    kinds = [op["kind"] for op in loop["regions"][0]["ops"]]
    assert "state.read" in kinds and "state.write" in kinds and kinds[-1] == "yield"
    scale = np.array([0.5, 2.0])
    xs = np.arange(6.0).reshape(3, 2)
    materializer = Materializer(plan, {"scale": scale})
    got = materializer.call("blk::Acc.run", [xs], {"D": 2, "T": 3})
    h = np.zeros(2)
    total = np.zeros(2)
    rows = []
    for x in xs:
        total = total + x
        h = h + scale * x
        rows.append(h + total)
    np.testing.assert_allclose(got, np.array(rows))
    np.testing.assert_allclose(materializer.state["total"], total)
