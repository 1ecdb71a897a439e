"""Benchmark: what dynamic axes cost an ONNX export, and where that time goes.

`export_model(dynamic=[...])` lowers the entry twice, once with traced sizes
and once at other sizes to check it, and matches the two
(`linnet.ir.dynamic_traced`; the sampler, 3 to 5 lowerings, only when tracing
declines); this bench exports examples/01-llama at small widths and
TinyLlama's depth (22 layers) in one process, static and dynamic, and prints
the best CPU time of `--rounds` exports of each (CPU time, not wall time: on a
shared machine the wall clock mostly measures the neighbours) with its parts:
lowering, optimising (both for every lowering), matching the lowerings,
writing the ONNX graph, and which path made the table.

    .venv/bin/python bench/dynamic_export.py [--rounds N] [--layers N]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "examples" / "01-llama" / "src" / "lib.linnet"
SIZES = {"Vocab": 256, "H": 64, "Heads": 4, "KvHeads": 2, "Inner": 176}
CASES = (
    ("prefill", {"Batch": 1, "S": 32}, ["S"]),
    ("forward", {"Batch": 1, "B": 2, "S": 32}, ["B", "S"]),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--layers", type=int, default=22)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    import linnet.ir.dynamic as dynamic
    import linnet.ir.dynamic_traced as traced
    import linnet.onnx.export.api as api
    import linnet.pipeline as pipeline

    parts: dict[str, float] = {}

    def timed(name: str, f: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*a: Any, **k: Any) -> Any:
            start = time.process_time()
            try:
                return f(*a, **k)
            finally:
                parts[name] = parts.get(name, 0.0) + time.process_time() - start

        return wrapper

    # `export_model` imports these from their modules at each call.
    pipeline.lower = timed("lower", pipeline.lower)  # type: ignore[assignment]
    pipeline.optimize = timed("optimize", pipeline.optimize)  # type: ignore[assignment]
    dynamic._Matcher.run = timed("match", dynamic._Matcher.run)  # type: ignore[method-assign]
    traced._Matcher.run = timed("match", traced._Matcher.run)  # type: ignore[method-assign]
    api.export_ir = timed("export_ir", api.export_ir)  # type: ignore[assignment]
    paths: list[str] = []
    lower_dynamic = dynamic.lower_dynamic

    def recorded(*a: Any, **k: Any) -> Any:
        fn, dims = lower_dynamic(*a, **k)
        paths.append(dims.method)
        return fn, dims

    dynamic.lower_dynamic = recorded  # type: ignore[assignment]

    program = pipeline.check_program(SOURCE)
    generics = {**SIZES, "Layers": args.layers, "MaxSeq": 64, "T": "f32"}
    print(f"# examples/01-llama {generics}, one process, best CPU ms of {args.rounds} exports")
    print("# load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    print(
        "| entry | dynamic | path | total ms | lower | optimize | match | export_ir | vs static |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for entry, own, names in CASES:
        static_total = None
        for dynamic_names in ([], names):
            best: dict[str, float] | None = None
            paths.clear()
            for _ in range(args.rounds):
                parts.clear()
                start = time.process_time()
                api.export_model(
                    program, generics={**generics, **own}, entry=entry, dynamic=dynamic_names
                )
                parts["total"] = time.process_time() - start
                if best is None or parts["total"] < best["total"]:
                    best = dict(parts)
            assert best is not None
            static_total = static_total or best["total"]
            ms = {k: f"{v * 1e3:.0f}" for k, v in best.items()}
            print(
                f"| {entry} | {','.join(dynamic_names) or 'none'} | "
                f"{'/'.join(sorted(set(paths))) or '-'} | {ms['total']} | "
                f"{ms['lower']} | {ms['optimize']} | {ms.get('match', '-')} | "
                f"{ms['export_ir']} | {best['total'] / static_total:.2f}x |"
            )
    print("# load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
