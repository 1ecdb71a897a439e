"""The language-model head and its loss in row chunks: never the whole `[N, Vocab]` logits.

Stage: backend, a native kernel (`linnet.torch.natives`) for
`std.nn.loss::linear_token_log_probs` and `linear_cross_entropy` (stdlib.md 15,
"Backend hint: fused chunked implementations"). A training step of a decoder
over `N` tokens would otherwise hold the logits `[N, V]` in f32, their softmax
and their gradient: at `N = 8192`, `V = 128256` that is 4 GiB each.

`linear_log_probs(hidden, weight, targets)` is an autograd Function:

- forward, per block of `rows` rows: `logits = hidden @ weight^T` in `T`, then
  in f32 the row's log-sum-exp and the target's logit; it keeps `hidden`,
  `weight`, `targets` and the `[N]` log-sum-exps, nothing of size `V` per row;
- backward recomputes each block's logits and turns them into
  `d lp / d logits = onehot(target) - softmax` times the incoming gradient, in
  f32; the block's gradient of `hidden` is that product with `weight` (in `T`,
  as autograd through the unfused ops computes it), and the gradient of
  `weight` is accumulated over the blocks in an f32 buffer, cast to `T` once.

`linear_cross_entropy` is a Function of its own: its result is a scalar, so the
incoming gradient only scales the gradients, which its forward pass computes
block by block while each block's logits are at hand (when autograd will ask
for them); the backward pass multiplies them by the incoming gradient. It costs
the gradients of `hidden` and `weight` held from the forward pass to the
backward pass, and saves the second product with the head.
The sums run in another order than the canonical bodies', so the results are
equal within rounding (the numeric contract for these ops), not bit for bit.
`CHUNK_ELEMENTS` bounds a block's logits (`rows = CHUNK_ELEMENTS // V`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

CHUNK_ELEMENTS = 1 << 24
"""Logit elements per block: 64 MiB in f32 (512 rows of a 32000-token vocabulary)."""


def chunk_rows(vocab: int) -> int:
    """Rows per block for a vocabulary of `vocab` tokens (at least one)."""
    return max(1, CHUNK_ELEMENTS // max(vocab, 1))


class _Gradients:
    """The gradients of `hidden` and `weight` (those autograd asks for), filled block by
    block from `d / d logits = scale * (softmax - onehot(targets))`; the head's in f32."""

    def __init__(self, hidden: torch.Tensor, weight: torch.Tensor, wanted: Sequence[bool]) -> None:
        self.weight = weight
        self.hidden = torch.empty_like(hidden) if wanted[0] else None
        self.head = (
            torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
            if wanted[1]
            else None
        )

    @property
    def wanted(self) -> bool:
        return self.hidden is not None or self.head is not None

    def add(
        self,
        start: int,
        block: torch.Tensor,
        shifted: torch.Tensor,
        targets: torch.Tensor,
        scale: torch.Tensor,
    ) -> None:
        """Rows `start ..` of `block`, whose f32 logits minus their log-sum-exp are
        `shifted` (consumed), each row's gradient scaled by `scale` `[rows, 1]`."""
        dlogits = torch.exp_(shifted).mul_(scale)
        dlogits.scatter_add_(1, targets[:, None], -scale)
        dlogits_t = dlogits.to(self.weight.dtype)
        if self.hidden is not None:
            self.hidden[start : start + block.shape[0]] = dlogits_t @ self.weight
        if self.head is not None:
            self.head += (dlogits_t.T @ block).to(torch.float32)

    def results(self) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        head = None if self.head is None else self.head.to(self.weight.dtype)
        return self.hidden, head


