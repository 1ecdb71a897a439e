"""Choosing the next token of every row: greedy, temperature, top-k, top-p, log-probs.

Stage: the engine's step after each model call (issue 14). In: the logits of
the rows that hold a request and each row's `Choice`. Out: the chosen token and,
when asked, its log-probability and the most likely alternatives.

Sampling is the Gumbel-max trick: among the tokens that top-k and top-p keep,
the argmax of `logits / temperature + g` with `g` standard Gumbel noise is a
sample of `softmax(logits / temperature)` restricted to them. The noise of a
request's step `n` comes from a Philox generator keyed by `(seed, n)` alone,
drawn on the host with NumPy (`gumbel_noise`): so a seeded request gets the
same tokens alone or in any batch, and the same noise on every backend. The
filtering, the argmax and the log-softmax run where the logits are: as torch
ops on the model's device for `linnet.torch` (`choose_torch`), in NumPy for
ONNX Runtime (`choose_numpy`, whose logits come back to the host anyway).

Log-probabilities are those of the model's own distribution (log-softmax of
the raw logits, before temperature and filtering), as OpenAI's API and vLLM
report them by default. They are computed only for the rows that ask: a greedy
batch pays for one argmax per row, never a softmax or a sort of the vocabulary
(the top alternatives come from a partition, `top_indices`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from linnet.serve.requests import TokenLogprob

if TYPE_CHECKING:
    import torch

Array = np.ndarray[Any, Any]
_MASK = (1 << 64) - 1


@dataclass(frozen=True)
class Choice:
    """How one row picks its token: `temperature` 0 is greedy; `noise` is the row's
    Gumbel noise `[Vocab]` (None when greedy); `logprobs` None or the top count."""

    temperature: float
    top_k: int
    top_p: float
    noise: Array | None
    logprobs: int | None


def gumbel_noise(seed: int, step: int, vocab: int) -> Array:
    """Standard Gumbel noise `[vocab]` (f32) for step `step` of a request seeded `seed`."""
    key = np.array([seed & _MASK, step & _MASK], dtype=np.uint64)
    uniform = np.random.Generator(np.random.Philox(key=key)).random(vocab, dtype=np.float32)
    uniform = np.maximum(uniform, np.finfo(np.float32).tiny)
    noise: Array = -np.log(-np.log(uniform))
    return noise


def _limits(choices: Sequence[Choice], vocab: int) -> tuple[Array, Array, Array, Array]:
    temperature = np.array([c.temperature or 1.0 for c in choices], np.float32)
    top_k = np.array([c.top_k if 0 < c.top_k < vocab else vocab for c in choices], np.int64)
    top_p = np.array([c.top_p for c in choices], np.float32)
    greedy = np.array([c.temperature == 0 for c in choices], bool)
    return temperature, top_k, top_p, greedy


def _noise(choices: Sequence[Choice], vocab: int) -> Array:
    rows = [c.noise if c.noise is not None else np.zeros(vocab, np.float32) for c in choices]
    return np.stack(rows).astype(np.float32)


def _results(
    choices: Sequence[Choice], tokens: Array, chosen: Array, top_ids: Array, top_values: Array
) -> list[tuple[int, TokenLogprob | None]]:
    out: list[tuple[int, TokenLogprob | None]] = []
    for i, choice in enumerate(choices):
        token = int(tokens[i])
        if choice.logprobs is None:
            out.append((token, None))
            continue
        top = tuple((int(top_ids[i, j]), float(top_values[i, j])) for j in range(choice.logprobs))
        out.append((token, TokenLogprob(token, float(chosen[i]), top)))
    return out


def top_indices(values: Array, count: int) -> Array:
    """The `count` largest entries' indices of each row of `values` `[R, V]`, largest first,
    ties by index: what a stable descending argsort's first `count` columns hold, found by
    partitioning instead of sorting the whole row."""
    rows, size = values.shape
    found = np.zeros((rows, count), np.int64)
    if count == 0:
        return found
    if count >= size:
        return np.argsort(-values, axis=1, kind="stable")[:, :count]
    # the count-th largest of each row; every index at or above it is a candidate
    kth = np.partition(values, size - count, axis=1)[:, size - count]
    for i in range(rows):
        candidates = np.flatnonzero(values[i] >= kth[i])
        order = np.lexsort((candidates, -values[i, candidates]))
        found[i] = candidates[order[:count]]
    return found


Logprobs = Callable[[list[int], int], tuple[Array, Array, Array]]
"""(the rows that ask, the top count) -> those rows' chosen-token log-probs `[A]`, top ids
`[A, top]` and top log-probs `[A, top]`, on the host."""


def _logprobs(compute: Logprobs, choices: Sequence[Choice]) -> tuple[Array, Array, Array]:
    """(chosen token's log-prob, top ids, top log-probs) of each row, computed only for the
    rows that ask (`Choice.logprobs`); zeros elsewhere, which `_results` never reads."""
    rows = len(choices)
    asked = [i for i, c in enumerate(choices) if c.logprobs is not None]
    most = max((c.logprobs or 0 for c in choices), default=0)
    chosen = np.zeros(rows, np.float32)
    top_ids = np.zeros((rows, most), np.int64)
    top_values = np.zeros((rows, most), np.float32)
    if asked:
        chosen[asked], top_ids[asked], top_values[asked] = compute(asked, most)
    return chosen, top_ids, top_values


def choose_numpy(logits: Array, choices: Sequence[Choice]) -> list[tuple[int, TokenLogprob | None]]:
    """The token of each row of `logits` `[R, Vocab]` (see the module docstring)."""
    x = np.asarray(logits, np.float32)
    _rows, vocab = x.shape
    tokens = x.argmax(axis=1)
    temperature, top_k, top_p, greedy = _limits(choices, vocab)
    if not greedy.all():
        scaled = x / temperature[:, None]
        order = np.argsort(-scaled, axis=1, kind="stable")
        ranked = np.take_along_axis(scaled, order, axis=1)
        keep = np.arange(vocab)[None, :] < top_k[:, None]
        kept = np.where(keep, ranked, -np.inf)
        probs = np.exp(kept - kept[:, :1])
        probs /= probs.sum(axis=1, keepdims=True)
        keep &= (np.cumsum(probs, axis=1) - probs) < top_p[:, None]
        noise = np.take_along_axis(_noise(choices, vocab), order, axis=1)
        score = np.where(keep, ranked + noise, -np.inf)
        picked = np.take_along_axis(order, score.argmax(axis=1)[:, None], axis=1)[:, 0]
        tokens = np.where(greedy, tokens, picked)

    def compute(asked: list[int], most: int) -> tuple[Array, Array, Array]:
        rows = x[asked]
        shifted = rows - rows.max(axis=1, keepdims=True)
        logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        ids = top_indices(logp, most)
        chosen = logp[np.arange(len(asked)), tokens[asked]]
        return chosen, ids, np.take_along_axis(logp, ids, axis=1)

    return _results(choices, tokens, *_logprobs(compute, choices))


def choose_torch(
    logits: torch.Tensor, choices: Sequence[Choice]
) -> list[tuple[int, TokenLogprob | None]]:
    """`choose_numpy` as torch ops on the logits' device; the tokens (and the asked
    log-probs) come to the host at the end."""
    import torch

    x = logits.float()
    _rows, vocab = x.shape
    device = x.device
    tokens = x.argmax(dim=1)
    temperature, top_k, top_p, greedy = _limits(choices, vocab)
    if not greedy.all():
        scaled = x / torch.from_numpy(temperature).to(device)[:, None]
        ranked, order = torch.sort(scaled, dim=1, descending=True, stable=True)
        positions = torch.arange(vocab, device=device)[None, :]
        keep = positions < torch.from_numpy(top_k).to(device)[:, None]
        kept = ranked.masked_fill(~keep, -torch.inf)
        probs = torch.softmax(kept, dim=1)
        keep &= (torch.cumsum(probs, dim=1) - probs) < torch.from_numpy(top_p).to(device)[:, None]
        noise = torch.from_numpy(_noise(choices, vocab)).to(device).gather(1, order)
        score = (ranked + noise).masked_fill(~keep, -torch.inf)
        picked = order.gather(1, score.argmax(dim=1, keepdim=True))[:, 0]
        tokens = torch.where(torch.from_numpy(greedy).to(device), tokens, picked)

    def compute(asked: list[int], most: int) -> tuple[Array, Array, Array]:
        index = torch.tensor(asked, device=device)
        logp = torch.log_softmax(x.index_select(0, index), dim=1)
        chosen = logp.gather(1, tokens.index_select(0, index)[:, None])[:, 0]
        top_values, top_ids = torch.topk(logp, most, dim=1)
        return chosen.cpu().numpy(), top_ids.cpu().numpy(), top_values.cpu().numpy()

    return _results(choices, tokens.cpu().numpy(), *_logprobs(compute, choices))
