"""Direct preference optimisation on JAX: `linnet.jax.dpo.dpo`, the same steps as `linnet.train.dpo`.

Stage: training on the JAX backend. In: a model from `linnet.jax.load_source`
/ `load_model` (or a `LoraModel`, `linnet.jax.train.add_lora`) whose logits
entry (`forward`, `tokens [B, S] -> logits [B, S, Vocab]`) scores sequences,
and preference `Pair`s (`linnet.train.dpo.Pair`). Out: every parameter after
training and one `DpoStep` of figures per step.

The data and the loss are `linnet.train.dpo`'s (TRL's sigmoid `DPOTrainer`):
batches are `linnet.train.dpo.collate`d (the N chosen rows, then the N
rejected rows, right-padded, with the completion mask; here all to the
longest row of all batches, so one compiled step serves every batch); a completion's
log-probability is the sum of `log_softmax(logits[t - 1])[token[t]]` over its
tokens in f32; with `d = (pi_c - ref_c) - (pi_r - ref_r)` a pair's loss is
`-(1 - eps) log sigmoid(beta d) - eps log sigmoid(-beta d)` and the step's
the mean over pairs. With `reference=None` the reference log-probs of every
batch are computed once, before the first step, from the starting
parameters; a `reference` model is run beside the policy each step instead.
Each step is one jitted function: the loss's gradient, clipping as
`torch.nn.utils.clip_grad_norm_`, the optax update, f32 master weights and
`trainable` globs as in `linnet.jax.train.train`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from linnet.errors import LinnetError
from linnet.jax.train.loop import starting_point, update
from linnet.jax.train.model import Apply, as_trainable
from linnet.jax.train.params import Globs, Split
from linnet.train.dpo import DpoStep, Pair, PreferenceBatch, collate, dpo_figures


def sequence_log_probs(logits: Any, tokens: Any, completion: Any) -> Any:
    """`[B]`: per row, the sum over masked positions `t >= 1` of the log-probability the
    logits at `t - 1` give `tokens[t]` (f32; `linnet.train.dpo.sequence_log_probs`)."""
    predicted = jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32), axis=-1)
    targets = tokens[:, 1:].astype(jnp.int32)
    per_token = jnp.take_along_axis(predicted, targets[..., None], axis=-1)[..., 0]
    return (per_token * completion[:, 1:].astype(per_token.dtype)).sum(axis=1)


def dpo_loss(
    policy_chosen: Any,
    policy_rejected: Any,
    reference_chosen: Any,
    reference_rejected: Any,
    *,
    beta: float = 0.1,
    label_smoothing: float = 0.0,
) -> tuple[Any, Any, Any]:
    """Per-pair sigmoid DPO losses and the chosen and rejected rewards, in the order of
    operations of `linnet.train.dpo.dpo_loss` (TRL's)."""
    chosen_logratios = policy_chosen - reference_chosen
    rejected_logratios = policy_rejected - reference_rejected
    delta = chosen_logratios - rejected_logratios
    losses = -jax.nn.log_sigmoid(beta * delta)
    if label_smoothing:
        losses = (
            losses * (1 - label_smoothing) - jax.nn.log_sigmoid(-beta * delta) * label_smoothing
        )
    rewards = jax.lax.stop_gradient
    return losses, rewards(beta * chosen_logratios), rewards(beta * rejected_logratios)


def preference_log_probs(apply: Apply, params: Mapping[str, Any], batch: Any) -> tuple[Any, Any]:
    """The chosen and rejected completion log-probs `[N]` of the logits entry `apply`."""
    tokens, completion = batch
    logits = apply(params, tokens)
    if logits.ndim != 3 or tuple(logits.shape[:2]) != tuple(tokens.shape):
        raise LinnetError(
            f"dpo: the entry must return logits [B, S, Vocab] for tokens {list(tokens.shape)}, "
            f"got {list(logits.shape)}"
        )
    both = sequence_log_probs(logits, tokens, completion)
    half = tokens.shape[0] // 2
    return both[:half], both[half:]


def arrays(batch: PreferenceBatch) -> tuple[np.ndarray, np.ndarray]:
    return np.asarray(batch.tokens, np.int32), np.asarray(batch.completion, np.bool_)


def dpo(
    model: Any,
    pairs: Sequence[Pair],
    *,
    optimizer: Any,
    reference: Any = None,
    beta: float = 0.1,
    label_smoothing: float = 0.0,
    batch_size: int = 8,
    steps: int | None = None,
    clip: float | None = 1.0,
    pad_id: int = 0,
    entry: str = "forward",
    trainable: Globs = True,
    master: str | None = "f32",
    parameters: Mapping[str, Any] | None = None,
    on_step: Callable[[DpoStep], None] | None = None,
) -> tuple[dict[str, Any], list[DpoStep]]:
    """Train `model` on `pairs` with the DPO loss (module docstring); every parameter after
    training and the figures of every step. `steps=None` is one pass over the pairs;
    batches are the pairs in order, `batch_size` at a time, cycled."""
    if not pairs:
        raise LinnetError("dpo: no preference pairs")
    if batch_size < 1:
        raise LinnetError(f"dpo: batch_size must be at least 1, got {batch_size}")
    if not 0.0 <= label_smoothing < 0.5:
        raise LinnetError(f"dpo: label_smoothing must be in [0, 0.5), got {label_smoothing}")
    # every batch padded to the longest row of all: one shape, one compile (right
    # padding changes no log-prob of a causal model)
    longest = max(len(p.prompt) + max(len(p.chosen), len(p.rejected)) for p in pairs)
    batches = [
        arrays(collate(pairs[i : i + batch_size], pad_id=pad_id, pad_to_multiple_of=longest))
        for i in range(0, len(pairs), batch_size)
    ]
    total = len(batches) if steps is None else steps
    if total < 0:
        raise LinnetError(f"dpo: steps must be at least 0, got {steps}")
    found, layout, trained = starting_point(model, parameters, trainable, master)
    frozen = dict(layout.frozen)
    apply = found.entry(entry)
    fixed = None
    if reference is None:
        start = layout.full(trained, frozen)
        score = _scorer(apply)
        fixed = [score(start, b) for b in batches]
    else:
        ref = as_trainable(reference)
        ref_score, ref_params = _scorer(ref.entry(entry)), ref.parameters
    opt_state = optimizer.init(trained)
    step = _compiled(apply, layout, optimizer, beta, label_smoothing, clip)
    history: list[DpoStep] = []
    for number in range(total):
        index = number % len(batches)
        batch = batches[index]
        if fixed is not None:
            chosen_ref, rejected_ref = fixed[index]
        else:
            chosen_ref, rejected_ref = ref_score(ref_params, batch)
        trained, opt_state, loss, chosen, rejected = step(
            trained, opt_state, frozen, batch, chosen_ref, rejected_ref
        )
        figures = dpo_figures(number, float(loss), np.asarray(chosen), np.asarray(rejected))
        history.append(figures)
        if on_step is not None:
            on_step(figures)
    return layout.full(trained, frozen), history


def _scorer(apply: Apply) -> Callable[[Mapping[str, Any], Any], tuple[Any, Any]]:
    """The jitted `preference_log_probs` of the entry `apply` (reference log-probs)."""
    scored: Callable[[Mapping[str, Any], Any], tuple[Any, Any]] = jax.jit(
        lambda params, batch: preference_log_probs(apply, params, batch)
    )
    return scored


def _compiled(
    apply: Apply,
    layout: Split,
    optimizer: Any,
    beta: float,
    label_smoothing: float,
    clip: float | None,
) -> Callable[..., Any]:
    def objective(trained: Any, frozen: Any, batch: Any, chosen_ref: Any, rejected_ref: Any) -> Any:
        chosen, rejected = preference_log_probs(apply, layout.full(trained, frozen), batch)
        losses, chosen_rewards, rejected_rewards = dpo_loss(
            chosen,
            rejected,
            chosen_ref,
            rejected_ref,
            beta=beta,
            label_smoothing=label_smoothing,
        )
        return losses.mean(), (chosen_rewards, rejected_rewards)

    grad = jax.value_and_grad(objective, has_aux=True)

    def step(
        trained: Any, opt_state: Any, frozen: Any, batch: Any, chosen_ref: Any, rejected_ref: Any
    ) -> Any:
        (loss, (chosen, rejected)), grads = grad(trained, frozen, batch, chosen_ref, rejected_ref)
        trained, opt_state, _ = update(optimizer, trained, opt_state, grads, clip)
        return trained, opt_state, loss, chosen, rejected

    return jax.jit(step, donate_argnums=(0, 1))