class _LinearLogProbs(torch.autograd.Function):
    """`log_softmax(hidden @ weight^T)[n, targets[n]]` by row blocks (module docstring)."""

    @staticmethod
    def forward(
        ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, rows: int
    ) -> torch.Tensor:
        count = hidden.shape[0]
        out = torch.empty(count, dtype=torch.float32, device=hidden.device)
        totals = torch.empty(count, dtype=torch.float32, device=hidden.device)
        for start in range(0, count, rows):
            stop = min(start + rows, count)
            logits = F.linear(hidden[start:stop], weight).to(torch.float32)
            total = torch.logsumexp(logits, dim=-1)
            picked = logits.gather(1, targets[start:stop, None]).squeeze(1)
            out[start:stop] = picked - total
            totals[start:stop] = total
        ctx.save_for_backward(hidden, weight, targets, totals)
        ctx.rows = rows
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        hidden, weight, targets, totals = ctx.saved_tensors
        grads = _Gradients(hidden, weight, ctx.needs_input_grad[:2])
        # d lp[n] / d logits[n, v] = onehot(targets[n])[v] - softmax[n, v]
        scale = -grad.to(torch.float32)
        rows: int = ctx.rows
        for start in range(0, hidden.shape[0], rows):
            stop = min(start + rows, hidden.shape[0])
            block = hidden[start:stop]
            logits = F.linear(block, weight).to(torch.float32)
            shifted = logits.sub_(totals[start:stop, None])
            grads.add(start, block, shifted, targets[start:stop], scale[start:stop, None])
        return (*grads.results(), None, None)


def linear_log_probs(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    """`std.nn.loss::linear_token_log_probs` by row blocks: `[N]` f32."""
    rows = chunk_rows(weight.shape[0])
    result: torch.Tensor = _LinearLogProbs.apply(  # type: ignore[no-untyped-call]
        hidden, weight, targets.to(torch.int64), rows
    )
    return result


class _LinearCrossEntropy(torch.autograd.Function):
    """`-sum_n weights[n] * lp[n]` by row blocks, its gradients computed in the forward pass.

    The loss is a scalar, so the incoming gradient only scales the gradients of
    `hidden` and `weight`: both are computed block by block while the logits are
    at hand (no second product with the head in the backward pass) and kept
    until backward multiplies them by it.
    """

    @staticmethod
    def forward(
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        targets: torch.Tensor,
        weights: torch.Tensor,
        rows: int,
        track: bool,
    ) -> torch.Tensor:
        # `needs_input_grad` ignores `torch.no_grad()`: `track` is the caller's grad mode
        grads = _Gradients(hidden, weight, [track and n for n in ctx.needs_input_grad[:2]])
        count = hidden.shape[0]
        log_probs = torch.empty(count, dtype=torch.float32, device=hidden.device)
        scales = weights.to(torch.float32)
        for start in range(0, count, rows):
            stop = min(start + rows, count)
            block = hidden[start:stop]
            logits = F.linear(block, weight).to(torch.float32)
            total = torch.logsumexp(logits, dim=-1)
            log_probs[start:stop] = logits.gather(1, targets[start:stop, None]).squeeze(1) - total
            if grads.wanted:
                # d loss / d logits[n, v] = weights[n] * (softmax[n, v] - onehot(targets[n])[v])
                shifted = logits.sub_(total[:, None])
                grads.add(start, block, shifted, targets[start:stop], scales[start:stop, None])
        grad_hidden, grad_weight = grads.results()
        ctx.save_for_backward(grad_hidden, grad_weight, log_probs)
        return -(scales * log_probs).sum()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        grad_hidden, grad_weight, log_probs = ctx.saved_tensors
        one = bool(grad.device.type == "cpu" and float(grad) == 1.0)
        scale = grad.to(torch.float32)

        def scaled(t: torch.Tensor | None) -> torch.Tensor | None:
            return t if t is None or one else t * scale.to(t.dtype)

        grad_weights = -log_probs * scale if ctx.needs_input_grad[3] else None
        return scaled(grad_hidden), scaled(grad_weight), None, grad_weights, None, None


def linear_cross_entropy(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    """`std.nn.loss::linear_cross_entropy` by row blocks: `sum_n -weights[n] * lp[n]`, f32."""
    rows = chunk_rows(weight.shape[0])
    result: torch.Tensor = _LinearCrossEntropy.apply(  # type: ignore[no-untyped-call]
        hidden, weight, targets.to(torch.int64), weights, rows, torch.is_grad_enabled()
    )
    return result
