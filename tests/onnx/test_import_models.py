"""Whole models through `import_onnx`, compared with independent references.

- Round trip: every example exported by `export_model` with random weights,
  then imported: the same parameter paths, the same bytes, and the same
  outputs as ONNX Runtime on the exported model.
- GPT-2: `torch.onnx.export` (TorchScript exporter) of transformers' GPT-2,
  against PyTorch on the same inputs; GELU and attention are recovered.
- Llama: `torch.onnx.export(..., dynamo=True)` of transformers' Llama, against
  PyTorch; the source reads like the Llama example (RMS norm, SiLU, attention
  with its softmax, rotary embeddings recovered; layers named after the modules).
"""

from __future__ import annotations

import re
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from import_support import (
    EXAMPLES_DIR,
    STDLIB,
    check_logits,
    close,
    imported,
    run_imported,
    run_onnxruntime,
)

from linnet.ir.bind import bind, find_root
from linnet.ir.core import numpy_dtype
from linnet.weights import read_safetensors

if TYPE_CHECKING:
    from torch_exports import TorchExport

GENERICS: dict[str, object] = {
    "Vocab": 11, "H": 8, "Heads": 2, "KvHeads": 1, "NumHeads": 2, "Inner": 16, "Layers": 2,
    "Batch": 1, "MaxSeq": 8, "Positions": 8, "MaxPos": 8, "TypeVocab": 2,
    "In": 4, "Out": 3, "Depth": 1, "Classes": 3, "Labels": 3,
    "TextH": 8, "TextHeads": 2, "TextInner": 16, "TextLayers": 1,
    "VisionH": 8, "VisionHeads": 2, "VisionInner": 16, "VisionLayers": 1,
    "Channels": 3, "Patch": 2, "Grid": 2, "Proj": 4, "T": "f32",
    "B": 2, "S": 3, "I": 1, "Steps": 2,
}  # fmt: skip
ROOTS = {"vit": "ViTForImageClassification"}
PACKS = {"01-linear": {"S": "2,3"}}


def example_dirs() -> list[str]:
    return sorted(p.name for p in EXAMPLES_DIR.iterdir() if (p / "src" / "lib.linnet").exists())


