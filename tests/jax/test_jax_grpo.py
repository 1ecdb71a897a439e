"""`linnet.jax.grpo` against `linnet.train.grpo` (PyTorch, itself checked against TRL).

On fixed completions of the tiny Llama example (unequal lengths, rewards in two
groups): the per-token log-probs, the loss and every parameter's gradient of
one step equal the PyTorch path's within 1e-5 (f32), for the three loss types,
with a reference model and KL, at temperatures 1 and 0.7, and with old log-probs
that differ from the current ones (ratios clipped both ways). Then one step end
to end: sampling with a JAX `Engine` refreshed from the policy, seeded, gives
the PyTorch loop's completions, figures and updated parameters (SGD), and a
second run's refresh puts the trained arrays into the engine.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

optax = pytest.importorskip("optax")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import jax  # noqa: E402
from decoder_cases import llama  # noqa: E402
from jax_train_support import torch_model  # noqa: E402

import linnet.jax as lj  # noqa: E402
import linnet.torch as lt  # noqa: E402
from linnet.jax.grpo import completion_log_probs, grpo, rollout_loss, sequences  # noqa: E402
from linnet.jax.train.model import as_trainable  # noqa: E402
from linnet.serve import Engine  # noqa: E402
from linnet.train import grpo as torch_grpo  # noqa: E402

PROMPTS = [[5, 9, 14], [20, 3, 8]]
COMPLETIONS = [[7, 7, 30, 2], [11, 4], [7, 25, 60, 41], [40], [8, 8, 8], [12, 2], [7], [33, 34]]
GROUP = 4
REWARDS = [1.0, 0.0, 2.0, 0.5, -1.0, 0.25, 3.0, 0.0]
WIDTH = 4

CASES = [
    ("dapo", 0.04, 1.0, True, False),
    pytest.param("grpo", 0.0, 0.7, True, True, marks=pytest.mark.slow),
    ("dr_grpo", 0.1, 1.0, False, True),
]


def jax_policy(seed: int = 0, rows: int = 1, max_seq: int = 16) -> Any:
    decoder = llama(seed)
    return lj.load_model(decoder.source, generics=decoder.generics(rows, max_seq),
                         weights=decoder.weights)  # fmt: skip


@pytest.mark.parametrize(("loss_type", "beta", "temperature", "corrected", "shifted"), CASES)
def test_loss_and_gradients_equal_pytorch(
    loss_type: str, beta: float, temperature: float, corrected: bool, shifted: bool
) -> None:
    prompts = [p for p in PROMPTS for _ in range(GROUP)]
    tokens = float(sum(map(len, COMPLETIONS)))
    shift = np.random.default_rng(4).uniform(-0.4, 0.4, (len(COMPLETIONS), WIDTH))
    options: dict[str, Any] = {"clip": (0.2, 0.28), "beta": beta, "kl_correction": corrected}
    # PyTorch
    model, reference = torch_model(llama(0)), torch_model(llama(1))
    logps, mask = torch_grpo.completion_log_probs(model, prompts, COMPLETIONS,
                                                  temperature=temperature)  # fmt: skip
    with torch.no_grad():
        ref_logps = torch_grpo.completion_log_probs(reference, prompts, COMPLETIONS,
                                                    temperature=temperature)[0]  # fmt: skip
    advantages = torch_grpo.group_advantages(torch.tensor(REWARDS), GROUP)
    old = logps.detach() + torch.from_numpy(shift).float() if shifted else logps.detach()
    terms = torch_grpo.token_losses(logps, old, advantages, reference_logps=ref_logps, **options)
    loss = torch_grpo.aggregate(terms.loss, mask, loss_type, completions=len(COMPLETIONS),  # type: ignore[arg-type]
                                tokens=tokens, max_new_tokens=WIDTH)  # fmt: skip
    loss.backward()
    # JAX
    policy, ref_model = as_trainable(jax_policy(0)), as_trainable(jax_policy(1))
    batch = sequences(prompts, COMPLETIONS)
    apply = policy.entry("forward")
    ours_logps = completion_log_probs(apply, policy.parameters, batch, temperature)
    np.testing.assert_allclose(np.asarray(ours_logps), logps.detach().numpy(), atol=1e-5)
    ours_ref = completion_log_probs(ref_model.entry("forward"), ref_model.parameters, batch,
                                    temperature)  # fmt: skip
    ours_old = np.asarray(ours_logps) + shift.astype(np.float32) if shifted else None

    def objective(params: Any) -> Any:
        return rollout_loss(apply, params, batch, advantages.numpy(), ours_old, ours_ref,
                            loss_type=loss_type, completions=len(COMPLETIONS), tokens=tokens,  # type: ignore[arg-type]
                            max_new_tokens=WIDTH, temperature=temperature, **options)  # fmt: skip

    (ours, (kl, clipped)), grads = jax.value_and_grad(objective, has_aux=True)(policy.parameters)
    assert float(ours) == pytest.approx(float(loss.detach()), rel=1e-5, abs=1e-7)
    if shifted:
        assert 0 < float(clipped) == float((terms.clipped & mask).sum()) < tokens
    if beta:
        assert terms.kl is not None
        assert float(kl) == pytest.approx(float((terms.kl.detach() * mask).sum()), rel=1e-5)
    for name, value in model.named_parameters():
        assert value.grad is not None
        np.testing.assert_allclose(np.asarray(grads[name]), value.grad.numpy(), rtol=1e-5,
                                   atol=1e-5, err_msg=name)  # fmt: skip


def reward(prompts: list[list[int]], completions: list[list[int]]) -> list[float]:
    return [float(sum(t % 3 == 0 for t in c)) for c in completions]


@pytest.mark.slow
def test_one_step_end_to_end_equals_pytorch() -> None:
    decoder = llama()
    options: dict[str, Any] = {"group": 4, "prompts_per_step": 2, "max_new_tokens": 5,
                               "steps": 1, "seed": 7, "beta": 0.05, "micro_batch": 3}  # fmt: skip
    engine = Engine(jax_policy(0, rows=4, max_seq=32))
    policy = jax_policy(0, max_seq=32)
    params, ours = grpo(policy, engine, PROMPTS, reward, optimizer=optax.sgd(0.5), **options)
    sampler = lt.load(decoder.source, generics=decoder.generics(4, 32), weights=decoder.weights)
    model = torch_model(decoder)
    theirs = torch_grpo.grpo(model, Engine(sampler), PROMPTS, reward,
                             optimizer=torch.optim.SGD(model.parameters(), lr=0.5), **options)  # fmt: skip
    (a,), (b,) = ours, theirs
    assert (a.reward, a.reward_std, a.length) == pytest.approx((b.reward, b.reward_std, b.length))
    assert a.reward_std > 0  # the advantages are not all zero: the step moves the weights
    assert a.loss == pytest.approx(b.loss, rel=1e-5, abs=1e-7)
    assert a.kl == pytest.approx(b.kl, rel=1e-5, abs=1e-7) and a.clipped == b.clipped
    for name, value in model.named_parameters():
        np.testing.assert_allclose(np.asarray(params[name]), value.detach().numpy(), rtol=1e-5,
                                   atol=1e-6, err_msg=name)  # fmt: skip
    # the next run's refresh hands the trained arrays to the engine
    grpo(policy, engine, PROMPTS, reward, optimizer=optax.sgd(0.0), parameters=params, **options)
    held = engine.decoder.model.parameters  # type: ignore[attr-defined]
    for name, _ in model.named_parameters():
        np.testing.assert_array_equal(np.asarray(held[name]), np.asarray(params[name]))
    assert not np.array_equal(np.asarray(held["lm_head.weight"]), decoder.weights["lm_head.weight"])


def test_a_lora_policy_is_merged_into_the_engine_and_bad_options_are_refused() -> None:
    from linnet.errors import LinnetError
    from linnet.jax.grpo import refresh
    from linnet.jax.train import add_lora, merge_lora

    lora = add_lora(jax_policy(0), "*.q_proj.weight", rank=2, alpha=4, seed=3)
    params = dict(lora.parameters)
    for key in lora.arrays():  # lora_B starts at zero: give the adapters an update
        params[key] = params[key] + 0.05
    engine = Engine(jax_policy(1, rows=2))
    refresh(engine, lora, params)
    held = engine.decoder.model.parameters  # type: ignore[attr-defined]
    merged = merge_lora(lora, params)
    assert not any(".lora_" in path for path in held)
    for path, value in merged.items():
        np.testing.assert_allclose(np.asarray(held[path]), np.asarray(value), rtol=0, atol=0)
    changed = [p for p in merged if "q_proj" in p]
    assert changed and not np.array_equal(np.asarray(held[changed[0]]),
                                          np.asarray(jax_policy(0).parameters[changed[0]]))  # fmt: skip
    for bad, match in (({"group": 1}, "group"), ({"loss_type": "sum"}, "loss_type"),
                       ({"beta": 0.0, "reference": lora}, "reference")):  # fmt: skip
        with pytest.raises(LinnetError, match=match):
            grpo(lora, engine, PROMPTS, reward, optimizer=optax.sgd(0.1), **bad)  # type: ignore[arg-type]
