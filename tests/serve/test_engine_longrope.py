"""`linnet.serve.Engine` on the Phi-3 example with longrope, against transformers' `generate`.

transformers rotates every position of a call with the long factors once the
call's last position + 1 exceeds `original_max_position_embeddings` (16 here),
and `generate` recomputes the whole sequence once when it first grows past that
length (the keys cached before were rotated with the short factors). Requests
whose prompts end on both sides of the switch, more of them than cache rows,
must give each the greedy tokens and the log-probabilities of `generate` on that
prompt alone, on `linnet.torch` (`decode_slots`, and `decode_rows`) and ONNX
Runtime (`decode_rows`, where a row prefilled again must not be written by the
step's decode). Without the recomputation the log-probabilities past the switch
differ, so the comparison can fail.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import family_support as fs  # noqa: E402

import linnet.torch as lt  # noqa: E402
from linnet.onnx.runtime.model import load_model  # noqa: E402
from linnet.serve import Completion, Engine, Request  # noqa: E402

Array = np.ndarray[Any, Any]
ROWS, MAX_SEQ = 3, 40
NEW_TOKENS = 12
# prompts ending before the switch (recomputed once while decoding), at it, and past it
LENGTHS = [6, 15, 16, 17, 9, 22]
GENERICS: dict[str, object] = {
    **fs.generics("phi3", batch=ROWS),
    "MaxSeq": MAX_SEQ,
    "RopeOriginalMaxSeq": fs.LONGROPE_ORIGINAL,
    "RopeMaxPositions": fs.LONGROPE_POSITIONS,
}


@pytest.fixture(scope="module")
def reference() -> Any:
    return fs.phi3_longrope_model(seed=1)


@pytest.fixture(scope="module")
def weights(reference: Any) -> dict[str, Any]:
    factors = np.asarray([fs.LONGROPE_SHORT, fs.LONGROPE_LONG], dtype=np.float32)
    arrays = {k: v.detach().numpy().copy() for k, v in reference.state_dict().items()}
    return {**arrays, "rope_factors": factors}


@pytest.fixture(scope="module")
def prompts() -> list[Array]:
    return [fs.tokens_of((n,), seed=10 + n) for n in LENGTHS]


@pytest.fixture(scope="module")
def expected(reference: Any, prompts: list[Array]) -> list[tuple[list[int], Array]]:
    """Per prompt alone: `generate`'s greedy tokens and the log-softmax of its logits."""
    found = []
    for prompt in prompts:
        ids = torch.from_numpy(prompt.astype(np.int64))[None]
        with torch.no_grad():
            out = reference.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                     max_new_tokens=NEW_TOKENS, output_logits=True,
                                     return_dict_in_generate=True)  # fmt: skip
        tokens = out.sequences[0, len(prompt) :].tolist()
        logits = torch.stack([step[0] for step in out.logits])
        found.append((tokens, torch.log_softmax(logits.float(), dim=-1).numpy()))
    return found


def torch_engine(weights: dict[str, Any]) -> Engine:
    tensors = {k: torch.from_numpy(v) for k, v in weights.items()}
    return Engine(lt.load(fs.source("phi3"), generics=GENERICS, weights=tensors, compile=True))


def onnx_engine(weights: dict[str, Any]) -> Engine:
    return Engine(load_model(fs.source("phi3"), generics=GENERICS, weights=weights))


def jax_engine(weights: dict[str, Any]) -> Engine:
    import linnet.jax

    model = linnet.jax.load_model(fs.source("phi3"), generics=GENERICS, weights=weights)
    return Engine(model)


def make_engine(backend: str, weights: dict[str, Any]) -> Engine:
    if backend == "onnx":
        return onnx_engine(weights)
    if backend == "jax":
        return jax_engine(weights)
    return torch_engine(weights)


def serve(engine: Engine, prompts: list[Array]) -> list[Completion]:
    requests = [Request(p, max_new_tokens=NEW_TOKENS, temperature=0, logprobs=0) for p in prompts]
    completions, _ = engine.run(requests)
    return completions


def chosen_logprobs(completion: Completion) -> Array:
    assert completion.logprobs is not None
    return np.array([entry.logprob for entry in completion.logprobs])


@pytest.mark.parametrize("backend", ["torch", "torch/decode_rows", "onnx", "jax"])
def test_requests_crossing_the_switch_equal_generate_alone(
    backend: str,
    weights: dict[str, Any],
    prompts: list[Array],
    expected: list[tuple[list[int], Array]],
) -> None:
    engine = make_engine(backend, weights)
    assert engine.recompute_at == fs.LONGROPE_ORIGINAL + 1
    assert engine.decoder.slotted  # every backend decodes the busy rows only
    if backend == "torch/decode_rows":
        engine.decoder.slotted = False  # every row each step (decode_rows)
    completions = serve(engine, prompts)
    distinct: set[int] = set()
    for prompt, completion, (tokens, logprobs) in zip(prompts, completions, expected, strict=True):
        assert completion.tokens == tokens, f"prompt of {len(prompt)} tokens"
        want = logprobs[np.arange(NEW_TOKENS), tokens]
        gap = float(np.abs(chosen_logprobs(completion) - want).max())
        assert gap <= 1e-4, f"prompt of {len(prompt)}: max |logprob difference| {gap:.2e}"
        distinct |= set(tokens)
    assert len(distinct) >= 6, "a degenerate reference proves little"
    # every prompt of at most 16 tokens reached 17 while decoding; 17 and 22 began past it
    assert engine.stats.recomputed == sum(n <= fs.LONGROPE_ORIGINAL for n in LENGTHS)


def test_without_the_recomputation_the_sequences_past_the_switch_differ(
    weights: dict[str, Any],
    prompts: list[Array],
    expected: list[tuple[list[int], Array]],
) -> None:
    """The same engine told not to recompute keeps short-factor keys in the cache: its
    log-probabilities after the switch leave transformers', so the test above can fail."""
    engine = torch_engine(weights)
    engine.recompute_at = None
    completions = serve(engine, prompts[:1])
    tokens, logprobs = expected[0]
    got = chosen_logprobs(completions[0])
    cross = fs.LONGROPE_ORIGINAL + 1 - len(prompts[0])  # the first step past the switch
    steps = min(len(completions[0].tokens), NEW_TOKENS)
    same = [t == u for t, u in zip(completions[0].tokens[:cross], tokens[:cross], strict=True)]
    assert all(same)  # before the switch nothing changes
    want = logprobs[np.arange(steps), completions[0].tokens[:steps]]
    assert float(np.abs(got[:cross] - want[:cross]).max()) <= 1e-4
    if completions[0].tokens[cross] == tokens[cross]:
        assert float(np.abs(got[cross] - want[cross])) > 1e-3
    else:
        assert completions[0].tokens != tokens
    assert engine.stats.recomputed == 0
