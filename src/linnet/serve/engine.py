"""`Engine`: continuous batching of generation requests over a decoder's cache rows.

Stage: the serving layer's core (issue 14). In: a model loaded with
`linnet.torch.load`, `linnet.onnx.load_model` or `linnet.jax.load_model` whose
root block has the `prefill_slots` / `decode_rows` entries
(`linnet.serve.backends`). Out:
`Completion`s, and `TokenEvent`s to each request's `on_token` as tokens come.

Every cache row holds at most one request. Each `step`:

1. admits waiting requests, first come first served, into the free rows: their
   prompts are grouped by padded length (a power of two from `min_bucket`, so few
   shapes are lowered and padding stays under half) and each group, within
   `max_prefill_tokens`, is one `prefill_slots` call whose member count is padded
   to a power of two with members whose slot lists no row (they write nothing);
   each admitted request's first token comes from its prefill logits;
2. runs one decode step, each active row at its own position, and picks every
   active row's next token: `decode_slots` over the active rows when the model has
   it (their count padded to a power of two with members that write nowhere, so
   few shapes are lowered), else `decode_rows` over every row (free rows compute
   logits nobody reads).

A model whose rotary tables switch for the whole sequence at some length (Phi-3's
longrope; `Decoder.recompute_at`) has its sequences that reach that length in this
step prefilled again from their first token instead of decoded (so every cached key
is rotated the new way), as transformers' `generate` does; their next token comes
from those prefill logits.

A request leaves its row when it reaches `max_new_tokens`, an eos token or a stop
sequence, or is cancelled; the row is free for the next step's admissions. Rows
never see each other (the entries' masks), so a request's tokens do not depend on
its neighbours, and sampling noise depends only on the request's seed and step.
The engine is not thread-safe: one thread calls it (the server runs it on its own).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from linnet.errors import LinnetError
from linnet.serve.backends import Decoder, decoder_for
from linnet.serve.requests import Completion, Request, Stats, TokenEvent, TokenLogprob
from linnet.serve.sampling import Choice, gumbel_noise
from linnet.serve.stops import split_stop

Array = np.ndarray[Any, Any]


def bucket(n: int, smallest: int, largest: int) -> int:
    """The power of two `>= n` (at least `smallest`), capped at `largest`."""
    size = max(1, smallest)
    while size < n:
        size *= 2
    return min(size, largest)


@dataclass
class _Live:
    """A submitted request: where it is and what it has produced so far."""

    id: int
    request: Request
    seed: int
    eos: frozenset[int]
    submitted: float
    row: int = -1
    generated: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    released: list[int] = field(default_factory=list)
    released_logprobs: list[TokenLogprob] = field(default_factory=list)
    held: list[int] = field(default_factory=list)
    held_logprobs: list[TokenLogprob] = field(default_factory=list)
    finished: bool = False

    @property
    def sequence(self) -> list[int]:
        """The prompt and the tokens generated so far."""
        return [*self.request.prompt, *self.generated]

    @property
    def position(self) -> int:
        """The cache position of the last generated token, which the next decode feeds."""
        return len(self.request.prompt) + len(self.generated) - 1


class Engine:
    """Continuous batching over a decoder's cache rows (see the module docstring).

    `eos`: the default eos token ids of requests that give none. `rows` and
    `max_seq` override the model's `Batch` and `MaxSeq` generics. `seed` seeds the
    draw of seeds for requests that give none. `prepack` (ONNX Runtime models only):
    the share of the weights' bytes that the session decoding every row at once holds
    again, pre-packed for the CPU's matrix products (default
    `backends.PREPACK_SHARE`; 0: none, 1: every product's weight). `threads`
    (`linnet.torch` models on the CPU only): the intra-op thread count of every model
    call; by default each call shape runs with 1 thread or the caller's count,
    whichever `linnet.serve.threads.ThreadChooser` measures to be faster.
    """

    def __init__(
        self,
        model: Any,
        *,
        eos: Iterable[int] = (),
        rows: int | None = None,
        max_seq: int | None = None,
        min_bucket: int = 8,
        max_prefill_tokens: int = 4096,
        seed: int | None = None,
        prepack: float | None = None,
        threads: int | None = None,
    ) -> None:
        self.decoder: Decoder = decoder_for(model, rows, max_seq, prepack, threads)
        self.rows = self.decoder.rows
        self.max_seq = self.decoder.max_seq
        self.recompute_at = self.decoder.recompute_at
        self.eos = frozenset(int(t) for t in eos)
        self.min_bucket = min_bucket
        self.max_prefill_tokens = max_prefill_tokens
        self._seeds = np.random.default_rng(seed)
        self._next_id = 0
        self._waiting: deque[_Live] = deque()
        self._active: dict[int, _Live] = {}
        self._done: list[Completion] = []
        self.stats = Stats()
        self.prefill_seconds = 0.0
        """How long the latest `prefill_slots` call took (0 before the first): what a
        caller weighs against waiting for more requests to prefill together
        (`EngineWorker`)."""

    # -- the public surface ----------------------------------------------------------------

    @property
    def busy(self) -> bool:
        """Whether a request is waiting or running."""
        return bool(self._waiting or self._active)

    @property
    def active_rows(self) -> int:
        return len(self._active)

    def check(self, request: Request) -> None:
        """A LinnetError when `request` cannot fit the cache."""
        length = len(request.prompt)
        if length + request.max_new_tokens - 1 > self.max_seq:
            raise LinnetError(
                f"a prompt of {length} tokens and {request.max_new_tokens} new tokens need "
                f"{length + request.max_new_tokens - 1} cache positions; the model has "
                f"MaxSeq = {self.max_seq}"
            )

    def submit(self, request: Request) -> int:
        """Queue `request`; its id (for `cancel` and in its `Completion`)."""
        self.check(request)
        seed = request.seed
        if seed is None:
            seed = int(self._seeds.integers(0, 2**63))
        eos = self.eos if request.eos is None else frozenset(int(t) for t in request.eos)
        live = _Live(self._next_id, request, seed, eos, time.perf_counter())
        self._next_id += 1
        self._waiting.append(live)
        self.stats.requests += 1
        self.stats.prompt_tokens += len(request.prompt)
        return live.id

    def cancel(self, request_id: int) -> bool:
        """End a waiting or running request (finish reason `cancelled`); False if unknown."""
        for live in self._waiting:
            if live.id == request_id:
                self._waiting.remove(live)
                self._finish(live, "cancelled")
                return True
        for live in self._active.values():
            if live.id == request_id:
                self._finish(live, "cancelled")
                return True
        return False

    def step(self) -> list[Completion]:
        """Admit, prefill, decode once (see the module docstring); the completions that
        finished in this step."""
        start = time.perf_counter()
        self._admit()
        if self._active:
            self._decode()
        self.stats.seconds += time.perf_counter() - start
        done, self._done = self._done, []
        return done

    def run(self, requests: Sequence[Request]) -> tuple[list[Completion], Stats]:
        """Submit `requests` and step until all finish: their completions in order, and
        the engine's stats."""
        ids = [self.submit(r) for r in requests]
        found: dict[int, Completion] = {}
        while len(found) < len(ids) and self.busy:
            for completion in self.step():
                found[completion.request_id] = completion
        return [found[i] for i in ids], self.stats

    def reset(self) -> None:
        """Drop every request (no events, no completions), zero the cache and the stats."""
        self._waiting.clear()
        self._active.clear()
        self._done.clear()
        self.decoder.reset()
        self.stats = Stats()

    def warmup(self, prompt_lengths: Iterable[int] | None = None) -> None:
        """Lower every shape the engine calls: the decode entry (`decode_slots` for each
        member count) and `prefill_slots` for each member count and prompt bucket
        (those of `prompt_lengths`, default all). Runs on an idle engine and leaves it
        reset."""
        if self.busy:
            raise LinnetError("Engine.warmup runs on an idle engine; requests are queued")
        lengths = range(1, self.max_seq + 1) if prompt_lengths is None else prompt_lengths
        if self.recompute_at is not None and self.recompute_at <= self.max_seq:
            lengths = [*lengths, self.recompute_at]  # the whole-sequence prefill
        widths = sorted({bucket(n, self.min_bucket, self.max_seq) for n in lengths})
        for width in widths:
            members = 1
            while True:
                size = bucket(members, 1, self.rows)
                if members > 1 and size * width > self.max_prefill_tokens:
                    break
                tokens = np.zeros((size, width), np.int32)
                slots = -1 - np.arange(size, dtype=np.int32)
                self.decoder.prefill(tokens, slots, np.ones(size, np.int32))
                if size >= self.rows:
                    break
                members = size * 2
        if self.decoder.slotted:
            size = 1
            while True:
                empty = np.zeros(size, np.int32)
                self.decoder.decode_slots(empty[:, None], -1 - np.arange(size, dtype=np.int32),
                                          empty)  # fmt: skip
                if size >= self.rows:
                    break
                size = min(size * 2, self.rows)
        else:
            self.decoder.decode(np.zeros((self.rows, 1), np.int32), np.zeros(self.rows, np.int32))
        self.reset()

    def load_weights(self, weights: Any, bindings: Any = None) -> None:
        """Copy new weights (a SafeTensors file, folder, or arrays by path or checkpoint
        name) into the model's tensors in place; every request sees them from the next
        step on. The cache is kept: call `reset` too for a clean start."""
        self.decoder.load_weights(weights, bindings)

    def copy_weights(self, tensors: Mapping[str, Any]) -> None:
        """Copy tensors by Linnet path (torch tensors on any device, or arrays, already in
        the model's layout: no bindings, no file) into the model's weights in place; every
        request sees them from the next step on. How a trainer hands its updated
        parameters to the sampler (`linnet.train.grpo`)."""
        self.decoder.copy_weights(tensors)

    # -- scheduling ------------------------------------------------------------------------

    def _admit(self) -> None:
        free = [r for r in range(self.rows) if r not in self._active]
        admitted: list[_Live] = []
        while free and self._waiting:
            live = self._waiting.popleft()
            live.row = free.pop(0)
            self._active[live.row] = live
            admitted.append(live)
        self._prefill_grouped(admitted)

    def _prefill_grouped(self, lives: list[_Live]) -> None:
        """Prefill each request's whole sequence into its row, grouped by padded width."""
        groups: dict[int, list[_Live]] = {}
        for live in lives:
            width = bucket(len(live.sequence), self.min_bucket, self.max_seq)
            groups.setdefault(width, []).append(live)
        for width, members in sorted(groups.items()):
            # a power of two, so that padding the member count adds no members
            per_call = 1 << (max(1, self.max_prefill_tokens // width).bit_length() - 1)
            for i in range(0, len(members), per_call):
                self._prefill(width, members[i : i + per_call])

    def _prefill(self, width: int, members: list[_Live]) -> None:
        size = bucket(len(members), 1, max(self.rows, len(members)))
        tokens = np.zeros((size, width), np.int32)
        slots = -1 - np.arange(size, dtype=np.int32)  # padding members write nowhere
        lengths = np.ones(size, np.int32)
        for m, live in enumerate(members):
            sequence = live.sequence
            tokens[m, : len(sequence)] = sequence
            slots[m] = live.row
            lengths[m] = len(sequence)
        start = time.perf_counter()
        logits = self.decoder.prefill(tokens, slots, lengths)
        self.prefill_seconds = time.perf_counter() - start
        self.stats.prefill_calls += 1
        self.stats.prefill_padding += size * width - int(lengths[: len(members)].sum())
        self._pick(logits, list(range(len(members))), members)

    def _decode(self) -> None:
        members = sorted(self._active.values(), key=lambda live: live.row)
        skipped: list[int] = []  # rows prefilled again in this step: no decode writes there
        if self.recompute_at is not None:
            again = [live for live in members if len(live.sequence) == self.recompute_at]
            if again:
                self.stats.recomputed += len(again)
                self._prefill_grouped(again)
                skipped = [live.row for live in again]
                members = [live for live in members if live.row not in skipped]
                if not members:
                    return
        if self.decoder.slotted:
            size = bucket(len(members), 1, self.rows)
            tokens = np.zeros((size, 1), np.int32)
            slots = -1 - np.arange(size, dtype=np.int32)  # padding members write nowhere
            positions = np.zeros(size, np.int32)
            for m, live in enumerate(members):
                tokens[m, 0] = live.generated[-1]
                slots[m] = live.row
                positions[m] = live.position
            logits = self.decoder.decode_slots(tokens, slots, positions)
            index = list(range(len(members)))
        else:
            tokens = np.zeros((self.rows, 1), np.int32)
            positions = np.zeros(self.rows, np.int32)
            positions[skipped] = self.max_seq  # past the cache: the write goes nowhere
            for live in members:
                tokens[live.row, 0] = live.generated[-1]
                positions[live.row] = live.position
            logits = self.decoder.decode(tokens, positions)
            index = [live.row for live in members]
        self.stats.decode_calls += 1
        self.stats.busy_rows += len(members)
        self._pick(logits, index, members)

    def _pick(self, logits: Any, index: list[int], members: list[_Live]) -> None:
        vocab = int(logits.shape[-1])
        choices = []
        for live in members:
            r = live.request
            noise = None
            if r.temperature > 0:
                noise = gumbel_noise(live.seed, len(live.generated), vocab)
            choices.append(Choice(r.temperature, r.top_k, r.top_p, noise, r.logprobs))
        picked = self.decoder.choose(logits, index, choices)
        now = time.perf_counter()
        for live, (token, logprob) in zip(members, picked, strict=True):
            self._advance(live, token, logprob, now)

    def _advance(self, live: _Live, token: int, logprob: TokenLogprob | None, now: float) -> None:
        if not live.generated:
            self.stats.ttfts.append(now - live.submitted)
        live.generated.append(token)
        live.times.append(now)
        self.stats.generated_tokens += 1
        live.held.append(token)
        if logprob is not None:
            live.held_logprobs.append(logprob)
        count, stopped = split_stop(live.held, live.request.stop)
        if stopped:
            self._release(live, count)
            self._finish(live, "stop")
        elif token in live.eos:
            self._release(live, len(live.held))
            self._finish(live, "stop")
        elif len(live.generated) >= live.request.max_new_tokens:
            self._release(live, len(live.held))
            self._finish(live, "length")
        else:
            self._release(live, count)

    def _release(self, live: _Live, count: int) -> None:
        if live.finished:
            return
        tokens, live.held = live.held[:count], live.held[count:]
        logprobs: list[TokenLogprob] = []
        if live.request.logprobs is not None:
            logprobs, live.held_logprobs = live.held_logprobs[:count], live.held_logprobs[count:]
        live.released += tokens
        live.released_logprobs += logprobs
        if tokens:
            self._notify(live, TokenEvent(live.id, tuple(tokens), tuple(logprobs)))

    def _finish(self, live: _Live, reason: str) -> None:
        if live.finished:
            return
        live.finished = True
        if live.row >= 0:
            self._active.pop(live.row, None)
        if reason == "cancelled":
            self.stats.cancelled += 1
        else:
            self.stats.completed += 1
        self._done.append(
            Completion(
                request_id=live.id,
                prompt=list(live.request.prompt),
                tokens=list(live.released),
                finish_reason=reason,
                logprobs=None if live.request.logprobs is None else live.released_logprobs,
                submitted=live.submitted,
                first_token=live.times[0] if live.times else None,
                finished=time.perf_counter(),
                token_times=list(live.times),
            )
        )
        self._notify(live, TokenEvent(live.id, (), (), finished=True, finish_reason=reason))

    def _notify(self, live: _Live, event: TokenEvent) -> None:
        callback = live.request.on_token
        if callback is None:
            return
        try:
            callback(event)
        except Exception:
            # A failing consumer (a closed stream) must not stop the other rows.
            live.request.on_token = None
            if not event.finished:
                self._finish(live, "cancelled")
