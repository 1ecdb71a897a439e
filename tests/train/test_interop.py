"""`linnet.train.interop.CausalLM` under transformers' `Trainer` and TRL's trainers.

The same Linnet model (the small Llama of `family_support`) is trained twice
from the same weights, with AdamW at a constant learning rate and gradient
norm clipping at 1: by the trainer through the adapter, and by
`linnet.train.train` on the same sequences. Every step's batch is the whole
(small) dataset, so the trainers' shuffling changes nothing. The losses of
every step agree within 1e-5, and so do the parameters at the end. For
`SFTTrainer` the sequences are TRL's own tokenised prompt-completion rows
(an eos appended, the completion learned), and its loss goes through TRL's
fused LM head (`base_model` and `get_output_embeddings` of the adapter).
Both trainers divide by the labels that are not -100 before the shift, `train`
by the positions that predict a learned token: the rows leave each first token
unlabelled so the two counts agree. `DPOTrainer` (the reference another adapter)
against `linnet.train.dpo.dpo` on its tokenised pairs: losses and parameters.
`GRPOTrainer`: its `_compute_loss` and gradients through the adapter on fixed
completions against `linnet.train.grpo`; the adapter's `generate` against
transformers' `generate` (greedy and seeded sampling); and `GRPOTrainer`
training 2 steps, sampling with that `generate`, its first logged loss and
gradient norm against `linnet.train.grpo` on the completions it sampled.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")

import family_support as fs  # noqa: E402
from lora_cases import gap, hf_tokenizer, linnet_twin  # noqa: E402

from linnet.errors import LinnetError  # noqa: E402
from linnet.train import Example, pack, train  # noqa: E402
from linnet.train.interop import CausalLM  # noqa: E402

ROWS = [[5, 9, 14, 3, 7], [20, 3, 8, 11], [4, 4, 50, 61, 2, 9, 30], [12, 13]]
STEPS = 3
LR = 1e-2


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    found = hf_tokenizer(tmp_path_factory.mktemp("tokenizer"))
    found.pad_token = found.eos_token
    return found


def common(tmp_path: Path) -> dict[str, Any]:
    return {
        "output_dir": str(tmp_path / "out"),
        "per_device_train_batch_size": len(ROWS),
        "max_steps": STEPS,
        "learning_rate": LR,
        "lr_scheduler_type": "constant",
        "weight_decay": 0.0,
        "max_grad_norm": 1.0,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": [],
        "use_cpu": True,
        "bf16": False,
        "gradient_checkpointing": False,  # TRL turns it on; the adapter refuses it
    }


def linnet_run(hf: Any, rows: list[Example]) -> tuple[list[float], Any]:
    model = linnet_twin(hf, "llama")
    batches = list(pack(rows, sum(map(len, rows)))) * STEPS
    assert len(batches) == STEPS
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    history = train(model, batches, optimizer=optimizer, steps=STEPS, clip=1.0)
    return history.losses, model


def logged(trainer: Any) -> list[float]:
    return [float(entry["loss"]) for entry in trainer.state.log_history if "loss" in entry]


def assert_same(ours: Any, theirs: Any) -> None:
    """Parameters after `STEPS` AdamW steps: AdamW divides each gradient element by its own
    running RMS, so an element's update carries that element's relative rounding error,
    large where the gradient is near 0 (measured 1.55e-5 of the largest parameter on an Intel
    Xeon, under 1e-5 on a Zen 4; a wrong gradient moves elements by about `LR`, 5e-2 here)."""
    mine = dict(ours.named_parameters())
    for name, value in theirs.named_parameters():
        assert gap(value, mine[name.removeprefix("module.")]) <= 1e-4, name


class RowCollator:
    """Right-padded `input_ids`, `attention_mask`, and `labels`: -100 on padding and on
    each row's first token, which nothing predicts (`Trainer` counts the labels that are
    not -100 before the shift, `train` the positions that predict one)."""

    def __call__(self, rows: list[dict[str, list[int]]]) -> dict[str, torch.Tensor]:
        width = max(len(r["input_ids"]) for r in rows)
        ids = torch.zeros(len(rows), width, dtype=torch.long)
        mask = torch.zeros(len(rows), width, dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r["input_ids"])] = torch.tensor(r["input_ids"])
            mask[i, : len(r["input_ids"])] = 1
        labels = ids.masked_fill(mask == 0, -100)
        labels[:, 0] = -100
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def test_trainer_equals_linnet_train(tmp_path: Path) -> None:
    hf = fs.hf_model("llama")
    expected, ours = linnet_run(hf, [Example(r) for r in ROWS])
    model = CausalLM(linnet_twin(hf, "llama"))
    data = datasets.Dataset.from_dict({"input_ids": ROWS})
    args = transformers.TrainingArguments(**common(tmp_path), remove_unused_columns=False)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data,
                                   data_collator=RowCollator())  # fmt: skip
    trainer.train()
    assert logged(trainer) == pytest.approx(expected, rel=1e-5)
    assert expected[-1] < expected[0]
    assert_same(ours, model)


def test_sft_trainer_equals_linnet_train(tokenizer: Any, tmp_path: Path) -> None:
    hf = fs.hf_model("llama")
    model = CausalLM(linnet_twin(hf, "llama"))
    data = datasets.Dataset.from_dict({"prompt": ["ab cd", "ij", "op qr st", "yz"],
                                       "completion": [" ef gh", " kl mn", " uv wx", " ab"]})  # fmt: skip
    args = trl.SFTConfig(**common(tmp_path))
    trainer = trl.SFTTrainer(model=model, args=args, train_dataset=data, processing_class=tokenizer)
    rows = [trainer.train_dataset[i] for i in range(len(data))]
    examples = [Example(r["input_ids"], [label != -100 for label in r["labels"]]) for r in rows]
    assert all(0 < e.targets < len(e) - 1 for e in examples)  # prompts are not learned
    assert all(r["input_ids"][-1] == tokenizer.eos_token_id for r in rows)
    trainer.train()
    expected, ours = linnet_run(hf, examples)
    assert logged(trainer) == pytest.approx(expected, rel=1e-5)
    assert_same(ours, model)


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_logits_and_padding(family: str) -> None:
    hf = fs.hf_model(family)
    head = "transformer.wte.weight" if family == "gpt2" else "lm_head.weight"  # GPT-2's is tied
    model = CausalLM(linnet_twin(hf, family), head=head)
    ids = torch.tensor([[5, 9, 14, 3], [0, 0, 20, 3]])
    mask = torch.tensor([[1, 1, 1, 1], [0, 0, 1, 1]])
    with torch.no_grad():
        logits = model(ids, attention_mask=mask).logits
        torch.testing.assert_close(logits[0], hf(ids[:1]).logits[0], rtol=1e-5, atol=1e-5)
        # left padding: the real tokens as if alone
        torch.testing.assert_close(logits[1, 2:], hf(ids[1:, 2:]).logits[0], rtol=1e-5, atol=1e-5)
        loss = model(ids[:1], labels=ids[:1]).loss
        assert float(loss) == pytest.approx(float(hf(ids[:1], labels=ids[:1]).loss), rel=1e-5)
    with pytest.raises(LinnetError, match="gradient checkpointing"):
        model.gradient_checkpointing_enable()
    with pytest.raises(LinnetError, match="unsupported inputs inputs_embeds"):
        model(ids, inputs_embeds=torch.zeros(1))
    with pytest.raises(LinnetError, match=r"no tensor at `lm_head\.bias`"):
        CausalLM(linnet_twin(hf, family), head="lm_head.bias")


def test_dpo_trainer_equals_linnet_dpo(tokenizer: Any, tmp_path: Path) -> None:
    from linnet.train.dpo import Pair, dpo

    policy, reference = fs.hf_model("llama"), fs.hf_model("llama", seed=1)
    model = CausalLM(linnet_twin(policy, "llama"))
    frozen = CausalLM(linnet_twin(reference, "llama"))
    frozen.requires_grad_(False)
    texts = {"prompt": ["ab cd", "ef gh ij", "kl"], "chosen": [" mn op", " qr", " st uv wx"],
             "rejected": [" yz", " ab ab cd", " ef"]}  # fmt: skip
    settings = common(tmp_path) | {"per_device_train_batch_size": 3}
    args = trl.DPOConfig(**settings, beta=0.1, loss_type=["sigmoid"], disable_dropout=True)
    trainer = trl.DPOTrainer(model=model, ref_model=frozen, args=args,
                             train_dataset=datasets.Dataset.from_dict(texts),
                             processing_class=tokenizer)  # fmt: skip
    rows = [trainer.train_dataset[i] for i in range(3)]
    pairs = [Pair.of(r["prompt_ids"], r["chosen_ids"], r["rejected_ids"]) for r in rows]
    trainer.train()
    ours = linnet_twin(policy, "llama", batch=6)
    optimizer = torch.optim.AdamW(ours.parameters(), lr=LR, weight_decay=0.0)
    history = dpo(ours, pairs, optimizer=optimizer, reference=linnet_twin(reference, "llama"),
                  batch_size=3, steps=STEPS, clip=1.0, pad_id=tokenizer.pad_token_id)  # fmt: skip
    assert logged(trainer) == pytest.approx([s.loss for s in history], rel=1e-5)
    assert history[-1].loss < history[0].loss
    assert_same(ours, model)


def test_grpo_trainer_loss_on_the_adapter(tokenizer: Any, tmp_path: Path) -> None:
    """`GRPOTrainer`'s loss and gradients through the adapter on fixed completions equal
    `linnet.train.grpo`'s (importance ratios of 1: the loss of fixed completions)."""
    from linnet.train.grpo import completion_log_probs, group_advantages, grpo_loss

    hf = fs.hf_model("llama")
    model = CausalLM(linnet_twin(hf, "llama"))
    prompts = [[5, 9, 14]] * 2 + [[20, 3, 8]] * 2
    completions = [[7, 7, 30, 2], [11, 4], [7, 25, 60], [40]]
    args = trl.GRPOConfig(**common(tmp_path) | {"per_device_train_batch_size": 4},
                          num_generations=2, max_completion_length=4, loss_type="grpo")  # fmt: skip
    trainer = trl.GRPOTrainer(model=model, reward_funcs=lambda **_: [0.0], args=args,
                              train_dataset=datasets.Dataset.from_dict({"prompt": ["ab", "cd"]}),
                              processing_class=tokenizer)  # fmt: skip
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0]])
    ids = torch.tensor([c + [0] * (4 - len(c)) for c in completions])
    advantages = group_advantages(torch.tensor([1.0, 0.0, 0.5, 2.0]), 2)
    theirs = trainer._compute_loss(trainer.model, {
        "prompt_ids": torch.tensor(prompts), "prompt_mask": torch.ones(4, 3, dtype=torch.long),
        "completion_ids": ids, "completion_mask": mask, "advantages": advantages})  # fmt: skip
    theirs.backward()
    twin = linnet_twin(hf, "llama")
    logps, ours_mask = completion_log_probs(twin, prompts, completions)
    ours = grpo_loss(logps, logps.detach(), advantages, ours_mask, loss_type="grpo")
    ours.backward()
    assert float(ours.detach()) == pytest.approx(float(theirs.detach()), rel=1e-5)
    grads = dict(model.named_parameters())
    for name, param in twin.named_parameters():
        assert param.grad is not None and gap(param.grad, grads["module." + name].grad) <= 1e-5


