"""`linnet.hf.export` against transformers' own loader.

Per family (llama, qwen2, qwen3, phi3, gpt2): the example source with seeded
random weights is exported, `AutoModelForCausalLM.from_pretrained` loads the
folder, and its logits equal linnet.torch's within 1e-5. Also: the family is
recognised from paths and present optionals (and refused with reasons), a tied
head is written once with `tie_word_embeddings`, shards and their index past a
size, tokenizer files copied with their special ids, and the config's keys for
transformers 4.x and 5.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import family_support as fs  # noqa: E402

import linnet.hf  # noqa: E402
import linnet.torch as linnet_torch  # noqa: E402
from linnet.errors import LinnetError  # noqa: E402
from linnet.weights import read_safetensors  # noqa: E402


def assert_close(actual: Any, expected: Any, tolerance: float) -> None:
    gap = float(np.abs(actual - expected).max())
    assert gap <= tolerance, f"max |logit difference| {gap:.2e}"
    np.testing.assert_array_equal(actual.argmax(-1), expected.argmax(-1))


@pytest.mark.parametrize("family", fs.FAMILIES)
def test_exported_folder_loads_in_transformers_with_equal_logits(
    family: str, tmp_path: Path
) -> None:
    weights = fs.linnet_weights(family, seed=1)
    result = linnet.hf.export(
        fs.source(family), tmp_path, generics=fs.generics(family), weights=weights
    )
    assert result.family == family
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == family
    assert config["torch_dtype"] == config["dtype"] == "float32"
    if family != "gpt2":
        assert config["rope_theta"] == config["rope_parameters"]["rope_theta"]
        assert config["rope_theta"] == float(fs.CASES[family][1]["RopeTheta"])  # type: ignore[arg-type]
    reference = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path, attn_implementation="eager"
    ).eval()
    assert type(reference).__name__ == config["architectures"][0]
    module = linnet_torch.load(fs.source(family), generics=fs.generics(family), weights=weights)
    tokens = fs.tokens_of((2, 9), seed=2)
    assert_close(fs.linnet_logits(module, tokens), fs.hf_logits(reference, tokens), 1e-5)
    stored = read_safetensors(tmp_path / "model.safetensors")
    expected_names = set(weights) - ({"lm_head.weight"} if result.tied else set())
    assert set(stored) == expected_names
    assert all(np.array_equal(stored[k], weights[k]) for k in stored)


def test_tied_head_is_written_once(tmp_path: Path) -> None:
    weights = fs.linnet_weights("llama", seed=3)
    del weights["lm_head.weight"]
    result = linnet.hf.export(
        fs.source("llama"),
        tmp_path,
        generics=fs.generics("llama"),
        weights=weights,
        bindings={"lm_head.weight": "model.embed_tokens.weight"},
    )
    assert result.tied
    assert json.loads((tmp_path / "config.json").read_text())["tie_word_embeddings"] is True
    assert "lm_head.weight" not in read_safetensors(tmp_path / "model.safetensors")
    reference = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert torch.equal(reference.lm_head.weight, reference.model.embed_tokens.weight)
    tokens = fs.tokens_of((1, 7), seed=4)
    module = linnet_torch.load(
        fs.source("llama"),
        generics=fs.generics("llama"),
        weights=weights,
        bindings={"lm_head.weight": "model.embed_tokens.weight"},
    )
    assert_close(fs.linnet_logits(module, tokens), fs.hf_logits(reference, tokens), 1e-5)


def test_shards_and_index_past_the_size_limit(tmp_path: Path) -> None:
    weights = fs.linnet_weights("qwen3", seed=5)
    (tmp_path / "model.safetensors").write_bytes(b"stale")  # an earlier export's file
    result = linnet.hf.export(
        fs.source("qwen3"),
        tmp_path,
        generics=fs.generics("qwen3"),
        weights=weights,
        max_shard_bytes=20_000,
    )
    assert len(result.weight_files) > 2
    assert not (tmp_path / "model.safetensors").exists()
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) == set(weights)
    assert index["metadata"]["total_size"] == sum(w.nbytes for w in weights.values())
    reference = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    module = linnet_torch.load(fs.source("qwen3"), generics=fs.generics("qwen3"), weights=tmp_path)
    tokens = fs.tokens_of((1, 6), seed=6)
    assert_close(fs.linnet_logits(module, tokens), fs.hf_logits(reference, tokens), 1e-5)


def test_llama3_rope_scaling_and_weights_from_a_file(tmp_path: Path) -> None:
    from linnet.weights import save_safetensors

    binds = {
        **fs.generics("llama"),
        "RopeFactor": 8,
        "RopeLowFreqFactor": 1,
        "RopeHighFreqFactor": 4,
        "RopeOriginalMaxSeq": 16,
    }
    weights = fs.linnet_weights("llama", seed=7)
    save_safetensors(weights, tmp_path / "in.safetensors")
    out = tmp_path / "out"
    linnet.hf.export(fs.source("llama"), out, generics=binds, weights=tmp_path / "in.safetensors")
    config = json.loads((out / "config.json").read_text())
    assert config["rope_parameters"]["rope_type"] == "llama3"
    assert config["rope_scaling"]["factor"] == 8.0
    reference = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    module = linnet_torch.load(fs.source("llama"), generics=binds, weights=weights)
    tokens = fs.tokens_of((1, 40), seed=8)
    assert_close(fs.linnet_logits(module, tokens), fs.hf_logits(reference, tokens), 1e-5)


def test_weights_from_a_file_are_copied_whole_in_its_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint holding just the exported tensors, in an order of its own: the folder's
    tensors follow it and its data section is the checkpoint's, copied with one kernel
    call (or written from memory where the kernel refuses, the same bytes); tensor by
    tensor, the file equals the one written from memory in the usual order."""
    import mmap
    import os

    from linnet.weights.safetensors import SafeTensorsFile, save_safetensors_streamed

    if not hasattr(os, "copy_file_range"):
        pytest.skip("no os.copy_file_range on this platform")
    weights = fs.linnet_weights("llama", seed=9)
    reverse = [(n, "f32", weights[n].shape) for n in sorted(weights, reverse=True)]
    source = tmp_path / "in.safetensors"
    save_safetensors_streamed(source, reverse, weights.__getitem__, keep_order=True)
    calls: list[int] = []
    real = os.copy_file_range

    def counted(*args: int) -> int:
        calls.append(args[2])
        return real(*args)

    def refused(*args: int) -> int:
        raise OSError(18, "Invalid cross-device link")

    def export(out: Path, weights: Any) -> Path:
        linnet.hf.export(fs.source("llama"), out, generics=fs.generics("llama"), weights=weights)
        return out / "model.safetensors"

    monkeypatch.setattr(os, "copy_file_range", counted)
    copied = export(tmp_path / "copied", source)
    monkeypatch.setattr(os, "copy_file_range", refused)
    written = export(tmp_path / "written", source)
    memory = export(tmp_path / "memory", weights)
    checkpoint, out = SafeTensorsFile(source), SafeTensorsFile(copied)
    data = checkpoint.path.read_bytes()[checkpoint.data_start :]
    assert calls == [len(data)]
    assert copied.read_bytes()[out.data_start :] == data
    # the header padded so that the kernel copies whole pages
    assert out.data_start % mmap.PAGESIZE == checkpoint.data_start % mmap.PAGESIZE
    assert list(out.tensors) == [name for name, *_ in reverse]
    assert written.read_bytes() == copied.read_bytes()
    stored, usual = read_safetensors(copied), read_safetensors(memory)
    assert list(usual) == sorted(weights)
    assert set(stored) == set(usual)
    assert all(np.array_equal(stored[n], usual[n]) for n in usual)
    assert all(stored[n].dtype == usual[n].dtype for n in usual)
    reference = transformers.AutoModelForCausalLM.from_pretrained(copied.parent).eval()
    state = reference.state_dict()
    assert all(torch.equal(state[n], torch.from_numpy(np.array(usual[n]))) for n in usual)


