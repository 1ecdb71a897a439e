"""ONNX backend node test cases through `import_onnx` and `linnet.torch`, against ONNX Runtime.

Usage:
    python bench/onnx_node_suite.py                 # every case, per-operator table + totals
    python bench/onnx_node_suite.py -k softmax      # cases whose name matches a regex
    python bench/onnx_node_suite.py --failures      # also list each failing case and why
    python bench/onnx_node_suite.py --json out.json # per-case results as JSON

Each case of `onnx.backend.test.loader.load_model_tests(kind="node")` (built in
memory; field-notes: the onnx wheel no longer ships the data files) is imported
with `linnet.onnx.import_onnx` into a temporary folder (source, SafeTensors,
bindings.json), loaded with `linnet.torch.load`, run on the case's inputs and
compared with the case's expected outputs using the case's own tolerances (the
comparison ONNX's backend test runner makes). Outcomes:

- pass: every output matches;
- unmapped: the import refused, recognised by the exception's type
  (`UnmappedOperatorsError`: an operator outside the table, or an attribute
  combination a translator does not handle, each node named with why;
  its base `ImportRefusedError`: a tensor of a dtype Linnet lacks);
- wrong: the import succeeded but an output differs (shape, dtype or values);
- error: anything else (a generated source that does not check, a crash).

The yardstick is ONNX Runtime on the same cases, measured in the same run.
A case's operator is its node's `op_type`; an `*_expanded` case (the operator's
function body spelled out as primitive nodes) counts under the operator it expands.

Totals are printed for all cases, for the cases whose operator is in the
translator table, and for those of them whose tensors all have Linnet dtypes
(Linnet has no strings, sequences, optionals, 8-bit floats or 2/4-bit
integers, so a case over them cannot pass whatever its operator). Graph
inputs that decide shapes (a `Reshape` target, `Slice` bounds, a `TopK` k)
are frozen to the case's values first, as explained at COMPILE_TIME_INPUTS.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT / "src") not in sys.path:
    sys.path.insert(0, str(_ROOT / "src"))

OUTCOMES = ("pass", "unmapped", "wrong", "error")

# Inputs an operator needs at import time (shapes, axes, sizes): a Linnet
# program has static ranks and compile-time extents, so where a node case feeds
# one of these from a graph input, the bench freezes that input to the case's
# value (as an initializer) before importing, the way static-shape compilers'
# ONNX front ends take frozen parameters (TVM `freeze_params`). `--no-freeze`
# imports the cases unchanged. Each frozen case is listed in the JSON output.
COMPILE_TIME_INPUTS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "Squeeze": (1,), "Unsqueeze": (1,),
    "Slice": (1, 2, 3, 4), "Pad": (1, 3), "Split": (1,), "ConstantOfShape": (0,),
    "Range": (0, 1, 2), "TopK": (1,), "OneHot": (1,), "Resize": (1, 2, 3),
    "Upsample": (1,), "CumSum": (1,), "CumProd": (1,), "Dropout": (1, 2),
    "ReduceSum": (1,), "ReduceMean": (1,), "ReduceMax": (1,), "ReduceMin": (1,),
    "ReduceProd": (1,), "ReduceL1": (1,), "ReduceL2": (1,), "ReduceLogSum": (1,),
    "ReduceLogSumExp": (1,), "ReduceSumSquare": (1,), "CenterCropPad": (1,),
    "Trilu": (1,), "HannWindow": (0,), "HammingWindow": (0,), "BlackmanWindow": (0,),
    "Compress": (1,), "RNN": (4,), "GRU": (4,), "LSTM": (4,),
    "AffineGrid": (1,), "Loop": (0, 1), "DFT": (1, 2),
}  # fmt: skip
SHAPE_ARITHMETIC = {
    "Add", "Sub", "Mul", "Div", "Max", "Min", "Concat", "Cast", "Unsqueeze", "Squeeze",
    "Gather", "Slice", "Identity", "Reshape", "Abs", "Neg", "Mod", "Ceil", "Floor",
}  # fmt: skip
"""Operators through which graph inputs feed compile-time inputs (expanded function bodies)."""


def load_cases(pattern: str | None) -> list[Any]:
    """The node test cases (optionally filtered by a name regex), built in memory."""
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = load_model_tests(kind="node")
    if pattern:
        rx = re.compile(pattern)
        cases = [c for c in cases if rx.search(c.name)]
    return cases


def case_operators(cases: list[Any]) -> dict[str, str]:
    """Each case's operator: the single node's op type, or for an expanded case
    the op type of the case it expands."""
    single: dict[str, str] = {}
    for c in cases:
        nodes = c.model.graph.node
        if len(nodes) == 1:
            single[c.name] = _qualified(nodes[0])
    out: dict[str, str] = {}
    for c in cases:
        if c.name in single:
            out[c.name] = single[c.name]
            continue
        base = re.sub(r"_expanded(_ver\d+)?$", "", c.name)
        out[c.name] = single.get(base) or _guess_operator(c)
    return out


def _qualified(node: Any) -> str:
    domain = node.domain if node.domain not in ("", "ai.onnx") else ""
    return f"{domain}::{node.op_type}" if domain else node.op_type


def _guess_operator(case: Any) -> str:
    """An expanded case without its plain twin: the graph name minus `test_`."""
    name = re.sub(r"^test_|_expanded(_ver\d+)?$", "", case.name)
    return "".join(p.capitalize() for p in name.split("_")[:1]) or case.name


def as_array(value: Any) -> Any:
    """Data-set values are arrays or `TensorProto`s."""
    from onnx import TensorProto, numpy_helper

    if isinstance(value, TensorProto):
        return numpy_helper.to_array(value)
    return np.asarray(value)


def compile_time_names(model: Any) -> set[str]:
    """Graph inputs that feed compile-time operator inputs (see COMPILE_TIME_INPUTS)."""
    graph = model.graph
    wanted: set[str] = set()
    for node in graph.node:
        slots = COMPILE_TIME_INPUTS.get(node.op_type, ())
        for i in slots:
            if i < len(node.input) and node.input[i]:
                wanted.add(node.input[i])
    # Values computed from graph inputs by shape arithmetic (an expanded function
    # body computing pads from a requested shape) are compile-time too.
    changed = True
    while changed:
        changed = False
        for node in graph.node:
            if node.op_type in SHAPE_ARITHMETIC and any(o in wanted for o in node.output):
                for name in node.input:
                    if name and name not in wanted:
                        wanted.add(name)
                        changed = True
    return wanted


def freeze_inputs(case: Any, twin: Any = None) -> tuple[Any, list[str]]:
    """The case's model with compile-time graph inputs turned into initializers, and
    the names frozen. An expanded case freezes what its plain twin freezes too (its
    function body may reach the compile-time input through a subgraph)."""
    import onnx
    from onnx import numpy_helper

    graph = case.model.graph
    wanted = compile_time_names(case.model)
    if twin is not None:
        wanted |= compile_time_names(twin.model)
    names = [i.name for i in graph.input]
    frozen: list[str] = []
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    for name in names:
        if name not in wanted:
            continue
        index = names.index(name)
        values = [as_array(inputs[index]) for inputs, _ in case.data_sets]
        if any(not np.array_equal(values[0], v) for v in values[1:]):
            continue
        model.graph.initializer.append(numpy_helper.from_array(values[0], name))
        kept = [i for i in model.graph.input if i.name != name]
        del model.graph.input[:]
        model.graph.input.extend(kept)
        frozen.append(name)
    return model, frozen


def linnet_dtypes_only(case: Any) -> bool:
    """Whether every tensor the case's graph declares has a Linnet dtype (no strings,
    8-bit floats, 4-bit integers, sequences or optionals)."""
    from linnet.onnx.importer.graph import DTYPES

    graph = case.model.graph
    for vi in [*graph.input, *graph.output]:
        t = vi.type
        if not t.HasField("tensor_type") or t.tensor_type.elem_type not in DTYPES:
            return False
    for node in graph.node:
        for attr in node.attribute:
            if attr.name in ("to", "output_datatype") and attr.i and attr.i not in DTYPES:
                return False
    return True


def compare(got: list[Any], expected: list[np.ndarray], rtol: float, atol: float) -> str | None:
    """None when `got` matches `expected` the way ONNX's backend test runner checks; else why."""
    if len(got) != len(expected):
        return f"{len(got)} outputs, expected {len(expected)}"
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        e = np.asarray(e)
        g = np.asarray(g)
        if e.dtype == object:
            return f"output {i} is not a tensor"
        if g.shape != e.shape:
            return f"output {i} has shape {g.shape}, expected {e.shape}"
        if g.dtype != e.dtype:
            return f"output {i} has dtype {g.dtype}, expected {e.dtype}"
        try:
            if e.dtype.kind in "biu" or e.dtype == np.bool_:
                np.testing.assert_array_equal(g, e)
            else:
                np.testing.assert_allclose(
                    g.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=atol
                )
        except AssertionError as exc:
            lines = [line for line in str(exc).splitlines() if line.strip()]
            return f"output {i}: " + " ".join(lines[1:4])[:300]
    return None


