"""`linnet.train.train` against transformers trained on the same sequences, and accumulation.

20 AdamW steps (4 outside `make test-slow`) of the Llama and GPT-2 examples (2 layers, H = 32, seeded
weights shared with `LlamaForCausalLM` / `GPT2LMHeadModel`, tests/decoder_cases.py)
over packed batches; the transformers twin trains on the same examples one by
one with its own loss (train_support.reference_step). The losses agree to
1e-5 relative at every step, and so do the parameters at the end.
"""

from __future__ import annotations

import pytest
import torch
from decoder_cases import Decoder, gpt2, llama
from train_support import (
    assert_same_parameters,
    examples,
    linnet_model,
    reference_model,
    reference_step,
)

from linnet.train import pack, train

STEPS = [pytest.param(4, id="4-steps"), pytest.param(20, id="20-steps", marks=pytest.mark.slow)]


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def decoder(request: pytest.FixtureRequest) -> Decoder:
    return llama() if request.param == "llama" else gpt2()


def adamw(parameters: object) -> torch.optim.AdamW:
    return torch.optim.AdamW(parameters, lr=3e-3, weight_decay=0.01)  # type: ignore[arg-type]


@pytest.mark.parametrize("steps", STEPS)
def test_sft_equals_transformers(decoder: Decoder, steps: int) -> None:
    batches = list(pack(examples(decoder.vocab, 80, seed=11), 32))
    assert len(batches) >= steps
    model = linnet_model(decoder)
    history = train(model, batches, optimizer=adamw(model.parameters()), steps=steps, clip=1.0)
    assert [s.step for s in history.steps] == list(range(1, steps + 1))
    reference = reference_model(decoder)
    optimizer = adamw(reference.parameters())
    expected = [reference_step(reference, optimizer, [b]) for b in batches[:steps]]
    assert history.losses == pytest.approx(expected, rel=1e-5)
    assert [s.learned for s in history.steps] == [b.learned for b in batches[:steps]]
    assert_same_parameters(model, reference)


def test_accumulating_half_batches_equals_one_whole_batch() -> None:
    """accumulate=2 over two 16-token batches equals one step over them packed in 32."""
    decoder = llama()
    data = examples(decoder.vocab, 12, seed=12, longest=8)
    wholes, halves = [], []
    for start in range(0, 12, 4):
        first, second = data[start : start + 2], data[start + 2 : start + 4]
        wholes.extend(pack(first + second, 32))
        halves.extend([*pack(first, 16), *pack(second, 16)])
    assert len(wholes) == 3 and len(halves) == 6
    one = linnet_model(decoder)
    whole = train(one, wholes, optimizer=adamw(one.parameters()))
    two = linnet_model(decoder)
    accumulated = train(two, halves, optimizer=adamw(two.parameters()), accumulate=2)
    assert len(whole) == len(accumulated) == 3
    assert accumulated.losses == pytest.approx(whole.losses, rel=1e-5)
    for (name, a), (_, b) in zip(one.named_parameters(), two.named_parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")
