"""Weights for a checked and bound program: source -> check -> bind -> bind_model_weights.

The Tower of language.md 12.4 (with an optional bias per stage and a state
member) is checked, bound with concrete generics, and given checkpoints
written by `safetensors.torch`; which optional params and subs come out
present must agree with `BoundModel`'s own presence rules (12.8).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import safetensors.torch
import torch

from linnet.errors import LinnetError
from linnet.ir.bind import BoundModel, bind
from linnet.pipeline import check_source
from linnet.weights import (
    TensorSpec,
    bind_model_weights,
    bind_weights,
    require_no_weights,
    specs_from_model,
)

TOWER = """\
module examples.tower

pub block Scale<H: Dim> {
    param gain: Tensor[H; f32]
    param bias: Tensor[H; f32]? = none

    pub fn forward<B: Dim>(x: Tensor[B, H; f32]) -> Tensor[B, H; f32] {
        let y = x * gain
        return match bias {
            some(b) => y + b
            none => y
        }
    }
}

pub block Tower<H: Dim, Depth: Dim> {
    sub stem: Scale<H>
    sub stages: [Scale<H>; Depth]
    sub extra: Scale<H>? = none
    state count: Tensor[1; i64]

    pub entry forward<B: Dim>(x: Tensor[B, H; f32]) -> Tensor[B, H; f32] {
        var y = stem.forward(x)
        static for stage in stages {
            y = stage.forward(y)
        }
        count = count + 1
        return match extra {
            some(last) => last.forward(y)
            none => y
        }
    }
}
"""


@pytest.fixture(scope="module")
def model() -> BoundModel:
    checked = check_source(TOWER, "tower.linnet")
    assert not checked.has_errors, checked.diagnostics
    return bind(checked, generics={"H": 4, "Depth": 2})


def test_specs_from_model(model: BoundModel) -> None:
    specs = specs_from_model(model)
    assert "count" not in specs  # state has no payload (12.6)
    assert specs["stages.1.gain"] == TensorSpec((4,), "f32")
    assert specs["stem.bias"] == TensorSpec((4,), "f32", optional=True)
    assert specs["extra.gain"] == TensorSpec((4,), "f32", group="extra")
    assert specs["extra.bias"] == TensorSpec((4,), "f32", optional=True, group="extra")


def _save(path: Path, names: list[str]) -> dict[str, torch.Tensor]:
    tensors = {n: torch.full((4,), float(i)) for i, n in enumerate(names)}
    safetensors.torch.save_file(tensors, str(path))
    return tensors


@pytest.mark.parametrize(
    "names",
    [
        ["stem.gain", "stages.0.gain", "stages.1.gain"],
        ["stem.gain", "stem.bias", "stages.0.gain", "stages.1.gain", "stages.1.bias"],
        ["stem.gain", "stages.0.gain", "stages.1.gain", "extra.gain"],
        ["stem.gain", "stages.0.gain", "stages.1.gain", "extra.gain", "extra.bias"],
    ],
)
def test_presence_agrees_with_the_bound_model(
    model: BoundModel, tmp_path: Path, names: list[str]
) -> None:
    stored = _save(tmp_path / "tower.safetensors", names)
    bound = bind_model_weights(model, tmp_path / "tower.safetensors")
    available = set(bound.arrays)
    assert available == set(names) == model.present_paths(available)
    assert bound.sub_present("extra") == model.sub_present("extra", available)
    assert bound.present == {n for n in names if n.endswith("bias") or n.startswith("extra")}
    for name in names:
        np.testing.assert_array_equal(bound.arrays[name], stored[name].numpy())


def test_mismatches_name_paths_for_the_bound_generics(model: BoundModel, tmp_path: Path) -> None:
    path = tmp_path / "wide.safetensors"
    safetensors.torch.save_file(
        {"stem.gain": torch.ones(5), "stages.0.gain": torch.ones(4), "extra.bias": torch.ones(4)},
        str(path),
    )
    with pytest.raises(LinnetError) as info:
        bind_model_weights(model, path)
    message = str(info.value)
    assert "(3 problems)" in message
    assert "wrong shape: `stem.gain`" in message and "stored [5], declared [4]" in message
    assert "missing: `stages.1.gain` (checkpoint name `stages.1.gain`)" in message
    assert "incomplete optional sub `extra`: `extra.gain`" in message


def test_a_stored_scalar_binds_a_declared_single_element_tensor() -> None:
    """Linnet has no rank-0 tensors; a 0-d checkpoint tensor binds `Tensor[1; T]`."""
    specs = {"scale": TensorSpec((1,), "f32"), "bias": TensorSpec((2,), "f32")}
    bound = bind_weights(
        specs, {"scale": np.float32(2.5).reshape(()), "bias": np.ones(2, np.float32)}
    )
    assert bound.arrays["scale"].shape == (1,) and float(bound.arrays["scale"][0]) == 2.5
    with pytest.raises(LinnetError, match=r"wrong shape: `bias`.*stored \[\], declared \[2\]"):
        bind_weights(specs, {"scale": np.ones(1, np.float32), "bias": np.float32(1).reshape(())})


def test_running_without_weights_names_the_paths_a_checkpoint_must_give(
    model: BoundModel,
) -> None:
    with pytest.raises(LinnetError, match=r"needs `stem\.gain`.*arrays by path\), or zeros$"):
        require_no_weights(model, ", or zeros")
    source = (
        "module m\npub block R {\n    pub entry f(x: f32) -> f32 {\n        return x\n    }\n}\n"
    )
    require_no_weights(bind(check_source(source), generics={}))  # nothing mandatory
