"""Each kernel of examples/kernels/tiles.linnet through Triton against its op's body.

Run as a script in a fresh process with `TRITON_INTERPRET=1` set before
`triton` is imported (Triton reads it at import); `test_triton_kernels.py`
starts it and asserts on the JSON it prints: one record per case with the
largest difference between the kernel's result (interpreted `Runner` and
generated code) and the body's (the NumPy reference interpreter on the same
lowered function, whose `call` ops run their regions), and whether the kernel
actually launched.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

TILES = Path(__file__).parents[2] / "examples" / "kernels" / "tiles.linnet"


def main() -> None:
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise SystemExit("set TRITON_INTERPRET=1 before running this script")
    import torch

    from linnet.ir.core import TensorType
    from linnet.ir.interp import run_function
    from linnet.ir.lower import lower_function
    from linnet.ir.passes import optimize
    from linnet.pipeline import check_program
    from linnet.torch import triton_kernels
    from linnet.torch.codegen import CompiledFunction
    from linnet.torch.ops import Context
    from linnet.torch.runner import Runner

    program = check_program(TILES.read_text(encoding="utf-8"), None)
    module = program.graph.roots[0]
    rng = np.random.default_rng(20)
    cpu = torch.device("cpu")
    cases: list[tuple[str, str, list[np.ndarray]]] = [
        ("softmax ragged", "row_softmax", [rng.standard_normal((7, 50), dtype=np.float32) * 4]),
        ("softmax full tile", "row_softmax", [rng.standard_normal((3, 64), dtype=np.float32)]),
        ("softmax where fails", "row_softmax", [rng.standard_normal((2, 100), dtype=np.float32)]),
        (
            "matmul ragged",
            "product",
            [
                rng.standard_normal((37, 45), dtype=np.float32),
                rng.standard_normal((45, 21), dtype=np.float32),
            ],
        ),
        (
            "matmul tiles",
            "product",
            [
                rng.standard_normal((32, 48), dtype=np.float32),
                rng.standard_normal((48, 16), dtype=np.float32),
            ],
        ),
        ("histogram ragged", "histogram", [rng.integers(-4, 21, 300).astype(np.int32)]),
        ("histogram one block", "histogram", [rng.integers(0, 16, 128).astype(np.int32)]),
    ]
    records = []
    for label, entry, inputs in cases:
        types = [TensorType(a.shape, "f32" if a.dtype == np.float32 else "i32") for a in inputs]
        fn = optimize(lower_function(program, module, entry, types))
        (body,), _ = run_function(fn, {}, {}, inputs)
        call = next(op for op in fn.body.ops if op.kind == "call")
        why = triton_kernels.explain(call, Context(cpu))
        tensors = [torch.from_numpy(a) for a in inputs]
        out: dict[str, float] = {}
        launches: dict[str, int] = {}
        for mode, run in (
            ("interpreted", Runner(fn, cpu, hoist_weights=True)),
            ("generated", CompiledFunction(fn, cpu, hoist_weights=True)),
            ("exact", Runner(fn, cpu, hoist_weights=True, natives=False)),
        ):
            before = sum(triton_kernels.LAUNCHES.values())
            (result,), _ = run({}, {}, tensors)
            launches[mode] = sum(triton_kernels.LAUNCHES.values()) - before
            diff = np.abs(result.numpy().astype(np.float64) - np.asarray(body, np.float64))
            out[mode] = float(diff.max())
        records.append(
            {
                "case": label,
                "explain": why,
                "launches": launches,
                "scale": float(np.abs(np.asarray(body, np.float64)).max()),
                "diff": out,
            }
        )
    json.dump(records, sys.stdout)


if __name__ == "__main__":
    main()