def run_linnet(
    case: Any, workdir: Path, freeze: bool, twin: Any = None
) -> tuple[str, str, list[str]]:
    """(outcome, detail, frozen inputs) of one case through `import_onnx` and `linnet.torch`."""
    model, frozen = freeze_inputs(case, twin) if freeze else (case.model, [])
    outcome, detail = _import_and_run(case, model, frozen, workdir)
    return outcome, detail, frozen


def _import_and_run(case: Any, model: Any, frozen: list[str], workdir: Path) -> tuple[str, str]:
    from linnet.errors import LinnetError
    from linnet.onnx import ImportRefusedError, UnmappedOperatorsError
    from linnet.onnx.importer.api import import_onnx

    out = workdir / "model.linnet"
    wdir = workdir / "weights"
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            result = import_onnx(model, output=out, weights=wdir, module_name="imported")
    except UnmappedOperatorsError as exc:
        return "unmapped", str(exc.refusals[0])[:300]  # `node` (domain::op): reason
    except ImportRefusedError as exc:
        return "unmapped", _one_line(exc)
    except LinnetError as exc:
        return "error", "import: " + _one_line(exc)
    except Exception as exc:  # a crash in the importer is a finding, never fatal here
        return "error", f"import crashed: {type(exc).__name__}: {_one_line(exc)}"
    try:
        return _run_imported(case, result, wdir, frozen)
    except Exception as exc:
        return "error", f"run: {type(exc).__name__}: {_one_line(exc)}"


