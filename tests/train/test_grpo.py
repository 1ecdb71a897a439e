"""`linnet.train.grpo` against TRL's `GRPOTrainer` (trl 1.16.0) on the same model and samples.

Sampling is random, so the comparison is on fixed completions: TRL's trainer
is built offline on the transformers model (a small BPE tokenizer, a prompt
dataset) and its own `_compute_loss` runs on prompts, completions of unequal
lengths, advantages, old log-probs that differ from the current ones (so the
ratio is clipped both ways) and reference log-probs computed by TRL's
`_get_per_token_logps_and_entropies` on a second transformers model. The
Linnet twin computes the same with `completion_log_probs` and `grpo_loss`.
Checked within 1e-5: the per-token log-probs (packed entry at temperature 1,
the `forward` logits at 0.7), the loss, the clipped share and KL TRL logs, and
every parameter's gradient, for the three loss types, Llama and GPT-2. The
advantages equal TRL's formula (with its `nanstd`).

Then the loop end to end: `grpo` samples with an `Engine` over a second,
frozen and compiled copy of the example, whose weights are refreshed from the
policy each step (checked against the policy's weights after the step before;
a LoRA policy's merged weights give the policy's own greedy tokens); micro
batches give the gradients of one batch; a seed makes a run reproducible; and
a reward the policy can reach goes up.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")

import family_support as fs  # noqa: E402
from lora_cases import gap, hf_tokenizer, linnet_twin, randomise  # noqa: E402

import linnet.torch as lt  # noqa: E402
from linnet.errors import LinnetError  # noqa: E402
from linnet.serve import Engine, Request  # noqa: E402
from linnet.train import add_lora  # noqa: E402
from linnet.train.grpo import (  # noqa: E402
    completion_log_probs,
    group_advantages,
    grpo,
    grpo_loss,
    policy_weights,
    refresh,
    token_losses,
)

PROMPTS = [[5, 9, 14], [20, 3, 8]]  # equal lengths: TRL counts positions from its left padding
COMPLETIONS = [[7, 7, 30, 2], [11, 4], [7, 25, 60, 61], [40], [8, 8, 8], [12, 2], [7], [33, 34]]
GROUP = 4
REWARDS = [1.0, 0.0, 2.0, 0.5, -1.0, 0.25, 3.0, 0.0]
WIDTH = 4  # the longest completion: TRL's max_completion_length for dr_grpo


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return hf_tokenizer(tmp_path_factory.mktemp("tokenizer"))


def trl_trainer(policy: Any, tokenizer: Any, tmp_path: Path, **config: Any) -> Any:
    args = trl.GRPOConfig(
        output_dir=str(tmp_path / "trl"),
        per_device_train_batch_size=len(COMPLETIONS),
        num_generations=GROUP,
        max_completion_length=WIDTH,
        report_to=[],
        use_cpu=True,
        disable_dropout=True,
        bf16=False,  # transformers 5 defaults to bf16 autocast where the CPU has it
        **config,
    )
    data = datasets.Dataset.from_dict({"prompt": ["ab cd", "ef gh"]})
    trainer = trl.GRPOTrainer(model=policy, reward_funcs=lambda **_: [0.0], args=args,
                              train_dataset=data, processing_class=tokenizer)  # fmt: skip
    trainer.model.train()  # TRL logs under "train" in training mode
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer's loop, which we skip
    return trainer


def trl_inputs() -> dict[str, Any]:
    prompts = [p for p in PROMPTS for _ in range(GROUP)]
    completion = torch.zeros(len(COMPLETIONS), WIDTH, dtype=torch.long)
    mask = torch.zeros(len(COMPLETIONS), WIDTH, dtype=torch.long)
    for i, tokens in enumerate(COMPLETIONS):
        completion[i, : len(tokens)] = torch.tensor(tokens)
        mask[i, : len(tokens)] = 1
    return {
        "prompt_ids": torch.tensor(prompts),
        "prompt_mask": torch.ones(len(prompts), len(PROMPTS[0]), dtype=torch.long),
        "completion_ids": completion,
        "completion_mask": mask,
    }


def trl_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """`_generate_and_score_completions`' advantages (scale_rewards="group")."""
    from trl.trainer.utils import nanstd

    grouped = rewards.view(-1, GROUP)
    mean = torch.nanmean(grouped, dim=1).repeat_interleave(GROUP)
    std = nanstd(grouped, dim=1).repeat_interleave(GROUP)
    return (rewards - mean) / (std + 1e-4)


