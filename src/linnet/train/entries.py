"""A model's training entries applied to a `Batch`: one place that knows how to call them.

A `LinnetModule` (`linnet.torch.load`) runs its `loss_packed`,
`log_probs_packed` and `hidden_packed` entries (the decoder examples declare
them); any other `nn.Module` may offer methods of those names taking the same
tensors. The batch is moved to the model's device first.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from linnet.errors import LinnetError
from linnet.train.data import Batch

LOSS = "loss_packed"
LOG_PROBS = "log_probs_packed"
HIDDEN = "hidden_packed"


def model_device(model: nn.Module) -> torch.device:
    """The device of the model's first parameter or buffer (the CPU for none)."""
    for parameter in model.parameters():
        return parameter.device
    for buffer in model.buffers():
        return buffer.device
    return torch.device("cpu")


def fsdp_entries(model: nn.Module) -> None:
    """Make `run_entry` of a model sharded by FSDP2 (`fully_shard`) gather its parameters
    as `forward` does (`register_fsdp_forward_method`), unless that was done already."""
    if "run_entry" in vars(model) or not hasattr(model, "run_entry"):
        return
    from torch.distributed.fsdp import FSDPModule, register_fsdp_forward_method

    if isinstance(model, FSDPModule):
        register_fsdp_forward_method(model, "run_entry")


def run(model: nn.Module, entry: str, inputs: Sequence[torch.Tensor]) -> torch.Tensor:
    """Entry `entry` of `model` on `inputs`; a LinnetError when the model lacks it."""
    entries = getattr(model, "entries", None)
    fsdp_entries(model)
    runner = getattr(model, "run_entry", None)
    if runner is not None and isinstance(entries, list):
        if entry not in entries:
            listed = ", ".join(f"`{n}`" for n in entries)
            raise LinnetError(
                f"the model has no `{entry}` entry, which training needs (entries: {listed}); "
                "the decoder examples declare loss_packed, log_probs_packed and hidden_packed"
            )
        result = runner(entry, list(inputs))
    else:
        method = getattr(model, entry, None)
        if method is None:
            raise LinnetError(f"{type(model).__name__} has no `{entry}` method or entry")
        result = method(*inputs)
    if not isinstance(result, torch.Tensor):
        raise LinnetError(f"`{entry}` returned {type(result).__name__}, not one tensor")
    return result


def packed_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    """`sum_p -weights[p] * log p(targets[p])` of the batch (an f32 scalar)."""
    return run(model, LOSS, batch.to(model_device(model)).inputs())


def packed_log_probs(model: nn.Module, batch: Batch) -> torch.Tensor:
    """`log p(targets[p])` of every position `[P]` (padding and unlearned ones included)."""
    return run(model, LOG_PROBS, batch.to(model_device(model)).inputs(weights=False))


def packed_hidden(model: nn.Module, batch: Batch) -> torch.Tensor:
    """The final hidden states `[P, H]`."""
    return run(model, HIDDEN, batch.to(model_device(model)).inputs(targets=False))
