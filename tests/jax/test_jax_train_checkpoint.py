"""`linnet.jax.train` checkpoints: exact resume, the files, and `save_weights`.

A run stopped after 2 steps and resumed to 4 gives the losses and parameters
of an uninterrupted 4-step run bit for bit (the optimizer state, its step
count and the data position come back); the folder holds the two latest
steps, each with `progress.json` written last; a wrong template is an error
naming the array. The one-layer Llama keeps the compiles short; the resume
compiles three runs' steps, a slow check (`make test-slow`).
"""

from __future__ import annotations

import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax_train_support import small_batches, small_model

from linnet.errors import LinnetError
from linnet.jax.train import load_checkpoint, save_weights, train
from linnet.weights.safetensors import read_safetensors


def optimizer() -> optax.GradientTransformation:
    schedule = optax.linear_schedule(1e-2, 1e-3, 4)
    return optax.inject_hyperparams(optax.adamw)(learning_rate=schedule, weight_decay=0.01)


@pytest.mark.slow
def test_resume_equals_an_uninterrupted_run(tmp_path: Path) -> None:
    model = small_model()
    batches = small_batches()
    whole, expected = train(model, batches, optimizer=optimizer(), steps=4, accumulate=2)
    folder = tmp_path / "run"
    train(
        model,
        batches,
        optimizer=optimizer(),
        steps=2,
        accumulate=2,
        checkpoint=folder,
        checkpoint_every=1,
    )
    assert sorted(p.name for p in folder.iterdir()) == ["step-00000001", "step-00000002"]
    record = json.loads((folder / "step-00000002" / "progress.json").read_text())
    assert record["step"] == 2 and record["batches"] == 4
    params, resumed = train(
        model, batches, optimizer=optimizer(), steps=4, accumulate=2, checkpoint=folder
    )
    assert resumed.losses == expected.losses
    assert [s.lr for s in resumed.steps] == pytest.approx([1e-2, 7.75e-3, 5.5e-3, 3.25e-3])
    for path, value in whole.items():
        np.testing.assert_array_equal(np.asarray(params[path]), np.asarray(value), err_msg=path)
    assert sorted(p.name for p in folder.iterdir()) == ["step-00000002", "step-00000004"]


def test_wrong_template_and_save_weights(tmp_path: Path) -> None:
    model = small_model()
    params, _ = train(
        model, small_batches(), optimizer=optax.sgd(0.1), steps=1, checkpoint=tmp_path / "c"
    )
    trained = {p: v for p, v in params.items() if p.endswith("norm.weight")}
    state = optax.sgd(0.1).init(trained)
    with pytest.raises(LinnetError, match="saved training"):
        load_checkpoint(tmp_path / "c", trained, state)
    with pytest.raises(LinnetError, match="holds no complete checkpoint"):
        load_checkpoint(tmp_path / "empty", trained, state)
    file = save_weights(params, tmp_path / "w.safetensors", dtype="bf16")
    stored = read_safetensors(file)
    assert sorted(stored) == sorted(params)
    head = stored["lm_head.weight"]
    assert head.dtype == jnp.bfloat16
    np.testing.assert_array_equal(head, np.asarray(params["lm_head.weight"]).astype(head.dtype))
    with pytest.raises(LinnetError, match="float dtype"):
        save_weights(params, tmp_path / "x.safetensors", dtype="i8")