def _run_imported(case: Any, result: Any, wdir: Path, frozen: list[str]) -> tuple[str, str]:
    import torch

    import linnet.torch as lt
    from linnet.torch.dtypes import linnet_dtype, to_numpy

    weights = result.weights if result.weights is not None and result.weights.exists() else None
    bindings = (
        wdir / "bindings.json"
        if weights is not None and (wdir / "bindings.json").exists()
        else None
    )
    module = lt.load(result.source, weights=weights, bindings=bindings)
    names = [i.name for i in case.model.graph.input]
    for inputs, expected in case.data_sets:
        feed = [as_array(v) for n, v in zip(names, inputs, strict=False) if n not in frozen]
        expected = [as_array(e) for e in expected]
        with torch.no_grad():
            outs = module.run_entry(result.entry, feed)
        got = list(outs) if isinstance(outs, tuple) else [outs]
        arrays = []
        for value in got:
            if isinstance(value, torch.Tensor):
                dtype = linnet_dtype(value.dtype)
                arrays.append(to_numpy(value, dtype) if dtype else value.numpy())
            else:
                arrays.append(np.asarray(value))
        expected_dtypes = [np.asarray(e).dtype for e in expected]
        arrays = [_storage_to_declared(a, d) for a, d in zip(arrays, expected_dtypes, strict=False)]
        why = compare(arrays, list(expected), case.rtol, case.atol)
        if why is not None:
            return "wrong", why
    return "pass", ""