CASES = [
    ("llama", "dapo", 0.04, 1.0, True),
    ("llama", "grpo", 0.0, 0.7, True),
    ("gpt2", "dr_grpo", 0.1, 1.0, False),
]


@pytest.mark.parametrize(("family", "loss_type", "beta", "temperature", "corrected"), CASES)
def test_loss_and_gradients_equal_trl(
    family: str,
    loss_type: str,
    beta: float,
    temperature: float,
    corrected: bool,
    tokenizer: Any,
    tmp_path: Path,
) -> None:
    policy, reference = fs.hf_model(family, seed=0), fs.hf_model(family, seed=1)
    model = linnet_twin(policy, family, batch=len(COMPLETIONS))
    frozen = linnet_twin(reference, family, batch=len(COMPLETIONS))
    trainer = trl_trainer(policy, tokenizer, tmp_path, loss_type=loss_type, epsilon=0.2,
                          epsilon_high=0.28, temperature=temperature,
                          use_bias_correction_kl=corrected)  # fmt: skip
    trainer.beta = beta  # a reference model of our own, not one TRL loads from the hub
    inputs = trl_inputs()
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    with torch.no_grad():
        theirs_logps = trainer._get_per_token_logps_and_entropies(trainer.model, ids, attention,
                                                                  WIDTH)[0]  # fmt: skip
        trl.trainer.utils.add_fused_lm_head(reference, temperature=temperature)
        theirs_ref = trainer._get_per_token_logps_and_entropies(reference, ids, attention,
                                                                WIDTH)[0]  # fmt: skip
    # old log-probs away from the current ones, so the ratio leaves [1 - 0.2, 1 + 0.28]
    shift = 0.4 * torch.randn(theirs_logps.shape, generator=torch.Generator().manual_seed(3))
    old = (theirs_logps + shift) * inputs["completion_mask"]
    rewards = torch.tensor(REWARDS)
    advantages = group_advantages(rewards, GROUP)
    torch.testing.assert_close(advantages, trl_advantages(rewards), rtol=1e-6, atol=1e-6)
    inputs |= {"advantages": advantages, "old_per_token_logps": old,
               "ref_per_token_logps": theirs_ref,
               "num_items_in_batch": inputs["completion_mask"].sum()}  # fmt: skip
    theirs = trainer._compute_loss(trainer.model, inputs)
    theirs.backward()
    metrics = {k: v[-1] for k, v in trainer._metrics["train"].items()}

    prompts = [p for p in PROMPTS for _ in range(GROUP)]
    logps, mask = completion_log_probs(model, prompts, COMPLETIONS, temperature=temperature)
    assert torch.equal(mask.long(), inputs["completion_mask"])
    assert gap(logps, theirs_logps) <= 1e-5
    with torch.no_grad():
        ours_ref = completion_log_probs(frozen, prompts, COMPLETIONS, temperature=temperature)[0]
    assert gap(ours_ref, theirs_ref) <= 1e-5
    options: dict[str, Any] = {"clip": (0.2, 0.28), "beta": beta, "reference_logps": ours_ref,
                               "kl_correction": corrected}  # fmt: skip
    loss = grpo_loss(logps, old, advantages, mask, loss_type=loss_type,  # type: ignore[arg-type]
                     max_new_tokens=WIDTH, **options)  # fmt: skip
    loss.backward()
    terms = token_losses(logps.detach(), old, advantages, **options)
    weight = mask.float()
    # the loss is a mean of per-token terms of order 1 that nearly cancel (about -1.6e-3 here),
    # each term as close as the log-probs (1e-5): a bound relative to the loss alone held on
    # one CPU and not on another (3.7e-8 apart, rel 2.3e-5), so bound it by the terms' size
    magnitude = float((terms.loss.abs() * weight).sum() / weight.sum())
    assert float(loss.detach()) == pytest.approx(
        float(theirs.detach()), rel=1e-5, abs=1e-5 * magnitude
    )
    clipped = float((terms.clipped.float() * weight).sum() / weight.sum())
    assert 0.1 < clipped < 0.9 and clipped == pytest.approx(metrics["clip_ratio/region_mean"])
    if beta:
        assert terms.kl is not None
        kl = float((terms.kl * weight).sum() / weight.sum())
        assert kl > 0.01 and kl == pytest.approx(metrics["kl"], rel=1e-5)
    expected = dict(policy.named_parameters())
    for name, param in model.named_parameters():
        assert param.grad is not None and expected[name].grad is not None, name
        assert gap(param.grad, expected[name].grad) <= 1e-5, name


