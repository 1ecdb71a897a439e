"""`linnet.convert` and `linnet convert`: transformers folders -> model cards.

Per family (llama, qwen2, qwen3, phi3, gpt2): a random-initialised transformers
model with a tokenizer is saved with `save_pretrained`, converted, and the card
loads with `linnet.torch.load(card)` and `linnet.onnx.load_model(card)` and no
other argument; both give transformers' logits within 1e-4 and its 16 greedy
tokens through prefill/decode; so does `linnet.jax` (llama; the other families
slow). The weights stay in the folder (the card references them, even at
TinyLlama size); a tied head binds through the card's bindings.json. Folders
the sources cannot reproduce are refused with every reason listed at once.
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


def test_every_reason_is_listed_at_once(tmp_path: Path) -> None:
    """A phi3 folder wrong in five ways (activation, rope scaling type, a sliding window
    shorter than the context, a tensor that binds nothing, a bias Phi3ForCausalLM does
    not have but the source would bind): one error lists all five."""
    folder = tmp_path / "phi3"
    saved_folder("phi3", folder, seed=6)
    config = json.loads((folder / "config.json").read_text())
    config["hidden_act"] = "relu"
    config["rope_parameters"] = {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}
    config["sliding_window"] = 8
    (folder / "config.json").write_text(json.dumps(config))
    extra = {"lm_head.bias": np.zeros(67, np.float32), "model.extra": np.zeros(3, np.float32)}
    save_safetensors(extra, folder / "extra.safetensors")
    with pytest.raises(LinnetError) as caught:
        convert(folder, output=tmp_path / "card")
    lines = str(caught.value).splitlines()
    assert lines[0].endswith("cannot convert this phi3 folder:")
    assert len(lines) == 6, lines
    assert "rope scaling type 'dynamic'" in lines[1]
    assert "activation `hidden_act` 'relu': phi3 runs silu" in lines[2]
    assert "`sliding_window` 8 is shorter than the context (64)" in lines[3]
    assert "1 stored tensor(s) bind nothing in the phi3 source: `model.extra`" in lines[4]
    assert "1 stored tensor(s) that Phi3ForCausalLM does not have" in lines[5]
    assert lines[5].endswith("`lm_head.bias`")
    assert not (tmp_path / "card").exists()


def test_a_tinyllama_sized_folder_is_referenced_not_copied(tmp_path: Path) -> None:
    """A folder of TinyLlama-1.1B's config and a 4.4 GB f32 checkpoint (sparse: its header,
    then a hole) converts reading the header only; the card holds no weight bytes."""
    from linnet import pipeline
    from linnet.hf.families import FAMILIES
    from linnet.weights import specs_from_model

    sizes = {"Vocab": 32000, "H": 2048, "Heads": 32, "KvHeads": 4, "Inner": 5632, "Layers": 22}
    values: dict[str, int | str] = {
        **sizes, "HeadDim": 64, "RopeTheta": 10000, "EpsInverse": 100000, "MaxSeq": 2048,
        "Batch": 1, "T": "f32",
    }  # fmt: skip
    model = pipeline.load_model(fs.source("llama"), generics=values)
    specs = [(p, s.shape) for p, s in specs_from_model(model).items() if not s.optional]
    header: dict[str, object] = {}
    offset = 0
    for path, shape in specs:
        size = 4 * int(np.prod(shape))
        header[path] = {
            "dtype": "F32",
            "shape": list(shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    encoded = json.dumps(header).encode()
    encoded += b" " * (-(8 + len(encoded)) % 8)
    folder = tmp_path / "tinyllama"
    folder.mkdir()
    with (folder / "model.safetensors").open("wb") as out:
        out.write(len(encoded).to_bytes(8, "little") + encoded)
        out.truncate(8 + len(encoded) + offset)
    config = FAMILIES["llama"].config(values, False, set())
    (folder / "config.json").write_text(json.dumps(config))
    assert offset > 4_000_000_000 and len(specs) == 3 + 9 * 22

    card = convert(folder, output=tmp_path / "card")
    assert card.weights == folder.resolve()
    assert {k: card.generics[k] for k in sizes} == sizes
    assert card.generics["MaxSeq"] == 2048 and card.generics["T"] == "f32"
    written = sum(p.stat().st_size for p in card.folder.rglob("*") if p.is_file())
    assert written < 200_000, f"{written} bytes in the card"
    assert not list(card.folder.rglob("*.safetensors"))


def test_llama_biases_convert_only_with_attention_bias(tmp_path: Path) -> None:
    """transformers' Llama has q/k/v/o biases only with `attention_bias`: stored without it
    they are refused; with it (a random-initialised biased model) the card equals it."""
    values = fs.CASES["llama"][1]
    config = transformers.LlamaConfig(
        vocab_size=values["Vocab"], hidden_size=values["H"], num_attention_heads=values["Heads"],
        num_key_value_heads=values["KvHeads"], intermediate_size=values["Inner"],
        num_hidden_layers=values["Layers"], head_dim=values["HeadDim"],
        max_position_embeddings=64, rms_norm_eps=1e-6, attention_bias=True,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
        initializer_range=0.15, bos_token_id=None, eos_token_id=None, pad_token_id=None,
        attn_implementation="eager",
    )  # fmt: skip
    torch.manual_seed(7)
    reference = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for name, value in reference.named_parameters():
            if name.endswith(".bias"):
                value.normal_(0.0, 0.3)
    reference.save_pretrained(tmp_path / "llama")
    card = convert(tmp_path / "llama", output=tmp_path / "card")
    tokens = fs.tokens_of((2, 9), seed=8)
    module = linnet_torch.load(card.folder)
    assert_logits(fs.linnet_logits(module, tokens), fs.hf_logits(reference, tokens))

    saved = json.loads((tmp_path / "llama" / "config.json").read_text())
    (tmp_path / "llama" / "config.json").write_text(json.dumps({**saved, "attention_bias": False}))
    with pytest.raises(
        LinnetError, match=r"8 stored tensor\(s\) that LlamaForCausalLM does not have"
    ):
        convert(tmp_path / "llama", output=tmp_path / "card2")


@pytest.mark.parametrize(
    "family",
    [f if f == "llama" else pytest.param(f, marks=pytest.mark.slow) for f in fs.FAMILIES],
)
def test_converted_card_runs_on_jax_like_transformers(family: str, tmp_path: Path) -> None:
    """`linnet.jax.load_model(card)` and `linnet.jax.load(card)`, no other argument: the
    logits of transformers (1e-4) and its 16 greedy tokens through prefill/decode (XLA
    compiles each entry: ~12 s a family here, so all but llama are slow)."""
    linnet_jax = pytest.importorskip("linnet.jax")
    folder = tmp_path / family
    reference = saved_folder(family, folder, seed=9)
    card = convert(folder, output=tmp_path / "card")
    tokens = fs.tokens_of((1, 10), seed=10)
    expected = fs.hf_logits(reference, tokens)
    ids = torch.from_numpy(tokens[:, :6].astype(np.int64))
    with torch.no_grad():
        generated = reference.generate(
            ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=16
        )[:, 6:].numpy()
    model = linnet_jax.load_model(card.folder)
    assert_logits(model.run_entry("forward", [tokens]), expected)
    model.reset_state()
    np.testing.assert_array_equal(greedy(model.run_entry, tokens[:, :6], 16), generated)
    assert_logits(linnet_jax.load(card.folder)(tokens), expected)
