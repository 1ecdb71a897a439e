"""`import_compressed` against compressed-tensors, the library that defines `pack-quantized`.

Weights are quantised and packed by compressed-tensors itself
(`calculate_qparams`, `PackedQuantizationCompressor.compress`), symmetric and
asymmetric, with an output count that is not a multiple of 8 (a padded
zero-point word); after `import_compressed` the std body
`dequantize_int4_groups` (NumPy reference interpreter) must give exactly the
weights of compressed-tensors' own `decompress`, and the quantised Llama
example on the imported file the logits of the float example on those
decompressed weights.
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
from linnet.torch.dtypes import to_numpy
from linnet.weights import read_safetensors, save_safetensors

torch = pytest.importorskip("torch")
ct = pytest.importorskip("compressed_tensors")
from compressed_tensors.compressors.pack_quantized.base import (  # noqa: E402
    PackedQuantizationCompressor,
)
from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme  # noqa: E402
from compressed_tensors.quantization.utils import calculate_qparams  # noqa: E402

Array = np.ndarray[Any, Any]

DEQUANTIZE = """module cases

use std.quant::{dequantize_int4_groups}

pub entry groups<Out: Dim, G: Dim, Half: Dim, T: Float>(
    packed: Tensor[Out, G, Half; u8],
    scale: Tensor[Out, G; T],
    zero: Tensor[Out, G; u8],
) -> Tensor[Out, G * (2 * Half); T] {
    return dequantize_int4_groups(packed, scale, zero)
}
"""


def compressed(weight: Any, group: int, symmetric: bool) -> tuple[dict[str, Any], Any]:
    """compressed-tensors' packed tensors of `weight` and its own decompressed weight."""
    args = QuantizationArgs(
        num_bits=4, type="int", symmetric=symmetric, strategy="group", group_size=group
    )
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    out, width = weight.shape
    blocks = weight.float().reshape(out, width // group, group)
    scale, zero = calculate_qparams(blocks.amin(-1), blocks.amax(-1), args)
    state = {"weight": weight, "weight_scale": scale.to(weight.dtype), "weight_zero_point": zero}
    packed = PackedQuantizationCompressor.compress(state, scheme)
    back = PackedQuantizationCompressor.decompress(dict(packed), scheme)["weight"]
    return dict(packed), back


def as_numpy(tensor: Any) -> Array:
    kinds = {torch.bfloat16: "bf16", torch.float32: "f32", torch.int32: "i32", torch.int64: "i64"}
    return to_numpy(tensor, kinds[tensor.dtype])


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_import_equals_compressed_tensors_decompress(
    tmp_path: Path, symmetric: bool, dtype: str
) -> None:
    torch.manual_seed(3)
    weight = (torch.randn(20, 64) * 0.05).to(getattr(torch, dtype))
    packed, expected = compressed(weight, 32, symmetric)
    arrays = {f"layer.proj.{k}": as_numpy(v) for k, v in packed.items()}
    arrays["layer.norm.weight"] = np.ones(64, np.float32)
    save_safetensors(arrays, tmp_path / "ct.safetensors")
    assert ("layer.proj.weight_zero_point" in arrays) == (not symmetric)
    done = import_compressed(tmp_path / "ct.safetensors", tmp_path / "ours.safetensors")
    assert done == ["layer.proj"]
    ours = read_safetensors(tmp_path / "ours.safetensors")
    assert sorted(ours) == ["layer.norm.weight", "layer.proj.scale", "layer.proj.weight",
                            "layer.proj.zero"]  # fmt: skip
    assert ours["layer.proj.weight"].shape == (20, 2, 16)
    inputs = [ours["layer.proj.weight"], ours["layer.proj.scale"], ours["layer.proj.zero"]]
    (got,) = StdCases(DEQUANTIZE).run("groups", inputs)["numpy"]
    np.testing.assert_array_equal(got.astype(np.float32), as_numpy(expected).astype(np.float32))


def test_refusals(tmp_path: Path) -> None:
    torch.manual_seed(4)
    packed, _ = compressed(torch.randn(8, 64), 32, True)
    arrays = {f"p.{k}": as_numpy(v) for k, v in packed.items()}
    path, out = tmp_path / "ct.safetensors", tmp_path / "ours.safetensors"

    def refused(changed: dict[str, Array], message: str) -> None:
        save_safetensors(changed, path)
        with pytest.raises(LinnetError, match=message):
            import_compressed(path, out)
        assert not out.exists()

    refused({"x.weight": np.ones((2, 2), np.float32)}, "not a pack-quantized")
    refused({**arrays, "p.weight_g_idx": np.zeros(64, np.int32)}, "activation order")
    eight = {**arrays, "p.weight_packed": np.zeros((8, 16), np.int32)}
    refused(eight, r"only 4-bit weights")
    missing = {k: v for k, v in arrays.items() if not k.endswith("weight_scale")}
    refused(missing, "has no `p.weight_scale`")
    refused({**arrays, "p.weight_scale": np.ones((8, 3), np.float32)}, "scale groups per row")


def test_imported_llama_runs_the_decompressed_weights(tmp_path: Path) -> None:
    from quant.test_quantised_llama import GENERICS, _float_logits, _module

    make_weights, quantised = _module("make_weights"), _module("quantised")
    floats = make_weights.make_weights(GENERICS, seed=5)
    arrays: dict[str, Array] = {}
    reference = dict(floats)
    for path, value in floats.items():
        if not (path.endswith("_proj.weight") or path == "lm_head.weight"):
            arrays[path] = value
            continue
        packed, back = compressed(torch.from_numpy(value), 32, symmetric=False)
        prefix = path.removesuffix(".weight")
        arrays.update({f"{prefix}.{k}": as_numpy(v) for k, v in packed.items()})
        reference[path] = as_numpy(back)
    save_safetensors(arrays, tmp_path / "ct.safetensors")
    import_compressed(tmp_path / "ct.safetensors", tmp_path / "ours.safetensors")
    source = tmp_path / "q.linnet"
    source.write_text(quantised.quantised_source(4, 32))
    tokens = np.random.default_rng(6).integers(0, GENERICS["Vocab"], (1, 7)).astype(np.int32)
    expected = _float_logits(reference, tokens)
    model = linnet.onnx.load_model(source, generics=GENERICS, weights=tmp_path / "ours.safetensors")
    got = np.asarray(model.run_entry("forward", [tokens]))
    assert np.abs(got - expected).max() <= 2e-4 * max(1.0, np.abs(expected).max())
