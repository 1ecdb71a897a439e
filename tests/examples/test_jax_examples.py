"""The other examples on the JAX backend: 01-linear, 02-attention, 03-tiny-transformer,
BERT, ViT and CLIP, through `linnet.jax.load` (StableHLO on XLA) and `load_source`
(generated `jax.numpy`), against the references of their PyTorch-backend tests.

The weights come from each example's `make_weights.py`; the references are
`torch.nn.Linear` and NumPy f64, `nn.MultiheadAttention` and NumPy f64 (with
and without the causal mask), the f64 PyTorch tiny transformer, and
transformers' `BertModel`, `ViTModel` and `CLIPModel` holding the same
weights. Tolerances are those of the PyTorch-backend tests (1e-5 for the
shallow examples, 1e-4 for the transformers models, f32).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
jax = pytest.importorskip("jax")

import test_bert as bert  # noqa: E402
import test_clip as clip  # noqa: E402
import test_small_examples as small  # noqa: E402
import test_vit as vit  # noqa: E402
from vision_support import assert_close, read_weights  # noqa: E402

import linnet.jax as lj  # noqa: E402

LOADERS = pytest.mark.parametrize("loader", ["load", "load_source"])
# The transformers encoders cost ~15-25 s per loader here; `load` (StableHLO) is a slow check.
HEAVY_LOADERS = pytest.mark.parametrize(
    "loader", [pytest.param("load", marks=pytest.mark.slow), "load_source"]
)


def loaded(loader: str, source: Path, **kw: Any) -> Any:
    return getattr(lj, loader)(source, **kw)


# -- 01-linear, 02-attention, 03-tiny-transformer -------------------------------------------


@LOADERS
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_linear(tmp_path: Path, loader: str, bias: bool) -> None:
    path = small.example_script("01-linear").make_weights(
        tmp_path, features_in=small.IN, features_out=small.OUT, bias=bias, seed=1
    )
    arrays = read_weights(path)
    f = loaded(loader, small.LINEAR, generics={"In": small.IN, "Out": small.OUT}, weights=path)
    reference = torch.nn.Linear(small.IN, small.OUT, bias=bias)
    reference.load_state_dict(small.tensors(arrays), strict=True)
    rng = np.random.default_rng(2)
    for shape in [(small.IN,), (5, small.IN), (2, 3, small.IN)]:
        x = rng.standard_normal(shape).astype(np.float32)
        with torch.no_grad():
            assert_close(f(x), reference(torch.from_numpy(x)), small.F32, f"nn.Linear {shape}")


@pytest.fixture(scope="module")
def attention_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path: Path = small.example_script("02-attention").make_weights(
        tmp_path_factory.mktemp("attention"), hidden=small.H, heads=small.HEADS, seed=3
    )
    return path


@LOADERS
def test_attention(attention_file: Path, loader: str) -> None:
    f64 = {name: a.astype(np.float64) for name, a in read_weights(attention_file).items()}
    generics = {"H": small.H, "Heads": small.HEADS}
    full = loaded(loader, small.ATTENTION, generics=generics, weights=attention_file)
    causal = loaded(
        loader, small.ATTENTION, generics=generics, weights=attention_file, entry="causal"
    )
    x = np.random.default_rng(4).standard_normal((2, 5, small.H)).astype(np.float32)
    x64 = x.astype(np.float64)
    assert_close(full(x), small.attention_f64(x64, f64, False), small.F32, "forward")
    assert_close(causal(x), small.attention_f64(x64, f64, True), small.F32, "causal")


@LOADERS
def test_tiny_transformer(tmp_path: Path, loader: str) -> None:
    g = small.TINY_GENERICS
    path = small.example_script("03-tiny-transformer").make_weights(tmp_path, seed=5, **g)
    reference = small.TinyTransformer(g["Vocab"], g["H"], g["Heads"], g["Inner"], g["Layers"])
    reference.load_state_dict(small.tensors(read_weights(path)), strict=True)
    reference = reference.double().eval()
    f = loaded(loader, small.TINY, generics=g, weights=path)
    ids = np.random.default_rng(6).integers(0, g["Vocab"], (2, 7))
    with torch.no_grad():
        expected = reference(torch.from_numpy(ids))
    assert_close(f(ids.astype(np.int32)), expected, small.TINY_TOLERANCE, "logits")


# -- BERT -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bert_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("bert")
    bert.example_script("make_weights").write(folder)
    return folder


@HEAVY_LOADERS
def test_bert(bert_checkpoint: Path, loader: str) -> None:
    import json

    reference = transformers.BertModel.from_pretrained(
        bert_checkpoint, attn_implementation="eager"
    ).eval()
    generics = json.loads((bert_checkpoint / "generics.json").read_text())
    common = {
        "generics": generics,
        "weights": bert_checkpoint / "model.safetensors",
        "bindings": bert.BINDINGS,
    }
    hidden = loaded(loader, bert.SOURCE, **common)
    pooled = loaded(loader, bert.SOURCE, entry="pooled", **common)
    embed = loaded(loader, bert.SOURCE, entry="embed", **common)
    ids, types, mask = bert.padded_batch()
    inputs = [t.numpy() for t in (ids, types, mask)]
    with torch.no_grad():
        out = reference(
            input_ids=ids.long(), token_type_ids=types.long(), attention_mask=mask.long()
        )
    assert_close(hidden(*inputs), out.last_hidden_state, 1e-4, "last_hidden_state")
    assert_close(pooled(*inputs), out.pooler_output, 1e-4, "pooler_output")
    want = bert.mean_pool(out.last_hidden_state, mask)
    assert_close(embed(*inputs), want, 1e-4, "mean-pooled embedding")


# -- ViT ------------------------------------------------------------------------------------


@LOADERS
def test_vit(tmp_path: Path, loader: str) -> None:
    path = vit.write(tmp_path)
    reference = vit.reference(path, transformers.ViTModel, vit.vit_config())
    f = loaded(loader, vit.SOURCE, root="ViTModel", generics=vit.GENERICS, weights=path)
    x = vit.pixels(2, 0)
    last, pooled = f(x.numpy())
    with torch.no_grad():
        expected = reference(pixel_values=x)
    assert_close(last, expected.last_hidden_state, vit.TOLERANCE, "last_hidden_state")
    assert_close(pooled, expected.pooler_output, vit.TOLERANCE, "pooler_output")


# -- CLIP -----------------------------------------------------------------------------------


@HEAVY_LOADERS
def test_clip(tmp_path: Path, loader: str) -> None:
    path = clip.example_script("clip").make_weights(tmp_path, seed=11, **clip.GENERICS)
    reference = transformers.CLIPModel(clip.clip_config())
    state = {name: torch.from_numpy(a) for name, a in read_weights(path).items()}
    state["logit_scale"] = state["logit_scale"].reshape(())
    reference.load_state_dict(state, strict=True)
    reference.eval()
    f = loaded(loader, clip.SOURCE, generics=clip.GENERICS, weights=path)
    text = loaded(loader, clip.SOURCE, generics=clip.GENERICS, weights=path, entry="encode_text")
    ids, images = clip.token_ids(), clip.pixels(2)
    per_image, per_text, text_embeds, image_embeds = f(ids.numpy(), images.numpy())
    with torch.no_grad():
        expected = reference(input_ids=ids, pixel_values=images)
        tower = reference.text_model(input_ids=ids)
    assert_close(per_image, expected.logits_per_image, clip.TOLERANCE, "logits_per_image")
    assert_close(per_text, expected.logits_per_text, clip.TOLERANCE, "logits_per_text")
    assert_close(text_embeds, expected.text_embeds, clip.TOLERANCE, "text_embeds")
    assert_close(image_embeds, expected.image_embeds, clip.TOLERANCE, "image_embeds")
    last, pooled = text(ids.numpy())
    assert_close(last, tower.last_hidden_state, clip.TOLERANCE, "text last_hidden_state")
    assert_close(pooled, tower.pooler_output, clip.TOLERANCE, "text pooler_output")
