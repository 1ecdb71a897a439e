"""Training data: token sequences (`Example`) packed end to end into fixed-size batches.

Stage: the data side of `linnet.train`. In: examples, each a token sequence
with the positions whose token is learned. Out: `Batch`es of exactly `tokens`
positions in the layout the decoders' training entries take
(`loss_packed(tokens, positions, segments, targets, weights)`):

- each example occupies consecutive positions; `segments` numbers the examples
  of a batch `0, 1, ...` and `positions` counts from 0 within each, so the
  model's `packed_mask` keeps attention inside an example;
- position `p` predicts the next token of its example: `targets[p]` is that
  token and `weights[p]` is 1 when it is learned, else 0; an example's last
  position predicts nothing (target 0, weight 0);
- the positions left after the last example that fits are padding: token 0,
  position 0, a segment of their own, weight 0, so they change no loss and no
  gradient.

`pack` never splits an example: one that does not fit in the rest of a batch
starts the next batch; with `together=k` each run of `k` consecutive examples
(a DPO pair: chosen, rejected) goes into one batch. An example longer than a
batch is an error unless `max_length` truncates it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from linnet.errors import LinnetError

IntArray = np.ndarray[tuple[int], np.dtype[np.int64]]
BoolArray = np.ndarray[tuple[int], np.dtype[np.bool_]]


class Example:
    """One token sequence; `learned[i]` says whether token `i` is a training target.

    `learned=None` learns every token (the first can never be predicted, having
    nothing before it). `Example.prompted(prompt, completion)` learns the
    completion only.

    >>> e = Example.prompted([5, 6], [7, 8])
    >>> e.tokens.tolist(), e.learned.tolist()
    ([5, 6, 7, 8], [False, False, True, True])
    """

    __slots__ = ("learned", "tokens")

    tokens: IntArray
    learned: BoolArray

    def __init__(
        self, tokens: Sequence[int] | np.ndarray, learned: Sequence[bool] | np.ndarray | None = None
    ) -> None:
        ids = np.asarray(tokens)
        if ids.ndim != 1 or not (ids.size == 0 or np.issubdtype(ids.dtype, np.integer)):
            raise LinnetError(f"Example: tokens must be a sequence of ints, got {_shown(tokens)}")
        if ids.size == 0:
            raise LinnetError("Example: tokens is empty")
        if int(ids.min()) < 0:
            raise LinnetError(f"Example: token ids must be >= 0, got {int(ids.min())}")
        if learned is None:
            mask = np.ones(ids.size, dtype=np.bool_)
        else:
            mask = np.asarray(learned)
            if mask.shape != ids.shape or mask.dtype != np.bool_:
                raise LinnetError(
                    f"Example: learned must be {ids.size} bools, one per token, "
                    f"got {_shown(learned)}"
                )
        self.tokens = ids.astype(np.int64)
        self.learned = mask.copy()

    @classmethod
    def prompted(
        cls, prompt: Sequence[int] | np.ndarray, completion: Sequence[int] | np.ndarray
    ) -> Example:
        """`prompt + completion`, learning the completion's tokens only."""
        head, tail = np.asarray(prompt, dtype=np.int64), np.asarray(completion, dtype=np.int64)
        learned = np.concatenate([np.zeros(head.size, np.bool_), np.ones(tail.size, np.bool_)])
        return cls(np.concatenate([head, tail]), learned)

    def __len__(self) -> int:
        return int(self.tokens.size)

    @property
    def targets(self) -> int:
        """How many positions of this example are learned (tokens learned after the first)."""
        return int(self.learned[1:].sum())

    def truncated(self, length: int) -> Example:
        return Example(self.tokens[:length], self.learned[:length])

    def __repr__(self) -> str:
        return f"Example({len(self)} tokens, {self.targets} learned)"


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class Batch:
    """`tokens` positions of packed examples (see the module docstring); tensors on one device.

    `spans[i] = (start, length)` locates the batch's `i`-th example; `examples[i]`
    is that example's index in the stream given to `pack`.
    """

    tokens: torch.Tensor
    positions: torch.Tensor
    segments: torch.Tensor
    targets: torch.Tensor
    weights: torch.Tensor
    spans: tuple[tuple[int, int], ...]
    examples: tuple[int, ...]

    @property
    def size(self) -> int:
        """Positions in the batch, padding included."""
        return int(self.tokens.shape[0])

    @property
    def learned(self) -> float:
        """The sum of the weights: the learned positions."""
        return float(self.weights.sum())

    @property
    def used(self) -> int:
        """Positions holding example tokens (the rest is padding)."""
        return sum(length for _, length in self.spans)

    def to(self, device: torch.device | str) -> Batch:
        if self.tokens.device == torch.device(device):
            return self
        return Batch(
            self.tokens.to(device),
            self.positions.to(device),
            self.segments.to(device),
            self.targets.to(device),
            self.weights.to(device),
            self.spans,
            self.examples,
        )

    def inputs(self, *, targets: bool = True, weights: bool = True) -> list[torch.Tensor]:
        """The entry inputs: `hidden_packed` takes the first three, `log_probs_packed`
        four, `loss_packed` all five."""
        found = [self.tokens, self.positions, self.segments]
        if targets:
            found.append(self.targets)
            if weights:
                found.append(self.weights)
        return found