def test_tokenizer_files_are_copied_with_their_special_ids(tmp_path: Path) -> None:
    tok = tmp_path / "tok"
    tok.mkdir()
    vocab = {f"t{i}": i for i in range(67)}
    (tok / "tokenizer.json").write_text(
        json.dumps(
            {
                "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "t0"},
                "added_tokens": [{"id": 1, "content": "<s>"}, {"id": 2, "content": "</s>"}],
            }
        )
    )
    (tok / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": "<s>", "eos_token": "</s>"})
    )
    out = tmp_path / "out"
    linnet.hf.export(
        fs.source("phi3"),
        out,
        generics=fs.generics("phi3"),
        weights=fs.linnet_weights("phi3"),
        tokenizer=tok,
    )
    assert (out / "tokenizer.json").read_bytes() == (tok / "tokenizer.json").read_bytes()
    generation = json.loads((out / "generation_config.json").read_text())
    assert generation["bos_token_id"] == 1 and generation["eos_token_id"] == 2
    assert json.loads((out / "config.json").read_text())["eos_token_id"] == 2


def test_a_model_of_no_family_is_refused_with_reasons(tmp_path: Path) -> None:
    weights = fs.linnet_weights("llama")
    rng = np.random.default_rng(9)
    for layer in range(2):
        for kind in ("q", "v"):  # q and v biases without k or o: neither llama nor qwen2
            name = f"model.layers.{layer}.self_attn.{kind}_proj.bias"
            weights[name] = rng.normal(size=weights[name[:-4] + "weight"].shape[0]).astype("f4")
    with pytest.raises(LinnetError) as caught:
        linnet.hf.export(
            fs.source("llama"), tmp_path, generics=fs.generics("llama"), weights=weights
        )
    message = str(caught.value)
    assert "none of the Hugging Face families" in message
    assert "llama: `model.layers.0.self_attn.q_proj.bias` is in the weights without" in message
    assert "qwen2: `model.layers.0.self_attn.k_proj.bias` is not in the weights" in message
    assert "phi3: no parameter `model.layers.0.self_attn.qkv_proj.weight`" in message
    assert "gpt2: no parameter `transformer.wte.weight`" in message
    assert not (tmp_path / "config.json").exists()


def test_a_transformers5_tokenizer_config_is_written_for_both_lines(tmp_path: Path) -> None:
    """transformers 5 saves `tokenizer_class: TokenizersBackend`, which 4.x cannot load; the
    export names `PreTrainedTokenizerFast` (the same class in 5), keeping every other key."""
    tok = tmp_path / "tok"
    fs.save_tokenizer(tok)
    source = json.loads((tok / "tokenizer_config.json").read_text())
    assert source["tokenizer_class"] == "TokenizersBackend"
    out = tmp_path / "out"
    linnet.hf.export(
        fs.source("llama"),
        out,
        generics=fs.generics("llama"),
        weights=fs.linnet_weights("llama"),
        tokenizer=tok,
    )
    written = json.loads((out / "tokenizer_config.json").read_text())
    assert written == {**source, "tokenizer_class": "PreTrainedTokenizerFast"}
    text = "the quick brown fox"
    expected = transformers.AutoTokenizer.from_pretrained(tok)(text)["input_ids"]
    assert transformers.AutoTokenizer.from_pretrained(out)(text)["input_ids"] == expected
