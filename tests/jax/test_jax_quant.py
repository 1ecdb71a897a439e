"""`linnet.jax.load_model` on `std.quant` linears: dequantised once at load (`linnet.jax.dequantize`).

The quantised Llama example (`examples/01-llama/quantised.py`: every projection
and `lm_head` an `Int4GroupLinear`, `Int8Linear`, `Fp8Linear` or `Mxfp4Linear`)
with a `quantize_checkpoint` checkpoint. `load_model` must read each weight as
one derived `[Out, In]` param (the generated source calls no `std.quant` op) and give
what the std bodies give, decoding on every call, through `load_source`; and
the stateful decode (`prefill` then `decode`, the KV cache) must match too.
After `update_weights` of a packed weight the derived weight is recomputed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("jax")

from quant.test_quantised_llama import GENERICS, GROUP, _module

import linnet.jax as lj
from linnet.quant import quantize_checkpoint
from linnet.weights import read_safetensors, save_safetensors

Array = np.ndarray[Any, Any]
SCHEMES = {"int4": ("int", 4), "int8": ("int", 8), "fp8": ("fp8", 4), "mxfp4": ("mxfp4", 4)}


def quantised(tmp_path: Path, name: str, seed: int = 3) -> tuple[Path, Path]:
    scheme, bits = SCHEMES[name]
    floats = _module("make_weights").make_weights(GENERICS, seed=seed)
    save_safetensors(floats, tmp_path / "float.safetensors")
    quantised = _module("quantised")
    quantize_checkpoint(
        tmp_path / "float.safetensors", tmp_path / "q.safetensors", patterns=quantised.PATTERNS,
        bits=bits, group=GROUP, scheme=scheme,
    )  # fmt: skip
    source = tmp_path / "q.linnet"
    source.write_text(quantised.quantised_source(bits, GROUP, scheme=scheme))
    return source, tmp_path / "q.safetensors"


@pytest.mark.parametrize("name", sorted(SCHEMES))
def test_load_model_dequantises_once_and_computes_the_std_body(tmp_path: Path, name: str) -> None:
    source, weights = quantised(tmp_path, name)
    tokens = np.random.default_rng(4).integers(0, GENERICS["Vocab"], (1, 9)).astype(np.int32)
    model = lj.load_model(source, generics=GENERICS, weights=weights)
    got = np.asarray(model(tokens))
    linears = [
        p for p in read_safetensors(weights) if p.endswith("proj.weight") or p == "lm_head.weight"
    ]
    assert sorted(model.derived) == sorted(f"{p}.dequantized" for p in linears)
    assert "# std.quant::" not in model.entry("forward").generated_source()
    body = lj.load_source(source, generics=GENERICS, weights=weights)
    expected = np.asarray(body(tokens))
    assert "# std.quant::dequantize" in body.generated_source()  # decoded on every call
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5 * np.abs(expected).max())
    assert np.abs(expected).max() > 1.0
    if name != "int4":
        return
    packed = lj.load_model(source, generics=GENERICS, weights=weights, dequantize=False)
    # load_model's StableHLO emits lax ops and grouped attention (linnet.jax.natives), so it
    # rounds like the std body only to f32 accumulation order, not bit for bit
    np.testing.assert_allclose(
        np.asarray(packed(tokens)), expected, rtol=0, atol=1e-5 * np.abs(expected).max()
    )
    assert not packed.derived and "# std.quant::" in packed.entry("forward").generated_source()
    # the KV-cache decode reads the same dequantised weights
    first = np.asarray(model.run_entry("prefill", [tokens[:, :8], np.int32(0)]))
    step = np.asarray(model.run_entry("decode", [tokens[:, 8], np.int32(8)]))
    np.testing.assert_allclose(first, expected[:, :8], rtol=0, atol=1e-4 * np.abs(expected).max())
    np.testing.assert_allclose(step, expected[:, 8], rtol=0, atol=1e-4 * np.abs(expected).max())


def test_update_weights_dequantises_the_new_weight(tmp_path: Path) -> None:
    source, weights = quantised(tmp_path, "int4")
    (tmp_path / "b").mkdir()
    _, other = quantised(tmp_path / "b", "int4", seed=9)
    tokens = np.random.default_rng(5).integers(0, GENERICS["Vocab"], (1, 7)).astype(np.int32)
    model = lj.load_model(source, generics=GENERICS, weights=weights)
    before = np.asarray(model(tokens))
    new = read_safetensors(other)
    prefix = "model.layers.1.mlp.down_proj"
    model.update_weights(
        {f"{prefix}.{r}": new[f"{prefix}.{r}"] for r in ("weight", "scale", "zero")}
    )
    arrays = read_safetensors(weights)
    arrays.update({f"{prefix}.{r}": new[f"{prefix}.{r}"] for r in ("weight", "scale", "zero")})
    expected = np.asarray(lj.load_source(source, generics=GENERICS, weights=arrays)(tokens))
    got = np.asarray(model(tokens))
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5 * np.abs(expected).max())
    assert np.abs(got - before).max() > 1e-3


@pytest.mark.slow
def test_bench_smoke() -> None:
    """bench/jax_quant_decode.py runs at the small shape (it checks both paths' tokens agree)."""
    import subprocess
    import sys

    bench = Path(__file__).resolve().parents[2] / "bench" / "jax_quant_decode.py"
    out = subprocess.run(
        [sys.executable, str(bench), "--shape", "small", "--rounds", "1", "--new", "4"],
        capture_output=True, text=True, check=True, timeout=600,
    ).stdout  # fmt: skip
    rows = [line.split()[:2] for line in out.splitlines() if line.startswith(("int", "f32"))]
    assert rows[0] == ["f32", "f32"] and len(rows) == 5


FOUR_KINDS = """module t

use std.quant::{Fp8Linear, Int4GroupLinear, Int8Linear, Mxfp4Linear}

pub block Model<T: Float> {
    sub four: Int4GroupLinear<64, 8, 32, T>
    sub eight: Int8Linear<64, 8, T>
    sub fp8: Fp8Linear<64, 8, T>
    sub mx: Mxfp4Linear<64, 8, T>

    pub entry forward<B: Dim>(x: Tensor[B, 64; T])
        -> (Tensor[B, 8; T], Tensor[B, 8; T], Tensor[B, 8; T], Tensor[B, 8; T]) {
        return (four.forward(x), eight.forward(x), fp8.forward(x), mx.forward(x))
    }
}
"""


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_dequantised_weights_are_the_std_bodies_bit_for_bit(dtype: str) -> None:
    """With one-hot inputs each result row is one weight column (a single product, exact), so
    the weights `load_model` derives once must equal, bit for bit, what the std bodies
    decode per call (f32 arithmetic, then the cast to a narrow `T`)."""
    from linnet.ir.core import numpy_dtype
    from linnet.quant import int4_groups, int8_rows
    from linnet.quant.minifloat import fp8_rows, mxfp4_blocks

    rng = np.random.default_rng(6)
    kind = numpy_dtype(dtype)
    packed, scale, zero = int4_groups(rng.normal(0, 0.3, (8, 64)).astype(np.float32), 32)
    q8, s8 = int8_rows(rng.normal(0, 0.3, (8, 64)).astype(np.float32))
    f8, fs = fp8_rows(rng.normal(0, 0.3, (8, 64)).astype(np.float32))
    blocks, scales = mxfp4_blocks(rng.normal(0, 0.3, (8, 64)).astype(np.float32))
    weights = {
        "four.weight": packed, "four.scale": scale.astype(kind), "four.zero": zero,
        "eight.weight": q8, "eight.scale": s8, "fp8.weight": f8, "fp8.scale": fs * np.float32(1.37),
        "mx.weight": blocks, "mx.scale": scales,
    }  # fmt: skip
    generics = {"T": dtype}
    x = np.eye(64, dtype=np.float32).astype(kind)
    model = lj.load_model(FOUR_KINDS, generics=generics, weights=weights)
    got = [np.asarray(r) for r in model(x)]
    assert len(model.derived) == 4
    body = lj.load_source(FOUR_KINDS, generics=generics, weights=weights)
    expected = [np.asarray(r) for r in body(x)]
    for a, b in zip(got, expected, strict=True):
        assert a.dtype == b.dtype == kind
        np.testing.assert_array_equal(a.view(np.uint16), b.view(np.uint16))
