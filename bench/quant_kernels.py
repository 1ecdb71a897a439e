"""Benchmark: one-row CPU linears on int8 / int4-group weights, PyTorch's kernels side by side.

What `linnet.torch` could run for `std.quant::linear_int8` (`Int8Linear`: int8
rows, an f32 scale per row) and `std.quant::linear_int4_groups`
(`Int4GroupLinear`: unsigned nibbles, a scale and a zero point per group of
128) at batch 1, on the TinyLlama weight shapes (2048x2048 attention,
5632x2048 MLP, 32000x2048 lm_head), each kernel on the same weights:

- `F.linear f32` / `oneDNN f32`: the weight dequantised once (as the std body
  does it) and kept as f32; `F.linear` is MKL (what `natives_quant` runs), `oneDNN`
  is the kernel of `natives.linear_cpu` (the std f32 linear; same function within
  f32 rounding);
- `int8pack_mm`: `aten._weight_int8pack_mm(x, q, scale)`, weight-only int8
  (`(x @ q^T) * scale`: the body's function within f32 rounding);
- `int4pack_mm`: `aten._weight_int4pack_mm_for_cpu` on
  `_convert_weight_to_int4pack_for_cpu`'s repack, scales and zeros as
  `(q - 8) * s + (8 - z) * s` (the body's function within f32 rounding);
- `dynamic int8 (fbgemm)` and `dynamic int8 (oneDNN)`: activations rounded to
  u8 per row at run time (one scale and zero point for the row), int8 weights
  with per-row scales, int32 sums (VNNI): `quantized.linear_dynamic` and
  `onednn.qlinear_pointwise`. A different function (the activations are
  rounded, per row rather than per block as `load_model(int8_activations=True)`
  and llama.cpp do): listed for speed only, with its error;
- `linnet.native int8` / `int4` / `f32`: `linnet.native`'s kernels on the
  packed bytes (what `natives_quant` runs now for f32 `x`), the std function
  within f32 reordering; `f32` on the dequantised weight, for the comparison
  with oneDNN.
- `linnet.native int8 (int8 act)` / `int4 (int8 act)`: the same bytes with the
  activations rounded to int8 per block (128 here; `linnet.torch.load(...,
  int8_activations=True)`, the function of `MatMulNBits` at `accuracy_level=4`;
  VNNI integer dot products): `max |err|` includes that rounding.

`--rows 1,4,16` runs each kernel on that many rows of x (a decode step of
several sequences, a prefill): where `natives_quant.NATIVE_ROWS` comes from.
A NumPy read probe (`bench/onnx_decode.py`'s, all cores) opens the run: the
`of probe` column is each kernel's GB/s over it.

Each kernel cycles through enough copies of the weight to overflow the caches
(a decode step reads each weight once), kernels alternate round by round, and
the best round is reported with the median; GB/s is the weight bytes each one
reads (f32 for the dequantised rows). `max |err|` is against f64 on the
dequantised weight.

    .venv/bin/python bench/quant_kernels.py [--rounds 7] [--threads 2] [--shapes 2048x2048,...]
        [--rows 1] [--only native]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))
from linnet.native import kernels as native_kernels
from linnet.native.activations import int8_block

Kernel = Callable[[int], torch.Tensor]
SHAPES = "2048x2048,5632x2048,2048x5632,32000x2048"
GROUP = 128


def timed(kernel: Kernel, copies: int) -> float:
    start = time.perf_counter()
    for i in range(copies):
        kernel(i)
    return (time.perf_counter() - start) / copies


def kernels(
    out: int, into: int, copies: int, rows: int = 1
) -> dict[str, tuple[Kernel, float, torch.Tensor]]:
    """name -> (kernel over copy i, weight bytes read, its result's max error on copy 0)."""
    torch.manual_seed(0)
    x = torch.randn(rows, into)
    q = [torch.randint(-127, 128, (out, into), dtype=torch.int8) for _ in range(copies)]
    s = [torch.rand(out) * 0.01 + 0.001 for _ in range(copies)]
    w8 = [qi.float() * si[:, None] for qi, si in zip(q, s, strict=True)]
    nib = torch.randint(0, 16, (out, into), dtype=torch.int32)
    gs = torch.rand(out, into // GROUP) * 0.01 + 0.001
    gz = torch.randint(0, 16, (out, into // GROUP)).float()
    w4 = ((nib.view(out, -1, GROUP).float() - gz[..., None]) * gs[..., None]).view(out, into)
    packed4 = torch.ops.aten._convert_weight_to_int4pack_for_cpu(nib, 1)
    nibbles = nib.to(torch.uint8).view(out, into // GROUP, GROUP // 2, 2)
    ours4 = [(nibbles[..., 0] | (nibbles[..., 1] << 4)).contiguous() for _ in range(copies)]
    zeros4 = gz.to(torch.uint8)
    p4 = [packed4.clone() for _ in range(copies)]
    scales_zeros = torch.stack([gs, (8 - gz) * gs], -1).transpose(0, 1).contiguous()
    with warnings.catch_warnings():  # quantized tensors are deprecated; only for this peer
        warnings.simplefilter("ignore")
        zeros = torch.zeros(out, dtype=torch.long)
        fbgemm = [
            torch.ops.quantized.linear_prepack(
                torch._make_per_channel_quantized_tensor(qi, si.double(), zeros, 0), None
            )
            for qi, si in zip(q, s, strict=True)
        ]
    onednn = [torch.ops.onednn.qlinear_prepack(qi, [1, into]) for qi in q]

    def dynamic_onednn(i: int) -> torch.Tensor:
        low, high = x.amin().clamp_max(0), x.amax().clamp_min(0)
        step = (high - low) / 255
        zero = torch.round(-low / step).to(torch.int64)
        xq = torch.clamp(torch.round(x / step) + zero, 0, 255).to(torch.uint8)
        return torch.ops.onednn.qlinear_pointwise.tensor(
            xq, step, zero, onednn[i], s[i], zeros, None, 1.0, 0, torch.float32, "none", [], ""
        )

    def dynamic_fbgemm(i: int) -> torch.Tensor:
        result: torch.Tensor = torch.ops.quantized.linear_dynamic(x, fbgemm[i], False)
        return result

    n8, n4 = out * into, out * into // 2 + 5 * out * into // GROUP
    native = native_kernels()
    threads = torch.get_num_threads()

    def native_int8(i: int) -> torch.Tensor:
        assert native is not None
        y = torch.empty(rows, out)
        native.int8_linear(x.data_ptr(), rows, into, q[i].data_ptr(), s[i].data_ptr(), None,
                           y.data_ptr(), out, threads)  # fmt: skip
        return y

    def native_int4(i: int) -> torch.Tensor:
        assert native is not None
        y = torch.empty(rows, out)
        native.int4_linear(x.data_ptr(), rows, into, ours4[i].data_ptr(), gs.data_ptr(),
                           zeros4.data_ptr(), GROUP, None, y.data_ptr(), out, threads)  # fmt: skip
        return y

    def native_int8_a8(i: int) -> torch.Tensor:
        assert native is not None
        y = torch.empty(rows, out)
        native.int8_linear_a8(x.data_ptr(), rows, into, q[i].data_ptr(), s[i].data_ptr(),
                              int8_block(into), None, y.data_ptr(), out, threads)  # fmt: skip
        return y

    def native_int4_a8(i: int) -> torch.Tensor:
        assert native is not None
        y = torch.empty(rows, out)
        native.int4_linear_a8(x.data_ptr(), rows, into, ours4[i].data_ptr(), gs.data_ptr(),
                              zeros4.data_ptr(), GROUP, None, y.data_ptr(), out, threads)  # fmt: skip
        return y

    def native_f32(i: int) -> torch.Tensor:
        assert native is not None
        y = torch.empty(rows, out)
        native.f32_linear(x.data_ptr(), rows, into, w8[i].data_ptr(), None, y.data_ptr(), out,
                          threads)  # fmt: skip
        return y

    found: dict[str, tuple[Kernel, float]] = {
        "F.linear f32": (lambda i: F.linear(x, w8[i]), 4 * n8),
        "oneDNN f32": (lambda i: torch.ops.mkldnn._linear_pointwise(x, w8[i], None, "none", [], ""), 4 * n8),
        "int8pack_mm": (lambda i: torch.ops.aten._weight_int8pack_mm(x, q[i], s[i]), n8),
        "dynamic int8 (fbgemm)": (dynamic_fbgemm, n8),
        "dynamic int8 (oneDNN)": (dynamic_onednn, n8),
        "int4pack_mm": (
            lambda i: torch.ops.aten._weight_int4pack_mm_for_cpu(x, p4[i], GROUP, scales_zeros), n4
        ),
    }  # fmt: skip
    if native is not None:
        found["linnet.native f32"] = (native_f32, 4 * n8)
        found["linnet.native int8"] = (native_int8, n8)
        found["linnet.native int4"] = (native_int4, n4)
        found["linnet.native int8 (int8 act)"] = (native_int8_a8, n8)
        found["linnet.native int4 (int8 act)"] = (native_int4_a8, n4)
    reference8 = F.linear(x.double(), w8[0].double())
    reference4 = F.linear(x.double(), w4.double())
    return {
        name: (
            kernel,
            size,
            (kernel(0).double() - (reference4 if "int4" in name else reference8)).abs().max(),
        )
        for name, (kernel, size) in found.items()
    }


def _module(name: str, file: str) -> object:
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(os.path.dirname(__file__), file)
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--shapes", default=SHAPES, help=f"Out x In, comma-separated ({SHAPES})")
    parser.add_argument("--rows", default="1", help="rows of x, comma-separated (1)")
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated: kernels whose name contains one of these (`native,oneDNN`)",
    )
    args = parser.parse_args()
    probe: float = _module("onnx_decode_bench", "onnx_decode.py").read_bandwidth()  # type: ignore[attr-defined]
    torch.set_num_threads(args.threads)
    status = native_kernels()
    print(f"# NumPy read probe (all cores): {probe / 1e9:.1f} GB/s; linnet.native: "
          + (status.path if status is not None else "not available"))  # fmt: skip
    torch.backends.quantized.engine = "x86"  # fbgemm's dynamic linear, the fastest here
    print(
        f"# torch {torch.__version__}, {args.threads} threads, CPU capability "
        f"{torch.backends.cpu.get_cpu_capability()}, best / median of {args.rounds} rounds, "
        f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())} at the start"
    )
    print("| weight | rows | kernel | best ms | median ms | GB/s (best) | of probe | max abs err |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    with torch.no_grad():
        for shape, rows in (
            (a, int(r)) for a in args.shapes.split(",") for r in args.rows.split(",")
        ):
            out, into = (int(n) for n in shape.split("x"))
            copies = max(2, int(256e6 // (4 * out * into)) + 1)
            found = {
                k: v
                for k, v in kernels(out, into, copies, rows).items()
                if any(o in k for o in args.only.split(","))
            }
            seconds: dict[str, list[float]] = {name: [] for name in found}
            for _ in range(args.rounds):
                for name, (kernel, _, _) in found.items():
                    kernel(0)
                    seconds[name].append(timed(kernel, copies))
            for name, (_, size, error) in found.items():
                best, middle = min(seconds[name]), statistics.median(seconds[name])
                print(
                    f"| {out}x{into} | {rows} | {name} | {best * 1e3:.3f} | {middle * 1e3:.3f} | "
                    f"{size / best / 1e9:.1f} | {size / best / probe:.0%} | {float(error):.1e} |",
                    flush=True,
                )
    print(f"# load average {' '.join(f'{v:.2f}' for v in os.getloadavg())} at the end")


if __name__ == "__main__":
    main()
