"""The training entries of the decoder examples against transformers, sequence by sequence.

`hidden_packed`, `log_probs_packed` and `loss_packed` take several sequences
packed end to end (with a padding segment after them); the reference runs
each sequence alone through the transformers twin (tests/decoder_cases.py for
Llama and GPT-2, tests/family_support.py for Qwen2, Qwen3 and Phi-3),
so equality shows that attention never crosses a sequence, that positions
restart with each one, and that the loss is the weighted sum of the
per-token cross entropies.
"""

from __future__ import annotations

from typing import Any

import family_support
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from decoder_cases import Decoder, gpt2, llama

import linnet.torch as lt

LENGTHS = [5, 1, 7, 3]
PADDING = 4


@pytest.fixture(scope="module", params=["llama", "gpt2", "qwen2", "qwen3", "phi3"])
def decoder(request: pytest.FixtureRequest) -> Decoder:
    if request.param == "llama":
        return llama()
    if request.param == "gpt2":
        return gpt2()
    family = str(request.param)
    model = family_support.hf_model(family)
    weights = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    sizes = {k: v for k, v in family_support.generics(family).items() if k != "MaxSeq"}
    return Decoder(family, family_support.source(family), sizes, weights, model)


def packed(vocab: int) -> tuple[list[np.ndarray[Any, Any]], list[torch.Tensor]]:
    """Sequences and the packed inputs: tokens, positions, segments, targets, weights."""
    rng = np.random.default_rng(7)
    sequences = [rng.integers(0, vocab, n).astype(np.int64) for n in LENGTHS]
    tokens, positions, segments, targets, weights = [], [], [], [], []
    for index, seq in enumerate(sequences):
        tokens.append(seq)
        positions.append(np.arange(len(seq)))
        segments.append(np.full(len(seq), index))
        targets.append(np.append(seq[1:], 0))
        weights.append(np.append(rng.uniform(0.5, 2.0, len(seq) - 1), 0.0))
    pad = np.zeros(PADDING, np.int64)
    columns = [
        np.concatenate([*tokens, pad]).astype(np.int32),
        np.concatenate([*positions, pad]).astype(np.int32),
        np.concatenate([*segments, pad + len(sequences)]).astype(np.int32),
        np.concatenate([*targets, pad]).astype(np.int64),
        np.concatenate([*weights, pad]).astype(np.float32),
    ]
    return sequences, [torch.from_numpy(c) for c in columns]


def reference(decoder: Decoder, sequences: list[np.ndarray[Any, Any]]) -> list[torch.Tensor]:
    """transformers' final hidden states and log-softmax, one sequence at a time."""
    hidden, log_probs = [], []
    with torch.no_grad():
        for seq in sequences:
            ids = torch.from_numpy(seq)[None]
            hidden.append(decoder.reference.base_model(ids).last_hidden_state[0])
            log_probs.append(F.log_softmax(decoder.reference(ids).logits[0].double(), dim=-1))
    return [torch.cat(hidden), torch.cat(log_probs)]


@pytest.mark.parametrize("compile", [False, True])
def test_packed_entries_equal_each_sequence_alone(decoder: Decoder, compile: bool) -> None:
    sequences, inputs = packed(decoder.vocab)
    targets, weights = inputs[3], inputs[4]
    model = lt.load(
        decoder.source, generics=decoder.generics(1, 16), weights=decoder.weights, compile=compile
    )
    hidden, log_probs = reference(decoder, sequences)
    real = len(hidden)
    ours_hidden = model.run_entry("hidden_packed", inputs[:3])
    assert isinstance(ours_hidden, torch.Tensor)
    torch.testing.assert_close(ours_hidden[:real], hidden, rtol=1e-5, atol=1e-5)
    picked = log_probs.gather(1, targets[:real, None]).squeeze(1)
    ours_lp = model.run_entry("log_probs_packed", inputs[:4])
    assert isinstance(ours_lp, torch.Tensor) and ours_lp.dtype == torch.float32
    torch.testing.assert_close(ours_lp[:real].double(), picked, rtol=1e-5, atol=1e-5)
    expected = -(picked * weights[:real].double()).sum()
    loss = model.run_entry("loss_packed", inputs)
    assert isinstance(loss, torch.Tensor) and loss.shape == ()
    assert float(loss) == pytest.approx(float(expected), rel=1e-5)
    if compile:
        assert "chunked_loss.linear_cross_entropy" in model.generated_source("loss_packed")