def test_generate_equals_transformers() -> None:
    """Greedy and seeded sampling (temperature, top-k, top-p, an eos that pads the finished
    row) give transformers' tokens on the same weights, left padding included."""
    hf = fs.hf_model("llama")
    model = CausalLM(linnet_twin(hf, "llama"))
    ids = torch.tensor([[5, 9, 14, 3], [0, 0, 20, 3]])
    mask = torch.tensor([[1, 1, 1, 1], [0, 0, 1, 1]])
    greedy = transformers.GenerationConfig(max_new_tokens=6, do_sample=False, pad_token_id=0)
    expected = hf.generate(ids, attention_mask=mask, generation_config=greedy)
    assert torch.equal(model.generate(ids, attention_mask=mask, generation_config=greedy), expected)
    assert expected.shape == (2, 10)
    eos = int(expected[0, 6])  # the first row's third greedy token ends it
    ended = model.generate(ids, attention_mask=mask, max_new_tokens=6, eos_token_id=eos,
                           pad_token_id=0)  # fmt: skip
    assert torch.equal(ended, hf.generate(ids, attention_mask=mask, max_new_tokens=6,
                                          eos_token_id=eos, pad_token_id=0))  # fmt: skip
    assert (ended[0, 7:] == 0).all()
    sampled = transformers.GenerationConfig(max_new_tokens=8, do_sample=True, temperature=0.7,
                                            top_k=20, top_p=0.9, pad_token_id=0)  # fmt: skip
    torch.manual_seed(3)
    theirs = hf.generate(ids, attention_mask=mask, generation_config=sampled)
    torch.manual_seed(3)
    assert torch.equal(model.generate(ids, attention_mask=mask, generation_config=sampled), theirs)
    with pytest.raises(LinnetError, match="unsupported options num_beams"):
        model.generate(ids, num_beams=2)
    with pytest.raises(LinnetError, match="unsupported inputs pixel_values"):
        model.generate(ids, pixel_values=torch.zeros(1))


