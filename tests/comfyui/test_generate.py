"""The Generate text node on a card of the tiny Llama example with a trained BPE tokenizer.

Greedy text equals transformers' greedy `generate` of the same weights, decoded
by the same tokenizer, on torch and ONNX Runtime; seeded sampling and the chat
template equal `linnet.serve.Engine` driven directly on a model loaded apart.
The workflows run in the stand-in executor (`standin`: ComfyUI is not
installable here).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

import comfy_cases  # noqa: E402
import decoder_cases  # noqa: E402
from standin import Executor, NodeFailure, load_custom_node  # noqa: E402

import linnet.torch as lt  # noqa: E402
from linnet.card import write_card  # noqa: E402
from linnet.serve import Engine, Request  # noqa: E402
from linnet.serve.tokenizer import Tokenizer  # noqa: E402
from linnet.weights import save_safetensors  # noqa: E402

ROWS, MAX_SEQ = 2, 64


def bpe_folder(folder: Path) -> Path:
    """`tests/serve/tokenizer_cases.bpe_folder`, imported by path (that folder is not on
    the test path)."""
    name = "tokenizer_cases"
    module = sys.modules.get(name)
    if module is None:
        path = Path(__file__).resolve().parents[1] / "serve" / "tokenizer_cases.py"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
    found: Path = module.bpe_folder(folder)
    return found


@pytest.fixture(scope="module")
def card(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, decoder_cases.Decoder]:
    folder = tmp_path_factory.mktemp("llama-card")
    decoder = decoder_cases.llama(vocab=320)
    save_safetensors(decoder.weights, folder / "model.safetensors")
    bpe_folder(folder / "tokenizer")
    fields = {"name": "tiny-llama", "source": str(decoder.source),
              "weights": "model.safetensors", "tokenizer": "tokenizer"}  # fmt: skip
    write_card(folder, fields, decoder.generics(ROWS, MAX_SEQ))
    return folder, decoder


@pytest.fixture(scope="module")
def tokenizer(card: tuple[Path, Any]) -> Tokenizer:
    return Tokenizer.from_folder(card[0] / "tokenizer")


def workflow(card: Path, backend: str, **generate: Any) -> dict[str, Any]:
    inputs = {"model": ["1", 0], "prompt": "hello world", "max_tokens": 12,
              "temperature": 0.0, "seed": 0, **generate}  # fmt: skip
    return {
        "1": {"class_type": "LinnetLoadCard",
              "inputs": {"card": str(card), "backend": backend, "device": "cpu"}},
        "2": {"class_type": "LinnetGenerateText", "inputs": inputs},
    }  # fmt: skip


def run(flow: dict[str, Any]) -> str:
    executor = Executor(load_custom_node(str(comfy_cases.PACK)))
    out = executor.run(flow)
    (text,) = out["2"]
    assert executor.ui["2"] == {"text": [text]}
    assert isinstance(text, str)
    return text


def direct(card: Path, request: Request, tokenizer: Tokenizer) -> str:
    """The engine driven directly on the card's model, loaded apart."""
    model = lt.load(card, compile=True)
    (completion,), _ = Engine(model).run([request])
    return tokenizer.decode(completion.tokens)


@pytest.mark.parametrize("backend", ["torch", "onnx"])
def test_greedy_text_equals_transformers(
    card: tuple[Path, decoder_cases.Decoder], tokenizer: Tokenizer, backend: str
) -> None:
    folder, decoder = card
    ids = tokenizer.encode("hello world")
    tokens = decoder.generate(np.array(ids), 12)
    assert not set(tokens) & tokenizer.eos_ids  # else the node would rightly stop early
    text = run(workflow(folder, backend))
    assert text == tokenizer.decode(tokens)


def test_sampled_and_chat_text_equal_the_engine(
    card: tuple[Path, decoder_cases.Decoder], tokenizer: Tokenizer
) -> None:
    folder, _ = card
    options = {"temperature": 0.9, "seed": 7, "top_k": 40, "top_p": 0.95, "max_tokens": 10}
    sampled = run(workflow(folder, "torch", **options))
    ids = tokenizer.encode("hello world")
    eos = sorted(tokenizer.eos_ids)
    request = Request(ids, max_new_tokens=10, temperature=0.9, seed=7, top_k=40, top_p=0.95,
                      eos=eos)  # fmt: skip
    assert sampled == direct(folder, request, tokenizer)
    other = run(workflow(folder, "torch", **{**options, "seed": 8}))
    assert other != sampled  # the seed reaches the engine
    chat = run(workflow(folder, "torch", chat=True, max_tokens=6, prompt="hi"))
    chat_ids = tokenizer.encode_chat([{"role": "user", "content": "hi"}])
    want = direct(folder, Request(chat_ids, max_new_tokens=6, temperature=0.0, eos=eos), tokenizer)
    assert chat == want


def failure(flow: dict[str, Any]) -> str:
    with pytest.raises(NodeFailure) as caught:
        Executor(load_custom_node(str(comfy_cases.PACK))).run(flow)
    assert caught.value.node_id == "2"
    assert caught.value.exception.__cause__ is None
    return caught.value.message


def test_bad_requests_give_messages(
    card: tuple[Path, decoder_cases.Decoder], tmp_path: Path
) -> None:
    folder, _ = card
    too_long = failure(workflow(folder, "torch", prompt="hello " * 80))
    assert too_long.startswith("the prompt has ") and "the model's MaxSeq is 64" in too_long
    missing = failure(workflow(folder, "torch", tokenizer=str(tmp_path)))
    assert missing == f"{tmp_path.resolve()} has no tokenizer.json (a Hugging Face fast tokenizer)"
    vision = comfy_cases.model_folder(tmp_path / "vision")
    flow = workflow(Path(vision["card"]), "torch")
    assert failure(flow).startswith(
        "`tokenizer`: the model `tiny-vision` has no card tokenizer; give the folder"
    )
    flow["2"]["inputs"]["tokenizer"] = str(folder / "tokenizer")
    message = failure(flow)
    assert message.startswith("the model has no `prefill_slots` or `decode_rows` entry")
    assert json.dumps(message)  # a plain string for the UI
