"""What goes into the engine and what comes out: `Request`, `Completion`, `Stats`.

Stage: the serving layer's vocabulary (issue 14). Token ids only: text is the
tokenizer's business (`linnet.serve.tokenizer`) and the HTTP server's. A
`Request` is validated once, when it is made (`Request.__post_init__`), so the
engine never meets a bad temperature or a negative token count mid-batch.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from linnet.errors import LinnetError

FINISH_REASONS = ("length", "stop", "cancelled")
"""`length`: `max_new_tokens` reached; `stop`: an eos token or a stop sequence;
`cancelled`: `Engine.cancel` (a client went away)."""


@dataclass(frozen=True)
class TokenLogprob:
    """The chosen token's log-probability and the `top` most likely tokens, each
    `(token, logprob)`, all under the model's own distribution (the raw logits'
    log-softmax, before temperature, top-k and top-p)."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class TokenEvent:
    """What `Request.on_token` receives: tokens released for one request (a stop
    sequence's possible start is held back until it is known not to be one), and
    whether that request has finished (then `finish_reason` says why)."""

    request_id: int
    tokens: tuple[int, ...]
    logprobs: tuple[TokenLogprob, ...]
    finished: bool = False
    finish_reason: str | None = None


@dataclass
class Request:
    """One generation: `prompt` token ids, then up to `max_new_tokens` new tokens.

    `eos`: token ids that end the request (the engine's own `eos` when None);
    the eos token is part of the completion, as transformers' `generate` returns it.
    `temperature` 0 is greedy (argmax); otherwise logits / temperature, kept to the
    `top_k` most likely (0: all) and to the smallest set whose probability reaches
    `top_p`, then sampled. `seed` fixes the sample: the same seed gives the same
    tokens alone or in any batch (None: the engine draws one). `stop`: token
    sequences that end the request and are left out of it. `logprobs`: None for
    none, `n` for the chosen token's log-probability and the `n` most likely.
    `on_token` is called on the engine's thread as tokens are released.
    """

    prompt: Sequence[int]
    max_new_tokens: int = 16
    eos: Sequence[int] | None = None
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    stop: Sequence[Sequence[int]] = ()
    logprobs: int | None = None
    on_token: Callable[[TokenEvent], None] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.prompt = [int(t) for t in self.prompt]
        if not self.prompt:
            raise LinnetError("Request.prompt is empty: a prompt needs at least one token")
        if self.max_new_tokens < 1:
            raise LinnetError(
                f"Request.max_new_tokens must be at least 1, got {self.max_new_tokens}"
            )
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise LinnetError(f"Request.temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise LinnetError(f"Request.top_k must be >= 0 (0: no limit), got {self.top_k}")
        if not (0 < self.top_p <= 1):
            raise LinnetError(f"Request.top_p must be in (0, 1], got {self.top_p}")
        if self.logprobs is not None and self.logprobs < 0:
            raise LinnetError(f"Request.logprobs must be >= 0, got {self.logprobs}")
        self.stop = [[int(t) for t in s] for s in self.stop]
        if any(not s for s in self.stop):
            raise LinnetError("Request.stop holds an empty sequence")


@dataclass
class Completion:
    """A finished request: its new `tokens`, why it ended, timings and log-probs.

    Times are `time.perf_counter()` seconds: `ttft` from `submit` to the first
    token, `inter_token` the gaps between later tokens.
    """

    request_id: int
    prompt: list[int]
    tokens: list[int]
    finish_reason: str
    logprobs: list[TokenLogprob] | None
    submitted: float
    first_token: float | None
    finished: float
    token_times: list[float] = field(default_factory=list, repr=False)

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.submitted

    @property
    def inter_token(self) -> list[float]:
        times = self.token_times
        return [b - a for a, b in itertools.pairwise(times)]


@dataclass
class Stats:
    """Counters of an engine since its start or `reset` (`Engine.stats`)."""

    requests: int = 0
    completed: int = 0
    cancelled: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    prefill_calls: int = 0
    prefill_padding: int = 0
    """Token slots of prefill calls that held padding, not prompt tokens."""
    decode_calls: int = 0
    busy_rows: int = 0
    """Sum over decode calls of the rows holding a request (occupancy = busy / calls / rows)."""
    recomputed: int = 0
    """Sequences prefilled again from their first token (`Decoder.recompute_at`)."""
    seconds: float = 0.0
    """Time spent in `step` (model calls, sampling, bookkeeping)."""
    ttfts: list[float] = field(default_factory=list, repr=False)

    @property
    def tokens_per_second(self) -> float:
        return self.generated_tokens / self.seconds if self.seconds > 0 else 0.0

    def ttft_quantile(self, q: float) -> float | None:
        """The `q` quantile of the time to first token (nearest rank), None before any."""
        if not self.ttfts:
            return None
        ordered = sorted(self.ttfts)
        rank = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
        return ordered[rank]