class Recorded(CausalLM):
    """The adapter, keeping what each `generate` call took and gave."""

    calls: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]

    def generate(self, input_ids: Any, attention_mask: Any = None, generation_config: Any = None,
                 **kwargs: Any) -> Any:  # fmt: skip
        out = super().generate(input_ids, attention_mask, generation_config, **kwargs)
        self.calls.append((input_ids, attention_mask, out))
        return out


def reward(completion_ids: list[list[int]], **_: Any) -> list[float]:
    return [float(sum(c) % 5) for c in completion_ids]


def test_grpo_trainer_trains_through_the_adapter(tokenizer: Any, tmp_path: Path) -> None:
    """`GRPOTrainer` samples with the adapter's `generate` and trains 2 steps; the first
    step's logged loss and gradient norm equal `linnet.train.grpo`'s on the completions it
    sampled (the rewards recomputed from them, groups of 2 in a row as TRL repeats them)."""
    from linnet.train.grpo import completion_log_probs, group_advantages, grpo_loss

    hf = fs.hf_model("llama")
    model = Recorded(linnet_twin(hf, "llama"))
    model.calls = []
    stops = [tokenizer.eos_token_id, 7, 21, 33, 45, 58]  # several eos ids: completions vary
    model.generation_config.eos_token_id = stops
    args = trl.GRPOConfig(**common(tmp_path) | {"per_device_train_batch_size": 4, "max_steps": 2},
                          num_generations=2, max_completion_length=6, loss_type="dapo")  # fmt: skip
    trainer = trl.GRPOTrainer(model=model, reward_funcs=reward, args=args,
                              train_dataset=datasets.Dataset.from_dict({"prompt": ["ab cd", "ef"]}),
                              processing_class=tokenizer)  # fmt: skip
    trainer.train()
    assert len(model.calls) == 2
    ids, mask, out = model.calls[0]
    width = ids.shape[1]
    prompts = [row[m.bool()].tolist() for row, m in zip(ids, mask, strict=True)]
    completions = []
    for row in out[:, width:].tolist():
        ends = [i for i, t in enumerate(row) if t in stops]
        completions.append(row[: ends[0] + 1] if ends else row)
    assert len({len(c) for c in completions}) > 1
    assert prompts[0] == prompts[1] and prompts[2] == prompts[3]
    twin = linnet_twin(hf, "llama")
    advantages = group_advantages(torch.tensor(reward(completions)), 2)
    logps, token_mask = completion_log_probs(twin, prompts, completions)
    loss = grpo_loss(logps, logps.detach(), advantages, token_mask, loss_type="dapo")
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(list(twin.parameters()), float("inf"))
    first = trainer.state.log_history[0]
    assert first["loss"] == pytest.approx(float(loss.detach()), rel=1e-4, abs=1e-6)
    assert first["grad_norm"] == pytest.approx(float(norm), rel=1e-4)
    assert float(norm) > 0
    before = {n: p.detach() for n, p in hf.named_parameters()}
    changed = [gap(p, before[n.removeprefix("module.")]) > 0 for n, p in model.named_parameters()]
    assert all(changed)
