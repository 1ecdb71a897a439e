"""`linnet.convert` and `linnet convert`: transformers folders -> model cards.

Per family (llama, qwen2, qwen3, phi3, gpt2): a random-initialised transformers
model with a tokenizer is saved with `save_pretrained`, converted, and the card
loads with `linnet.torch.load(card)` and `linnet.onnx.load_model(card)` and no
other argument; both give transformers' logits within 1e-4 and its 16 greedy
tokens through prefill/decode. The weights stay in the folder (the card
references them); a tied head binds through the card's bindings.json. Folders
the sources cannot reproduce are refused with every reason listed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

import family_support as fs  # noqa: E402

import linnet.onnx  # noqa: E402
import linnet.torch as linnet_torch  # noqa: E402
from linnet.card import CARD_NAME, read_card  # noqa: E402
from linnet.cli import main as linnet_main  # noqa: E402
from linnet.convert import convert  # noqa: E402
from linnet.errors import LinnetError  # noqa: E402
from linnet.weights import save_safetensors  # noqa: E402

TIED = {"qwen3", "gpt2"}


def assert_logits(actual: Any, expected: Any) -> None:
    actual = np.asarray(actual)
    assert actual.shape == expected.shape
    gap = float(np.abs(actual - expected).max())
    assert gap <= 1e-4, f"max |logit difference| {gap:.2e}"
    np.testing.assert_array_equal(actual.argmax(-1), expected.argmax(-1))


def saved_folder(family: str, folder: Path, seed: int = 0) -> Any:
    model = fs.hf_model(family, seed=seed, tied=family in TIED)
    model.save_pretrained(folder)
    fs.save_tokenizer(folder)
    return model


def greedy(run: Any, prompt: Any, steps: int) -> Any:
    """`run(entry, inputs)` -> logits; prefill the prompt, then `steps` argmax tokens."""
    logits = np.asarray(run("prefill", [prompt, 0]))
    token = logits[:, -1].argmax(-1).astype(np.int32)
    chosen = [token]
    for step in range(1, steps):
        position = prompt.shape[1] + step - 1
        token = np.asarray(run("decode", [token, position])).argmax(-1).astype(np.int32)
        chosen.append(token)
    return np.stack(chosen, axis=1)


@pytest.mark.parametrize("family", fs.FAMILIES)
def test_converted_card_runs_on_torch_and_onnx_like_transformers(
    family: str, tmp_path: Path
) -> None:
    folder = tmp_path / family
    reference = saved_folder(family, folder)
    card = convert(folder, output=tmp_path / "card")
    assert (tmp_path / "card" / CARD_NAME).is_file()
    assert not list((tmp_path / "card").glob("*.safetensors")), "weights are referenced, not copied"
    assert card.weights == folder.resolve()
    assert (tmp_path / "card" / "tokenizer.json").is_file()
    assert (tmp_path / "card" / "generation_config.json").is_file()
    assert (card.bindings is not None) == (family == "qwen3")  # gpt2 reads wte itself
    tokens = fs.tokens_of((1, 10), seed=3)
    expected = fs.hf_logits(reference, tokens)
    ids = torch.from_numpy(tokens[:, :6].astype(np.int64))
    with torch.no_grad():
        generated = reference.generate(
            ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=16
        )[:, 6:].numpy()

    module = linnet_torch.load(card.folder, compile=True)
    assert_logits(fs.linnet_logits(module, tokens), expected)

    def run_torch(entry: str, inputs: list[Any]) -> Any:
        args = [torch.from_numpy(x) if isinstance(x, np.ndarray) else x for x in inputs]
        with torch.no_grad():
            return module.run_entry(entry, args).numpy()

    module.reset_state()
    np.testing.assert_array_equal(greedy(run_torch, tokens[:, :6], 16), generated)

    onnx_model = linnet.onnx.load_model(card.folder)
    assert_logits(onnx_model.run_entry("forward", [tokens]), expected)
    onnx_model.reset_state()
    np.testing.assert_array_equal(greedy(onnx_model.run_entry, tokens[:, :6], 16), generated)


def test_convert_command_writes_the_card(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "llama"
    saved_folder("llama", folder, seed=1)
    out = tmp_path / "out"
    assert linnet_main(["convert", str(folder), "-o", str(out), "--context", "32"]) == 0
    assert "wrote the model card" in capsys.readouterr().out
    card = read_card(out)
    assert card.generics["MaxSeq"] == 32
    assert card.generics["RopeTheta"] == 500000 and card.generics["EpsInverse"] == 1000000
    assert card.entry == "forward" and card.root == "LlamaForCausalLM"


def test_unconvertible_folders_are_refused_with_every_reason(tmp_path: Path) -> None:
    folder = tmp_path / "llama"
    saved_folder("llama", folder, seed=2)
    config = json.loads((folder / "config.json").read_text())
    config["hidden_act"] = "gelu"
    config["rope_parameters"] = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0}
    config["rms_norm_eps"] = 3e-6
    (folder / "config.json").write_text(json.dumps(config))
    save_safetensors({"model.extra.weight": np.zeros(3, np.float32)}, folder / "extra.safetensors")
    with pytest.raises(LinnetError) as caught:
        convert(folder, output=tmp_path / "card")
    message = str(caught.value)
    assert "activation `hidden_act` 'gelu'" in message
    assert "rope scaling type 'yarn'" in message
    assert "`rms_norm_eps` 3e-06 is not 1 / N" in message
    assert "bind nothing in the llama source: `model.extra.weight`" in message
    assert not (tmp_path / "card").exists()

    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"model_type": "mamba"}))
    with pytest.raises(LinnetError, match="model_type 'mamba' is not one of llama, qwen2"):
        convert(other)


def test_sliding_window_shorter_than_the_context_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "phi3"
    saved_folder("phi3", folder, seed=4)
    config = json.loads((folder / "config.json").read_text())
    config["sliding_window"] = 16
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(LinnetError, match="`sliding_window` 16 is shorter than the context"):
        convert(folder, output=tmp_path / "card")
    card = convert(folder, output=tmp_path / "card", context=16)  # within the window: exact
    assert card.generics["MaxSeq"] == 16


def test_mistral_folder_converts_to_the_llama_source(tmp_path: Path) -> None:
    values = fs.CASES["llama"][1]
    config = transformers.MistralConfig(
        vocab_size=values["Vocab"], hidden_size=values["H"], num_attention_heads=values["Heads"],
        num_key_value_heads=values["KvHeads"], intermediate_size=values["Inner"],
        num_hidden_layers=values["Layers"], head_dim=values["HeadDim"],
        max_position_embeddings=64, sliding_window=4096, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        initializer_range=0.15, bos_token_id=None, eos_token_id=None, pad_token_id=None,
        attn_implementation="eager",
    )  # fmt: skip
    torch.manual_seed(5)
    reference = transformers.MistralForCausalLM(config).eval()
    reference.save_pretrained(tmp_path / "mistral")
    card = convert(tmp_path / "mistral", output=tmp_path / "card")
    assert card.root == "LlamaForCausalLM" and card.source.name == "lib.linnet"
    assert card.generics["RopeTheta"] == 1000000 and card.generics["EpsInverse"] == 100000
    tokens = fs.tokens_of((2, 9), seed=6)
    module = linnet_torch.load(card.folder)
    assert_logits(fs.linnet_logits(module, tokens), fs.hf_logits(reference, tokens))
