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

import zlib
from pathlib import Path

import numpy as np
import pytest
from import_support import EXAMPLES_DIR, STDLIB, close, imported, run_imported, run_onnxruntime

from linnet.ir.bind import bind, find_root
from linnet.ir.core import numpy_dtype
from linnet.weights import read_safetensors

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


def _randomize(model: object, seed: int) -> None:
    """Distinct random values for every parameter, so exporters cannot merge equal ones."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():  # type: ignore[attr-defined]
            p.copy_(torch.randn(p.shape, generator=gen) * 0.2)


def test_gpt2_torchscript_export_imports(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        n_layer=2, n_head=4, n_embd=32, vocab_size=50, n_positions=16, use_cache=False
    )
    model = transformers.GPT2LMHeadModel(config).eval()
    _randomize(model, 1)

    class Wrapper(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.transformer = model.transformer
            self.lm_head = model.lm_head

        def forward(self, input_ids, attention_mask):  # type: ignore[no-untyped-def]
            return model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)[0]

    ids = torch.randint(0, 50, (2, 7))
    mask = torch.ones(2, 7, dtype=torch.int64)
    path = tmp_path / "gpt2.onnx"
    torch.onnx.export(
        Wrapper().eval(),
        (ids, mask),
        str(path),
        input_names=["input_ids", "attention_mask"],
        output_names=["logits"],
        dynamic_axes={
            "input_ids": {0: "batch", 1: "seq"},
            "attention_mask": {0: "batch", 1: "seq"},
            "logits": {0: "batch", 1: "seq"},
        },
        dynamo=False,
        opset_version=17,
    )
    result = imported(path, tmp_path / "out", "gpt2")
    text = result.source
    assert "forward<batch: Dim, seq: Dim>" in text
    assert "gelu(" in text and "attention_rows(" in text
    assert "transformer: Transformer" in text and "[H; 2]" in text
    for length in (7, 3):
        ids = torch.randint(0, 50, (3, length))
        mask = torch.ones(3, length, dtype=torch.int64)
        with torch.no_grad():
            expected = model(input_ids=ids, attention_mask=mask, use_cache=False)[0].numpy()
        (actual,) = run_imported(result, [ids.numpy(), mask.numpy()])
        close(actual, expected, rtol=1e-4, atol=1e-4)


def test_llama_dynamo_export_imports_like_the_example(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=60,
        max_position_embeddings=64,
        use_cache=False,
    )
    model = transformers.LlamaForCausalLM(config).eval()
    _randomize(model, 2)
    ids = torch.randint(0, 60, (2, 7))
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq", min=2, max=64)
    path = tmp_path / "llama.onnx"
    torch.onnx.export(
        model,
        (ids,),
        str(path),
        input_names=["input_ids"],
        output_names=["logits"],
        dynamic_shapes={"input_ids": {0: batch, 1: seq}},
        dynamo=True,
    )
    result = imported(path, tmp_path / "out", "llama")
    text = result.source
    for call in ("rms_norm(", "silu(", "attention", "rope("):
        assert call in text, call
    assert "layers: [Layer; 2]" in text
    assert any("recovered `rms_norm`" in n for n in result.notes)
    for length in (7, 4):
        ids = torch.randint(0, 60, (2, length))
        with torch.no_grad():
            expected = model(input_ids=ids, use_cache=False).logits.numpy()
        (actual,) = run_imported(result, [ids.numpy()])
        close(actual, expected, rtol=1e-4, atol=1e-4)
