"""examples/clip against transformers' `CLIPModel` holding the same random f32 weights.

The example's `make_weights.py` writes the file under the `state_dict` names;
transformers takes it with `load_state_dict(strict=True)` after one change:
`logit_scale` is stored with one element (Linnet has no rank-0 tensors) and
transformers wants a 0-d tensor. The Linnet model binds the file by path through
`linnet.torch.load`, interpreted and as generated source. Covered: the text tower
(token and position embeddings, causal pre-LN layers with quick GELU, final
LayerNorm, pooling at the first end-of-text token), the image tower (patch
projection written as a contraction, class embedding, positions, `pre_layrnorm`,
`post_layernorm` on the class token), both projections, the normalised
embeddings and `logits_per_image` / `logits_per_text`. Outputs agree within 1e-4.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from vision_support import (  # noqa: E402
    COMPILE,
    EXAMPLES,
    assert_close,
    example_script,
    read_weights,
)

import linnet.torch as lt  # noqa: E402

EXAMPLE = EXAMPLES / "clip"
SOURCE = EXAMPLE / "src"
GENERICS = {
    "Vocab": 50,
    "TextH": 32,
    "TextHeads": 4,
    "TextInner": 48,
    "TextLayers": 2,
    "MaxPos": 10,
    "Channels": 3,
    "VisionH": 24,
    "VisionHeads": 3,
    "VisionInner": 40,
    "VisionLayers": 2,
    "Patch": 4,
    "Grid": 3,
    "Proj": 16,
}
EOS = GENERICS["Vocab"] - 1
PAD = 0
TOLERANCE = 1e-4

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def clip_config() -> Any:
    g = GENERICS
    text = {
        "vocab_size": g["Vocab"],
        "hidden_size": g["TextH"],
        "num_attention_heads": g["TextHeads"],
        "intermediate_size": g["TextInner"],
        "num_hidden_layers": g["TextLayers"],
        "max_position_embeddings": g["MaxPos"],
        "hidden_act": "quick_gelu",
        "eos_token_id": EOS,
        "bos_token_id": EOS - 1,
        "pad_token_id": PAD,
    }
    vision = {
        "hidden_size": g["VisionH"],
        "num_attention_heads": g["VisionHeads"],
        "intermediate_size": g["VisionInner"],
        "num_hidden_layers": g["VisionLayers"],
        "image_size": g["Grid"] * g["Patch"],
        "patch_size": g["Patch"],
        "num_channels": g["Channels"],
        "hidden_act": "quick_gelu",
    }
    return transformers.CLIPConfig(text_config=text, vision_config=vision, projection_dim=g["Proj"])


@pytest.fixture(scope="module")
def weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path: Path = example_script("clip").make_weights(
        tmp_path_factory.mktemp("clip"), seed=11, **GENERICS
    )
    return path


@pytest.fixture(scope="module")
def reference(weights: Path) -> Any:
    model = transformers.CLIPModel(clip_config())
    state = {name: torch.from_numpy(a) for name, a in read_weights(weights).items()}
    assert state["logit_scale"].shape == (1,)
    state["logit_scale"] = state["logit_scale"].reshape(())
    model.load_state_dict(state, strict=True)
    return model.eval()


@pytest.fixture(scope="module", params=COMPILE, ids=["interpreted", "generated"])
def model(request: pytest.FixtureRequest, weights: Path) -> lt.LinnetModule:
    return lt.load(SOURCE, generics=GENERICS, weights=weights, compile=request.param)


def token_ids() -> torch.Tensor:
    """Three sequences of 8 with end-of-text at 7, 3 (then padding) and 5 (twice)."""
    generator = torch.Generator().manual_seed(12)
    ids = torch.randint(1, EOS - 1, (3, 8), generator=generator)
    ids[0, 7] = EOS
    ids[1, 3] = EOS
    ids[1, 4:] = PAD
    ids[2, 5] = EOS
    ids[2, 7] = EOS
    return ids


def pixels(batch: int) -> torch.Tensor:
    side = GENERICS["Grid"] * GENERICS["Patch"]
    generator = torch.Generator().manual_seed(13)
    return torch.randn(batch, GENERICS["Channels"], side, side, generator=generator)


def test_clip_model_matches_transformers(model: lt.LinnetModule, reference: Any) -> None:
    assert sorted(model.state_dict()) == sorted(reference.state_dict())
    ids, images = token_ids(), pixels(2)
    per_image, per_text, text_embeds, image_embeds = model(ids, images)
    with torch.no_grad():
        expected = reference(input_ids=ids, pixel_values=images)
    assert per_image.shape == (2, 3) and per_text.shape == (3, 2)
    assert_close(per_image.detach(), expected.logits_per_image, TOLERANCE, "logits_per_image")
    assert_close(per_text.detach(), expected.logits_per_text, TOLERANCE, "logits_per_text")
    assert_close(text_embeds.detach(), expected.text_embeds, TOLERANCE, "text_embeds")
    assert_close(image_embeds.detach(), expected.image_embeds, TOLERANCE, "image_embeds")
    assert float(expected.logits_per_image.std()) > 0.5  # the logits are not all alike


def test_clip_towers_match_transformers(model: lt.LinnetModule, reference: Any) -> None:
    ids, images = token_ids(), pixels(3)
    text_last, text_pooled = model.run_entry("encode_text", [ids])
    image_last, image_pooled = model.run_entry("encode_image", [images])
    with torch.no_grad():
        text = reference.text_model(input_ids=ids)
        image = reference.vision_model(pixel_values=images)
        text_features = reference.get_text_features(input_ids=ids).pooler_output
        image_features = reference.get_image_features(pixel_values=images).pooler_output
    # Every position is compared, so the causal mask matters, not only the pooled one.
    assert_close(text_last.detach(), text.last_hidden_state, TOLERANCE, "text last_hidden_state")
    assert_close(text_pooled.detach(), text.pooler_output, TOLERANCE, "text pooler_output")
    assert_close(image_last.detach(), image.last_hidden_state, TOLERANCE, "image last_hidden")
    assert_close(image_pooled.detach(), image.pooler_output, TOLERANCE, "image pooler_output")
    got_text = model.run_entry("text_features", [ids]).detach()
    got_image = model.run_entry("image_features", [images]).detach()
    assert_close(got_text, text_features, TOLERANCE, "get_text_features")
    assert_close(got_image, image_features, TOLERANCE, "get_image_features")


def test_clip_pools_at_the_first_end_of_text(model: lt.LinnetModule) -> None:
    ids = token_ids()
    last, pooled = model.run_entry("encode_text", [ids])
    first_eos = [7, 3, 5]
    for row, at in enumerate(first_eos):
        assert torch.equal(pooled[row], last[row, at])
    # Tokens after the end-of-text token change neither the pooled output nor earlier states.
    later = ids.clone()
    later[2, 6] = 1
    last_changed, pooled_changed = model.run_entry("encode_text", [later])
    assert_close(pooled_changed.detach(), pooled.detach(), 1e-6, "pooled after a later change")
    assert_close(last_changed[2, :6].detach(), last[2, :6].detach(), 1e-6, "earlier states")


def test_clip_binds_a_save_pretrained_folder_unchanged(reference: Any, tmp_path: Path) -> None:
    """`logit_scale` is stored 0-d; the declared `Tensor[1; T]` binds it (weights.py)."""
    reference.save_pretrained(tmp_path)
    loaded = lt.load(SOURCE, generics=GENERICS, weights=tmp_path / "model.safetensors")
    ids, images = token_ids(), pixels(2)
    per_image = loaded(ids, images)[0]
    with torch.no_grad():
        expected = reference(input_ids=ids, pixel_values=images)
    assert_close(per_image.detach(), expected.logits_per_image, TOLERANCE, "logits_per_image")


@pytest.mark.slow
def test_clip_vit_base_patch32_matches_transformers() -> None:
    """The full-size CLIP ViT-B/32 configuration (151M parameters), transformers' init."""
    torch.manual_seed(0)
    config = transformers.CLIPConfig()
    ref = transformers.CLIPModel(config).eval()
    text, vision = config.text_config, config.vision_config
    assert text.eos_token_id == text.vocab_size - 1  # the end-of-text rule of the example
    generics = {
        "Vocab": text.vocab_size,
        "TextH": text.hidden_size,
        "TextHeads": text.num_attention_heads,
        "TextInner": text.intermediate_size,
        "TextLayers": text.num_hidden_layers,
        "MaxPos": text.max_position_embeddings,
        "Channels": vision.num_channels,
        "VisionH": vision.hidden_size,
        "VisionHeads": vision.num_attention_heads,
        "VisionInner": vision.intermediate_size,
        "VisionLayers": vision.num_hidden_layers,
        "Patch": vision.patch_size,
        "Grid": vision.image_size // vision.patch_size,
        "Proj": config.projection_dim,
    }
    state = {name: t.detach() for name, t in ref.state_dict().items()}
    state["logit_scale"] = state["logit_scale"].reshape(1)
    model = lt.load(SOURCE, generics=generics, weights=state, compile=True)
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(1, text.vocab_size - 2, (2, 16), generator=generator)
    ids[0, 15] = ids[1, 9] = text.eos_token_id
    images = torch.randn(2, 3, vision.image_size, vision.image_size, generator=generator)
    outputs = model(ids, images)
    with torch.no_grad():
        expected = ref(input_ids=ids, pixel_values=images)
    names = ["logits_per_image", "logits_per_text", "text_embeds", "image_embeds"]
    for got, name in zip(outputs, names, strict=True):
        assert_close(got.detach(), getattr(expected, name), TOLERANCE, name)
