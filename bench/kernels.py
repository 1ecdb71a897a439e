"""Benchmark: each test kernel through Triton against its op's body on the same backend.

The three kernels of examples/kernels/tiles.linnet (a row softmax, a tiled
matmul with a K loop, an atomic histogram) run through `linnet.torch`'s
generated code twice in the same process:

- kernel: natives on, so the op launches its Triton kernel (language-extensions 4.5);
- body: natives off (the exact policy), so the op's body runs as PyTorch ops.

Outputs are compared before timing (the kernel must equal the body within
1e-5 relative for floats, exactly for the histogram). Each path is timed in
interleaved rounds; the table prints the best round in milliseconds and the
ratio kernel / body (lower is better). On a CPU, Triton runs in its
interpreter (`TRITON_INTERPRET=1`, set here before `triton` is imported),
which executes each program in Python: the ratio then measures the
interpreter, not a GPU kernel, and the table says so ("interpreter"). With
`--device cuda` on a GPU the ratio is the real one.

    .venv/bin/python bench/kernels.py [--device cuda] [--rounds 5] [--small]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
TILES = ROOT / "examples" / "kernels" / "tiles.linnet"


def shapes(small: bool) -> list[tuple[str, str, list[tuple[tuple[int, ...], str]]]]:
    """(label, entry, input shapes and dtypes) per kernel; ragged sizes on purpose."""
    if small:
        return [
            ("row softmax 8x50", "row_softmax", [((8, 50), "f32")]),
            ("matmul 33x40 @ 40x20", "product", [((33, 40), "f32"), ((40, 20), "f32")]),
            ("histogram 500 ids", "histogram", [((500,), "i32")]),
        ]
    return [
        ("row softmax 256x60", "row_softmax", [((256, 60), "f32")]),
        ("matmul 100x90 @ 90x70", "product", [((100, 90), "f32"), ((90, 70), "f32")]),
        ("histogram 5000 ids", "histogram", [((5000,), "i32")]),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--small", action="store_true", help="small inputs (smoke test)")
    args = parser.parse_args()
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    import torch

    from linnet.ir.core import TensorType
    from linnet.ir.lower import lower_function
    from linnet.ir.passes import optimize
    from linnet.pipeline import check_program
    from linnet.torch import triton_kernels
    from linnet.torch.codegen import CompiledFunction
    from linnet.torch.ops import Context

    if not triton_kernels.triton_available():
        raise SystemExit("triton is not installed (pip install 'linnet-lang[kernels]')")
    device = torch.device(args.device)
    mode = "interpreter" if device.type == "cpu" else "GPU"
    program = check_program(TILES.read_text(encoding="utf-8"), None)
    module = program.graph.roots[0]
    gen = torch.Generator().manual_seed(4)
    rows = [("kernel", "inputs", "kernel ms", "body ms", "kernel/body", "runs on")]
    for label, entry, specs in shapes(args.small):
        inputs = [
            torch.randn(shape, generator=gen).to(device)
            if dtype == "f32"
            else torch.randint(-2, 20, shape, generator=gen, dtype=torch.int32).to(device)
            for shape, dtype in specs
        ]
        types = [TensorType(shape, dtype) for shape, dtype in specs]
        fn = optimize(lower_function(program, module, entry, types))
        call = next(op for op in fn.body.ops if op.kind == "call")
        why = triton_kernels.explain(call, Context(device))
        if why is not None:
            raise SystemExit(f"{label}: the kernel would not run: {why}")
        kernel = CompiledFunction(fn, device, hoist_weights=True)
        body = CompiledFunction(fn, device, hoist_weights=True, natives=False)
        (got,), _ = kernel({}, {}, inputs)
        (want,), _ = body({}, {}, inputs)
        if got.dtype.is_floating_point:
            ok = torch.allclose(got, want, rtol=1e-5, atol=1e-5)
        else:
            ok = torch.equal(got, want)
        if not ok:
            raise SystemExit(f"{label}: the kernel differs from the body")
        sync: Callable[[], None] = torch.cuda.synchronize if device.type == "cuda" else lambda: None
        best = {"kernel": float("inf"), "body": float("inf")}
        for _ in range(args.rounds):
            for name, run in (("kernel", kernel), ("body", body)):
                sync()
                start = time.perf_counter()
                run({}, {}, inputs)
                sync()
                best[name] = min(best[name], (time.perf_counter() - start) * 1000)
        shown = " ".join("x".join(map(str, s)) for s, _ in specs)
        rows.append(
            (
                label,
                shown,
                f"{best['kernel']:.2f}",
                f"{best['body']:.3f}",
                f"{best['kernel'] / best['body']:.1f}x",
                mode,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for index, row in enumerate(rows):
        print(
            "  ".join(
                c.ljust(w) if i < 2 else c.rjust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
        if index == 0:
            print("  ".join("-" * w for w in widths))
    if mode == "interpreter":
        print("\ninterpreter: Triton's CPU interpreter runs each program in Python; the ratio")
        print("measures the interpreter against PyTorch's CPU kernels, not a compiled kernel.")


if __name__ == "__main__":
    main()
