"""`import_compressed` on compressed-tensors' FP8 and MXFP4 checkpoints, against the library.

compressed-tensors quantises and packs the weights itself
(`calculate_qparams`, `FloatQuantizationCompressor` per channel and per
tensor, `MXFP4PackedCompressor`), the file is written by the `safetensors`
package (it stores torch's float8 tensors as F8_E4M3). After the import the
std bodies (`dequantize_fp8`, `dequantize_mxfp4`, NumPy reference
interpreter) must give exactly compressed-tensors' own `decompress`, and the
Llama example with `Fp8Linear` / `Mxfp4Linear` the logits of the float
example on those decompressed weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from stdlib.stdlib_support import StdCases

import linnet.onnx
from linnet.errors import LinnetError
from linnet.quant import import_compressed
from linnet.weights import read_safetensors

torch = pytest.importorskip("torch")
pytest.importorskip("compressed_tensors")
st_torch = pytest.importorskip("safetensors.torch")
from compressed_tensors.compressors.mxfp4.base import MXFP4PackedCompressor  # noqa: E402
from compressed_tensors.compressors.naive_quantized.base import (  # noqa: E402
    FloatQuantizationCompressor,
)
from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme  # noqa: E402
from compressed_tensors.quantization.utils import calculate_qparams  # noqa: E402

Array = np.ndarray[Any, Any]

DEQUANTIZE = """module cases

use std.quant::{dequantize_fp8, dequantize_mxfp4}

pub entry fp8<Out: Dim, In: Dim>(q: Tensor[Out, In; u8], scale: Tensor[Out, 1; f32]) -> Tensor[Out, In; f32] {
    return dequantize_fp8<[Out], In, f32>(q, scale)
}

pub entry mxfp4<Out: Dim, G: Dim>(blocks: Tensor[Out, G, 16; u8], scales: Tensor[Out, G; u8]) -> Tensor[1, Out, G * 32; f32] {
    return dequantize_mxfp4<1, Out, G, f32>(reshape(blocks, [1, Out, G, 16]), reshape(scales, [1, Out, G]))
}
"""


def compressed(weight: Any, form: str) -> tuple[dict[str, Any], Any]:
    """compressed-tensors' stored tensors of `weight` and its own decompressed weight."""
    if form == "mxfp4":
        args = QuantizationArgs(num_bits=4, type="float", symmetric=True, strategy="group",
                                group_size=32, scale_dtype=torch.uint8, zp_dtype=torch.uint8)  # fmt: skip
        compressor: Any = MXFP4PackedCompressor
        blocks = weight.float().reshape(weight.shape[0], -1, 32)
        scale, zero = calculate_qparams(blocks.amin(-1), blocks.amax(-1), args)
    else:
        args = QuantizationArgs(num_bits=8, type="float", symmetric=True, strategy=form)
        compressor = FloatQuantizationCompressor
        dims: Any = (-1,) if form == "channel" else (0, 1)
        low, high = weight.float().amin(dims, keepdim=True), weight.float().amax(dims, keepdim=True)
        scale, zero = calculate_qparams(low.reshape(-1, 1) if form == "channel" else low.reshape(1),
                                        high.reshape(-1, 1) if form == "channel" else high.reshape(1),
                                        args)  # fmt: skip
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    state = {"weight": weight, "weight_scale": scale, "weight_zero_point": zero}
    packed = compressor.compress(state, scheme)
    back = compressor.decompress(dict(packed), scheme)["weight"]
    return {k: v.contiguous() for k, v in packed.items()}, back.float()


def save(tensors: dict[str, Any], path: Path) -> None:
    st_torch.save_file(tensors, str(path))


@pytest.mark.parametrize("form", ["channel", "tensor", "mxfp4"])
def test_import_equals_compressed_tensors_decompress(tmp_path: Path, form: str) -> None:
    torch.manual_seed(5)
    weight = torch.randn(20, 64) * 0.05
    packed, expected = compressed(weight, form)
    tensors = {f"layer.proj.{k}": v for k, v in packed.items()}
    tensors["layer.norm.weight"] = torch.ones(64)
    if form != "mxfp4":
        tensors["layer.proj.input_scale"] = torch.ones(1)  # static activation scale: dropped
    save(tensors, tmp_path / "ct.safetensors")
    done = import_compressed(tmp_path / "ct.safetensors", tmp_path / "ours.safetensors")
    assert done == ["layer.proj"]
    ours = read_safetensors(tmp_path / "ours.safetensors")
    assert sorted(ours) == ["layer.norm.weight", "layer.proj.scale", "layer.proj.weight"]
    entry = "mxfp4" if form == "mxfp4" else "fp8"
    inputs = [ours["layer.proj.weight"], ours["layer.proj.scale"]]
    (got,) = StdCases(DEQUANTIZE).run(entry, inputs)["numpy"]
    np.testing.assert_array_equal(got.reshape(20, 64), expected.numpy())
    if form == "tensor":
        assert (ours["layer.proj.scale"] == ours["layer.proj.scale"][0]).all()


def test_refusals(tmp_path: Path) -> None:
    torch.manual_seed(6)
    packed, _ = compressed(torch.randn(8, 64), "channel")
    path, out = tmp_path / "ct.safetensors", tmp_path / "ours.safetensors"

    def refused(tensors: dict[str, Any], message: str) -> None:
        save(tensors, path)
        with pytest.raises(LinnetError, match=message):
            import_compressed(path, out)
        assert not out.exists()

    refused({"p.weight": packed["weight"]}, "without a `p.weight_scale`")
    refused({**{f"p.{k}": v for k, v in packed.items()}, "p.weight_scale": torch.ones(8, 2)},
            "only per-channel")  # fmt: skip
    mx, _ = compressed(torch.randn(8, 64), "mxfp4")
    refused({"m.weight_packed": mx["weight_packed"], "m.weight_scale": mx["weight_scale"][:, :1].clone()},
            "one scale per 32 inputs")  # fmt: skip


@pytest.mark.parametrize("form", ["channel", "mxfp4"])
def test_imported_llama_runs_the_decompressed_weights(tmp_path: Path, form: str) -> None:
    from quant.test_quantised_llama import GENERICS, _float_logits, _module

    floats = _module("make_weights").make_weights(GENERICS, seed=7)
    tensors: dict[str, Any] = {}
    reference = dict(floats)
    for path, value in floats.items():
        if not (path.endswith("_proj.weight") or path == "lm_head.weight"):
            tensors[path] = torch.from_numpy(value)
            continue
        packed, back = compressed(torch.from_numpy(value), form)
        prefix = path.removesuffix(".weight")
        tensors.update({f"{prefix}.{k}": v for k, v in packed.items()})
        reference[path] = back.numpy()
    save(tensors, tmp_path / "ct.safetensors")
    import_compressed(tmp_path / "ct.safetensors", tmp_path / "ours.safetensors")
    source = tmp_path / "q.linnet"
    scheme = "mxfp4" if form == "mxfp4" else "fp8"
    source.write_text(_module("quantised").quantised_source(4, 32, scheme=scheme))
    tokens = np.random.default_rng(8).integers(0, GENERICS["Vocab"], (1, 7)).astype(np.int32)
    expected = _float_logits(reference, tokens)
    model = linnet.onnx.load_model(source, generics=GENERICS, weights=tmp_path / "ours.safetensors")
    got = np.asarray(model.run_entry("forward", [tokens]))
    assert np.abs(got - expected).max() <= 2e-4 * max(1.0, np.abs(expected).max())