def _rng(*key: object) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def _random(rng: np.random.Generator, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.startswith(("i", "u")):
        return rng.integers(0, 2, size=shape).astype(numpy_dtype(dtype))
    return (rng.normal(0.0, 0.3, size=shape)).astype(numpy_dtype(dtype))


@pytest.mark.parametrize("example", example_dirs())
def test_examples_round_trip(example: str, tmp_path: Path) -> None:
    from linnet.onnx import export_model
    from linnet.pipeline import check_paths

    source = EXAMPLES_DIR / example / "src" / "lib.linnet"
    program = check_paths([source], STDLIB)
    root = find_root(program, ROOTS.get(example))
    generics = {**GENERICS, **PACKS.get(example, {})}
    root_generics = {g.name: generics[g.name] for g in root.generics if g.name in generics}
    model = bind(program, root=root.name, generics=root_generics)
    rng = _rng(example)
    weights = {
        path: _random(rng, t.type.dtype, t.type.shape)
        for path, t in model.tensors.items()
        if t.kind != "state" and t.group is None and not t.optional
    }
    entry = "forward" if "forward" in model.entries else next(iter(model.entries))
    entry_generics = {
        g.name: generics[g.name]
        for g in model.entries[entry].fn.generics
        if g.name in generics and not g.has_default
    }
    exported = export_model(
        source,
        generics={**root_generics, **entry_generics},
        weights=weights,
        entry=entry,
        root=ROOTS.get(example),
        std_root=STDLIB,
    )
    result = imported(exported.model, tmp_path)

    # State comes back as `state` members at its paths (test_import_state.py runs it).
    state_paths = {io.path for io in exported.inputs if io.role == "state"}
    state_paths |= {io.path for io in exported.outputs if io.role == "next_state"}
    assert set(result.state) == state_paths

    # The same parameter paths, bound to the same bytes.
    exported_paths = {io.path for io in exported.inputs if io.role == "param"}
    assert set(result.parameters) == exported_paths
    stored = read_safetensors(result.weights)  # type: ignore[arg-type]
    for path in exported_paths:
        assert path is not None
        name = result.bindings.get(path, path)
        original = weights[path]
        assert stored[name].tobytes() == original.tobytes(), path

    # The same outputs as ONNX Runtime on the exported model.
    feeds = {
        io.name: _random(rng, io.type.dtype, io.type.shape)
        for io in exported.inputs
        if io.role == "input"
    }
    zeros = {  # the state's value before the first call
        io.name: np.zeros(io.type.shape, numpy_dtype(io.type.dtype))
        for io in exported.inputs
        if io.role == "state"
    }
    results = sum(io.role == "output" for io in exported.outputs)
    expected = run_onnxruntime(exported.model, {**feeds, **zeros})[:results]
    actual = run_imported(result, list(feeds.values()))
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        close(a, e)


# ---------------------------------------------------------------- transformers models


def test_gpt2_torchscript_export_imports(gpt2_torchscript: TorchExport, tmp_path: Path) -> None:
    result = imported(gpt2_torchscript.path, tmp_path / "out", "gpt2")
    text = result.source
    assert "forward<batch: Dim, seq: Dim>" in text
    assert "gelu(" in text and "attention_rows(" in text
    assert "transformer: Transformer" in text and "[H; 2]" in text
    check_logits(result, gpt2_torchscript.model, batch=3, lengths=(7, 3), mask=True)


def test_llama_dynamo_export_imports_like_the_example(
    llama_dynamo: TorchExport, tmp_path: Path
) -> None:
    result = imported(llama_dynamo.path, tmp_path / "out", "llama")
    text = result.source
    for call in ("rms_norm(", "silu(", "attention", "rope("):
        assert call in text, call
    assert "layers: [Layer; 2]" in text
    assert any("recovered `rms_norm`" in n for n in result.notes)
    check_logits(result, llama_dynamo.model, batch=2, lengths=(7, 4))


def _encoder_export(model: Any, inputs: dict[str, Any], path: Path) -> Path:
    """An encoder's `last_hidden_state` through the TorchScript exporter, batch dynamic."""
    import torch

    names = list(inputs)

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = model

        def forward(self, *args: Any) -> Any:
            return self.encoder(**dict(zip(names, args, strict=True))).last_hidden_state

    torch.onnx.export(Encoder().eval(), tuple(inputs.values()), str(path), input_names=names,
                      output_names=["hidden"], dynamic_axes={n: {0: "batch"} for n in names},
                      dynamo=False, opset_version=17)  # fmt: skip
    return path


@pytest.mark.parametrize("kind", ["bert", "vit"])
def test_encoder_torchscript_exports_import(kind: str, torch_exports: Any, tmp_path: Path) -> None:
    """BERT with a right-padded attention mask (rows of padding keys) and ViT: the
    import uses the std attention and GELU and equals PyTorch at every position."""
    import torch
    import transformers

    if kind == "bert":
        config = transformers.BertConfig(vocab_size=60, hidden_size=32, num_hidden_layers=2,
                                         num_attention_heads=4, intermediate_size=64,
                                         max_position_embeddings=32)  # fmt: skip
        model = transformers.BertModel(config).eval()
        mask = torch.ones(2, 7, dtype=torch.int64)
        mask[1, 4:] = 0
        inputs = {"input_ids": torch.randint(0, 60, (2, 7)), "attention_mask": mask}
    else:
        config = transformers.ViTConfig(image_size=16, patch_size=4, num_channels=3,
                                        hidden_size=32, num_hidden_layers=2,
                                        num_attention_heads=4, intermediate_size=64)  # fmt: skip
        model = transformers.ViTModel(config).eval()
        inputs = {"pixel_values": torch.randn(2, 3, 16, 16)}
    torch_exports.randomize(model, 3)
    path = _encoder_export(model, inputs, tmp_path / f"{kind}.onnx")
    result = imported(path, tmp_path / "out", kind)
    text = result.source
    assert re.search(r"\battention(_rows|_fn)?\(", text) and "gelu_erf(" in text, text
    with torch.no_grad():
        expected = model(**inputs).last_hidden_state.numpy()
    (actual,) = run_imported(result, [t.numpy() for t in inputs.values()])
    close(actual, expected, rtol=1e-4, atol=1e-5)
