"""A guarded dynamic export imports back with its guards as the entry's `where` clause.

A dynamic export (`linnet.ir.dynamic`) that folded size decisions at its
sample sizes checks guards in the graph (`linnet.onnx.export.guards`) and
lists them, with the entry's own clauses on dynamic generics, as
`linnet.where.<N>` metadata. `import_onnx` drops the guard nodes and states
those clauses on the imported entry (`linnet.onnx.importer.guards`,
`linnet.sourcegen.stated_where`): the imported entry runs on `linnet.torch`
and matches the exported graph in ONNX Runtime wherever the guards hold, and
is refused by the Linnet runtime where they do not.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from import_support import run_imported

from linnet.check.dims import Dim, Symbol
from linnet.errors import LinnetError
from linnet.ir.symbolic import dim_from_json, dim_to_json
from linnet.onnx.export.api import export_function
from linnet.onnx.importer.api import import_onnx
from linnet.onnx.runtime.exported import ExportedSession
from linnet.sourcegen.refusals import ImportRefusedError
from linnet.sourcegen.stated_where import readable

pytest.importorskip("torch")


def _source(body: str) -> str:
    return f"module m\npub entry f<N: Dim>(x: Tensor[N; f32]) -> Tensor[N; f32] {{\n    {body}\n}}"


def _where(source: str) -> list[str]:
    """The imported entry's where clauses, one per string."""
    match = re.search(r"\n\s*where(.*?)\{", source, re.S)
    assert match is not None, source
    return [c.strip() for c in match.group(1).split(",") if c.strip()]


def _round_trip(
    source: str, dynamic: list[str], inputs: list[dict[str, Any]], tmp_path: Path
) -> tuple[str, list[bool]]:
    """Import the export of `source`; for each input: whether the guards held (and then
    the imported entry matched ONNX Runtime), or both sides refused it."""
    exported = export_function(source, "f", generics={}, dynamic=dynamic)
    result = import_onnx(exported.model, output=tmp_path / "m.linnet", weights=tmp_path / "w")
    session = ExportedSession(exported)
    served = []
    for feed in inputs:
        try:
            expected = session.run(feed)
        except LinnetError:
            with pytest.raises(LinnetError, match=r"constraint .* does not hold"):
                run_imported(result, list(feed.values()))
            served.append(False)
            continue
        actual = run_imported(result, list(feed.values()))
        for a, e in zip(actual, expected, strict=True):
            np.testing.assert_allclose(a, e, rtol=1e-6)
        served.append(True)
    return result.source, served


def _ramp(n: int) -> dict[str, Any]:
    return {"x": np.linspace(1.0, 2.0, n, dtype=np.float32)}


SIZES = (1, 3, 4, 5, 7, 8, 9, 12)


@pytest.mark.parametrize(
    ("body", "clauses"),
    [
        ("let y = if N > 4 { x * 2.0 } else { x + 1.0 }", ["N > 4"]),
        ("let y = x + sum[j] x[0:8][j]", ["N <= 8"]),
        ("let y[i] = x[i] * cast<f32>(N / 4)", ["N >= 4", "N < 8"]),
        ("let y[i] = x[i] * cast<f32>(N % 8)", ["N < 8"]),
    ],
    ids=["comparison", "slice", "floor", "mod"],
)
def test_guards_come_back_as_where_clauses(body: str, clauses: list[str], tmp_path: Path) -> None:
    source = _source(f"{body}\n    return y")
    text, held = _round_trip(source, ["N"], [_ramp(n) for n in SIZES], tmp_path)
    assert "entry f<N: Dim>(x: Tensor[N; f32])" in text
    assert _where(text) == clauses
    assert "guard" not in text and "reshape" not in text
    expected = [_holds(clauses, n) for n in SIZES]
    assert held == expected
    assert any(expected) and not all(expected)


def _holds(clauses: list[str], n: int) -> bool:
    ops = {">": int.__gt__, ">=": int.__ge__, "<": int.__lt__, "<=": int.__le__}
    for clause in clauses:
        name, rel, value = clause.split()
        assert name == "N"
        if not ops[rel](n, int(value)):
            return False
    return True


def test_two_generics_two_results_and_the_entrys_own_clause(tmp_path: Path) -> None:
    source = """module m
pub entry f<N: Dim, M: Dim>(x: Tensor[N, M; f32]) -> (Tensor[N, M; f32], Tensor[M; f32])
where M > 1 {
    let y = if N * M > 20 { x * 2.0 } else { x + 1.0 }
    let z[j] = sum[i] y[i, j]
    return (y, z)
}"""
    shapes = [(5, 7), (3, 8), (2, 3), (21, 1), (10, 10)]
    feeds = [{"x": np.arange(n * m, dtype=np.float32).reshape(n, m)} for n, m in shapes]
    text, held = _round_trip(source, ["N", "M"], feeds, tmp_path)
    assert _where(text) == ["M > 1", "N * M > 20"]
    assert held == [True, True, False, False, True]


