"""Benchmark: one f32 matrix-vector product on XLA CPU, per compile option and weight layout.

Batch-1 decode through `linnet.jax.load_model` (bench/jax_backend.py) is
these products and almost nothing else: a chain of the same dots over the same
weights takes as long as the whole decode step. This bench asks what XLA's
CPU compiler can do for one of them, at TinyLlama's shapes (`x[1, In] @ W`):

- each variant is compiled for this call only,
  `jax.jit(f).lower(...).compile(compiler_options=...)`, never through the
  process-wide `XLA_FLAGS`;
- it runs over enough distinct weights that no cache holds them, the variants
  alternating round by round (the machine may be shared); the table shows the
  GB/s of weights read (median), that as a fraction of the read bandwidth
  probe of bench/onnx_decode.py, and the paired median time against the
  default (below 1 is faster);
- `kernel` is what the compiled HLO holds: `dot` is XLA's own tiled LLVM IR
  matrix-vector kernel, `ynn`/`xnn`/`onednn` a library fusion;
- `result` says whether the product equals the default's bit for bit, else its
  largest difference relative to the largest |y|;
- layouts: `[Out, In]` contracted on its minor axis (what linnet.jax and the
  hand-written peer emit for a `[Out, In]` weight) and `[In, Out]`.

Measured at jax 0.10.2 on 2 Zen 4 cores: with one row on the left XLA emits
its tiled LLVM IR GEMV whatever library fusion is asked for (the HLO and the
results are bit for bit the default's), `[Out, In]` reads as fast as
`[In, Out]` or faster (up to twice as fast on a quiet machine), and only `xla_cpu_prefer_vector_width=512` changes the kernel
(16-wide instead of 8-wide partial sums: results differ in the last bits).
Padding the row to a small matrix hands the dot to YNNPACK, which is several
times slower, so it is not a variant here.

    .venv/bin/python bench/jax_gemv.py [--rounds 7] [--small]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from onnx_decode import load_average, read_bandwidth  # noqa: E402

Array = np.ndarray[Any, Any]

VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "vector width 512": {"xla_cpu_prefer_vector_width": 512},
    "xnn dot fusion": {"xla_cpu_experimental_xnn_fusion_type": "LIBRARY_FUSION_TYPE_DOT"},
    "xnn individual dot": {
        "xla_cpu_experimental_xnn_fusion_type": "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"
    },
    "ynn dot fusion": {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_DOT"},
    "onednn dot fusion": {"xla_cpu_experimental_onednn_fusion_type": "LIBRARY_FUSION_TYPE_DOT"},
    "onednn thunks": {"xla_cpu_use_onednn": True},
    "xnn graph greedy": {
        "xla_cpu_experimental_xnn_graph_fusion_mode": "XNN_GRAPH_FUSION_MODE_GREEDY"
    },
    "no xnnpack": {"xla_cpu_use_xnnpack": False},
    "single-thread eigen": {"xla_cpu_multi_thread_eigen": False},
}

TINYLLAMA_SHAPES = [(5632, 2048), (2048, 5632), (32000, 2048)]
"""`[Out, In]`: gate/up, down, the head (q/o are 2048 x 2048)."""
SMALL_SHAPES = [(96, 64)]


def kernel_of(hlo: str) -> str:
    """Which kernel the compiled module's entry runs the product with."""
    entry = hlo[hlo.index("ENTRY") :]
    for mark, name in (("ynn_fusion", "ynn"), ("xnn_fusion", "xnn"), ("onednn", "onednn")):
        if mark in entry:
            return name
    return "dot" if " dot(" in entry else "other"


def result_note(value: Array, default: Array) -> str:
    if np.array_equal(value, default):
        return "bit-identical"
    scale = float(np.max(np.abs(default))) or 1.0
    return f"differs {float(np.max(np.abs(value - default))) / scale:.1e}"


def run_shape(out_dim: int, in_dim: int, layout: str, count: int, rounds: int) -> list[str]:
    import jax
    from jax import lax

    rng = np.random.default_rng(0)
    shape = (out_dim, in_dim) if layout == "[Out, In]" else (in_dim, out_dim)
    contract = 1 if layout == "[Out, In]" else 0
    weights = [jax.device_put(rng.standard_normal(shape, np.float32)) for _ in range(count)]
    x = jax.device_put(rng.standard_normal((1, in_dim), np.float32))

    def product(x: Any, w: Any) -> Any:
        return lax.dot_general(x, w, (((1,), (contract,)), ((), ())))

    compiled = {
        name: jax.jit(product).lower(x, weights[0]).compile(compiler_options=options)
        for name, options in VARIANTS.items()
    }
    outputs = {name: np.asarray(c(x, weights[0])) for name, c in compiled.items()}
    exact = np.asarray(x, np.float64) @ (
        np.asarray(weights[0], np.float64).T if contract == 1 else np.asarray(weights[0])
    )
    worst = max(float(np.max(np.abs(o - exact))) for o in outputs.values())
    if worst > 1e-4 * float(np.max(np.abs(exact))):
        raise SystemExit(f"{layout} {shape}: a variant is off the f64 product by {worst:.3e}")
    times: dict[str, list[float]] = {name: [] for name in compiled}
    for _ in range(rounds):
        for name, c in compiled.items():
            c(x, weights[0]).block_until_ready()
            start = time.perf_counter()
            for w in weights:
                y = c(x, w)
            y.block_until_ready()
            times[name].append((time.perf_counter() - start) / count)
    size = weights[0].nbytes
    rows = []
    for name, c in compiled.items():
        median = statistics.median(times[name])
        paired = statistics.median(
            a / b for a, b in zip(times[name], times["default"], strict=True)
        )
        rows.append(
            f"| {out_dim}x{in_dim} | {layout} | {name} | {kernel_of(c.as_text())} | "
            f"{size / median / 1e9:.1f} | {{share}} | {paired:.2f} | "
            f"{result_note(outputs[name], outputs['default'])} |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--small", action="store_true", help="tiny shapes (smoke test)")
    args = parser.parse_args()
    import jax

    shapes = SMALL_SHAPES if args.small else TINYLLAMA_SHAPES
    bandwidth = read_bandwidth(0.05 if args.small else 1.1)
    print(f"# jax {jax.__version__} ({jax.default_backend()}); read bandwidth probe "
          f"{bandwidth / 1e9:.1f} GB/s; {args.rounds} alternating rounds, medians; "
          f"load average {load_average()}")  # fmt: skip
    print("| W [Out, In] | stored | variant | kernel | GB/s | of the probe | time vs default "
          "| result |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for out_dim, in_dim in shapes:
        # enough distinct weights that the caches hold none of them (about 350 MB a pass)
        count = 2 if args.small else max(2, (350 * 2**20) // (out_dim * in_dim * 4))
        for layout in ("[Out, In]", "[In, Out]"):
            for row in run_shape(out_dim, in_dim, layout, count, args.rounds):
                rate = float(row.split("|")[5])
                print(row.replace("{share}", f"{rate * 1e9 / bandwidth:.0%}"))
    print(f"# load average after: {load_average()}")


if __name__ == "__main__":
    main()
