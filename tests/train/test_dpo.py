"""`linnet.train.dpo` against TRL's own `DPOTrainer` (trl 1.16.0) on the same model and batch.

TRL's trainer is built offline on the transformers model (a small BPE
tokenizer, a three-pair text dataset); its tokenised rows and its collator
give the batch, `DPOTrainer.compute_loss` the loss, its logged metrics the
rewards and margins, and `backward` the gradients. The Linnet twin holds the
same weights and runs `linnet.train.dpo.dpo` for one step on the same pairs
(SGD with lr 0, so the gradients of the step stay to be read). Checked within
1e-5: loss, mean chosen/rejected rewards, margins, every parameter's gradient
(full fine-tuning, Llama and GPT-2, a reference model that differs from the
policy), and a LoRA policy against TRL running the PEFT model with the same
adapters. TRL's trainer is used as is, with `bf16=False`: transformers 5
turns on bf16 autocast for the prepared reference model on a CPU that has it.
Then: the precomputed reference equals a reference model, the loss
formula with label smoothing in f64, training raises the margin, and refusals.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")
peft = pytest.importorskip("peft")

import family_support as fs  # noqa: E402
from lora_cases import gap, hf_tokenizer, linnet_twin, peft_twin, randomise  # noqa: E402

from linnet.errors import LinnetError  # noqa: E402
from linnet.train import add_lora  # noqa: E402
from linnet.train.dpo import Pair, collate, dpo, dpo_loss  # noqa: E402

TEXTS = {
    "prompt": ["ab cd", "ef gh ij", "kl"],
    "chosen": [" mn op", " qr", " st uv wx"],
    "rejected": [" yz", " ab ab cd", " ef"],
}
BETA = 0.1


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return hf_tokenizer(tmp_path_factory.mktemp("tokenizer"))


def trl_step(policy: Any, reference: Any, tokenizer: Any, tmp_path: Path) -> dict[str, Any]:
    """One DPO loss and backward by TRL's trainer; its batch, rows and metrics."""
    args = trl.DPOConfig(
        output_dir=str(tmp_path / "trl"),
        per_device_train_batch_size=3,
        report_to=[],
        use_cpu=True,
        beta=BETA,
        loss_type=["sigmoid"],
        disable_dropout=True,
        bf16=False,  # transformers 5 defaults to bf16 autocast where the CPU has it
    )
    data = datasets.Dataset.from_dict(TEXTS)
    trainer = trl.DPOTrainer(model=policy, ref_model=reference, args=args,
                             train_dataset=data, processing_class=tokenizer)  # fmt: skip
    rows = [trainer.train_dataset[i] for i in range(len(data))]
    batch = trainer.data_collator(rows)
    trainer.model.train()  # TRL logs under "train" in training mode
    loss = trainer.compute_loss(trainer.model, batch)
    loss.backward()
    metrics = {k: v[-1] for k, v in trainer._metrics["train"].items()}
    pairs = [Pair.of(r["prompt_ids"], r["chosen_ids"], r["rejected_ids"]) for r in rows]
    return {"loss": float(loss.detach()), "metrics": metrics, "batch": batch, "pairs": pairs}


def linnet_step(model: Any, pairs: list[Pair], pad_id: int, **options: Any) -> Any:
    params = [p for p in model.parameters() if p.requires_grad]
    (step,) = dpo(model, pairs, optimizer=torch.optim.SGD(params, lr=0.0), beta=BETA,
                  batch_size=len(pairs), clip=None, pad_id=pad_id, **options)  # fmt: skip
    return step


def assert_figures(step: Any, theirs: dict[str, Any]) -> None:
    metrics = theirs["metrics"]
    assert step.loss == pytest.approx(theirs["loss"], rel=1e-5)
    assert step.chosen_rewards == pytest.approx(metrics["rewards/chosen"], rel=1e-5)
    assert step.rejected_rewards == pytest.approx(metrics["rewards/rejected"], rel=1e-5)
    assert step.margins == pytest.approx(metrics["rewards/margins"], rel=1e-5)
    assert step.accuracy == metrics["rewards/accuracies"]
    assert abs(step.margins) > 0.05  # the reference differs: nonzero rewards


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_one_step_equals_trl(family: str, tokenizer: Any, tmp_path: Path) -> None:
    policy = fs.hf_model(family, seed=0)
    reference = fs.hf_model(family, seed=1)
    model = linnet_twin(policy, family, batch=6)
    frozen = linnet_twin(reference, family, batch=6)
    theirs = trl_step(policy, copy.deepcopy(reference), tokenizer, tmp_path)
    ours = collate(theirs["pairs"], pad_id=tokenizer.pad_token_id)
    assert torch.equal(ours.tokens.long(), theirs["batch"]["input_ids"])
    assert torch.equal(ours.completion.long(), theirs["batch"]["completion_mask"].long())
    step = linnet_step(model, theirs["pairs"], tokenizer.pad_token_id, reference=frozen)
    assert_figures(step, theirs)
    expected = dict(policy.named_parameters())
    for name, param in model.named_parameters():
        assert param.grad is not None and expected[name].grad is not None, name
        assert gap(param.grad, expected[name].grad) <= 1e-5, name
    assert all(p.grad is None for p in frozen.parameters())