def test_advantages_by_scale() -> None:
    rewards = torch.tensor([1.0, 3.0, 0.0, 0.0, 2.0, 4.0], dtype=torch.float64)
    # a group of equal rewards: advantage 0 (std 0)
    assert group_advantages(rewards, 2, "group").tolist() == pytest.approx(
        [
            -1 / (2**0.5 + 1e-4),
            1 / (2**0.5 + 1e-4),
            0.0,
            0.0,
            -1 / (2**0.5 + 1e-4),
            1 / (2**0.5 + 1e-4),
        ]
    )
    assert group_advantages(rewards, 2, "none").tolist() == [-1, 1, 0, 0, -1, 1]
    batch = group_advantages(rewards, 2, "batch")
    torch.testing.assert_close(batch, torch.tensor([-1, 1, 0, 0, -1, 1.0], dtype=torch.float64)
                               / (rewards.std() + 1e-4))  # fmt: skip
    with pytest.raises(LinnetError, match="do not make groups of 4"):
        group_advantages(rewards, 4)


# -- the loop, with an engine ----------------------------------------------------------------

ROWS = 4


@pytest.fixture(scope="module")
def engine() -> Engine:
    """An engine over a second, frozen and compiled copy of the example, its weights
    unlike any policy's until `grpo` refreshes them (each test's first step does)."""
    other = fs.hf_model("llama", seed=7)
    weights = {k: v.detach().clone() for k, v in other.state_dict().items()}
    model = lt.load(fs.source("llama"), generics=fs.generics("llama", ROWS), weights=weights,
                    compile=True)  # fmt: skip
    return Engine(model, seed=0)


def engine_tensors(engine: Engine) -> dict[str, torch.Tensor]:
    module = engine.decoder.module  # type: ignore[attr-defined]
    return {p: module.tensor(p).clone() for p in policy_weights(module)}


def low(prompts: list[list[int]], completions: list[list[int]]) -> list[float]:
    """The share of a completion's tokens below 16 (about a quarter of them at first)."""
    return [sum(t < 16 for t in c) / len(c) for c in completions]


def test_a_step_samples_with_the_refreshed_policy(engine: Engine) -> None:
    hf = fs.hf_model("llama")
    policy = linnet_twin(hf, "llama")
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-2)
    after_first: dict[str, torch.Tensor] = {}

    def keep(step: Any) -> None:
        if step.step == 0:
            after_first.update({k: v.clone() for k, v in policy_weights(policy).items()})

    history = grpo(policy, engine, PROMPTS, low, optimizer=optimizer, group=4,
                   prompts_per_step=2, steps=2, max_new_tokens=6, seed=0,
                   on_step=keep)  # fmt: skip
    assert [s.step for s in history] == [0, 1]
    for s in history:
        assert 0 <= s.reward <= 1 and 1 <= s.length <= 6 and s.kl == 0.0
    # the engine sampled step 1 with the policy's weights after step 0's update
    held = engine_tensors(engine)
    for path, value in after_first.items():
        torch.testing.assert_close(held[path], value, rtol=0, atol=0, msg=path)
    assert any(not torch.equal(value, policy.tensor(p)) for p, value in after_first.items())


def test_a_lora_policy_is_merged_into_the_engine(engine: Engine) -> None:
    hf = fs.hf_model("llama")
    policy = linnet_twin(hf, "llama")
    randomise(add_lora(policy, ["*.q_proj.weight", "*.down_proj.weight"], rank=4), seed=2)
    refresh(engine, policy)
    prompt = [5, 9, 14, 3]
    (completion,), _ = engine.run([Request(prompt, max_new_tokens=6, temperature=0)])
    tokens = list(prompt)
    with torch.no_grad():
        for _ in range(6):
            logits = policy(torch.tensor([tokens], dtype=torch.int32))
            tokens.append(int(logits[0, -1].argmax()))
    assert completion.tokens == tokens[len(prompt) :]


