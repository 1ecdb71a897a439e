"""Ops with a gradient clause as `torch.autograd.Function`s (language-extensions 3.4).

Stage: backend, shared by the interpreted runner and the generated code (which
calls `clauses.apply`). A `call` op with a `gradient` region is one autograd
primitive: `forward` computes the op's body (what its first region computes),
saving the arguments and the result; `backward` evaluates the clause (its
second region) on the arguments, the result and the incoming gradient, and
returns the clause's gradients for the operands listed in `wrt` and `None`
for every other argument. Nothing inside the body is differentiated; a second
derivative differentiates the clause as ordinary code (3.3 leaves it open).

The two callables are made per call by the caller: `forward(*args)` runs the
body, `backward(*args, result, grad)` the clause, returning one tensor per
`wrt` position (a tuple when there are several).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

Forward = Callable[..., torch.Tensor]
Backward = Callable[..., Any]


class ClauseFunction(torch.autograd.Function):
    """One op with a gradient clause: its body forward, its clause backward."""

    @staticmethod
    def forward(
        ctx: Any,
        forward: Forward,
        backward: Backward,
        wrt: tuple[int, ...],
        *args: torch.Tensor,
    ) -> torch.Tensor:
        result = forward(*args)
        ctx.backward = backward
        ctx.wrt = wrt
        ctx.save_for_backward(*args, result)
        return result

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        *args, result = ctx.saved_tensors
        found = ctx.backward(*args, result, grad)
        gradients = found if isinstance(found, tuple | list) else (found,)
        out: list[torch.Tensor | None] = [None] * len(args)
        wanted = ctx.needs_input_grad[3:]
        for index, gradient in zip(ctx.wrt, gradients, strict=True):
            if wanted[index]:
                out[index] = gradient
        return (None, None, None, *out)


def apply(
    forward: Forward, backward: Backward, wrt: Sequence[int], *args: torch.Tensor
) -> torch.Tensor:
    """The op's value, with the clause as its backward pass when autograd records."""
    if not torch.is_grad_enabled() or not any(
        isinstance(a, torch.Tensor) and a.requires_grad for a in args
    ):
        return forward(*args)
    run: Callable[..., torch.Tensor] = ClauseFunction.apply
    return run(forward, backward, tuple(wrt), *args)
