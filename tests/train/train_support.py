"""Shared pieces of the `linnet.train` tests: data, Linnet models and the transformers reference.

`reference_step` trains a transformers model the way `linnet.train.train`
defines a step, with transformers' own loss: the examples of each packed
batch become the rows of an ordinary right-padded batch with `labels`
(unlearned tokens and padding -100) and `num_items_in_batch` = the step's
learned positions, so transformers sums the token cross entropies and divides
by that count; the batches are back-propagated one by one, then the
gradients are clipped to norm 1 and the optimizer steps. Nothing of `linnet.train` but the `Batch` layout is used.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
from decoder_cases import Decoder

import linnet.torch as lt
from linnet.torch.module import LinnetModule
from linnet.train import Batch, Example


def examples(vocab: int, count: int, seed: int, longest: int = 12) -> list[Example]:
    """Random examples of 2..`longest` tokens; every third learns only its completion."""
    rng = np.random.default_rng(seed)
    found = []
    for index in range(count):
        tokens = rng.integers(0, vocab, int(rng.integers(2, longest + 1)))
        if index % 3 == 2:
            cut = int(rng.integers(1, len(tokens)))
            found.append(Example.prompted(tokens[:cut], tokens[cut:]))
        else:
            found.append(Example(tokens))
    return found


def linnet_model(decoder: Decoder, compile: bool = False) -> LinnetModule:
    return lt.load(
        decoder.source,
        generics=decoder.generics(1, 16),
        weights=decoder.weights,
        trainable=True,
        compile=compile,
    )


def reference_model(decoder: Decoder) -> Any:
    """A fresh copy of the transformers twin (training changes it)."""
    return copy.deepcopy(decoder.reference)


def reference_step(
    model: Any, optimizer: torch.optim.Optimizer, batches: list[Batch], clip: float = 1.0
) -> float:
    """One step over `batches` with transformers' loss (module docstring); the loss."""
    optimizer.zero_grad(set_to_none=True)
    learned = sum(b.learned for b in batches)
    total = 0.0
    for batch in batches:
        ids, labels, mask = padded(batch)
        out = model(ids, attention_mask=mask, labels=labels, num_items_in_batch=learned)
        out.loss.backward()
        total += float(out.loss.detach())
    torch.nn.utils.clip_grad_norm_(list(model.parameters()), clip)
    optimizer.step()
    return total


def padded(batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The batch's examples as rows of transformers inputs, right-padded: ids, labels
    (-100 for tokens not learned and for padding) and the attention mask. Causal
    attention keeps the padding on the right out of every real token's view, and
    positions count from 0 in each row."""
    rows = len(batch.spans)
    width = max(length for _, length in batch.spans)
    ids = torch.zeros(rows, width, dtype=torch.long)
    labels = torch.full((rows, width), -100, dtype=torch.long)
    mask = torch.zeros(rows, width, dtype=torch.long)
    for row, (start, length) in enumerate(batch.spans):
        tokens = batch.tokens[start : start + length].long()
        ids[row, :length] = tokens
        mask[row, :length] = 1
        # weights[p] says whether tokens[p + 1] is learned
        learned = batch.weights[start : start + length - 1] > 0
        labels[row, 1:length] = torch.where(learned, tokens[1:], -100)
    return ids, labels, mask


def assert_same_parameters(
    ours: LinnetModule, theirs: Any, rtol: float = 1e-5, atol: float = 1e-5
) -> None:
    """Every parameter of `ours` equals the transformers one of the same name, except
    GPT-2's key biases (`c_attn.bias[H:2H]`): a bias added to every key adds the same
    amount to all of a query's scores, which softmax ignores, so its gradient is 0 in
    exact arithmetic and rounding noise in practice, which Adam's normalised steps turn
    into changes of up to the learning rate in either model. Neither loss depends on them.
    """
    reference = dict(theirs.named_parameters())
    for name, value in ours.named_parameters():
        expected = reference[name]
        if name.endswith("attn.c_attn.bias"):
            width = value.shape[0] // 3
            value = torch.cat([value[:width], value[2 * width :]])
            expected = torch.cat([expected[:width], expected[2 * width :]])
        torch.testing.assert_close(value, expected, rtol=rtol, atol=atol, msg=name)