def run_once(engine: Engine, micro_batch: int | None, seed: int = 0) -> tuple[Any, Any]:
    hf = fs.hf_model("llama")
    policy = linnet_twin(hf, "llama")
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.0)
    history = grpo(policy, engine, PROMPTS, low, optimizer=optimizer, group=4,
                   prompts_per_step=2, steps=1, max_new_tokens=5, seed=seed, beta=0.05,
                   reference=linnet_twin(fs.hf_model("llama", seed=1), "llama"),
                   iterations=2, micro_batch=micro_batch, max_grad_norm=None)  # fmt: skip
    return history, policy


def test_micro_batches_give_the_gradients_of_one_batch_and_seeds_repeat(engine: Engine) -> None:
    (whole,), one = run_once(engine, None)
    (parts,), split = run_once(engine, 3)
    # the same seed, the same samples: equal rewards (the loss differs by rounding only)
    assert parts.reward == whole.reward and parts.loss == pytest.approx(whole.loss, rel=1e-5)
    assert whole.reward_std > 0 and whole.kl > 0.01  # nonzero advantages, a distant reference
    grads = dict(split.named_parameters())
    for name, param in one.named_parameters():
        assert param.grad is not None and gap(param.grad, grads[name].grad) <= 1e-5, name


@pytest.mark.slow
def test_the_reward_goes_up(engine: Engine) -> None:
    hf = fs.hf_model("llama")
    policy = linnet_twin(hf, "llama")
    adapters = add_lora(policy, ["*.q_proj.weight", "*.v_proj.weight"], rank=4, alpha=8)
    head = policy.tensor("lm_head.weight")
    head.requires_grad_(True)
    optimizer = torch.optim.AdamW([head, *[p for a in adapters for p in a.parameters()]], lr=3e-2)
    history = grpo(policy, engine, PROMPTS, low, optimizer=optimizer, group=8,
                   prompts_per_step=2, steps=8, max_new_tokens=4, seed=1)  # fmt: skip
    first, last = history[0].reward, history[-1].reward
    assert last > first + 0.2, [s.reward for s in history]


def test_the_default_reference_is_the_starting_policy(engine: Engine) -> None:
    """`beta > 0` without a reference: a frozen copy of the policy (LoRA views included)
    as it was before the first step, so the first step's KL is 0 and later ones are not."""
    policy = linnet_twin(fs.hf_model("llama"), "llama")
    adapters = add_lora(policy, ["*.q_proj.weight", "*.o_proj.weight"], rank=4)
    randomise(adapters, seed=5)
    optimizer = torch.optim.AdamW([p for a in adapters for p in a.parameters()], lr=5e-2)
    history = grpo(policy, engine, PROMPTS, low, optimizer=optimizer, group=4, beta=0.1,
                   prompts_per_step=2, steps=2, max_new_tokens=4, seed=3)  # fmt: skip
    assert history[0].kl == 0.0 and history[1].kl > 1e-4
    assert all(p.requires_grad for a in adapters for p in a.parameters())


def test_refusals(engine: Engine) -> None:
    hf = fs.hf_model("llama")
    policy = linnet_twin(hf, "llama")
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.0)

    def run(**options: Any) -> None:
        settings = {"optimizer": optimizer, "group": 2, "steps": 1, "max_new_tokens": 2}
        grpo(policy, engine, options.pop("prompts", PROMPTS), options.pop("reward", low),
             **(settings | options))  # fmt: skip

    with pytest.raises(LinnetError, match="group must be at least 2"):
        run(group=1)
    with pytest.raises(LinnetError, match="no prompts"):
        run(prompts=[])
    with pytest.raises(LinnetError, match="loss_type must be one of"):
        run(loss_type="ppo")
    with pytest.raises(LinnetError, match="used only with beta > 0"):
        run(reference=copy.deepcopy(policy))
    with pytest.raises(LinnetError, match="returned 1 values for 2 completions"):
        run(reward=lambda p, c: [0.0])
    with pytest.raises(LinnetError, match="non-finite"):
        run(reward=lambda p, c: [float("nan")] * len(c))
    with pytest.raises(LinnetError, match="cache positions"):
        run(max_new_tokens=100)
    engine.submit(Request([1, 2], max_new_tokens=2))
    with pytest.raises(LinnetError, match="idle engine"):
        run()
    engine.reset()
    policy.requires_grad_(False)
    with pytest.raises(LinnetError, match="no trainable parameter"):
        run()
