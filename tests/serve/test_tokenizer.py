"""`linnet.serve.tokenizer` against transformers' tokenizers on the same folders.

Encoding, decoding and chat templates (text and ids) equal transformers'
`AutoTokenizer` on a byte-level BPE trained here and on the BERT WordPiece
tokenizer a package ships; streamed text never splits a UTF-8 character and
adds up to the whole decode; bad folders and templates are LinnetErrors.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizer_cases import bert_folder, bpe_folder

from linnet.errors import LinnetError
from linnet.serve.tokenizer import REPLACEMENT, Tokenizer

transformers = pytest.importorskip("transformers")

TEXTS = ["hello world", "The Quick brown fox, jumps!", "naïve café — 東京 🦊 ok", "  spaced  out "]
MESSAGES = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "hello linnet 🦊"},
    {"role": "assistant", "content": "hello"},
    {"role": "user", "content": "shapes?"},
]


@pytest.fixture(scope="module")
def bpe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return bpe_folder(tmp_path_factory.mktemp("bpe"))


@pytest.mark.parametrize("which", ["bpe", "bert"])
def test_encode_and_decode_equal_transformers(which: str, bpe: Path) -> None:
    folder = bpe if which == "bpe" else bert_folder()
    ours = Tokenizer.from_folder(folder)
    theirs = transformers.AutoTokenizer.from_pretrained(folder)
    for text in TEXTS:
        ids = ours.encode(text)
        assert ids == theirs(text)["input_ids"]
        assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=True)
    assert ours.vocab_size == len(theirs)


def test_chat_template_renders_as_transformers(bpe: Path) -> None:
    ours = Tokenizer.from_folder(bpe)
    theirs = transformers.AutoTokenizer.from_pretrained(bpe)
    for generation in (True, False):
        text = ours.render_chat(MESSAGES, add_generation_prompt=generation)
        want = theirs.apply_chat_template(
            MESSAGES, tokenize=False, add_generation_prompt=generation
        )
        assert text == want
        ids = ours.encode_chat(MESSAGES, add_generation_prompt=generation)
        want_ids = theirs.apply_chat_template(
            MESSAGES, tokenize=True, add_generation_prompt=generation
        )
        if isinstance(want_ids, dict) or hasattr(want_ids, "keys"):
            want_ids = want_ids["input_ids"]
        assert ids == list(want_ids)
    assert text.startswith("<s><|system|>\nbe brief</s>\n")
    assert ours.eos_ids == {theirs.eos_token_id}
    with pytest.raises(LinnetError, match="unknown role tool"):
        ours.render_chat([{"role": "tool", "content": "x"}])


@pytest.mark.parametrize("which", ["bpe", "bert"])
def test_streamed_text_never_splits_a_character(which: str, bpe: Path) -> None:
    tokenizer = Tokenizer.from_folder(bpe if which == "bpe" else bert_folder())
    for text in TEXTS:
        ids = tokenizer.encode(text, add_special_tokens=False)
        if which == "bpe" and not text.isascii():
            # byte-level BPE: some token ends inside a multi-byte character
            assert any(REPLACEMENT in tokenizer.decode(ids[:n]) for n in range(1, len(ids)))
        stream = tokenizer.stream(context=tokenizer.encode("hello", add_special_tokens=False))
        pieces = [stream.push([t]) for t in ids]
        pieces.append(stream.flush())
        assert all(REPLACEMENT not in p for p in pieces)
        joined = "".join(pieces)
        whole = tokenizer.decode(ids)
        assert joined.strip() == whole.strip()  # the context may add one separating space


def test_bad_folders_are_linnet_errors(tmp_path: Path, bpe: Path) -> None:
    with pytest.raises(LinnetError, match=r"no tokenizer\.json"):
        Tokenizer.from_folder(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(LinnetError, match="cannot load"):
        Tokenizer.from_folder(tmp_path)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "tokenizer.json").write_bytes((bpe / "tokenizer.json").read_bytes())
    (broken / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{% if %}"}))
    with pytest.raises(LinnetError, match="does not parse"):
        Tokenizer.from_folder(broken)
    plain = Tokenizer.from_folder(bert_folder())
    with pytest.raises(LinnetError, match="no chat template"):
        plain.render_chat(MESSAGES)


def test_the_template_runs_sandboxed(bpe: Path) -> None:
    tokenizer = Tokenizer.from_folder(bpe)
    from linnet.serve.tokenizer import compile_template

    hostile = compile_template("{{ messages.__class__.__mro__[1].__subclasses__() }}")
    import jinja2.exceptions

    with pytest.raises(jinja2.exceptions.SecurityError):
        hostile.render(messages=[])
    assert tokenizer.chat_template is not None
