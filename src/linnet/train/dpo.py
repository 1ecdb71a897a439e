"""Direct preference optimisation (DPO) of a `LinnetModule`: `dpo`, `dpo_loss`.

Stage: training, on the PyTorch backend. In: a trainable module (full
parameters or LoRA adapters, `linnet.train.lora`) whose logits entry
(`forward`, `tokens [B, S] -> logits [B, S, Vocab]`) scores sequences, and
preference `Pair`s of token ids (prompt, chosen completion, rejected
completion). Out: the trained module and one `DpoStep` of figures per step.

The computation is TRL's `DPOTrainer` (trl 1.16, `loss_type="sigmoid"`,
`f_divergence_type="reverse_kl"`), so losses, rewards and gradients can be
compared with it number for number:

- a batch of N pairs is `2N` rows, the N prompt+chosen rows then the N
  prompt+rejected rows, right-padded with `pad_id`, with a completion mask
  marking the completion tokens (TRL's `DataCollatorForPreference`);
- the log-probability of a completion is the sum over its tokens `t` of
  `log_softmax(logits[t - 1])[token[t]]` (`sequence_log_probs`, in f32);
  right padding never changes an earlier position of a causal model, so the
  padded rows need no attention mask;
- `dpo_loss`: with `d = (pi_c - ref_c) - (pi_r - ref_r)`, the loss of a pair is
  `-(1 - eps) log sigmoid(beta d) - eps log sigmoid(-beta d)`, the rewards
  `beta (pi - ref)` (detached); the step's loss is the mean over pairs.
  `label_smoothing` `eps` is conservative DPO (cDPO, a label flipped with
  probability `eps`), what TRL's sigmoid loss computed before 1.0; at 0, the
  default, it is TRL 1.16's sigmoid loss exactly (1.16 reads the option only
  in its `robust` and `exo_pair` losses).

The reference: with `reference=None` the log-probs of every batch are
computed once, before the first step, from the model as it is then (eval
mode, no gradient), so no second copy of the model is held; a `reference`
module is run beside the policy each step instead. Batches are the pairs in
order, `batch_size` at a time, cycled when `steps` asks for more than one pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from linnet.errors import LinnetError
from linnet.records import record
from linnet.torch.module import LinnetModule


@record(frozen=True)
class Pair:
    """One preference: token ids of the prompt and of the chosen and rejected completions."""

    prompt: tuple[int, ...]
    chosen: tuple[int, ...]
    rejected: tuple[int, ...]

    @staticmethod
    def of(prompt: Sequence[int], chosen: Sequence[int], rejected: Sequence[int]) -> Pair:
        """A pair from any integer sequences; `LinnetError` for an empty completion."""
        if not chosen or not rejected:
            raise LinnetError("a preference pair needs a nonempty chosen and rejected completion")
        return Pair(tuple(map(int, prompt)), tuple(map(int, chosen)), tuple(map(int, rejected)))


@record(frozen=True)
class PreferenceBatch:
    """`2N` padded rows (chosen rows first) and their completion mask, both `[2N, S]`."""

    tokens: torch.Tensor
    completion: torch.Tensor

    @property
    def pairs(self) -> int:
        return self.tokens.shape[0] // 2


@record(frozen=True)
class DpoStep:
    """The figures of one step: means over the step's pairs (TRL's logged metrics)."""

    step: int
    loss: float
    chosen_rewards: float
    rejected_rewards: float
    margins: float
    accuracy: float


def collate(
    pairs: Sequence[Pair], *, pad_id: int = 0, pad_to_multiple_of: int | None = None
) -> PreferenceBatch:
    """The rows of `pairs` as TRL's `DataCollatorForPreference` lays them out."""
    if not pairs:
        raise LinnetError("a preference batch needs at least one pair")
    rows = [p.prompt + p.chosen for p in pairs] + [p.prompt + p.rejected for p in pairs]
    learned = [len(p.chosen) for p in pairs] + [len(p.rejected) for p in pairs]
    length = max(map(len, rows))
    if pad_to_multiple_of:
        length = -(-length // pad_to_multiple_of) * pad_to_multiple_of
    tokens = torch.full((len(rows), length), pad_id, dtype=torch.int32)
    completion = torch.zeros((len(rows), length), dtype=torch.bool)
    for i, (row, count) in enumerate(zip(rows, learned, strict=True)):
        tokens[i, : len(row)] = torch.tensor(row, dtype=torch.int32)
        completion[i, len(row) - count : len(row)] = True
    return PreferenceBatch(tokens, completion)


def sequence_log_probs(
    logits: torch.Tensor, tokens: torch.Tensor, completion: torch.Tensor
) -> torch.Tensor:
    """`[B]`: per row, the sum over masked positions `t >= 1` of the log-probability the
    logits at `t - 1` give `tokens[t]` (f32; position 0 has no prediction)."""
    predicted = logits[:, :-1].float()
    targets = tokens[:, 1:].long()
    per_token = -F.cross_entropy(predicted.transpose(1, 2), targets, reduction="none")
    return (per_token * completion[:, 1:].to(per_token.dtype)).sum(dim=1)


def dpo_loss(
    policy_chosen: torch.Tensor,
    policy_rejected: torch.Tensor,
    reference_chosen: torch.Tensor,
    reference_rejected: torch.Tensor,
    *,
    beta: float = 0.1,
    label_smoothing: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-pair sigmoid DPO losses and the chosen and rejected rewards (see the module
    docstring), in TRL's order of operations."""
    if not 0.0 <= label_smoothing < 0.5:
        raise LinnetError(f"dpo: label_smoothing must be in [0, 0.5), got {label_smoothing}")
    chosen_logratios = policy_chosen - reference_chosen
    rejected_logratios = policy_rejected - reference_rejected
    delta = chosen_logratios - rejected_logratios
    losses = -F.logsigmoid(beta * delta)
    if label_smoothing:
        losses = losses * (1 - label_smoothing) - F.logsigmoid(-beta * delta) * label_smoothing
    return losses, beta * chosen_logratios.detach(), beta * rejected_logratios.detach()


def preference_log_probs(
    model: LinnetModule, batch: PreferenceBatch, *, entry: str = "forward"
) -> tuple[torch.Tensor, torch.Tensor]:
    """The chosen and rejected completion log-probs `[N]` of `model` on `batch`."""
    device = next((t.device for t in model.parameters()), torch.device("cpu"))
    tokens = batch.tokens.to(device)
    logits = model.run_entry(entry, [tokens])
    if not isinstance(logits, torch.Tensor) or logits.dim() != 3:
        raise LinnetError(
            f"dpo: entry `{entry}` must return logits [B, S, Vocab] for tokens [B, S]"
        )
    if tuple(logits.shape[:2]) != tuple(tokens.shape):
        raise LinnetError(
            f"dpo: entry `{entry}` returned {list(logits.shape)} for tokens {list(tokens.shape)}"
        )
    both = sequence_log_probs(logits, tokens, batch.completion.to(device))
    chosen, rejected = both.chunk(2)
    return chosen, rejected


def dpo(
    model: LinnetModule,
    pairs: Sequence[Pair],
    *,
    optimizer: torch.optim.Optimizer,
    reference: LinnetModule | None = None,
    beta: float = 0.1,
    label_smoothing: float = 0.0,
    batch_size: int = 8,
    steps: int | None = None,
    clip: float | None = 1.0,
    pad_id: int = 0,
    entry: str = "forward",
    on_step: Callable[[DpoStep], None] | None = None,
) -> list[DpoStep]:
    """Train `model` on `pairs` with the DPO loss; returns the figures of every step.

    Each step: zero the gradients, the loss of one batch, backward, clip the global
    gradient norm to `clip` (None: no clipping), `optimizer.step()`. The gradients
    of the last step stay on the parameters. `steps=None` is one pass over the
    pairs. See the module docstring for the batches and the reference.
    """
    if not pairs:
        raise LinnetError("dpo: no preference pairs")
    if batch_size < 1:
        raise LinnetError(f"dpo: batch_size must be at least 1, got {batch_size}")
    batches = [
        collate(pairs[i : i + batch_size], pad_id=pad_id) for i in range(0, len(pairs), batch_size)
    ]
    total = len(batches) if steps is None else steps
    if total < 0:
        raise LinnetError(f"dpo: steps must be at least 0, got {steps}")
    fixed = None if reference is not None else _precompute(model, batches, entry)
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise LinnetError("dpo: the model has no trainable parameter (trainable=True, or LoRA)")
    history = []
    for step in range(total):
        index = step % len(batches)
        batch = batches[index]
        if fixed is not None:
            reference_chosen, reference_rejected = fixed[index]
        else:
            assert reference is not None
            with torch.no_grad():
                reference_chosen, reference_rejected = preference_log_probs(
                    reference, batch, entry=entry
                )
        optimizer.zero_grad()
        chosen, rejected = preference_log_probs(model, batch, entry=entry)
        losses, chosen_rewards, rejected_rewards = dpo_loss(
            chosen,
            rejected,
            reference_chosen.to(chosen.device),
            reference_rejected.to(chosen.device),
            beta=beta,
            label_smoothing=label_smoothing,
        )
        loss = losses.mean()
        loss.backward()  # type: ignore[no-untyped-call]
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(params, clip)
        optimizer.step()
        figures = _figures(step, loss, chosen_rewards, rejected_rewards)
        history.append(figures)
        if on_step is not None:
            on_step(figures)
    return history


def _precompute(
    model: LinnetModule, batches: Sequence[PreferenceBatch], entry: str
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The reference log-probs of every batch from the model as it is (eval mode)."""
    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            return [preference_log_probs(model, b, entry=entry) for b in batches]
    finally:
        model.train(training)


def _figures(
    step: int, loss: torch.Tensor, chosen: torch.Tensor, rejected: torch.Tensor
) -> DpoStep:
    return dpo_figures(
        step,
        float(loss.detach()),
        chosen.detach().float().cpu().numpy(),
        rejected.detach().float().cpu().numpy(),
    )


def dpo_figures(step: int, loss: float, chosen: np.ndarray, rejected: np.ndarray) -> DpoStep:
    """TRL's logged metrics of one step from the implicit rewards of the pairs (shared
    with `linnet.jax.dpo`); a loss that is not finite stops training."""
    if not math.isfinite(loss):
        raise LinnetError(f"dpo: the loss of step {step} is {loss}")
    return DpoStep(
        step=step,
        loss=loss,
        chosen_rewards=float(chosen.mean()),
        rejected_rewards=float(rejected.mean()),
        margins=float((chosen - rejected).mean()),
        accuracy=float((chosen > rejected).astype(np.float32).mean()),
    )
