"""`linnet.train.lora` against PEFT's own `lora.Linear` on the transformers model.

The reference is `peft` 0.21.2 applied to the same transformers Llama and
GPT-2 (GPT-2's `Conv1D`: `fan_in_fan_out`) whose weights the Linnet examples
hold, with the same adapter values: logits and adapter gradients within 1e-5
(relative to the largest value), generated and interpreted, dropout included
(same seed, same masks); `merge_lora` against PEFT's `merge_and_unload`. The
weight-view mechanism (`LoraWeight`) is checked on its own against the merged
weight `W + s B A` for every way a weight can be read (linear, matmul,
transposes, a gather, arithmetic); and each refusal names what is wrong.
"""

from __future__ import annotations

import math

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

import linnet.torch as lt  # noqa: E402
from linnet.errors import LinnetError  # noqa: E402
from linnet.train import add_lora, lora_adapters, merge_lora, remove_lora  # noqa: E402
from linnet.train.lora import LoraAdapter, LoraWeight  # noqa: E402

FAMILIES = ["llama", "gpt2"]


@pytest.fixture(scope="module", params=FAMILIES)
def family(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def reference(family: str) -> object:
    return hf_model(family)


def test_fresh_adapters_start_as_peft_does(family: str, reference: object) -> None:
    model = linnet_twin(reference, family)
    ids = tokens((1, 6), 1)
    before = model(ids).detach()
    adapters = add_lora(model, PATTERNS[family], rank=4, alpha=8,
                        fan_in_fan_out=FAN_IN_FAN_OUT[family])  # fmt: skip
    assert [a.path for a in adapters] == [a.path for a in lora_adapters(model)]
    assert len(adapters) == 2 * (3 if family == "llama" else 2)
    for adapter in adapters:
        weight = model.tensor(adapter.path)
        out_features, in_features = weight.shape[::-1] if adapter.fan_in_fan_out else weight.shape
        assert adapter.lora_A.shape == (4, in_features)
        assert adapter.lora_B.shape == (out_features, 4)
        assert adapter.scaling == 2.0
        # kaiming_uniform_(a=sqrt(5)) over fan_in: bound 1 / sqrt(in)
        bound = 1 / math.sqrt(in_features)
        largest = float(adapter.lora_A.detach().abs().max())
        assert 0.5 * bound < largest <= bound
        assert not adapter.lora_B.any()
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    expected = {f"{a.path.rsplit('.', 1)[0]}.weight_lora.{ab}" for a in adapters
                for ab in ("lora_A", "lora_B")}  # fmt: skip
    assert trainable == expected
    # B = 0: the update is exactly zero
    torch.testing.assert_close(model(ids), before, rtol=0, atol=0)


@pytest.mark.parametrize("compile", [True, False], ids=["generated", "interpreted"])
def test_logits_and_gradients_match_peft(family: str, reference: object, compile: bool) -> None:
    model = linnet_twin(reference, family, compile=compile, batch=2)
    adapters = add_lora(model, PATTERNS[family], rank=4, alpha=8,
                        fan_in_fan_out=FAN_IN_FAN_OUT[family])  # fmt: skip
    randomise(adapters, seed=2)
    twin = peft_twin(reference, adapters)
    ids = tokens((2, 7), 3)
    ours = model(ids)
    theirs = twin(ids.long()).logits
    assert gap(ours, theirs) <= 1e-5
    base = linnet_twin(reference, family, compile=compile, batch=2)(ids)
    assert gap(ours, base) > 1e-2  # the adapters matter
    targets = tokens((2, 7), 4).long()
    F.cross_entropy(ours.flatten(0, 1), targets.flatten()).backward()
    F.cross_entropy(theirs.flatten(0, 1), targets.flatten()).backward()
    for adapter in adapters:
        layer = peft_layer(twin, adapter.path)
        for ours_p, theirs_p in ((adapter.lora_A, layer.lora_A["default"].weight),
                                 (adapter.lora_B, layer.lora_B["default"].weight)):  # fmt: skip
            assert ours_p.grad is not None and theirs_p.grad is not None
            assert gap(ours_p.grad, theirs_p.grad) <= 1e-5, adapter.path
    assert all(p.grad is None for n, p in model.named_parameters() if "_lora." not in n)


def test_dropout_matches_peft(family: str, reference: object) -> None:
    """Dropout on the adapter's input only, as PEFT: the same seed draws the same masks."""
    model = linnet_twin(reference, family, batch=2)
    adapters = add_lora(model, PATTERNS[family], rank=4, alpha=8, dropout=0.3,
                        fan_in_fan_out=FAN_IN_FAN_OUT[family])  # fmt: skip
    randomise(adapters, seed=5)
    twin = peft_twin(reference, adapters, lora_dropout=0.3).eval()
    for name, module in twin.named_modules():  # GPT-2's own dropouts stay off
        if "lora_dropout" in name:
            module.train()
    model.train()
    ids = tokens((2, 7), 6)
    torch.manual_seed(7)
    ours = model(ids)
    torch.manual_seed(7)
    theirs = twin(ids.long()).logits
    assert gap(ours, theirs) <= 1e-5
    torch.manual_seed(8)
    assert gap(model(ids), theirs) > 1e-3  # another seed, other masks
    model.eval()
    twin.eval()
    assert gap(model(ids), twin(ids.long()).logits) <= 1e-5


def test_merge_matches_peft_merge_and_unload(family: str, reference: object) -> None:
    model = linnet_twin(reference, family, batch=2)
    keys = set(model.state_dict())
    adapters = add_lora(model, PATTERNS[family], rank=4, alpha=8,
                        fan_in_fan_out=FAN_IN_FAN_OUT[family])  # fmt: skip
    randomise(adapters, seed=9)
    merged_twin = peft_twin(reference, adapters).merge_and_unload()
    ids = tokens((2, 7), 10)
    before = model(ids).detach()
    assert merge_lora(model) == [a.path for a in adapters]
    assert lora_adapters(model) == [] and set(model.state_dict()) == keys
    assert gap(model(ids), before) <= 1e-5
    theirs = merged_twin.state_dict()
    for adapter in adapters:
        assert gap(model.tensor(adapter.path), theirs[adapter.path]) <= 1e-6
    with pytest.raises(LinnetError, match="no LoRA adapter"):
        merge_lora(model)


def test_remove_restores_the_base_model() -> None:
    model = linnet_twin(hf_model("llama"), "llama")
    ids = tokens((1, 5), 11)
    before = model(ids).detach()
    randomise(add_lora(model, "*.o_proj.weight", rank=2), seed=1)
    assert gap(model(ids), before) > 1e-3
    assert remove_lora(model, ["model.layers.0.self_attn.o_proj.weight"]) == [
        "model.layers.0.self_attn.o_proj.weight"
    ]
    assert [a.path for a in lora_adapters(model)] == ["model.layers.1.self_attn.o_proj.weight"]
    remove_lora(model)
    torch.testing.assert_close(model(ids), before, rtol=0, atol=0)


# -- the weight view on its own ------------------------------------------------------------


def _adapter(shape: tuple[int, int], fan_in_fan_out: bool, dropout: float = 0.0) -> LoraAdapter:
    torch.manual_seed(0)
    adapter = LoraAdapter("w", shape, rank=3, alpha=5, dropout=dropout,
                          fan_in_fan_out=fan_in_fan_out, use_rslora=False,
                          dtype=torch.float64, device=torch.device("cpu"))  # fmt: skip
    with torch.no_grad():
        adapter.lora_B.normal_()
    return adapter


@pytest.mark.parametrize("fan_in_fan_out", [False, True])
def test_every_read_of_the_weight_sees_the_update(fan_in_fan_out: bool) -> None:
    weight = torch.randn(6, 4, dtype=torch.float64)
    adapter = _adapter((6, 4), fan_in_fan_out)
    merged = weight + adapter.scaling * (
        (adapter.lora_B @ adapter.lora_A).T if fan_in_fan_out else adapter.lora_B @ adapter.lora_A
    )
    w = adapter.view(weight)
    assert isinstance(w, LoraWeight) and w.shape == (6, 4) and w.dtype == torch.float64
    x4, x6 = torch.randn(5, 4, dtype=torch.float64), torch.randn(2, 5, 6, dtype=torch.float64)
    bias = torch.randn(6, dtype=torch.float64)
    cases = {
        "linear": (F.linear(x4, w), F.linear(x4, merged)),
        "linear bias": (F.linear(x4, w, bias), F.linear(x4, merged, bias)),
        "linear kwargs": (F.linear(input=x4, weight=w), F.linear(x4, merged)),
        "matmul": (torch.matmul(x6, w), x6 @ merged),
        "@": (x6 @ w, x6 @ merged),
        "mm": (torch.mm(x6[0], w), x6[0] @ merged),
        "reshape then matmul": (x6 @ w.reshape(6, 4), x6 @ merged),
        "linear of .T": (F.linear(x6, w.T), F.linear(x6, merged.T)),
        "matmul of .t()": (x4 @ w.t(), x4 @ merged.T),
        "matmul of permute": (x4 @ w.permute(1, 0), x4 @ merged.T),
        "matmul of mT.T": (x6 @ w.mT.T, x6 @ merged),
        "weight on the left": (w @ x4.T, merged @ x4.T),
        "gather": (w[torch.tensor([0, 5])], merged[torch.tensor([0, 5])]),
        "arithmetic": (w * 2 + 1, merged * 2 + 1),
        "reduction": (w.sum(0), merged.sum(0)),
    }
    for name, (actual, expected) in cases.items():
        assert type(actual) is torch.Tensor, name  # no LoraWeight leaks out of a call
        torch.testing.assert_close(actual, expected, rtol=1e-12, atol=1e-12, msg=name)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("fan_in_fan_out", [False, True], ids=["linear", "conv1d"])
def test_one_layer_equals_peft_layer(dtype: str, fan_in_fan_out: bool) -> None:
    """Against PEFT's own `lora.Linear` over `nn.Linear` / transformers' `Conv1D`, bf16
    included: adapters in f32 over a bf16 weight (PEFT's autocast_adapter_dtype)."""
    import copy

    from transformers.pytorch_utils import Conv1D

    torch_dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[dtype]
    torch.manual_seed(0)
    layer = Conv1D(6, 4) if fan_in_fan_out else torch.nn.Linear(4, 6)
    layer = layer.to(torch_dtype)
    config = peft.LoraConfig(r=3, lora_alpha=5, target_modules=["0"], fan_in_fan_out=fan_in_fan_out)
    wrapped = peft.get_peft_model(copy.deepcopy(torch.nn.Sequential(layer)), config)
    theirs = wrapped.base_model.model[0]
    adapter = LoraAdapter("0.weight", tuple(layer.weight.shape), rank=3, alpha=5, dropout=0.0,
                          fan_in_fan_out=fan_in_fan_out, use_rslora=False,
                          dtype=torch.float32, device=torch.device("cpu"))  # fmt: skip
    with torch.no_grad():
        adapter.lora_B.normal_()
        theirs.lora_A["default"].weight.copy_(adapter.lora_A)
        theirs.lora_B["default"].weight.copy_(adapter.lora_B)
    assert theirs.lora_A["default"].weight.dtype == torch.float32
    x = torch.randn(2, 5, 4).to(torch_dtype)
    w = adapter.view(layer.weight.detach())
    ours = torch.matmul(x, w) + layer.bias if fan_in_fan_out else F.linear(x, w, layer.bias)
    assert ours.dtype == torch_dtype
    tolerance = 1e-6 if dtype == "f32" else 2**-8  # one bf16 rounding
    torch.testing.assert_close(ours, wrapped(x), rtol=tolerance, atol=tolerance)


def test_a_merged_read_refuses_dropout() -> None:
    adapter = _adapter((6, 4), False, dropout=0.2)
    w = adapter.view(torch.randn(6, 4, dtype=torch.float64))
    F.linear(torch.randn(2, 4, dtype=torch.float64), w)  # the adapter's own path: fine
    with pytest.raises(LinnetError, match=r"`w`.*dropout=0\.0"):
        w[torch.tensor([1])]
    adapter.eval()  # no dropout outside training
    w[torch.tensor([1])]


EMBEDDING = """module lora_embedding

use std.nn.embedding::{embedding}

pub block Lookup<V: Dim, H: Dim, O: Dim> {
    param table: Tensor[V, H; f64]
    param proj: Tensor[O, H; f64]

    pub entry forward<S: Dim>(ids: Tensor[S; i32]) -> Tensor[S, O; f64] {
        let x = embedding(ids, table)
        let y[s, o] = sum[h] x[s, h] * proj[o, h]
        return y
    }
}
"""


@pytest.mark.parametrize("compile", [True, False], ids=["generated", "interpreted"])
def test_adapter_on_an_embedding_table(compile: bool) -> None:
    """A table read by a gather gets the merged weight: the same numbers as PEFT's merge."""
    g = torch.Generator().manual_seed(3)
    table = torch.randn(7, 5, dtype=torch.float64, generator=g)
    proj = torch.randn(3, 5, dtype=torch.float64, generator=g)
    model = lt.load(EMBEDDING, generics={"V": 7, "H": 5, "O": 3}, compile=compile,
                    weights={"table": table, "proj": proj}, trainable=True)  # fmt: skip
    (a_table,) = add_lora(model, "table", rank=2, alpha=3)
    (a_proj,) = add_lora(model, "proj", rank=2, alpha=4)
    with torch.no_grad():
        a_table.lora_B.normal_(generator=g)
        a_proj.lora_B.normal_(generator=g)
    ids = torch.tensor([1, 6, 0, 6], dtype=torch.int32)
    expected = F.linear(
        (table + 1.5 * a_table.lora_B @ a_table.lora_A)[ids.long()],
        proj + 2.0 * a_proj.lora_B @ a_proj.lora_A,
    )
    torch.testing.assert_close(model(ids), expected, rtol=1e-12, atol=1e-12)
    model(ids).sum().backward()
    assert a_table.lora_A.grad is not None and a_proj.lora_B.grad is not None


# -- refusals ------------------------------------------------------------------------------

TIED = """module lora_tied

use std.nn.embedding::{Embedding}
use std.nn.linear::{Linear}

pub block Tied<V: Dim, H: Dim> {
    sub embed: Embedding<V, H, f64>
    sub head: Linear<H, V, f64>
    param gain: Tensor[H; f64]

    pub entry forward<S: Dim>(ids: Tensor[S; i32]) -> Tensor[S, V; f64] {
        return head.forward(embed.forward(ids) * gain)
    }
}
"""


def _tied(trainable: bool = True) -> lt.LinnetModule:
    table = torch.randn(5, 3, dtype=torch.float64)
    return lt.load(TIED, generics={"V": 5, "H": 3}, trainable=trainable,
                   weights={"embed.weight": table, "gain": torch.ones(3, dtype=torch.float64)},
                   bindings={"head.weight": "embed.weight"})  # fmt: skip


def test_refusals_name_the_problem() -> None:
    model = _tied()
    with pytest.raises(LinnetError, match=r"no parameter path matches '\*q_proj\*'.*embed"
                       r"\.weight, gain, head\.weight"):  # fmt: skip
        add_lora(model, "*q_proj*")
    with pytest.raises(LinnetError, match="`gain` is 3, LoRA adapts 2-D weights only"):
        add_lora(model, "gain")
    with pytest.raises(LinnetError, match=r"`head\.weight` is one tensor with `embed\.weight`"):
        add_lora(model, "head.weight")
    with pytest.raises(LinnetError, match="rank must be at least 1"):
        add_lora(model, "head.weight", rank=0)
    with pytest.raises(LinnetError, match="dropout must be in"):
        add_lora(model, "head.weight", dropout=1.0)
    with pytest.raises(LinnetError, match="trainable=True"):
        add_lora(_tied(trainable=False), "head.weight")
    plain = lt.load(EMBEDDING, generics={"V": 7, "H": 5, "O": 3}, trainable=True,
                    weights={"table": np.zeros((7, 5)), "proj": np.zeros((3, 5))})  # fmt: skip
    add_lora(plain, "proj")
    with pytest.raises(LinnetError, match="`proj` already has a LoRA adapter"):
        add_lora(plain, "p*")


def test_weight_views_need_a_trainable_param() -> None:
    """`LinnetModule.set_weight_view`, the hook adapters use, refuses what it cannot serve."""
    weights = {"table": np.zeros((7, 5)), "proj": np.zeros((3, 5))}
    frozen = lt.load(EMBEDDING, generics={"V": 7, "H": 5, "O": 3}, weights=weights)
    with pytest.raises(LinnetError, match="needs a trainable module"):
        frozen.set_weight_view("proj", lambda w: w)
    trainable = lt.load(EMBEDDING, generics={"V": 7, "H": 5, "O": 3}, weights=weights,
                        trainable=True)  # fmt: skip
    with pytest.raises(LinnetError, match="no param or buffer at `nope`"):
        trainable.set_weight_view("nope", lambda w: w)
    ids = torch.tensor([1, 2], dtype=torch.int32)
    trainable.set_weight_view("proj", lambda w: w + 1)
    assert torch.equal(trainable(ids), torch.full((2, 3), 0.0, dtype=torch.float64))
    trainable.set_weight_view("table", lambda w: w + 1)
    assert torch.equal(trainable(ids), torch.full((2, 3), 5.0, dtype=torch.float64))
    trainable.set_weight_view("table", None)
    assert not trainable(ids).any()
