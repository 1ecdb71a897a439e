"""`linnet.jax.train.train` against `linnet.train.train` (PyTorch) on the same data.

20 AdamW steps (4 outside `make test-slow`) of the Llama example (tests/decoder_cases.py,
2 layers, H = 32, f32) over packed batches: the JAX run (optax's adamw, one
jitted step) and the PyTorch run (torch's AdamW) give the same losses to
1e-5 relative at every step and the same parameters at the end (the GPT-2
example too, a slow check). On a one-layer Llama: a head tied to the
embedding by bindings trains as one parameter, as on PyTorch;
accumulation equals whole batches, `trainable` globs freeze the rest, and
bf16 weights train through f32 masters.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch
from decoder_cases import Decoder, gpt2, llama
from jax_train_support import (
    LLAMA,
    examples,
    small_batches,
    small_examples,
    small_generics,
    small_model,
    small_weights,
    torch_model,
)

import linnet.jax as lj
from linnet.errors import LinnetError
from linnet.jax.train import pack, train
from linnet.jax.train.loop import FIELDS
from linnet.train import train as torch_train

STEPS = [pytest.param(4, id="4-steps"), pytest.param(20, id="20-steps", marks=pytest.mark.slow)]


def jax_model(decoder: Decoder) -> Any:
    return lj.load_source(
        decoder.source, generics=decoder.generics(1, 16), weights=decoder.weights, entry="forward"
    )


def compare(decoder: Decoder, steps: int) -> dict[str, Any]:
    batches = list(pack(examples(decoder.vocab, 80, seed=11), 32))
    params, history = train(
        jax_model(decoder), batches, optimizer=optax.adamw(3e-3, weight_decay=0.01), steps=steps
    )
    model = torch_model(decoder)
    expected = torch_train(
        model,
        batches,
        optimizer=torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01),
        steps=steps,
    )
    assert [s.step for s in history.steps] == list(range(1, steps + 1))
    assert history.losses == pytest.approx(expected.losses, rel=1e-5)
    assert [s.learned for s in history.steps] == [s.learned for s in expected.steps]
    norms = [s.grad_norm for s in history.steps]
    assert norms == pytest.approx([s.grad_norm for s in expected.steps], rel=1e-4)
    for name, value in model.named_parameters():
        ours, theirs = np.asarray(params[name]), value.detach().numpy()
        if name.endswith("attn.c_attn.bias"):
            # GPT-2's key biases have a zero gradient in exact arithmetic and rounding
            # noise in practice, which Adam turns into steps of either sign
            # (tests/train/train_support.assert_same_parameters); no loss depends on them
            width = ours.shape[0] // 3
            ours, theirs = (np.concatenate([a[:width], a[2 * width :]]) for a in (ours, theirs))
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5, err_msg=name)
    return params


@pytest.mark.parametrize("steps", STEPS)
def test_sft_equals_pytorch(steps: int) -> None:
    compare(llama(), steps)


@pytest.mark.slow
def test_gpt2_equals_pytorch() -> None:
    compare(gpt2(), 3)


@pytest.mark.slow
def test_tied_head_trains_as_one_parameter() -> None:
    """The Llama with `tied.bindings.json` (lm_head reads the embedding) against PyTorch."""
    import linnet.torch as lt

    weights = small_weights()
    del weights["lm_head.weight"]
    bindings = LLAMA.parent.parent / "tied.bindings.json"
    model = lj.load_source(LLAMA, generics=small_generics(), weights=weights, bindings=bindings)
    batches = small_batches()
    params, history = train(model, batches, optimizer=optax.adam(1e-2), steps=3)
    assert params["lm_head.weight"] is params["model.embed_tokens.weight"]
    theirs = lt.load(
        LLAMA, generics=small_generics(), weights=weights, bindings=bindings, trainable=True
    )
    optimizer = torch.optim.Adam(theirs.parameters(), lr=1e-2)
    expected = torch_train(theirs, batches, optimizer=optimizer, steps=3)
    assert history.losses == pytest.approx(expected.losses, rel=1e-5)
    np.testing.assert_allclose(
        np.asarray(params["model.embed_tokens.weight"]),
        theirs.tensor("lm_head.weight").detach().numpy(),
        rtol=1e-5,
        atol=1e-5,
    )


@pytest.mark.slow
def test_accumulating_half_batches_equals_whole_batches() -> None:
    """accumulate=2 over two 16-token batches (rematerialised but for the matmuls) equals
    one step over them packed in 32."""
    data = small_examples()
    wholes, halves = [], []
    for start in range(0, 12, 4):
        first, second = data[start : start + 2], data[start + 2 : start + 4]
        wholes.extend(pack(first + second, 32))
        halves.extend([*pack(first, 16), *pack(second, 16)])
    assert len(wholes) == 3 and len(halves) == 6
    model = small_model()
    one, whole = train(model, wholes, optimizer=optax.adam(1e-2))
    policy = jax.checkpoint_policies.dots_with_no_batch_dims_saveable
    two, accumulated = train(model, halves, optimizer=optax.adam(1e-2), accumulate=2, remat=policy)
    assert len(whole) == len(accumulated) == 3
    assert accumulated.losses == pytest.approx(whole.losses, rel=1e-5)
    assert [s.learned for s in accumulated.steps] == [s.learned for s in whole.steps]
    for path, value in one.items():
        np.testing.assert_allclose(two[path], value, rtol=1e-5, atol=1e-5, err_msg=path)


def test_trainable_globs_freeze_the_rest_and_bf16_trains_in_f32() -> None:
    weights = small_weights()
    batches = small_batches()
    model = small_model(weights)
    params, history = train(
        model, batches, optimizer=optax.sgd(0.1), steps=2, trainable="*norm.weight"
    )
    for path, start in weights.items():
        moved = not np.array_equal(np.asarray(params[path]), start)
        assert moved == path.endswith("norm.weight"), path
    params16, history16 = train(
        small_model(weights, dtype="bf16"),
        batches,
        optimizer=optax.sgd(0.1),
        steps=2,
        trainable="*norm.weight",
    )
    assert params16["model.norm.weight"].dtype == jnp.bfloat16
    assert history16.losses == pytest.approx(history.losses, rel=2e-2)


def test_bad_options_are_errors() -> None:
    model = small_model()
    with pytest.raises(LinnetError, match="matches no floating param"):
        train(model, small_batches(), optimizer=optax.sgd(0.1), trainable="*nothing*")
    with pytest.raises(LinnetError, match="accumulate must be >= 1"):
        train(model, small_batches(), optimizer=optax.sgd(0.1), accumulate=0)
    with pytest.raises(LinnetError, match="master must be"):
        train(model, small_batches(), optimizer=optax.sgd(0.1), master="f8")
    with pytest.raises(LinnetError, match="lacks"):
        train(model, small_batches(), optimizer=optax.sgd(0.1), parameters={"nope": 1.0})
    mixed = [small_batches(tokens=16)[0], small_batches(tokens=32)[0]]
    with pytest.raises(LinnetError, match="one length"):
        train(model, mixed, optimizer=optax.sgd(0.1), accumulate=2)
    with pytest.raises(LinnetError, match="checkpoint_every needs a checkpoint"):
        train(model, small_batches(), optimizer=optax.sgd(0.1), checkpoint_every=2)


def test_a_jax_model_trains_through_its_entries_source() -> None:
    """`load_model` (StableHLO entries) trains through the generated source of the same
    entries: its `loss_packed` as training runs it equals `load_source`'s."""
    from linnet.jax.train.model import as_trainable

    weights = small_weights()
    compiled = as_trainable(lj.load_model(LLAMA, generics=small_generics(), weights=weights))
    source = as_trainable(small_model(weights))
    assert sorted(compiled.parameters) == sorted(source.parameters)
    batch = small_batches()[0]
    inputs = [np.asarray(getattr(batch, f)) for f in FIELDS]
    with jax.enable_x64(True):
        ours = compiled.entry("loss_packed")(compiled.parameters, *inputs)
        expected = source.entry("loss_packed")(source.parameters, *inputs)
    assert float(ours) == pytest.approx(float(expected), rel=1e-6)
    with pytest.raises(LinnetError, match="no `nothing` entry"):
        compiled.entry("nothing")
