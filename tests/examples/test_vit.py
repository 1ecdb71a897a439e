"""examples/vit against transformers' `ViTModel` and `ViTForImageClassification`.

The example's `make_weights.py` writes random f32 weights under the `state_dict`
names; transformers takes the same file with `load_state_dict(strict=True)` (so
the parameter paths are its names) and the Linnet model binds it by path
through `linnet.torch.load`, interpreted and as generated source. Covered: the
patch convolution (`std.nn.conv::Conv2d` with stride = kernel = patch), the class
token, position embeddings, pre-LN encoder layers with exact GELU, the final
LayerNorm, the `tanh` pooler, the optional pooler being absent
(`add_pooling_layer=False`), the classifier head, and a folder written by
`save_pretrained` (whose tensor names differ) bound through `hub-bindings.json`.
Outputs agree within 1e-4.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
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
from linnet.errors import LinnetError  # noqa: E402

EXAMPLE = EXAMPLES / "vit"
SOURCE = EXAMPLE / "src" / "lib.linnet"
GENERICS = {"Channels": 3, "H": 32, "Heads": 4, "Inner": 48, "Layers": 2, "Patch": 4, "Grid": 3}
LABELS = 5
TOLERANCE = 1e-4
MODES = pytest.mark.parametrize("compile", COMPILE, ids=["interpreted", "generated"])

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def vit_config(labels: int | None = None) -> Any:
    g = GENERICS
    extra = {} if labels is None else {"num_labels": labels}
    return transformers.ViTConfig(
        hidden_size=g["H"],
        num_hidden_layers=g["Layers"],
        num_attention_heads=g["Heads"],
        intermediate_size=g["Inner"],
        image_size=g["Grid"] * g["Patch"],
        patch_size=g["Patch"],
        num_channels=g["Channels"],
        hidden_act="gelu",
        layer_norm_eps=1e-12,
        qkv_bias=True,
        **extra,
    )


def reference(weights: Path, cls: Any, config: Any, **options: Any) -> Any:
    model = cls(config, **options)
    state = {name: torch.from_numpy(a) for name, a in read_weights(weights).items()}
    model.load_state_dict(state, strict=True)
    return model.eval()


def pixels(batch: int, seed: int) -> torch.Tensor:
    side = GENERICS["Grid"] * GENERICS["Patch"]
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, GENERICS["Channels"], side, side, generator=generator)


def write(folder: Path, **options: Any) -> Path:
    path: Path = example_script("vit").make_weights(folder, seed=7, **options, **GENERICS)
    return path


@pytest.fixture(scope="module")
def with_pooler(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write(tmp_path_factory.mktemp("vit"))


@pytest.fixture(scope="module")
def without_pooler(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write(tmp_path_factory.mktemp("vit_no_pooler"), pooler=False)


@pytest.fixture(scope="module")
def classifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write(tmp_path_factory.mktemp("vit_classifier"), labels=LABELS)


@MODES
def test_vit_model_matches_transformers(with_pooler: Path, compile: bool) -> None:
    ref = reference(with_pooler, transformers.ViTModel, vit_config())
    model = lt.load(
        SOURCE, root="ViTModel", generics=GENERICS, weights=with_pooler, compile=compile
    )
    assert sorted(model.state_dict()) == sorted(ref.state_dict())
    for batch, seed in [(2, 0), (1, 1)]:
        x = pixels(batch, seed)
        last, pooled = model(x)
        with torch.no_grad():
            expected = ref(pixel_values=x)
        assert_close(last.detach(), expected.last_hidden_state, TOLERANCE, "last_hidden_state")
        assert_close(pooled.detach(), expected.pooler_output, TOLERANCE, "pooler_output")
    # The pooler ran: tanh keeps it in (-1, 1), unlike the LayerNorm output.
    assert float(pooled.abs().max()) < 1.0 < float(last.abs().max())


def test_vit_without_pooler_pools_the_class_token(without_pooler: Path) -> None:
    ref = reference(without_pooler, transformers.ViTModel, vit_config(), add_pooling_layer=False)
    model = lt.load(SOURCE, root="ViTModel", generics=GENERICS, weights=without_pooler)
    assert not any(name.startswith("pooler.") for name in model.state_dict())
    x = pixels(2, 2)
    last, pooled = model(x)
    with torch.no_grad():
        expected = ref(pixel_values=x)
    assert expected.pooler_output is None
    assert_close(last.detach(), expected.last_hidden_state, TOLERANCE, "last_hidden_state")
    assert_close(pooled.detach(), expected.last_hidden_state[:, 0], TOLERANCE, "class token")


@MODES
def test_vit_classifier_matches_transformers(classifier: Path, compile: bool) -> None:
    ref = reference(classifier, transformers.ViTForImageClassification, vit_config(labels=LABELS))
    model = lt.load(
        SOURCE,
        root="ViTForImageClassification",
        generics={**GENERICS, "Labels": LABELS},
        weights=classifier,
        compile=compile,
    )
    x = pixels(3, 3)
    logits = model(x).detach()
    with torch.no_grad():
        expected = ref(pixel_values=x).logits
    assert logits.shape == (3, LABELS)
    assert_close(logits, expected, TOLERANCE, "logits")
    assert torch.equal(logits.argmax(-1), expected.argmax(-1))


@pytest.mark.parametrize("kind", ["model", "classifier"])
def test_save_pretrained_folder_binds_through_hub_bindings(
    kind: str, with_pooler: Path, classifier: Path, tmp_path: Path
) -> None:
    if kind == "model":
        ref = reference(with_pooler, transformers.ViTModel, vit_config())
        root, generics, bindings = "ViTModel", GENERICS, "hub-bindings.json"
    else:
        config = vit_config(labels=LABELS)
        ref = reference(classifier, transformers.ViTForImageClassification, config)
        root, generics = "ViTForImageClassification", {**GENERICS, "Labels": LABELS}
        bindings = "hub-bindings-classifier.json"
    ref.save_pretrained(tmp_path)
    stored = read_weights(tmp_path / "model.safetensors")
    assert any(".attention.attention.query." in name for name in stored)  # the on-disk names
    with pytest.raises(LinnetError, match="missing"):
        lt.load(SOURCE, root=root, generics=generics, weights=tmp_path / "model.safetensors")
    model = lt.load(
        SOURCE,
        root=root,
        generics=generics,
        weights=tmp_path / "model.safetensors",
        bindings=EXAMPLE / bindings,
    )
    x = pixels(2, 4)
    with torch.no_grad():
        expected = ref(pixel_values=x)
    if kind == "model":
        last, pooled = model(x)
        assert_close(last.detach(), expected.last_hidden_state, TOLERANCE, "last_hidden_state")
        assert_close(pooled.detach(), expected.pooler_output, TOLERANCE, "pooler_output")
    else:
        assert_close(model(x).detach(), expected.logits, TOLERANCE, "logits")


def test_vit_rejects_images_of_another_size(with_pooler: Path) -> None:
    model = lt.load(SOURCE, root="ViTModel", generics=GENERICS, weights=with_pooler)
    side = GENERICS["Grid"] * GENERICS["Patch"] + 1
    with pytest.raises(LinnetError):
        model(torch.zeros(1, GENERICS["Channels"], side, side))


def test_weights_script_scales_are_not_degenerate(with_pooler: Path) -> None:
    arrays = read_weights(with_pooler)
    gains = arrays["layernorm.weight"]
    assert 0.5 < float(np.mean(gains)) < 1.5 and float(np.std(gains)) > 0.01
    assert float(np.std(arrays["embeddings.position_embeddings"])) > 0.5


@pytest.mark.slow
def test_vit_base_patch16_224_matches_transformers() -> None:
    """The full-size ViT-B/16 configuration (86M parameters, 197 tokens), transformers' init."""
    torch.manual_seed(0)
    ref = transformers.ViTModel(transformers.ViTConfig()).eval()
    generics = {"Channels": 3, "H": 768, "Heads": 12, "Inner": 3072, "Layers": 12}
    model = lt.load(
        SOURCE,
        root="ViTModel",
        generics={**generics, "Patch": 16, "Grid": 14},
        weights={name: t.detach() for name, t in ref.state_dict().items()},
        compile=True,
    )
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    last, pooled = model(x)
    with torch.no_grad():
        expected = ref(pixel_values=x)
    assert_close(last.detach(), expected.last_hidden_state, TOLERANCE, "last_hidden_state")
    assert_close(pooled.detach(), expected.pooler_output, TOLERANCE, "pooler_output")
