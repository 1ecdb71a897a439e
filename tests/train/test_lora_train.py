"""LoRA through `linnet.train.train` against `peft` on the transformers model, step for step.

The Llama and GPT-2 of `lora_cases` (their Linnet twins hold the transformers
weights) get adapters on the same modules with the same initial values
(`add_lora`, then `peft_twin` copies them into PEFT's layers). `train` runs
AdamW on the adapters over packed batches; the PEFT model trains on the same
examples with transformers' own loss (`train_support.reference_step`: right
padded rows, the step's learned tokens as `num_items_in_batch`, clipping at
norm 1). The losses agree to 1e-5 relative at every step, and so do the
adapters at the end: 4 steps, and 20 under `make test-slow`.

GPT-2's adapters sit on `c_fc` and `attn.c_proj`, not `c_attn`: an update of
the keys along the `ln_1` bias adds the same amount to all of a query's scores,
which softmax ignores, so `lora_A`'s gradient in that direction is rounding
noise that Adam's normalised steps turn into changes of up to the learning
rate in either model (the GPT-2 key-bias case of `train_support`).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from lora_cases import FAN_IN_FAN_OUT, gap, hf_model, linnet_twin, peft_layer, peft_twin  # noqa: E402
from train_support import examples, reference_step  # noqa: E402

from linnet.train import add_lora, pack, train  # noqa: E402

PATTERNS = {
    "llama": ["*.q_proj.weight", "*.v_proj.weight", "*.down_proj.weight"],
    "gpt2": ["*.mlp.c_fc.weight", "*.attn.c_proj.weight"],
}
STEPS = [pytest.param(4, id="4-steps"), pytest.param(20, id="20-steps", marks=pytest.mark.slow)]


@pytest.mark.parametrize("family", ["llama", "gpt2"])
@pytest.mark.parametrize("steps", STEPS)
def test_lora_train_equals_peft(family: str, steps: int) -> None:
    reference = hf_model(family)
    model = linnet_twin(reference, family)
    torch.manual_seed(4)
    adapters = add_lora(model, PATTERNS[family], rank=4, alpha=8,
                        fan_in_fan_out=FAN_IN_FAN_OUT[family])  # fmt: skip
    twin = peft_twin(reference, adapters)
    batches = list(pack(examples(67, 100, seed=21), 32))
    assert len(batches) >= steps
    ours = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    history = train(model, batches, optimizer=ours, steps=steps, clip=1.0)
    theirs = torch.optim.AdamW([p for p in twin.parameters() if p.requires_grad], lr=1e-2)
    expected = [reference_step(twin, theirs, [b]) for b in batches[:steps]]
    assert history.losses == pytest.approx(expected, rel=1e-5)
    for adapter in adapters:
        layer = peft_layer(twin, adapter.path)
        assert gap(adapter.lora_A, layer.lora_A["default"].weight) <= 1e-5, adapter.path
        assert gap(adapter.lora_B, layer.lora_B["default"].weight) <= 1e-5, adapter.path
        assert float(adapter.lora_B.detach().abs().max()) > 1e-3  # the adapters moved
