"""gpt-oss' MXFP4 expert tensors in GGUF (`linnet.gguf.experts`), read back by llama.cpp's tools.

Linnet has no gpt-oss model source, so no whole gpt-oss GGUF is exported or run
here; the expert tensors are. A tiny gpt-oss expert checkpoint (random float
experts quantised by the OCP MX quantiser, `minifloat.mxfp4_blocks`) is added
to a `gpt-oss` GGUF file; the `gguf` package (llama.cpp's reader and its MXFP4
dequantiser) must read each gate, up and down tensor back to exactly the
weights transformers' own gpt-oss dequantiser (`convert_moe_packed_tensors`)
gives for the checkpoint, with gate and up the even and odd rows of
`gate_up_proj`, under llama.cpp's names. With llama.cpp's converter on the
path (slow), its `GptOssModel` repacking of the same blocks must give our bytes.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
gguf = pytest.importorskip("gguf")
pytest.importorskip("transformers")

from linnet.errors import LinnetError  # noqa: E402
from linnet.gguf.experts import add_experts, expert_tensors  # noqa: E402
from linnet.quant.minifloat import mxfp4_blocks, mxfp4_values  # noqa: E402

Array = np.ndarray[Any, Any]
EXPERTS, HIDDEN, INNER, LAYERS = 4, 64, 96, 2
VENDOR = Path("/tmp/hf_llamacpp/vendor")


def checkpoint(seed: int) -> dict[str, Array]:
    """gpt-oss' expert tensors of `LAYERS` layers, as its checkpoints store them."""
    rng = np.random.default_rng(seed)
    arrays: dict[str, Array] = {}
    for layer in range(LAYERS):
        prefix = f"model.layers.{layer}.mlp.experts"
        for name, out, width in (("gate_up_proj", 2 * INNER, HIDDEN), ("down_proj", HIDDEN, INNER)):
            weight = rng.normal(0, 0.05, (EXPERTS, out, width)).astype(np.float32)
            blocks, scales = mxfp4_blocks(weight)
            arrays[f"{prefix}.{name}_blocks"] = blocks
            arrays[f"{prefix}.{name}_scales"] = scales
            arrays[f"{prefix}.{name}_bias"] = rng.normal(0, 0.1, (EXPERTS, out)).astype(np.float32)
    return arrays


def transformers_weight(blocks: Array, scales: Array) -> Array:
    """transformers' gpt-oss dequantiser, as `[E, Out, In]`."""
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    values = convert_moe_packed_tensors(
        torch.from_numpy(blocks), torch.from_numpy(scales), dtype=torch.float32
    )
    out: Array = values.transpose(1, 2).numpy()
    return out


def test_expert_tensors_read_back_as_transformers_dequantises_them(tmp_path: Path) -> None:
    arrays = checkpoint(seed=1)
    writer = gguf.GGUFWriter(tmp_path / "experts.gguf", arch="gpt-oss")
    assert add_experts(writer, arrays, LAYERS, used=2) == LAYERS * 6
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    reader = gguf.GGUFReader(tmp_path / "experts.gguf")
    fields = {f.name: f.parts[f.data[0]][0] for f in reader.fields.values() if f.data}
    assert fields["gpt-oss.expert_count"] == EXPERTS
    assert fields["gpt-oss.expert_used_count"] == 2
    assert fields["gpt-oss.expert_feed_forward_length"] == INNER
    stored = {t.name: t for t in reader.tensors}
    assert len(stored) == LAYERS * 6
    for layer in range(LAYERS):
        prefix = f"model.layers.{layer}.mlp.experts"
        gate_up = transformers_weight(
            arrays[f"{prefix}.gate_up_proj_blocks"], arrays[f"{prefix}.gate_up_proj_scales"]
        )
        down = transformers_weight(
            arrays[f"{prefix}.down_proj_blocks"], arrays[f"{prefix}.down_proj_scales"]
        )
        bias = arrays[f"{prefix}.gate_up_proj_bias"]
        expected = {
            "ffn_gate_exps": (gate_up[:, 0::2], bias[:, 0::2]),
            "ffn_up_exps": (gate_up[:, 1::2], bias[:, 1::2]),
            "ffn_down_exps": (down, arrays[f"{prefix}.down_proj_bias"]),
        }
        for name, (weight, b) in expected.items():
            tensor = stored[f"blk.{layer}.{name}.weight"]
            assert tensor.tensor_type == gguf.GGMLQuantizationType.MXFP4
            values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
            np.testing.assert_array_equal(values.reshape(weight.shape), weight)
            assert list(tensor.shape) == list(weight.shape[::-1])  # GGUF lists dims innermost first
            np.testing.assert_array_equal(stored[f"blk.{layer}.{name}.bias"].data, b)
        # and our own decoder agrees (the std body's arithmetic)
        ours = mxfp4_values(
            arrays[f"{prefix}.down_proj_blocks"], arrays[f"{prefix}.down_proj_scales"]
        )
        np.testing.assert_array_equal(ours, down)


