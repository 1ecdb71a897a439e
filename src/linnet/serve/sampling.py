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
report them by default.
"""

from __future__ import annotations

from collections.abc import Sequence
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


def choose_numpy(logits: Array, choices: Sequence[Choice]) -> list[tuple[int, TokenLogprob | None]]:
    """The token of each row of `logits` `[R, Vocab]` (see the module docstring)."""
    x = np.asarray(logits, np.float32)
    rows, vocab = x.shape
    shifted = x - x.max(axis=1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
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
    chosen = logp[np.arange(rows), tokens]
    most = max((c.logprobs or 0 for c in choices), default=0)
    top_ids = np.argsort(-logp, axis=1, kind="stable")[:, :most]
    top_values = np.take_along_axis(logp, top_ids, axis=1)
    return _results(choices, tokens, chosen, top_ids, top_values)


def choose_torch(
    logits: torch.Tensor, choices: Sequence[Choice]
) -> list[tuple[int, TokenLogprob | None]]:
    """`choose_numpy` as torch ops on the logits' device; one copy to the host at the end."""
    import torch

    x = logits.float()
    _rows, vocab = x.shape
    device = x.device
    logp = torch.log_softmax(x, dim=1)
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
    chosen = logp.gather(1, tokens[:, None])[:, 0]
    most = max((c.logprobs or 0 for c in choices), default=0)
    top_values, top_ids = (
        torch.topk(logp, most, dim=1) if most else (logp[:, :0], tokens[:, None][:, :0])
    )
    host = [t.cpu().numpy() for t in (tokens, chosen, top_ids, top_values)]
    return _results(choices, *host)
