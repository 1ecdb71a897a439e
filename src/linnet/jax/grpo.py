"""Group relative policy optimisation on JAX: `linnet.jax.grpo.grpo`, `linnet.train.grpo`'s steps.

Stage: reinforcement learning on the JAX backend. In: a policy from
`linnet.jax.load_model` / `load_source` (or a `LoraModel`,
`linnet.jax.train.add_lora`) whose `forward` entry gives logits `[B, S,
Vocab]`, a `linnet.serve.Engine` that samples (any backend; over a
`linnet.jax.load_model` of the example the weights never leave the device),
prompts as token ids and a reward function. Out: every parameter after
training and one `linnet.train.grpo.GrpoStep` of figures per step.

Each step is `linnet.train.grpo`'s (TRL's `GRPOTrainer`), with its pieces:
the engine's weights become the policy's (`refresh`: `Engine.copy_weights` of
the policy's arrays, LoRA adapters merged); `sample` draws `group`
completions per prompt; `score` gives the rewards and `group_advantages`;
the loss per token is `token_losses` and its aggregation `aggregate` (the
same functions, run on `jax.numpy` arrays inside the traced loss). The
log-probs of the completion tokens come from the `forward` logits of the
right-padded sequences divided by the temperature (`completion_log_probs`;
padding after a row never changes it in a causal model), in f32.

The optimizer step is optax's: `iterations` times, the gradient of the loss
summed over parts of `micro_batch` completions (every part padded to the
same rows, masked out, so one compiled gradient serves them all; each part's
loss scaled so that the parts sum to the step's), clipped as
`torch.nn.utils.clip_grad_norm_` to `max_grad_norm`, then the optax update,
the trained arrays kept in the `master` dtype and `trainable` picked by path
globs as in `linnet.jax.train.train`. The rows are padded to a power of two
and the sequence length to one (16 at least), so few shapes are compiled.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from linnet.errors import LinnetError
from linnet.jax.train.loop import starting_point, update
from linnet.jax.train.lora import LoraModel
from linnet.jax.train.model import Apply, as_trainable
from linnet.jax.train.params import Globs
from linnet.serve import Engine
from linnet.serve.engine import bucket
from linnet.train.grpo import (
    SMALLEST,
    GrpoStep,
    LossType,
    Reward,
    Rollout,
    Scale,
    aggregate,
    bessel_std,
    check_options,
    sample,
    score,
    token_losses,
)

LARGEST = 1 << 30


class Sequences(NamedTuple):
    """Prompts and completions as the loss reads them (host arrays): `tokens [R, L]`
    (prompt then completion, right-padded), for each completion token the index
    (`picks [R, T]`) into the flattened `[R * (L - 1)]` next-token log-probs of the position
    that predicts it, and the mask `[R, T]` of real tokens. Rows past the
    completions (padding) are all masked. A tuple, so a pytree `jax.jit` traces."""

    tokens: np.ndarray[Any, Any]
    picks: np.ndarray[Any, Any]
    mask: np.ndarray[Any, Any]


def sequences(
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    *,
    rows: int | None = None,
    length: int | None = None,
    width: int | None = None,
) -> Sequences:
    """The `Sequences` of these completions, `rows` rows (default: their number), the
    sequence `length` (default: the power of two over the longest) and `width`
    completion tokens (default: the longest completion)."""
    if len(prompts) != len(completions) or not prompts:
        raise LinnetError("grpo: log-probs need one prompt per completion, and at least one")
    if any(not c for c in completions) or any(not p for p in prompts):
        raise LinnetError("grpo: a prompt or completion is empty")
    joined = [list(p) + list(c) for p, c in zip(prompts, completions, strict=True)]
    count = len(joined) if rows is None else rows
    size = bucket(max(map(len, joined)), SMALLEST, LARGEST) if length is None else length
    wide = max(map(len, completions)) if width is None else width
    tokens = np.zeros((count, size), np.int32)
    index = np.zeros((count, wide), np.int32)
    mask = np.zeros((count, wide), np.bool_)
    for row, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
        tokens[row, : len(joined[row])] = joined[row]
        start = row * (size - 1) + len(prompt) - 1
        index[row] = np.minimum(np.arange(start, start + wide), (row + 1) * (size - 1) - 1)
        mask[row, : len(completion)] = True
    return Sequences(tokens, index, mask)


def completion_log_probs(
    apply: Apply, params: Mapping[str, Any], batch: Sequences, temperature: float = 1.0
) -> Any:
    """`[R, T]` log-probabilities (f32) of each completion token given the tokens before it,
    of the `forward` logits divided by `temperature` (0 where masked);
    `linnet.train.grpo.completion_log_probs` on JAX."""
    tokens = jnp.asarray(batch.tokens)
    logits = apply(params, tokens)
    if logits.ndim != 3 or tuple(logits.shape[:2]) != tuple(tokens.shape):
        raise LinnetError(
            f"grpo: the entry must return logits [B, S, Vocab] for tokens {list(tokens.shape)}, "
            f"got {list(logits.shape)}"
        )
    scaled = jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32) / temperature, axis=-1)
    targets = tokens[:, 1:]
    per_position = jnp.take_along_axis(scaled, targets[..., None], axis=-1)[..., 0]
    picked = per_position.reshape(-1)[jnp.asarray(batch.picks)]
    return jnp.where(jnp.asarray(batch.mask), picked, 0.0)


def rollout_loss(
    apply: Apply,
    params: Mapping[str, Any],
    batch: Sequences,
    advantages: Any,
    old_logps: Any = None,
    reference_logps: Any = None,
    *,
    clip: tuple[float, float] = (0.2, 0.2),
    beta: float = 0.0,
    kl_correction: bool = True,
    loss_type: LossType = "dapo",
    completions: int,
    tokens: float,
    max_new_tokens: int | None = None,
    temperature: float = 1.0,
) -> tuple[Any, tuple[Any, Any]]:
    """The GRPO loss of `batch` as its part of a step of `completions` completions holding
    `tokens` completion tokens (`token_losses` then `aggregate`, linnet.train.grpo's),
    with the masked sums of the KL and of the clipped tokens. `old_logps=None` takes the
    current log-probs, without gradient (`iterations=1`: the ratio is 1)."""
    logps = completion_log_probs(apply, params, batch, temperature)
    before = jax.lax.stop_gradient(logps) if old_logps is None else old_logps
    weights: Any = jnp.asarray(advantages, jnp.float32)
    terms = token_losses(logps, before, weights, clip=clip, beta=beta,
                         reference_logps=reference_logps, kl_correction=kl_correction)  # fmt: skip
    mask: Any = jnp.asarray(batch.mask)
    loss = aggregate(terms.loss, mask, loss_type, completions=completions, tokens=tokens,
                     max_new_tokens=max_new_tokens)  # fmt: skip
    weight = mask.astype(jnp.float32)
    per_kl: Any = terms.kl
    kl = jnp.zeros(()) if per_kl is None else (jax.lax.stop_gradient(per_kl) * weight).sum()
    clipped: Any = terms.clipped
    return loss, (kl, (clipped.astype(jnp.float32) * weight).sum())


def policy_weights(policy: Any, params: Mapping[str, Any]) -> dict[str, Any]:
    """The weights the policy's entries read, by path: `params` with every LoRA adapter
    merged into its weight (the adapters' own arrays left out), params only."""
    trainable = as_trainable(policy)
    merged = policy.merged(params) if isinstance(policy, LoraModel) else dict(params)
    return {p: v for p, v in merged.items() if trainable.bound.tensors[p].kind == "param"}


def refresh(engine: Engine, policy: Any, params: Mapping[str, Any]) -> None:
    """Copy the policy's weights (`policy_weights`) into the engine's model in place."""
    engine.copy_weights(policy_weights(policy, params))


def grpo(
    policy: Any,
    engine: Engine,
    prompts: Sequence[Sequence[int]],
    reward: Reward,
    *,
    optimizer: Any,
    group: int = 8,
    clip: tuple[float, float] = (0.2, 0.2),
    beta: float = 0.0,
    reference: Any = None,
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
    entry: str = "forward",
    trainable: Globs = True,
    master: str | None = "f32",
    parameters: Mapping[str, Any] | None = None,
    on_step: Callable[[GrpoStep], None] | None = None,
) -> tuple[dict[str, Any], list[GrpoStep]]:
    """Train `policy` with GRPO (module docstring); every parameter after training and the
    figures of every step. The options are `linnet.train.grpo.grpo`'s; `reference=None`
    with `beta > 0` scores with the starting parameters. `trainable`, `master` and
    `parameters` are `linnet.jax.train.train`'s, `entry` the logits entry."""
    check_options(prompts, group, clip, beta, reference, prompts_per_step, iterations, loss_type,
           scale_rewards, micro_batch)  # fmt: skip
    found, layout, trained = starting_point(policy, parameters, trainable, master)
    frozen = dict(layout.frozen)
    apply = found.entry(entry)
    if reference is not None:
        ref = as_trainable(reference)
        ref_apply, ref_params = ref.entry(entry), ref.parameters
    elif beta != 0.0:
        ref_apply = apply
        ref_params = jax.tree.map(jnp.copy, layout.full(trained, frozen))
    opt_state = optimizer.init(trained)
    options = {"clip": clip, "beta": beta, "kl_correction": kl_correction,
               "loss_type": loss_type, "max_new_tokens": max_new_tokens,
               "temperature": temperature}  # fmt: skip
    scorer = jax.jit(lambda params, batch: completion_log_probs(apply, params, batch, temperature))
    ref_scorer = None
    if beta != 0.0:
        ref_scorer = jax.jit(
            lambda params, batch: completion_log_probs(ref_apply, params, batch, temperature)
        )
    gradient = _gradient(apply, layout, options)

    def optimizer_step(trained: Any, opt_state: Any, grads: Any) -> Any:
        return update(optimizer, trained, opt_state, grads, max_grad_norm)

    step_update = jax.jit(optimizer_step, donate_argnums=(0, 1))
    total = -(-len(prompts) // prompts_per_step) if steps is None else steps
    seeds = np.random.default_rng(seed)
    history: list[GrpoStep] = []
    for number in range(total):
        started = time.perf_counter()
        first = number * prompts_per_step
        chosen = [prompts[(first + i) % len(prompts)] for i in range(prompts_per_step)]
        refresh(engine, policy, layout.full(trained, frozen))
        count = len(chosen) * group
        drawn = None if seed is None else seeds.integers(0, 2**62, count).tolist()
        asked, completions = sample(engine, chosen, group, max_new_tokens=max_new_tokens,
                                    temperature=temperature, top_k=top_k, top_p=top_p, eos=eos,
                                    seeds=drawn)  # fmt: skip
        rollout = score(asked, completions, reward, group, scale_rewards)
        parts = _parts(rollout, micro_batch or count)
        advantages = [a for _, a in parts]
        old: list[Any] = [None] * len(parts)
        if iterations > 1:
            full = layout.full(trained, frozen)
            old = [scorer(full, batch) for batch, _ in parts]
        references: list[Any] = [None] * len(parts)
        if ref_scorer is not None:
            references = [ref_scorer(ref_params, batch) for batch, _ in parts]
        tokens = float(sum(len(c) for c in rollout.completions))
        figures: dict[str, float] = {}
        for _ in range(iterations):
            grads = jax.tree.map(jnp.zeros_like, trained)
            loss_sum, kl_sum, clipped_sum = 0.0, 0.0, 0.0
            for (batch, _), adv, before, ref_logps in zip(
                parts, advantages, old, references, strict=True
            ):
                (loss, (kl, clipped)), part_grads = gradient(
                    trained, frozen, batch, adv, before, ref_logps, count, tokens
                )
                grads = jax.tree.map(jnp.add, grads, part_grads)
                loss_sum += float(loss)
                kl_sum += float(kl)
                clipped_sum += float(clipped)
            if not math.isfinite(loss_sum):
                raise LinnetError(f"grpo: the loss is {loss_sum}")
            trained, opt_state, _ = step_update(trained, opt_state, grads)
            figures = {"loss": loss_sum, "kl": kl_sum / tokens, "clipped": clipped_sum / tokens}
        record = GrpoStep(
            step=number,
            reward=float(rollout.rewards.mean()),
            reward_std=float(bessel_std(rollout.rewards, 0)),
            length=float(np.mean([len(c) for c in rollout.completions])),
            seconds=time.perf_counter() - started,
            **figures,
        )
        history.append(record)
        if on_step is not None:
            on_step(record)
    return layout.full(trained, frozen), history


def _parts(rollout: Rollout, micro_batch: int) -> list[tuple[Sequences, np.ndarray[Any, Any]]]:
    """The rollout in parts of `micro_batch` completions, each padded to the same rows
    (a power of two), length and width, with its advantages `[rows]` (0 on padding)."""
    count = len(rollout.completions)
    rows = bucket(min(micro_batch, count), 1, LARGEST)
    longest = max(
        len(p) + len(c) for p, c in zip(rollout.prompts, rollout.completions, strict=True)
    )
    length = bucket(longest, SMALLEST, LARGEST)
    width = max(len(c) for c in rollout.completions)
    advantages = rollout.advantages.numpy().astype(np.float32)
    found = []
    for start in range(0, count, micro_batch):
        end = min(start + micro_batch, count)
        batch = sequences(rollout.prompts[start:end], rollout.completions[start:end], rows=rows,
                          length=length, width=width)  # fmt: skip
        padded = np.zeros(rows, np.float32)
        padded[: end - start] = advantages[start:end]
        found.append((batch, padded))
    return found


def _gradient(apply: Apply, layout: Any, options: Mapping[str, Any]) -> Callable[..., Any]:
    """The jitted `(trained, frozen, batch, advantages, old, reference, completions,
    tokens) -> ((loss, (kl, clipped)), grads)` of one part (`rollout_loss`)."""

    def objective(
        trained: Any, frozen: Any, batch: Sequences, advantages: Any, old: Any, ref: Any,
        completions: Any, tokens: Any,
    ) -> Any:  # fmt: skip
        return rollout_loss(apply, layout.full(trained, frozen), batch, advantages, old, ref,
                            completions=completions, tokens=tokens, **options)  # fmt: skip

    grad = jax.value_and_grad(objective, has_aux=True)
    return jax.jit(grad, static_argnames=("completions",))