def test_refusals() -> None:
    arrays = checkpoint(seed=2)
    name = "model.layers.0.mlp.experts.down_proj"
    with pytest.raises(LinnetError, match=r"has no `.*_scales`"):
        expert_tensors({k: v for k, v in arrays.items() if k != f"{name}_scales"}, LAYERS)
    bad = {**arrays, f"{name}_scales": arrays[f"{name}_scales"][:, :, :1]}
    with pytest.raises(LinnetError, match="not MXFP4 expert blocks"):
        expert_tensors(bad, LAYERS)
    odd = {
        k: (v[:, :-1] if "gate_up" in k else v) for k, v in arrays.items() if "layers.1" not in k
    }
    with pytest.raises(LinnetError, match="even number"):
        expert_tensors(odd, LAYERS)
    writer = gguf.GGUFWriter(None, arch="gpt-oss")
    with pytest.raises(LinnetError, match="experts used per token"):
        add_experts(writer, arrays, LAYERS, used=EXPERTS + 1)
    with pytest.raises(LinnetError, match=r"no `model\.layers\.N\.mlp\.experts"):
        add_experts(writer, {}, LAYERS, used=1)


@pytest.mark.slow
def test_bytes_equal_llama_cpp_converters_repacking() -> None:
    if not (VENDOR / "conversion" / "gpt_oss.py").is_file():
        pytest.skip(f"llama.cpp's converter is not at {VENDOR}")
    sys.path[:0] = [str(VENDOR / "gguf-py"), str(VENDOR)]
    try:
        module = importlib.import_module("conversion.gpt_oss")
    except ImportError as error:
        pytest.skip(f"llama.cpp's converter does not import here: {error}")
    finally:
        del sys.path[:2]
    arrays = checkpoint(seed=3)
    ours = {t.name: t.data for t in expert_tensors(arrays, LAYERS)}
    prefix = "model.layers.1.mlp.experts"
    for name, rows, target in (
        ("gate_up_proj", slice(0, None, 2), "blk.1.ffn_gate_exps.weight"),
        ("gate_up_proj", slice(1, None, 2), "blk.1.ffn_up_exps.weight"),
        ("down_proj", slice(None), "blk.1.ffn_down_exps.weight"),
    ):
        blocks = torch.from_numpy(arrays[f"{prefix}.{name}_blocks"][:, rows].copy())
        scales = torch.from_numpy(arrays[f"{prefix}.{name}_scales"][:, rows].copy())
        nibbles = module.GptOssModel.transform_nibble_layout(None, blocks)
        theirs = torch.concat((scales.unsqueeze(-1), nibbles), dim=-1)
        expected = theirs.reshape(theirs.shape[0], theirs.shape[1], -1).numpy()
        np.testing.assert_array_equal(ours[target], expected)