def batch_of(examples: Sequence[Example], size: int, indices: Sequence[int]) -> Batch:
    """`examples` packed into one batch of `size` positions, padding at the end."""
    used = sum(len(e) for e in examples)
    if used > size:
        raise LinnetError(f"pack: {used} tokens do not fit a batch of {size}")
    tokens = np.zeros(size, np.int32)
    positions = np.zeros(size, np.int32)
    segments = np.full(size, len(examples), np.int32)
    targets = np.zeros(size, np.int64)
    weights = np.zeros(size, np.float32)
    spans: list[tuple[int, int]] = []
    start = 0
    for index, example in enumerate(examples):
        n = len(example)
        stop = start + n
        tokens[start:stop] = example.tokens
        positions[start:stop] = np.arange(n)
        segments[start:stop] = index
        targets[start : stop - 1] = example.tokens[1:]
        weights[start : stop - 1] = example.learned[1:]
        spans.append((start, n))
        start = stop
    return Batch(
        torch.from_numpy(tokens),
        torch.from_numpy(positions),
        torch.from_numpy(segments),
        torch.from_numpy(targets),
        torch.from_numpy(weights),
        tuple(spans),
        tuple(indices),
    )


def pack(
    examples: Iterable[Example],
    tokens: int,
    *,
    max_length: int | None = None,
    together: int = 1,
) -> Iterator[Batch]:
    """Batches of exactly `tokens` positions, the examples in their order (module docstring).

    `max_length` truncates longer examples (at most `tokens`); without it an
    example longer than `tokens` is an error. `together=k` keeps each run of
    `k` consecutive examples in one batch (the stream's length must be a
    multiple of `k`). Examples are read lazily, so the stream may be endless.
    """
    if tokens <= 0:
        raise LinnetError(f"pack: tokens must be positive, got {tokens}")
    if together <= 0:
        raise LinnetError(f"pack: together must be positive, got {together}")
    if max_length is not None and not 0 < max_length <= tokens:
        raise LinnetError(f"pack: max_length must be in 1..{tokens} (tokens), got {max_length}")
    current: list[Example] = []
    indices: list[int] = []
    used = 0
    for first, group in _groups(examples, together):
        if max_length is not None:
            group = [e if len(e) <= max_length else e.truncated(max_length) for e in group]
        length = sum(len(e) for e in group)
        if length > tokens:
            what = (
                f"example {first}" if together == 1 else f"examples {first}..{first + together - 1}"
            )
            raise LinnetError(
                f"pack: {what} has {length} tokens, more than a batch of {tokens}; "
                "pass max_length to truncate" + ("" if together == 1 else ", or use larger batches")
            )
        if used + length > tokens:
            yield batch_of(current, tokens, indices)
            current, indices, used = [], [], 0
        current.extend(group)
        indices.extend(range(first, first + len(group)))
        used += length
    if current:
        yield batch_of(current, tokens, indices)


def _groups(examples: Iterable[Example], size: int) -> Iterator[tuple[int, list[Example]]]:
    """Runs of `size` consecutive examples with the index of their first."""
    group: list[Example] = []
    start = 0
    for index, example in enumerate(examples):
        if not isinstance(example, Example):
            raise LinnetError(
                f"pack: item {index} is a {type(example).__name__}, not a linnet.train.Example"
            )
        group.append(example)
        if len(group) == size:
            yield start, group
            group, start = [], index + 1
    if group:
        raise LinnetError(
            f"pack: together={size} needs a multiple of {size} examples; "
            f"the last {len(group)} have no partner"
        )