def test_lora_step_equals_trl_on_peft(tokenizer: Any, tmp_path: Path) -> None:
    """A LoRA policy (PEFT's on TRL's side) against a reference model that differs."""
    base = fs.hf_model("llama")
    reference = fs.hf_model("llama", seed=1)
    model = linnet_twin(base, "llama", batch=6)
    adapters = add_lora(model, ["*.q_proj.weight", "*.up_proj.weight"], rank=4, alpha=8)
    randomise(adapters, seed=3)
    policy = peft_twin(base, adapters)
    theirs = trl_step(policy, copy.deepcopy(reference), tokenizer, tmp_path)
    step = linnet_step(model, theirs["pairs"], tokenizer.pad_token_id,
                       reference=linnet_twin(reference, "llama", batch=6))  # fmt: skip
    assert_figures(step, theirs)
    for adapter in adapters:
        layer = policy.base_model.model.get_submodule(adapter.path.removesuffix(".weight"))
        for mine, other in ((adapter.lora_A, layer.lora_A["default"].weight),
                            (adapter.lora_B, layer.lora_B["default"].weight)):  # fmt: skip
            assert mine.grad is not None and other.grad is not None
            assert gap(mine.grad, other.grad) <= 1e-5, adapter.path


def _pairs(count: int, seed: int) -> list[Pair]:
    g = torch.Generator().manual_seed(seed)

    def ids(n: int) -> list[int]:
        return torch.randint(3, 67, (n,), generator=g).tolist()

    return [Pair.of(ids(3 + i % 2), ids(2 + i % 3), ids(4 - i % 3)) for i in range(count)]


def test_precomputed_reference_equals_a_reference_model() -> None:
    """`reference=None`: the initial model's log-probs, computed once, as a copy would give."""
    hf = fs.hf_model("llama")
    pairs = _pairs(5, seed=1)
    histories = []
    for reference in (None, linnet_twin(hf, "llama")):
        model = linnet_twin(hf, "llama")
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        histories.append(dpo(model, pairs, optimizer=optimizer, reference=reference,
                             batch_size=2, steps=4))  # fmt: skip
    precomputed, explicit = histories
    assert [s.step for s in precomputed] == [0, 1, 2, 3]  # 3 batches, cycled
    for a, b in zip(precomputed, explicit, strict=True):
        assert a.loss == pytest.approx(b.loss, rel=1e-6)
        assert a.margins == pytest.approx(b.margins, rel=1e-5, abs=1e-7)
    assert precomputed[0].margins == 0.0 and precomputed[0].loss == pytest.approx(math.log(2))
    assert precomputed[3].margins > 0  # the first batch again, after training on it


def test_training_raises_the_margin() -> None:
    model = linnet_twin(fs.hf_model("gpt2"), "gpt2")
    adapters = add_lora(model, "*.c_attn.weight", rank=4, alpha=8, fan_in_fan_out=True)
    optimizer = torch.optim.AdamW([p for a in adapters for p in a.parameters()], lr=2e-2)
    seen: list[float] = []
    history = dpo(model, _pairs(2, seed=2), optimizer=optimizer, batch_size=2, steps=6,
                  on_step=lambda s: seen.append(s.loss))  # fmt: skip
    assert seen == [s.loss for s in history]
    assert history[-1].loss < history[0].loss - 0.05
    assert history[-1].margins > 0.5 and history[-1].accuracy == 1.0


def test_loss_formula_in_f64() -> None:
    g = torch.Generator().manual_seed(4)
    pc, pr, rc, rr = (-20 * torch.rand(6, dtype=torch.float64, generator=g) for _ in range(4))
    for eps in (0.0, 0.2):
        losses, chosen, rejected = dpo_loss(pc, pr, rc, rr, beta=0.3, label_smoothing=eps)
        d = 0.3 * ((pc - rc) - (pr - rr))
        expected = (1 - eps) * torch.log1p(torch.exp(-d)) + eps * torch.log1p(torch.exp(d))
        torch.testing.assert_close(losses, expected, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(chosen - rejected, d, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(chosen, 0.3 * (pc - rc), rtol=0, atol=0)


def test_sequence_log_probs_count_completion_tokens_only() -> None:
    from linnet.train.dpo import sequence_log_probs

    logits = torch.randn(2, 5, 7, dtype=torch.float64)
    batch = collate([Pair.of([1, 2], [3, 4], [5])], pad_id=6)
    assert batch.tokens.tolist() == [[1, 2, 3, 4], [1, 2, 5, 6]]
    assert batch.completion.tolist() == [[False, False, True, True], [False, False, True, False]]
    got = sequence_log_probs(logits[:, :4], batch.tokens, batch.completion)
    logp = logits.log_softmax(-1)
    expected = torch.stack([logp[0, 1, 3] + logp[0, 2, 4], logp[1, 1, 5]]).float()
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)


def test_refusals() -> None:
    model = linnet_twin(fs.hf_model("llama"), "llama")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    with pytest.raises(LinnetError, match="nonempty chosen and rejected"):
        Pair.of([1], [], [2])
    with pytest.raises(LinnetError, match="no preference pairs"):
        dpo(model, [], optimizer=optimizer)
    with pytest.raises(LinnetError, match="label_smoothing must be in"):
        dpo(model, _pairs(1, 0), optimizer=optimizer, label_smoothing=0.5)
    with pytest.raises(LinnetError, match="batch_size must be at least 1"):
        dpo(model, _pairs(1, 0), optimizer=optimizer, batch_size=0)
    with pytest.raises(LinnetError, match="model has no entry `logits`"):
        dpo(model, _pairs(1, 0), optimizer=optimizer, entry="logits")
    for param in model.parameters():
        param.requires_grad_(False)
    with pytest.raises(LinnetError, match="no trainable parameter"):
        dpo(model, _pairs(1, 0), optimizer=optimizer)
