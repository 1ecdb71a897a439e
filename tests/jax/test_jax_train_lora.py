"""`linnet.jax.train` LoRA against `linnet.train` LoRA (PyTorch) on the Llama example.

`add_lora(..., seed=s)` draws the adapters PyTorch's `add_lora` draws after
`torch.manual_seed(s)`, bit for bit; both write the same PEFT files, which
each side loads; 20 SFT steps (4 outside `make test-slow`) of the q/v
adapters give PyTorch's losses to 1e-5 relative and its adapters; merging
folds them into the weights; bad targets are refused by name.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import optax
import pytest
import torch
from decoder_cases import llama
from jax_train_support import examples, torch_model

import linnet.jax as lj
from linnet.errors import LinnetError
from linnet.jax.train import add_lora, load_lora, merge_lora, pack, save_lora, train
from linnet.train import add_lora as torch_add_lora
from linnet.train import load_lora as torch_load_lora
from linnet.train import save_lora as torch_save_lora
from linnet.train import train as torch_train
from linnet.weights.safetensors import read_safetensors

PATTERNS = ["*.q_proj.weight", "*.v_proj.weight"]
STEPS = [pytest.param(4, id="4-steps"), pytest.param(20, id="20-steps", marks=pytest.mark.slow)]


def jax_model() -> lj.LinnetJaxFunction:
    decoder = llama()
    return lj.load_source(
        decoder.source, generics=decoder.generics(1, 16), weights=decoder.weights, entry="forward"
    )


def torch_lora(seed: int) -> torch.nn.Module:
    model = torch_model(llama())
    torch.manual_seed(seed)
    torch_add_lora(model, PATTERNS, rank=4, alpha=8)
    return model


def test_initialisation_and_peft_files_equal_pytorch(tmp_path: Path) -> None:
    ours = add_lora(jax_model(), PATTERNS, rank=4, alpha=8, seed=5)
    theirs = torch_lora(5)
    expected = {n: p.detach().numpy() for n, p in theirs.named_parameters() if p.requires_grad}
    assert sorted(ours.arrays()) == sorted(expected)
    for name, value in expected.items():
        np.testing.assert_array_equal(np.asarray(ours.arrays()[name]), value, err_msg=name)
    save_lora(ours, tmp_path / "jax", task_type="CAUSAL_LM")
    torch_save_lora(theirs, tmp_path / "torch", task_type="CAUSAL_LM")
    config = json.loads((tmp_path / "jax" / "adapter_config.json").read_text())
    assert config == json.loads((tmp_path / "torch" / "adapter_config.json").read_text())
    ours_files = read_safetensors(tmp_path / "jax" / "adapter_model.safetensors")
    theirs_files = read_safetensors(tmp_path / "torch" / "adapter_model.safetensors")
    assert sorted(ours_files) == sorted(theirs_files)
    for key, value in theirs_files.items():
        np.testing.assert_array_equal(ours_files[key], value, err_msg=key)
    again = load_lora(jax_model(), tmp_path / "torch")
    for name, value in ours.arrays().items():
        np.testing.assert_array_equal(np.asarray(again.arrays()[name]), np.asarray(value))


@pytest.mark.parametrize("steps", STEPS)
def test_lora_sft_equals_pytorch(steps: int, tmp_path: Path) -> None:
    decoder = llama()
    batches = list(pack(examples(decoder.vocab, 80, seed=11), 32))
    model = add_lora(jax_model(), PATTERNS, rank=4, alpha=8, seed=1)
    params, history = train(
        model, batches, optimizer=optax.adamw(1e-2, weight_decay=0.01), steps=steps
    )
    theirs = torch_lora(1)
    trained = [p for p in theirs.parameters() if p.requires_grad]
    expected = torch_train(
        theirs,
        batches,
        optimizer=torch.optim.AdamW(trained, lr=1e-2, weight_decay=0.01),
        steps=steps,
    )
    assert history.losses == pytest.approx(expected.losses, rel=1e-5)
    for name, value in theirs.named_parameters():
        np.testing.assert_allclose(
            np.asarray(params[name]), value.detach().numpy(), rtol=1e-4, atol=1e-6, err_msg=name
        )
    frozen = model.parameters["model.layers.0.self_attn.q_proj.weight"]
    assert params["model.layers.0.self_attn.q_proj.weight"] is not None
    np.testing.assert_array_equal(
        np.asarray(params["model.layers.0.self_attn.q_proj.weight"]), np.asarray(frozen)
    )
    # the trained adapters, written by JAX, loaded by PyTorch, give its logits
    save_lora(model, tmp_path / "trained", params)
    loaded = torch_model(decoder)
    torch_load_lora(loaded, tmp_path / "trained")
    tokens = np.array([[1, 5, 9, 2, 7, 3]], np.int32)
    merged = merge_lora(model, params)
    logits = np.asarray(jax_model().apply(merged, tokens))
    with torch.no_grad():
        np.testing.assert_allclose(
            logits, loaded(torch.from_numpy(tokens)).numpy(), rtol=1e-4, atol=1e-4
        )


def test_bad_targets_are_refused() -> None:
    model = jax_model()
    with pytest.raises(LinnetError, match="no parameter path matches"):
        add_lora(model, "*.nothing")
    with pytest.raises(LinnetError, match="LoRA adapts 2-D weights only"):
        add_lora(model, "model.norm.weight")
    with pytest.raises(LinnetError, match="already has a LoRA adapter"):
        add_lora(add_lora(model, PATTERNS), "*.q_proj.weight")
    with pytest.raises(LinnetError, match="no LoRA adapter"):
        merge_lora(model)  # type: ignore[arg-type]
