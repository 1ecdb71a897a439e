"""examples/01-llama on the JAX backend against transformers' `LlamaForCausalLM` (f32).

The reference and its weights are those of test_llama.py (a GQA Llama, random
seeded weights, eager attention). Through `linnet.jax.load` and `load_source`
the `forward` logits match within 1e-4 with identical argmax; through
`load_model` (StableHLO on XLA, caches donated) and `load_source` (state passed
explicitly) a prefill and 8 decode steps give the tokens of
`generate(do_sample=False, max_new_tokens=9)`, and the KV cache holds
transformers' keys and values. `jax.grad` of a loss through `load_source`
equals `torch.autograd` through `linnet.torch.load(..., trainable=True)` for
every parameter (1e-5 relative).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
jax = pytest.importorskip("jax")

from jax_backends import JaxModelBackend, JaxSourceBackend  # noqa: E402
from test_llama import (  # noqa: E402
    SIZES,
    SOURCE,
    assert_logits,
    demo,
    generics,
    hf_model,
    reference_logits,
    state_dict,
    tokens_of,
)

import linnet.jax as lj  # noqa: E402

NEW_TOKENS = 9  # the prefill's token, then 8 decode steps


@pytest.fixture(scope="module")
def reference() -> Any:
    return hf_model(SIZES)


def numpy_weights(model: Any) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in state_dict(model).items()}


@pytest.mark.parametrize("loader", ["load", "load_source"])
def test_forward_logits_match_transformers(reference: Any, loader: str) -> None:
    load = getattr(lj, loader)
    f = load(
        SOURCE, generics=generics(SIZES, batch=2, max_seq=32), weights=numpy_weights(reference)
    )
    tokens = tokens_of((3, 11), seed=1)
    assert_logits(np.asarray(f(tokens)), reference_logits(reference, tokens))


@pytest.fixture(scope="module")
def generated(reference: Any) -> tuple[np.ndarray, np.ndarray]:
    prompt = tokens_of((2, 6), seed=4)
    ids = torch.from_numpy(prompt.astype(np.int64))
    with torch.no_grad():
        out = reference.generate(
            ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=NEW_TOKENS
        )
    return prompt, out[:, 6:].numpy()


@pytest.mark.parametrize(
    "backend", ["load_model", pytest.param("load_source", marks=pytest.mark.slow)]
)
def test_prefill_and_decode_equal_generate(
    reference: Any, generated: tuple[np.ndarray, np.ndarray], backend: str
) -> None:
    config = generics(SIZES, batch=2, max_seq=32)
    weights = numpy_weights(reference)
    runner = (
        JaxModelBackend(SOURCE, config, weights)
        if backend == "load_model"
        else JaxSourceBackend(SOURCE, config, weights, entries=("prefill", "decode"))
    )
    prompt, expected = generated
    run = demo.greedy(runner, prompt, NEW_TOKENS, warm=False)
    np.testing.assert_array_equal(run.generated, expected)
    assert len(set(expected.ravel().tolist())) >= 4, "a degenerate reference proves little"
    history = np.concatenate([prompt, expected], axis=1)
    assert_logits(run.chosen_from, reference_logits(reference, history)[:, 5 : 5 + NEW_TOKENS])


def test_kv_cache_stays_on_the_device_and_is_updated_in_place(reference: Any) -> None:
    tokens = tokens_of((2, 7), seed=3)
    with torch.no_grad():
        cache = reference(torch.from_numpy(tokens.astype(np.int64)), use_cache=True).past_key_values
    model = lj.load_model(
        SOURCE, generics=generics(SIZES, batch=2, max_seq=32), weights=numpy_weights(reference)
    )
    model.run_entry("prefill", [tokens[:, :5], 0])
    before = model.state["model.layers.0.self_attn.k_cache"]
    model.run_entry("decode", [tokens[:, 5], 5])
    assert before.is_deleted(), "the cache was donated to the decode step"
    after = model.state["model.layers.0.self_attn.k_cache"]
    pointer = after.unsafe_buffer_pointer()
    model.run_entry("decode", [tokens[:, 6], 6])
    again = model.state["model.layers.0.self_attn.k_cache"]
    assert again.unsafe_buffer_pointer() == pointer, "XLA wrote the new cache into the old buffer"
    for i, layer in enumerate(cache.layers):
        for kind, stored in (("k", layer.keys), ("v", layer.values)):
            held = np.asarray(model.state[f"model.layers.{i}.self_attn.{kind}_cache"])
            assert held.shape == (2, 2, 32, 8)
            np.testing.assert_allclose(held[:, :, :7], stored.numpy(), rtol=1e-5, atol=1e-5)
            assert not held[:, :, 7:].any()
    model.reset_state()
    assert not np.asarray(model.state["model.layers.0.self_attn.k_cache"]).any()


def test_jax_grad_equals_torch_autograd(reference: Any) -> None:
    import jax.numpy as jnp

    import linnet.torch as lt

    config = generics(SIZES, batch=2, max_seq=16)
    weights = numpy_weights(reference)
    tokens = tokens_of((2, 9), seed=21)
    targets = tokens_of((2, 9), seed=22)

    def cross_entropy(logits: Any, xp: Any) -> Any:
        shifted = logits - xp.max(logits, axis=-1, keepdims=True)
        log_probs = shifted - xp.log(xp.sum(xp.exp(shifted), axis=-1, keepdims=True))
        picked = xp.take_along_axis(log_probs, xp.asarray(targets[..., None].astype(np.int64)), -1)
        return -xp.mean(picked)

    f = lj.load_source(SOURCE, generics=config, weights=weights)
    grads = jax.jit(jax.grad(lambda p: cross_entropy(f.apply(p, tokens), jnp)))(f.parameters)

    module = lt.load(SOURCE, generics=config, weights=weights, trainable=True)

    class TorchOps:
        max = staticmethod(lambda x, axis, keepdims: torch.amax(x, dim=axis, keepdim=keepdims))
        sum = staticmethod(lambda x, axis, keepdims: torch.sum(x, dim=axis, keepdim=keepdims))
        exp = staticmethod(torch.exp)
        log = staticmethod(torch.log)
        mean = staticmethod(torch.mean)
        asarray = staticmethod(torch.from_numpy)
        take_along_axis = staticmethod(torch.take_along_dim)

    loss = cross_entropy(module(torch.from_numpy(tokens)), TorchOps)
    loss.backward()
    expected = {name: p.grad.numpy() for name, p in module.named_parameters()}
    assert sorted(expected) == sorted(grads)
    for name, want in expected.items():
        got = np.asarray(grads[name])
        scale = float(np.abs(want).max())
        assert scale > 0, name
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * scale, err_msg=name)
