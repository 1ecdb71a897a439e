"""Group relative policy optimisation (GRPO) of a `LinnetModule`, sampling with `linnet.serve`.

Stage: reinforcement learning on the PyTorch backend. In: a trainable policy
(full parameters or LoRA adapters, `linnet.train.lora`), an `Engine` that
samples from a decoder of the same weights (any `linnet.serve.Engine`: another
`linnet.torch.load` of the example, compiled, or ONNX Runtime), prompts as token
ids and a reward function. Out: the trained policy and one `GrpoStep` of
figures per step.

Each step, as TRL's `GRPOTrainer` (trl 1.16) defines it:

1. refresh: the engine's weights become the policy's, in place (`refresh`;
   LoRA adapters merged on the way, no file written or read);
2. sample: `prompts_per_step` prompts (cycled), each `group` times (`sample`);
3. score: `reward(prompts, completions)` gives one float per completion;
4. advantages (`group_advantages`): `(r - mean) / (std + 1e-4)` with the mean
   and the Bessel-corrected std of the completion's group (`scale="group"`,
   TRL's default), of the whole step (`"batch"`), or not divided (`"none"`);
5. per-token log-probabilities of the completion tokens under the policy, at
   the sampling temperature (`completion_log_probs`); the old log-probs are the
   policy's before the step's first update (with `iterations=1`, TRL's
   default, the current ones detached, so the ratio is 1 and only its gradient
   counts); the reference's when `beta > 0`;
6. the loss (`grpo_loss`): per token `-min(ratio A, clamp(ratio, 1 - lo, 1 + hi) A)
   + beta KL` with `ratio = exp(logp - old)`, `clip = (lo, hi)` and the k3
   estimator `KL = exp(ref - logp) - (ref - logp) - 1`, aggregated by
   `loss_type`: `"dapo"` (TRL's default) the sum over the step's completion
   tokens divided by their number; `"grpo"` the mean over completions of each
   one's token mean; `"dr_grpo"` the sum divided by completions times
   `max_new_tokens`;
7. `iterations` optimizer steps on those samples, each: zero the gradients,
   backward (`micro_batch` completions at a time, each part scaled so the sum
   is the whole step's loss), clip the gradient norm to `max_grad_norm`, step.

The log-probs come from the model's `log_probs_packed` entry (prompt and
completion packed end to end, each sequence from position 0 as the engine
samples it, the logits never materialised) at temperature 1, or from its
`forward` logits divided by the temperature otherwise. The sequences are
padded to a power-of-two size so few shapes are lowered.

TRL pads prompts on the left and runs them with an attention mask but
positions counted from the padding; with prompts of equal length the two
computations are the same (what `tests/train/test_grpo.py` checks).
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F

from linnet.errors import LinnetError
from linnet.records import record
from linnet.serve import Engine, Request
from linnet.torch.module import LinnetModule
from linnet.train.data import Example, batch_of
from linnet.train.entries import LOG_PROBS, model_device, packed_log_probs
from linnet.train.lora import lora_adapters

Reward = Callable[[list[list[int]], list[list[int]]], Sequence[float]]
"""`reward(prompts, completions)`: one float per completion (the i-th prompt is the
i-th completion's, repeated `group` times)."""

LossType = Literal["dapo", "grpo", "dr_grpo"]
Scale = Literal["group", "batch", "none"]
LOSS_TYPES = ("dapo", "grpo", "dr_grpo")
SCALES = ("group", "batch", "none")
SMALLEST = 16


@record(frozen=True)
class Rollout:
    """The samples of one step: `prompts[i]` and `completions[i]` token ids, their
    rewards `[N]` and advantages `[N]` (f32)."""

    prompts: tuple[tuple[int, ...], ...]
    completions: tuple[tuple[int, ...], ...]
    rewards: torch.Tensor
    advantages: torch.Tensor


@record(frozen=True)
class GrpoStep:
    """The figures of one step (its last iteration): the loss, the mean and std of the
    rewards, the mean KL to the reference per completion token (0 without one), the
    share of tokens whose ratio was clipped, the mean completion length, wall time."""

    step: int
    loss: float
    reward: float
    reward_std: float
    kl: float
    clipped: float
    length: float
    seconds: float


# -- the engine ------------------------------------------------------------------------------


def policy_weights(policy: LinnetModule) -> dict[str, torch.Tensor]:
    """The policy's weights by Linnet path as its entries read them: each LoRA
    adapter's update added to its weight (a new tensor; the rest are the module's own)."""
    adapters = {a.path: a for a in lora_adapters(policy)}
    found: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for path in policy.linnet_model.live_tensors(policy.present_paths, "param"):
            value = policy.tensor(path).detach()
            adapter = adapters.get(path)
            found[path] = value if adapter is None else value + adapter.delta().to(value.dtype)
    return found


def refresh(engine: Engine, policy: LinnetModule) -> None:
    """Copy the policy's weights into the engine's model in place (`Engine.copy_weights`);
    nothing to do when the engine samples from the policy module itself."""
    if getattr(engine.decoder, "module", None) is policy:
        return  # its calls read the policy's weights (through the LoRA views) already
    engine.copy_weights(policy_weights(policy))


def sample(
    engine: Engine,
    prompts: Sequence[Sequence[int]],
    group: int,
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    eos: Sequence[int] | None = None,
    seeds: Sequence[int] | None = None,
) -> tuple[list[list[int]], list[list[int]]]:
    """`group` completions of each prompt by `engine`: the prompts (each repeated
    `group` times, in order) and the completions' tokens (an eos token included)."""
    if engine.busy:
        raise LinnetError("grpo: the engine has requests of its own; sample on an idle engine")
    repeated = [list(map(int, p)) for p in prompts for _ in range(group)]
    if seeds is not None and len(seeds) != len(repeated):
        raise LinnetError(f"grpo: {len(seeds)} seeds for {len(repeated)} completions")
    requests = [
        Request(
            prompt,
            max_new_tokens=max_new_tokens,
            eos=eos,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            seed=None if seeds is None else int(seeds[i]),
        )
        for i, prompt in enumerate(repeated)
    ]
    completions, _ = engine.run(requests)
    return repeated, [list(c.tokens) for c in completions]


# -- advantages and log-probs ----------------------------------------------------------------


def group_advantages(rewards: torch.Tensor, group: int, scale: Scale = "group") -> torch.Tensor:
    """`(r - group mean) / (std + 1e-4)` per completion (module docstring, step 4)."""
    if scale not in SCALES:
        raise LinnetError(f"grpo: scale_rewards must be one of {', '.join(SCALES)}, got {scale!r}")
    if rewards.dim() != 1 or rewards.numel() % group:
        raise LinnetError(f"grpo: {rewards.numel()} rewards do not make groups of {group}")
    grouped = rewards.view(-1, group)
    mean = grouped.mean(dim=1).repeat_interleave(group)
    advantages = rewards - mean
    if scale == "none":
        return advantages
    if scale == "group":
        std = bessel_std(grouped, dim=1).repeat_interleave(group)
    else:
        std = bessel_std(rewards, dim=0).expand_as(rewards)
    return advantages / (std + 1e-4)


def bessel_std(values: torch.Tensor, dim: int) -> torch.Tensor:
    """The Bessel-corrected standard deviation (0 of a single value, where TRL's is NaN
    and its advantage is then zeroed: the same advantage of 0)."""
    if values.shape[dim] < 2:
        return torch.zeros_like(values.select(dim, 0))
    return values.std(dim=dim, unbiased=True)


def completion_log_probs(
    model: LinnetModule,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    *,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`[N, T]` log-probabilities of each completion token given the tokens before it,
    of logits divided by `temperature` (0 past a completion's end), and the `[N, T]`
    mask of real tokens; `T` is the longest completion."""
    if len(prompts) != len(completions) or not prompts:
        raise LinnetError("grpo: log-probs need one prompt per completion, and at least one")
    if any(not c for c in completions) or any(not p for p in prompts):
        raise LinnetError("grpo: a prompt or completion is empty")
    device = model_device(model)
    lengths = torch.tensor([len(c) for c in completions])
    width = int(lengths.max())
    mask = torch.arange(width)[None, :] < lengths[:, None]
    if temperature == 1.0 and LOG_PROBS in model.entries:
        flat, index = _packed(model, prompts, completions, width)
    else:
        flat, index = _padded(model, prompts, completions, width, temperature)
    mask = mask.to(device)
    logps = flat[index.to(device)].masked_fill(~mask, 0.0)
    return logps, mask


def _packed(
    model: LinnetModule,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    width: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs `[P]` of every packed position and, per completion token, the index of
    the position that predicts it (the token before it)."""
    examples = [Example(list(p) + list(c)) for p, c in zip(prompts, completions, strict=True)]
    used = sum(len(e) for e in examples)
    batch = batch_of(examples, _bucket(used), range(len(examples)))
    logps = packed_log_probs(model, batch)
    index = torch.zeros(len(examples), width, dtype=torch.long)
    for row, ((start, _), prompt) in enumerate(zip(batch.spans, prompts, strict=True)):
        first = start + len(prompt) - 1
        index[row] = torch.arange(first, first + width).clamp(max=batch.size - 1)
    return logps, index


def _padded(
    model: LinnetModule,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    width: int,
    temperature: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same through the `forward` logits of right-padded rows (padding after a row's
    tokens never changes them in a causal model)."""
    rows = [list(p) + list(c) for p, c in zip(prompts, completions, strict=True)]
    length = _bucket(max(map(len, rows)))
    tokens = torch.zeros(len(rows), length, dtype=torch.int32)
    for i, row in enumerate(rows):
        tokens[i, : len(row)] = torch.tensor(row, dtype=torch.int32)
    device = model_device(model)
    logits = model.run_entry("forward", [tokens.to(device)])
    if not isinstance(logits, torch.Tensor) or tuple(logits.shape[:2]) != tuple(tokens.shape):
        raise LinnetError("grpo: the `forward` entry must return logits [B, S, Vocab]")
    scaled = logits[:, :-1].float() / temperature
    targets = tokens[:, 1:].long().to(device)
    per_position = -F.cross_entropy(scaled.transpose(1, 2), targets, reduction="none")
    index = torch.zeros(len(rows), width, dtype=torch.long)
    for number, prompt in enumerate(prompts):
        start = number * (length - 1) + len(prompt) - 1
        end = (number + 1) * (length - 1) - 1
        index[number] = torch.arange(start, start + width).clamp(max=end)
    return per_position.reshape(-1), index


def _bucket(n: int) -> int:
    """The power of two `>= n` (at least `SMALLEST`): few distinct shapes to lower."""
    size = SMALLEST
    while size < n:
        size *= 2
    return size


# -- the loss --------------------------------------------------------------------------------


def array_ops(value: Any) -> Any:
    """The functions on `value`'s kind of array: `torch` for a tensor, else the array's
    own array API namespace (`jax.numpy` for a JAX array or tracer)."""
    if isinstance(value, torch.Tensor):
        return torch
    namespace = getattr(value, "__array_namespace__", None)
    if namespace is None:
        raise LinnetError(f"grpo: expected torch tensors or arrays, got {type(value).__name__}")
    return namespace()


@record(frozen=True)
class TokenLosses:
    """Per-token losses `[N, T]` and what the figures read: the KL `[N, T]` (None
    without a reference) and which tokens' ratios were clipped `[N, T]` (bool)."""

    loss: torch.Tensor
    kl: torch.Tensor | None
    clipped: torch.Tensor


def token_losses(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    *,
    clip: tuple[float, float] = (0.2, 0.2),
    beta: float = 0.0,
    reference_logps: torch.Tensor | None = None,
    kl_correction: bool = True,
) -> TokenLosses:
    """The clipped surrogate plus `beta` KL of every token (module docstring, step 6),
    in TRL's order of operations. Array-agnostic: torch tensors, or arrays of an array
    API namespace (`jax.numpy` inside `linnet.jax.grpo`'s traced loss)."""
    ops = array_ops(logps)
    low, high = clip
    if advantages.ndim == 1:
        advantages = advantages[:, None]
    ratio = ops.exp(logps - old_logps)
    clamped = ops.clip(ratio, min=1 - low, max=1 + high)
    loss = -ops.minimum(ratio * advantages, clamped * advantages)
    clipped = ((ratio < 1 - low) & (advantages < 0)) | ((ratio > 1 + high) & (advantages > 0))
    kl = None
    if beta != 0.0:
        if reference_logps is None:
            raise LinnetError("grpo: beta != 0 needs the reference log-probs")
        kl = ops.exp(reference_logps - logps) - (reference_logps - logps) - 1
        if kl_correction:
            kl = kl * ratio
        loss = loss + beta * kl
    return TokenLosses(loss, kl, clipped)


def aggregate(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    loss_type: LossType,
    *,
    completions: int | None = None,
    tokens: float | None = None,
    max_new_tokens: int | None = None,
) -> torch.Tensor:
    """The loss of `per_token` `[n, T]` as its part of a step of `completions`
    completions holding `tokens` completion tokens (both default to this batch's;
    pass them under a JAX trace). Array-agnostic as `token_losses`."""
    ops = array_ops(per_token)
    if isinstance(mask, torch.Tensor):
        mask = mask.to(per_token.dtype)
    else:
        mask = mask.astype(per_token.dtype)
    count = per_token.shape[0] if completions is None else completions
    if loss_type == "grpo":
        each: torch.Tensor = (per_token * mask).sum(-1) / ops.clip(mask.sum(-1), min=1.0)
        return each.sum() / count
    if loss_type == "dapo":
        total = float(mask.sum()) if tokens is None else tokens
        if isinstance(total, float | int):
            total = max(total, 1.0)  # a traced count (linnet.jax.grpo) is at least 1 already
        summed: torch.Tensor = (per_token * mask).sum() / total
        return summed
    if loss_type == "dr_grpo":
        if max_new_tokens is None:
            raise LinnetError("grpo: loss_type 'dr_grpo' needs max_new_tokens")
        return (per_token * mask).sum() / (count * max_new_tokens)
    raise LinnetError(f"grpo: loss_type must be one of {', '.join(LOSS_TYPES)}, got {loss_type!r}")


def grpo_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip: tuple[float, float] = (0.2, 0.2),
    beta: float = 0.0,
    reference_logps: torch.Tensor | None = None,
    kl_correction: bool = True,
    loss_type: LossType = "dapo",
    max_new_tokens: int | None = None,
) -> torch.Tensor:
    """The loss of one batch of completions (`token_losses`, then `aggregate`)."""
    terms = token_losses(logps, old_logps, advantages, clip=clip, beta=beta,
                         reference_logps=reference_logps, kl_correction=kl_correction)  # fmt: skip
    return aggregate(terms.loss, mask, loss_type, max_new_tokens=max_new_tokens)


# -- the loop --------------------------------------------------------------------------------


def grpo(
    policy: LinnetModule,
    engine: Engine,
    prompts: Sequence[Sequence[int]],
    reward: Reward,
    *,
    optimizer: torch.optim.Optimizer,
    group: int = 8,
    clip: tuple[float, float] = (0.2, 0.2),
    beta: float = 0.0,
    reference: LinnetModule | None = None,
    kl_correction: bool = True,
    steps: int | None = None,
    prompts_per_step: int = 1,
    iterations: int = 1,
    loss_type: LossType = "dapo",
    scale_rewards: Scale = "group",
    max_new_tokens: int = 16,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    eos: Sequence[int] | None = None,
    seed: int | None = None,
    micro_batch: int | None = None,
    max_grad_norm: float | None = 1.0,
    on_step: Callable[[GrpoStep], None] | None = None,
) -> list[GrpoStep]:
    """Train `policy` with GRPO (module docstring); the figures of every step.

    `steps=None` is one pass over the prompts. `reference=None` with `beta > 0`
    takes a frozen copy of the policy as it is at the start (a second copy of the
    model). `seed` makes the samples reproducible (each completion's sampling seed
    is drawn from it). The gradients of the last iteration stay on the parameters.
    """
    check_options(prompts, group, clip, beta, reference, prompts_per_step, iterations, loss_type,
           scale_rewards, micro_batch)  # fmt: skip
    params = [p for p in policy.parameters() if p.requires_grad]
    if not params:
        raise LinnetError("grpo: the policy has no trainable parameter (trainable=True, or LoRA)")
    if beta != 0.0 and reference is None:
        reference = copy.deepcopy(policy)
        reference.requires_grad_(False)
    total = -(-len(prompts) // prompts_per_step) if steps is None else steps
    seeds = np.random.default_rng(seed)
    history: list[GrpoStep] = []
    for step in range(total):
        started = time.perf_counter()
        first = step * prompts_per_step
        chosen = [prompts[(first + i) % len(prompts)] for i in range(prompts_per_step)]
        refresh(engine, policy)
        count = len(chosen) * group
        drawn = None if seed is None else seeds.integers(0, 2**62, count).tolist()
        asked, completions = sample(
            engine,
            chosen,
            group,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            eos=eos,
            seeds=drawn,
        )
        rollout = score(asked, completions, reward, group, scale_rewards)
        figures = _train_on(
            policy, rollout, optimizer, params, reference, iterations=iterations, clip=clip,
            beta=beta, kl_correction=kl_correction, loss_type=loss_type,
            max_new_tokens=max_new_tokens, temperature=temperature, micro_batch=micro_batch or count,
            max_grad_norm=max_grad_norm,
        )  # fmt: skip
        record_ = GrpoStep(
            step=step,
            reward=float(rollout.rewards.mean()),
            reward_std=float(bessel_std(rollout.rewards, 0)),
            length=float(np.mean([len(c) for c in rollout.completions])),
            seconds=time.perf_counter() - started,
            **figures,
        )
        history.append(record_)
        if on_step is not None:
            on_step(record_)
    return history


def score(
    prompts: list[list[int]],
    completions: list[list[int]],
    reward: Reward,
    group: int,
    scale_rewards: Scale = "group",
) -> Rollout:
    """The rewards and advantages of sampled completions (module docstring, steps 3-4)."""
    values = list(reward(prompts, completions))
    if len(values) != len(completions):
        raise LinnetError(
            f"grpo: the reward function returned {len(values)} values for "
            f"{len(completions)} completions"
        )
    rewards = torch.tensor([float(v) for v in values], dtype=torch.float32)
    if not bool(torch.isfinite(rewards).all()):
        raise LinnetError(f"grpo: the reward function returned a non-finite value: {values}")
    return Rollout(
        tuple(tuple(p) for p in prompts),
        tuple(tuple(c) for c in completions),
        rewards,
        group_advantages(rewards, group, scale_rewards),
    )


def _train_on(
    policy: LinnetModule,
    rollout: Rollout,
    optimizer: torch.optim.Optimizer,
    params: list[torch.nn.Parameter],
    reference: LinnetModule | None,
    *,
    iterations: int,
    clip: tuple[float, float],
    beta: float,
    kl_correction: bool,
    loss_type: LossType,
    max_new_tokens: int,
    temperature: float,
    micro_batch: int,
    max_grad_norm: float | None,
) -> dict[str, float]:
    """`iterations` optimizer steps on one rollout; the figures of the last."""
    count = len(rollout.completions)
    parts = [slice(i, min(i + micro_batch, count)) for i in range(0, count, micro_batch)]
    tokens = float(sum(len(c) for c in rollout.completions))

    def log_probs(model: LinnetModule, part: slice) -> tuple[torch.Tensor, torch.Tensor]:
        return completion_log_probs(model, rollout.prompts[part], rollout.completions[part],
                                    temperature=temperature)  # fmt: skip

    old: list[torch.Tensor | None] = [None] * len(parts)
    references: list[torch.Tensor | None] = [None] * len(parts)
    with torch.no_grad():
        for i, part in enumerate(parts):
            if iterations > 1:
                old[i] = log_probs(policy, part)[0]
            if reference is not None and beta != 0.0:
                references[i] = log_probs(reference, part)[0]
    figures: dict[str, float] = {}
    for _ in range(iterations):
        optimizer.zero_grad()
        loss_sum, kl_sum, clipped_sum = 0.0, 0.0, 0.0
        for i, part in enumerate(parts):
            logps, mask = log_probs(policy, part)
            before = old[i]
            terms = token_losses(
                logps,
                logps.detach() if before is None else before,
                rollout.advantages[part].to(logps.device),
                clip=clip,
                beta=beta,
                reference_logps=references[i],
                kl_correction=kl_correction,
            )
            loss = aggregate(terms.loss, mask, loss_type, completions=count, tokens=tokens,
                             max_new_tokens=max_new_tokens)  # fmt: skip
            loss.backward()  # type: ignore[no-untyped-call]
            loss_sum += float(loss.detach())
            weight = mask.to(logps.dtype)
            if terms.kl is not None:
                kl_sum += float((terms.kl.detach() * weight).sum())
            clipped_sum += float((terms.clipped.to(logps.dtype) * weight).sum())
        if not math.isfinite(loss_sum):
            raise LinnetError(f"grpo: the loss is {loss_sum}")
        if max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
        optimizer.step()
        figures = {"loss": loss_sum, "kl": kl_sum / tokens, "clipped": clipped_sum / tokens}
    return figures


def check_options(
    prompts: Sequence[Sequence[int]],
    group: int,
    clip: tuple[float, float],
    beta: float,
    reference: object | None,
    prompts_per_step: int,
    iterations: int,
    loss_type: str,
    scale_rewards: str,
    micro_batch: int | None,
) -> None:
    """A LinnetError naming the first bad option of `grpo` (shared with `linnet.jax.grpo`)."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise LinnetError("grpo: no prompts, or an empty prompt")
    if group < 2:
        raise LinnetError(
            f"grpo: group must be at least 2 (advantages compare a group), got {group}"
        )
    if len(clip) != 2 or min(clip) < 0 or clip[0] >= 1:
        raise LinnetError(
            f"grpo: clip must be (low, high) with 0 <= low < 1 and high >= 0, got {clip}"
        )
    if beta < 0:
        raise LinnetError(f"grpo: beta must be >= 0, got {beta}")
    if reference is not None and beta == 0.0:
        raise LinnetError("grpo: a reference model is used only with beta > 0")
    for name, value in (("prompts_per_step", prompts_per_step), ("iterations", iterations)):
        if value < 1:
            raise LinnetError(f"grpo: {name} must be at least 1, got {value}")
    if micro_batch is not None and micro_batch < 1:
        raise LinnetError(f"grpo: micro_batch must be at least 1, got {micro_batch}")
    if loss_type not in LOSS_TYPES:
        raise LinnetError(
            f"grpo: loss_type must be one of {', '.join(LOSS_TYPES)}, got {loss_type!r}"
        )
    if scale_rewards not in SCALES:
        raise LinnetError(
            f"grpo: scale_rewards must be one of {', '.join(SCALES)}, got {scale_rewards!r}"
        )
