"""Per-layer rematerialisation (`linnet.jax.remat`, `train(..., remat=True)`).

The two-layer Llama example: its `loss_packed` source generated with each
layer under `jax.checkpoint` gives the loss and gradients of the plain source
(1e-6), the jaxpr of its gradient holds one `checkpoint` equation per layer
(the whole-loss `remat="loss"` one), and `train` steps with `remat=True`
give the losses and parameters of `remat=False`.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import optax  # type: ignore[import-untyped]
import pytest
from jax_train_support import LLAMA, SMALL, small_batches

import linnet.jax as lj
from linnet.errors import LinnetError
from linnet.jax.remat import LayerRemat, remat_layers
from linnet.jax.train import train
from linnet.jax.train.loop import DTYPES, FIELDS, compiled_step, stack, starting_point

GENERICS = {**SMALL, "Layers": 2, "Batch": 1, "MaxSeq": 16, "T": "f32"}


def two_layers() -> Any:
    from linnet.pipeline import load_model

    rng = np.random.default_rng(4)
    weights = {
        path: (rng.standard_normal(spec.type.shape) * 0.2).astype(np.float32)
        for path, spec in load_model(LLAMA, generics=GENERICS).tensors.items()
        if spec.kind == "param" and not spec.optional
    }
    return lj.load_source(LLAMA, generics=GENERICS, weights=weights, entry="loss_packed")


def checkpoints(jaxpr: Any) -> int:
    """`checkpoint` (remat) equations in `jaxpr` and the jaxprs nested in its equations."""
    count = 0
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name  # `remat2` in jax 0.4-0.7, `checkpoint` in some releases
        count += "remat" in name or name == "checkpoint"
        for value in eqn.params.values():
            for item in value if isinstance(value, tuple | list) else (value,):
                inner = getattr(item, "jaxpr", item)
                if hasattr(inner, "eqns"):
                    count += checkpoints(inner)
    return count


def test_each_layer_is_checkpointed_with_the_same_loss_and_gradients() -> None:
    model = two_layers()
    batch = small_batches()[0]
    inputs = [np.asarray(getattr(batch, f)).astype(d) for f, d in zip(FIELDS, DTYPES, strict=True)]
    params = dict(model.parameters)

    def loss(p: Any) -> Any:
        return model.apply(p, *inputs)

    with jax.enable_x64(True):
        plain, plain_grads = jax.value_and_grad(loss)(params)
        plain_count = checkpoints(jax.make_jaxpr(jax.grad(loss))(params).jaxpr)
        with remat_layers(LayerRemat()):
            value, grads = jax.value_and_grad(loss)(params)
            count = checkpoints(jax.make_jaxpr(jax.grad(loss))(params).jaxpr)
            source = model.generated_source()
        with remat_layers(LayerRemat(policy=jax.checkpoint_policies.dots_saveable)):
            kept = jax.value_and_grad(loss)(params)[0]
    assert plain_count == 0
    assert count == 2  # one per layer
    assert source.count("jax.checkpoint(layer_") == 2
    assert "def layer_0(" in source and "def layer_1(" in source
    np.testing.assert_allclose(float(value), float(plain), rtol=1e-6)
    np.testing.assert_allclose(float(kept), float(plain), rtol=1e-6)
    for path, grad in plain_grads.items():
        np.testing.assert_allclose(np.asarray(grads[path]), np.asarray(grad), rtol=1e-6, atol=1e-6)


def test_train_with_layer_remat_equals_train_without() -> None:
    model = two_layers()
    batches = small_batches(24, seed=6)[:4]
    options: dict[str, Any] = dict(optimizer=optax.adamw(1e-2), accumulate=2)
    plain, expected = train(model, batches, **options)
    layered, history = train(model, batches, remat=True, **options)
    np.testing.assert_allclose(history.losses, expected.losses, rtol=1e-6)
    for path, value in plain.items():
        np.testing.assert_allclose(
            np.asarray(layered[path]), np.asarray(value), rtol=1e-5, atol=1e-6
        )

    # The jitted step: one checkpoint per layer (the whole-loss mode: one in all).
    found, layout, trained = starting_point(model, None, True, "f32")
    stacked, learned, _ = stack(batches[:2], 2, 1, None)
    counts = []
    for remat in (True, "loss"):
        step = compiled_step(
            found.entry("loss_packed"), layout, optax.sgd(0.1), 1.0, remat, None, 1
        )
        args = (trained, optax.sgd(0.1).init(trained), dict(layout.frozen), stacked, learned)
        with jax.enable_x64(True):
            counts.append(checkpoints(jax.make_jaxpr(step)(*args).jaxpr))
    assert counts == [2, 1]


def test_an_unknown_remat_mode_is_refused() -> None:
    with pytest.raises(LinnetError, match="remat='layer' is not an option"):
        train(two_layers(), small_batches()[:1], optimizer=optax.sgd(0.1), remat="layer")