def _storage_to_declared(a: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    """Unsigned dtypes leave the torch backend in wider signed storage; view them back."""
    if a.dtype != dtype and dtype.kind == "u" and a.dtype.kind == "i":
        return a.astype(dtype)
    return a


def run_ort(case: Any) -> bool:
    """Whether ONNX Runtime (CPU) reproduces the case's expected outputs."""
    import onnxruntime as ort

    ort.set_default_logger_severity(3)
    try:
        options = ort.SessionOptions()
        options.log_severity_level = 3
        session = ort.InferenceSession(
            case.model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        names = [i.name for i in session.get_inputs()]
        graph_inputs = [i.name for i in case.model.graph.input]
        for inputs, expected in case.data_sets:
            feed = {
                n: as_array(v) for n, v in zip(graph_inputs, inputs, strict=False) if n in names
            }
            outs = session.run(None, feed)
            want = [as_array(e) for e in expected]
            if compare(list(outs), want, case.rtol, case.atol) is not None:
                return False
        return True
    except Exception:
        return False


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-k", "--pattern", help="only cases whose name matches this regex")
    parser.add_argument("--failures", action="store_true", help="list every failing case")
    parser.add_argument("--no-ort", action="store_true", help="skip the ONNX Runtime yardstick")
    parser.add_argument("--json", help="write per-case results to this file")
    parser.add_argument(
        "--no-freeze", action="store_true", help="import shape/axes graph inputs unchanged"
    )
    args = parser.parse_args(argv)

    from linnet.onnx.importer.graph import REGISTRY

    start = time.perf_counter()
    cases = load_cases(args.pattern)
    operators = case_operators(cases)
    by_name = {c.name: c for c in load_cases(None)} if args.pattern else {c.name: c for c in cases}
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="linnet-node-suite-") as tmp:
        for n, case in enumerate(cases):
            workdir = Path(tmp) / f"case{n}"
            workdir.mkdir()
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    twin = by_name.get(re.sub(r"_expanded(_ver\d+)?$", "", case.name))
                    outcome, detail, frozen = run_linnet(case, workdir, not args.no_freeze, twin)
                except Exception:  # never let one case stop the run
                    outcome, detail, frozen = "error", traceback.format_exc(limit=1), []
            seconds = time.perf_counter() - t0
            ort_ok = None if args.no_ort else run_ort(case)
            results[case.name] = {
                "operator": operators[case.name],
                "outcome": outcome,
                "detail": detail,
                "ort": ort_ok,
                "frozen": frozen,
                "linnet_dtypes": linnet_dtypes_only(case),
                "seconds": round(seconds, 3),
            }
    elapsed = time.perf_counter() - start
    _report(results, REGISTRY, elapsed, args.failures, not args.no_ort)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    return 0


def _report(
    results: dict[str, dict[str, Any]], registry: Any, elapsed: float, failures: bool, ort: bool
) -> None:
    table = {op for domain, op in registry.operators()} | {
        f"{d}::{op}" for d, op in registry.operators() if d
    }
    per_op: dict[str, Counter[str]] = defaultdict(Counter)
    for r in results.values():
        per_op[r["operator"]][r["outcome"]] += 1
        per_op[r["operator"]]["cases"] += 1
        if r["ort"]:
            per_op[r["operator"]]["ort"] += 1
    header = f"{'operator':<34}{'table':>6}{'cases':>7}" + "".join(f"{o:>10}" for o in OUTCOMES)
    header += f"{'ort pass':>10}" if ort else ""
    print(header)
    print("-" * len(header))
    for op in sorted(per_op):
        c = per_op[op]
        line = f"{op:<34}{'yes' if op in table else '-':>6}{c['cases']:>7}"
        line += "".join(f"{c[o]:>10}" for o in OUTCOMES)
        line += f"{c['ort']:>10}" if ort else ""
        print(line)
    print("-" * len(header))
    total: Counter[str] = Counter()
    in_table: Counter[str] = Counter()
    typed: Counter[str] = Counter()
    for r in results.values():
        groups = [total]
        if r["operator"] in table:
            groups.append(in_table)
            if r["linnet_dtypes"]:
                groups.append(typed)
        for c in groups:
            c[r["outcome"]] += 1
            c["cases"] += 1
            c["ort"] += bool(r["ort"])
    lines = (
        ("all cases", total),
        ("cases of table operators", in_table),
        ("... whose tensors all have Linnet dtypes", typed),
    )
    for label, c in lines:
        n = max(c["cases"], 1)
        parts = ", ".join(f"{o} {c[o]} ({100 * c[o] / n:.1f}%)" for o in OUTCOMES)
        ort_part = f"; ONNX Runtime passes {c['ort']} ({100 * c['ort'] / n:.1f}%)" if ort else ""
        print(f"{label}: {c['cases']}: {parts}{ort_part}")
    frozen = sum(1 for r in results.values() if r["frozen"])
    print(f"cases with shape/axes inputs frozen to their values: {frozen}")
    print(f"operators in the table: {len(registry.operators())}; "
          f"operators met in these cases: {len(per_op)}; {elapsed:.0f} s")  # fmt: skip
    if failures:
        print()
        for name, r in sorted(results.items()):
            if r["outcome"] != "pass":
                print(f"{r['outcome']:<9} {name}: {r['detail']}")


if __name__ == "__main__":
    raise SystemExit(main())
