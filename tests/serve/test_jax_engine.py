"""`linnet.serve.Engine` over `linnet.jax.load_model` (`JaxDecoder`) against the torch backend.

On the tiny Llama example: the prefill logits of the two decoders agree, and
greedy and seeded generation give the torch engine's tokens (and transformers'
greedy `generate`) with the same log-probabilities; `copy_weights` takes JAX
arrays by path (a trainer's, which stay its own: the engine holds copies) and
`load_weights` a checkpoint. Prompts of at most 8 tokens and requests that
finish together keep XLA to a few compiled shapes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("jax")
pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

import decoder_cases  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import linnet.jax as lj  # noqa: E402
import linnet.torch as lt  # noqa: E402
from linnet.errors import LinnetError  # noqa: E402
from linnet.serve import Engine, Request  # noqa: E402

ROWS, MAX_SEQ = 4, 32
LENGTHS = [5, 8, 7, 3]


@pytest.fixture(scope="module")
def llama() -> decoder_cases.Decoder:
    return decoder_cases.llama()


@pytest.fixture(scope="module")
def jax_engine(llama: decoder_cases.Decoder) -> Engine:
    model = lj.load_model(llama.source, generics=llama.generics(ROWS, MAX_SEQ),
                          weights=llama.weights)  # fmt: skip
    return Engine(model)


def torch_engine(decoder: decoder_cases.Decoder) -> Engine:
    model = lt.load(decoder.source, generics=decoder.generics(ROWS, MAX_SEQ),
                    weights=decoder.weights)  # fmt: skip
    return Engine(model)


def test_prefill_logits_equal_torch(llama: decoder_cases.Decoder, jax_engine: Engine) -> None:
    assert jax_engine.decoder.description.startswith("JAX on") and jax_engine.decoder.slotted
    prompts = decoder_cases.prompts(llama.vocab, LENGTHS, seed=2)
    tokens = np.zeros((ROWS, 8), np.int32)
    for i, p in enumerate(prompts):
        tokens[i, : len(p)] = p
    slots = np.arange(ROWS, dtype=np.int32)
    lengths = np.array([len(p) for p in prompts], np.int32)
    ours = np.asarray(jax_engine.decoder.prefill(tokens, slots, lengths))
    theirs = torch_engine(llama).decoder.prefill(tokens, slots, lengths).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
    for i, p in enumerate(prompts):  # and transformers' last-position logits
        np.testing.assert_allclose(ours[i], llama.logits(p)[-1], rtol=1e-4, atol=1e-4)
    jax_engine.reset()


def test_greedy_and_seeded_generation_equal_torch(
    llama: decoder_cases.Decoder, jax_engine: Engine
) -> None:
    prompts = decoder_cases.prompts(llama.vocab, LENGTHS, seed=3)
    on_torch = torch_engine(llama)
    for options in ({"temperature": 0.0}, {"temperature": 0.9, "top_k": 20, "top_p": 0.9}):
        requests = [
            Request(p, max_new_tokens=8, seed=50 + i, logprobs=3, **options)  # type: ignore[arg-type]
            for i, p in enumerate(prompts)
        ]
        ours, stats = jax_engine.run(requests)
        theirs, _ = on_torch.run(requests)
        assert [c.tokens for c in ours] == [c.tokens for c in theirs]
        for a, b in zip(ours, theirs, strict=True):
            assert a.logprobs is not None and b.logprobs is not None
            for x, y in zip(a.logprobs, b.logprobs, strict=True):
                assert x.token == y.token and abs(x.logprob - y.logprob) < 1e-5
                assert [t for t, _ in x.top] == [t for t, _ in y.top]
                np.testing.assert_allclose([v for _, v in x.top], [v for _, v in y.top], atol=1e-5)
        if options["temperature"] == 0.0:
            assert [c.tokens for c in ours] == [llama.generate(p, 8) for p in prompts]
    assert stats.completed == 2 * len(prompts) and stats.generated_tokens == 16 * len(prompts)


def test_copy_and_load_weights(llama: decoder_cases.Decoder, jax_engine: Engine) -> None:
    other = decoder_cases.llama(seed=1)
    prompts = decoder_cases.prompts(llama.vocab, LENGTHS, seed=4)
    greedy = [Request(p, max_new_tokens=6, temperature=0) for p in prompts]
    mine: dict[str, Any] = {k: jnp.asarray(v) for k, v in other.weights.items()}
    jax_engine.copy_weights(mine)
    for value in mine.values():
        value.delete()  # a trainer donating its arrays to its next step leaves the engine's
    after, _ = jax_engine.run(greedy)
    assert [c.tokens for c in after] == [other.generate(p, 6) for p in prompts]
    jax_engine.load_weights(llama.weights)
    again, _ = jax_engine.run(greedy)
    assert [c.tokens for c in again] == [llama.generate(p, 6) for p in prompts]
    assert [c.tokens for c in again] != [c.tokens for c in after]
    with pytest.raises(LinnetError, match=r"`lm_head\.weight` has shape"):
        jax_engine.copy_weights({"lm_head.weight": np.zeros((3, 3), np.float32)})
    with pytest.raises(LinnetError, match=r"no weight at `nowhere`"):
        jax_engine.copy_weights({"nowhere": torch.zeros(3)})
