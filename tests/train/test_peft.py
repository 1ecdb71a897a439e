"""`linnet.train.peft`: LoRA adapters as PEFT files, both ways, against `peft` itself.

The reference is `peft` 0.21.2 on the transformers Llama and GPT-2 whose
weights the Linnet examples hold. Checked: an adapter saved here loads with
`PeftModel.from_pretrained` and gives our logits (1e-5 relative), per-module
ranks and alphas included; an adapter trained and saved by PEFT (random
nonzero B) loads here with PEFT's logits; save/load round trips exactly; five
AdamW steps of LoRA on our model equal the same steps of PEFT on the
transformers model (losses 1e-5, adapters after); bad folders are refused by name.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")

import torch.nn.functional as F  # noqa: E402
from lora_cases import (  # noqa: E402
    FAN_IN_FAN_OUT,
    PATTERNS,
    gap,
    hf_model,
    linnet_twin,
    peft_layer,
    peft_twin,
    randomise,
    tokens,
)

from linnet.errors import LinnetError  # noqa: E402
from linnet.train import add_lora, load_lora, lora_adapters, save_lora  # noqa: E402
from linnet.weights import read_safetensors  # noqa: E402
from linnet.weights.safetensors import save_safetensors  # noqa: E402

FAMILIES = ["llama", "gpt2"]


@pytest.fixture(scope="module", params=FAMILIES)
def family(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def reference(family: str) -> object:
    return hf_model(family)


def test_saved_adapter_loads_into_peft(family: str, reference: object, tmp_path: Path) -> None:
    model = linnet_twin(reference, family, batch=2)
    first, *rest = PATTERNS[family]
    fif = FAN_IN_FAN_OUT[family]
    adapters = add_lora(model, first, rank=4, alpha=8, fan_in_fan_out=fif)
    adapters += add_lora(model, rest, rank=2, alpha=5, fan_in_fan_out=fif)
    randomise(adapters, seed=1)
    folder = save_lora(model, tmp_path / "adapter", task_type="CAUSAL_LM")
    config = json.loads((folder / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["fan_in_fan_out"] is fif
    modules = sorted(a.path.removesuffix(".weight") for a in adapters)
    assert config["target_modules"] == modules
    stored = read_safetensors(folder / "adapter_model.safetensors")
    assert sorted(stored) == sorted(f"base_model.model.{m}.lora_{ab}.weight"
                                    for m in modules for ab in "AB")  # fmt: skip
    loaded = peft.PeftModel.from_pretrained(_copy(reference), folder).eval()
    for adapter in adapters:  # PEFT read each module's own rank and alpha
        layer = peft_layer(loaded, adapter.path)
        assert layer.r["default"] == adapter.rank
        assert layer.scaling["default"] == pytest.approx(adapter.scaling)
    ids = tokens((2, 7), 2)
    assert gap(model(ids), loaded(ids.long()).logits) <= 1e-5


def test_peft_adapter_loads_into_ours(family: str, reference: object, tmp_path: Path) -> None:
    config = peft.LoraConfig(
        r=4,
        lora_alpha=12,
        target_modules=["q_proj", "o_proj", "up_proj"] if family == "llama" else ["c_proj"],
        fan_in_fan_out=FAN_IN_FAN_OUT[family],
        rank_pattern={"up_proj": 2} if family == "llama" else {"mlp.c_proj": 3},
        alpha_pattern={"o_proj": 3} if family == "llama" else {},
    )
    torch.manual_seed(3)
    trained = peft.get_peft_model(_copy(reference), config)
    with torch.no_grad():  # as if trained: B nonzero
        for name, value in trained.named_parameters():
            if "lora_B" in name:
                value.normal_(0.0, 0.3)
    trained.save_pretrained(tmp_path / "peft")
    model = linnet_twin(reference, family, batch=2)
    adapters = load_lora(model, tmp_path / "peft")
    assert [a.path for a in adapters] == [a.path for a in lora_adapters(model)]
    assert len(adapters) == 6 if family == "llama" else 4
    ids = tokens((2, 7), 4)
    assert gap(model(ids), trained.eval()(ids.long()).logits) <= 1e-5
    # round trip: our file of the same adapters holds the same numbers
    save_lora(model, tmp_path / "ours")
    again = linnet_twin(reference, family, batch=2)
    load_lora(again, tmp_path / "ours")
    for a, b in zip(lora_adapters(model), lora_adapters(again), strict=True):
        assert (a.path, a.rank, a.scaling) == (b.path, b.rank, b.scaling)
        assert torch.equal(a.lora_A, b.lora_A) and torch.equal(a.lora_B, b.lora_B)


def test_adamw_steps_match_peft(family: str, reference: object) -> None:
    """Five AdamW steps over the `forward` logits with a cross-entropy loss, both sides."""
    model = linnet_twin(reference, family, batch=2)
    torch.manual_seed(5)
    adapters = add_lora(model, PATTERNS[family], rank=4, alpha=8,
                        fan_in_fan_out=FAN_IN_FAN_OUT[family])  # fmt: skip
    twin = peft_twin(reference, adapters)
    trainable = [p for p in twin.parameters() if p.requires_grad]
    assert len(trainable) == 2 * len(adapters)
    ours_opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    theirs_opt = torch.optim.AdamW(trainable, lr=1e-2)
    for step in range(5):
        ids = tokens((2, 9), 10 + step)
        inputs, targets = ids[:, :-1], ids[:, 1:].long()
        losses = []
        for side, optimizer in ((model, ours_opt), (twin, theirs_opt)):
            optimizer.zero_grad()
            if side is model:
                logits = model(inputs.contiguous())
            else:
                logits = twin(inputs.long()).logits
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
            loss.backward()
            optimizer.step()
            losses.append(float(loss))
        assert losses[0] == pytest.approx(losses[1], rel=1e-5), step
    assert losses[0] < _loss_without(reference, family, inputs, targets)  # it learned
    for adapter in adapters:
        layer = peft_layer(twin, adapter.path)
        assert gap(adapter.lora_A, layer.lora_A["default"].weight) <= 1e-5
        assert gap(adapter.lora_B, layer.lora_B["default"].weight) <= 1e-5
        assert adapter.lora_B.detach().abs().max() > 1e-3


def _loss_without(reference: object, family: str, inputs: object, targets: object) -> float:
    base = linnet_twin(reference, family, batch=2)
    logits = base(inputs)
    return float(F.cross_entropy(logits.flatten(0, 1), targets.flatten()))  # type: ignore[union-attr]


def _copy(model: object) -> object:
    import copy

    return copy.deepcopy(model)


# -- refusals ------------------------------------------------------------------------------


def _saved(tmp_path: Path) -> tuple[object, Path]:
    reference = hf_model("llama")
    model = linnet_twin(reference, "llama")
    randomise(add_lora(model, "*.q_proj.weight", rank=2), seed=1)
    return reference, save_lora(model, tmp_path / "adapter")


def _edit_config(folder: Path, **changes: object) -> None:
    path = folder / "adapter_config.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | changes))


def test_bad_folders_are_refused_by_name(tmp_path: Path) -> None:
    reference, folder = _saved(tmp_path)
    model = linnet_twin(reference, "llama")
    with pytest.raises(LinnetError, match="no LoRA adapter"):
        save_lora(model, tmp_path / "empty")
    with pytest.raises(LinnetError, match=r"adapter_config\.json` does not exist"):
        load_lora(model, tmp_path / "nowhere")
    (folder / "adapter_model.safetensors").rename(folder / "kept.safetensors")
    (folder / "adapter_model.bin").write_bytes(b"\x80\x04pickle")
    with pytest.raises(LinnetError, match=r"adapter_model\.bin is a pickle, never read"):
        load_lora(model, folder)
    (folder / "kept.safetensors").rename(folder / "adapter_model.safetensors")
    _edit_config(folder, use_dora=True)
    with pytest.raises(LinnetError, match="sets `use_dora` to True"):
        load_lora(model, folder)
    _edit_config(folder, use_dora=False, peft_type="IA3")
    with pytest.raises(LinnetError, match="peft_type 'IA3', not 'LORA'"):
        load_lora(model, folder)
    _edit_config(folder, peft_type="LORA", r=3)
    with pytest.raises(LinnetError, match="gives the module rank 3"):
        load_lora(model, folder)
    _edit_config(folder, r=2)
    stored = read_safetensors(folder / "adapter_model.safetensors")
    key = "base_model.model.model.layers.1.self_attn.q_proj.lora_B.weight"
    save_safetensors(stored | {key: np.zeros((31, 2), "f4")}, folder / "wrong.safetensors")
    (folder / "wrong.safetensors").rename(folder / "adapter_model.safetensors")
    with pytest.raises(LinnetError, match=r"q_proj\.lora_B\.weight` is \[31, 2\].*needs \[32, 2\]"):
        load_lora(model, folder)
    (folder / "adapter_config.json").write_text("{not json")
    with pytest.raises(LinnetError, match="cannot read"):
        load_lora(model, folder)
    assert lora_adapters(model) == []  # nothing half-attached


def test_modules_the_model_lacks_are_refused(tmp_path: Path) -> None:
    reference, folder = _saved(tmp_path)
    stored = read_safetensors(folder / "adapter_model.safetensors")
    renamed = {k.replace("q_proj", "qkv_proj"): np.array(v) for k, v in stored.items()}
    save_safetensors(renamed, folder / "adapter_model.safetensors")
    with pytest.raises(LinnetError, match=r"adapts `model\.layers\.0\.self_attn\.qkv_proj`"):
        load_lora(linnet_twin(reference, "llama"), folder)
    save_safetensors({"base_model.model.lm_head.lora_embedding_A": np.zeros((2, 3), "f4")},
                     folder / "adapter_model.safetensors")  # fmt: skip
    with pytest.raises(LinnetError, match="no LoRA pair of a linear weight"):
        load_lora(linnet_twin(reference, "llama"), folder)