def test_a_divisibility_clause_on_the_second_generic(tmp_path: Path) -> None:
    """`M % 2 == 0` once made the sampler refuse every size of `N` (the spare size it
    gave `M` was odd); the export now runs and the clause comes back on import."""
    source = """module m
pub entry f<N: Dim, M: Dim>(x: Tensor[N, M; f32]) -> Tensor[N, M / 2; f32]
where M % 2 == 0 {
    let r = reshape(x, [N, M / 2, 2])
    let y[i, j] = r[i, j, 0] + r[i, j, 1]
    return y
}"""
    shapes = [(3, 4), (1, 10), (2, 3), (5, 2)]
    feeds = [{"x": np.arange(n * m, dtype=np.float32).reshape(n, m)} for n, m in shapes]
    text, held = _round_trip(source, ["N", "M"], feeds, tmp_path)
    assert _where(text) == ["M % 2 == 0"]
    assert held == [True, True, False, True]
    x = feeds[0]["x"]
    (y,) = ExportedSession(export_function(source, "f", generics={}, dynamic=["N", "M"])).run(
        {"x": x}
    )
    np.testing.assert_array_equal(y, x[:, 0::2] + x[:, 1::2])


def test_a_guard_of_another_shape_is_still_refused_naming_it(tmp_path: Path) -> None:
    """Only the exact form the exporter writes is read back as a clause."""
    exported = export_function(
        _source("let y = if N > 4 { x * 2.0 } else { x + 1.0 }\n    return y"),
        "f",
        generics={},
        dynamic=["N"],
    )
    model = onnx.ModelProto()
    model.CopyFrom(exported.model)
    (total,) = [n for n in model.graph.node if n.op_type == "ReduceSum"]
    total.op_type = "ReduceMax"  # the guards no longer meet in their sum
    with pytest.raises(LinnetError, match=r"linnet guard 0: N > 4"):
        import_onnx(model, output=tmp_path / "m.linnet", weights=tmp_path / "w")
    assert not (tmp_path / "m.linnet").exists()


def test_a_clause_on_no_input_axis_is_refused(tmp_path: Path) -> None:
    exported = export_function(
        _source("let y = if N > 4 { x * 2.0 } else { x + 1.0 }\n    return y"),
        "f",
        generics={},
        dynamic=["N"],
    )
    model = onnx.ModelProto()
    model.CopyFrom(exported.model)
    (prop,) = [p for p in model.metadata_props if p.key == "linnet.where.0"]
    prop.value = json.dumps({"text": "K > 4", "lhs": [[1, ["K"]], [-4, []]], "rel": ">", "rhs": []})
    with pytest.raises(ImportRefusedError, match=r"`K > 4` names `K`, which is no axis"):
        import_onnx(model, output=tmp_path / "m.linnet", weights=tmp_path / "w")
    prop.value = '{"text": "N > 4", "rel": "~"}'
    with pytest.raises(LinnetError, match=r"`linnet.where.0` is not a size clause"):
        import_onnx(model, output=tmp_path / "m.linnet", weights=tmp_path / "w")
    assert not (tmp_path / "m.linnet").exists()


N, M = Dim.symbol(Symbol("N")), Dim.symbol(Symbol("M"))


@pytest.mark.parametrize(
    ("lhs", "rel", "rhs", "shown"),
    [
        (N - 4, ">", Dim.const(0), "N > 4"),
        (8 - N, ">=", Dim.const(0), "N <= 8"),
        (N * M - 20, ">", Dim.const(0), "N * M > 20"),
        (N, "<=", Dim.const(1024), "N <= 1024"),
        ((N - 3).mod(8), "==", Dim.const(0), "(N + 5) % 8 == 0"),
        (2 - 2 * N, "!=", Dim.const(0), "2 * N != 2"),
    ],
)
def test_clauses_are_stated_as_people_write_them(lhs: Dim, rel: str, rhs: Dim, shown: str) -> None:
    a, r, b = readable(lhs, rel, rhs)
    assert f"{a} {r} {b}" == shown
    for n in range(12):
        for m in range(4):
            values = {s: v for s, v in zip((*N.symbols(), *M.symbols()), (n, m), strict=True)}
            before = _relation(rel, lhs.evaluate(values), rhs.evaluate(values))
            assert _relation(r, a.evaluate(values), b.evaluate(values)) == before


def _relation(rel: str, a: int, b: int) -> bool:
    return {
        "==": a == b,
        "!=": a != b,
        "<": a < b,
        "<=": a <= b,
        ">": a > b,
        ">=": a >= b,
    }[rel]


def test_dim_json_reads_back() -> None:
    names = {"N": N, "M": M}
    for d in [N * M - 20, (N - 3).mod(8), N.floordiv(4) + M.minimum(8), N.maximum(M * 2)]:
        assert dim_from_json(dim_to_json(d), names.__getitem__) == d
    with pytest.raises(LinnetError, match="malformed size expression"):
        dim_from_json([[1, [["pow", [], []]]]], names.__getitem__)
