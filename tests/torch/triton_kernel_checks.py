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
CLAUSE = Path(__file__).parents[1] / "conformance" / "valid" / "x4_kernel_clause.linnet"


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
        (
            "row norms ragged",
            "lengths",
            [rng.standard_normal((5, 150), dtype=np.float32), np.array(0.5, np.float32)],
        ),
        (
            "row norms negative scale",
            "lengths",
            [rng.standard_normal((3, 40), dtype=np.float32), np.array(-2.0, np.float32)],
        ),
        ("histogram ragged", "histogram", [rng.integers(-4, 21, 300).astype(np.int32)]),
        ("histogram one block", "histogram", [rng.integers(0, 16, 128).astype(np.int32)]),
        ("two results ragged", "parts", [rng.standard_normal(200, dtype=np.float32)]),
        ("running for ragged", "running", [rng.standard_normal((9, 50), dtype=np.float32)]),
        ("running for one row", "running", [rng.standard_normal((1, 32), dtype=np.float32)]),
    ]
    records = []
    for label, entry, inputs in cases:
        types = [TensorType(a.shape, "f32" if a.dtype == np.float32 else "i32") for a in inputs]
        fn = optimize(lower_function(program, module, entry, types))
        bodies, _ = run_function(fn, {}, {}, inputs)
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
            results, _ = run({}, {}, tensors)
            launches[mode] = sum(triton_kernels.LAUNCHES.values()) - before
            out[mode] = max(
                float(np.abs(r.numpy().astype(np.float64) - np.asarray(b, np.float64)).max())
                for r, b in zip(results, bodies, strict=True)
            )
        records.append(
            {
                "case": label,
                "explain": why,
                "launches": launches,
                "scale": max(float(np.abs(np.asarray(b, np.float64)).max()) for b in bodies),
                "diff": out,
            }
        )
    records.extend(_gradients(program, module, rng))
    records.extend(_clause_gradients(rng))
    json.dump(records, sys.stdout)


def _clause_gradients(rng: np.random.Generator) -> list[dict[str, object]]:
    """An op with a kernel and a gradient clause (x4_kernel_clause): the kernel runs
    forward, the clause (straight-through: `dy`, not the clip's derivative) backward."""
    import torch

    from linnet.ir.core import TensorType
    from linnet.ir.lower import lower_function
    from linnet.ir.passes import optimize
    from linnet.pipeline import check_program
    from linnet.torch import triton_kernels
    from linnet.torch.codegen import CompiledFunction
    from linnet.torch.runner import Runner

    program = check_program(CLAUSE.read_text(encoding="utf-8"), None)
    fn = optimize(
        lower_function(program, program.graph.roots[0], "main", [TensorType((100,), "f32")])
    )
    x = rng.standard_normal(100, dtype=np.float32) * 2
    weight = rng.standard_normal(100, dtype=np.float32)
    cpu = torch.device("cpu")
    out: list[dict[str, object]] = []
    for mode, run in (
        ("interpreted", Runner(fn, cpu, hoist_weights=True)),
        ("generated", CompiledFunction(fn, cpu, hoist_weights=True)),
        ("exact", Runner(fn, cpu, hoist_weights=True, natives=False)),
    ):
        for grad in (True, False):
            mine = torch.tensor(x, requires_grad=grad)
            before = sum(triton_kernels.LAUNCHES.values())
            (y,), _ = run({}, {}, [mine])
            launched = sum(triton_kernels.LAUNCHES.values()) - before
            record: dict[str, object] = {
                "case": f"clause {mode}{' grad' if grad else ''}",
                "launches": launched,
                "value": float(np.abs(y.detach().numpy() - np.clip(x, -1.0, 1.0)).max()),
            }
            if grad:
                (y * torch.from_numpy(weight)).sum().backward()
                record["gradient"] = float(np.abs(mine.grad.numpy() - weight).max())  # type: ignore[union-attr]
            out.append(record)
    return out


def _gradients(program: object, module: str, rng: np.random.Generator) -> list[dict[str, object]]:
    """Under autograd the kernel runs forward and the body's derivative backward (4.5)."""
    import torch

    from linnet.ir.core import TensorType
    from linnet.ir.lower import lower_function
    from linnet.ir.passes import optimize
    from linnet.torch import triton_kernels
    from linnet.torch.runner import Runner

    out: list[dict[str, object]] = []
    cases = {
        "matmul gradient": ("product", [(37, 45), (45, 21)], lambda a, b: a @ b),
        "softmax gradient": ("row_softmax", [(5, 50)], lambda x: torch.softmax(x, -1)),
    }
    for label, (entry, shapes, reference) in cases.items():
        arrays = [rng.standard_normal(s, dtype=np.float32) for s in shapes]
        fn = optimize(
            lower_function(program, module, entry, [TensorType(s, "f32") for s in shapes])  # type: ignore[arg-type]
        )
        mine = [torch.tensor(a, requires_grad=True) for a in arrays]
        theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
        weight = torch.from_numpy(rng.standard_normal(reference(*theirs).shape, dtype=np.float32))
        before = sum(triton_kernels.LAUNCHES.values())
        (y,), _ = Runner(fn, torch.device("cpu"), hoist_weights=True)({}, {}, mine)
        launched = sum(triton_kernels.LAUNCHES.values()) - before
        (y * weight).sum().backward()
        (reference(*theirs) * weight).sum().backward()
        diff = max(
            float((m.grad - t.grad).abs().max())  # type: ignore[operator]
            for m, t in zip(mine, theirs, strict=True)
        )
        scale = max(float(t.grad.abs().max()) for t in theirs)  # type: ignore[union-attr]
        out.append({"case": label, "launches": launched, "diff": diff, "scale": scale})
    return out


if __name__ == "__main__":
    main()
