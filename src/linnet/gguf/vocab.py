"""A tokenizer's vocabulary as GGUF tokenizer metadata (`tokenizer.ggml.*`).

Stage: part of `linnet.gguf.export`. In: a tokenizer folder (or its
`tokenizer.json`) and the model's vocabulary size. Out, for a `tokenizer.json`
BPE model: the tokens by id, their types (normal, control for special added
tokens, user-defined for other added tokens, unused for the padding llama.cpp's
converter adds up to the model's vocabulary size), the merges, and the
bos/eos/unk/pad ids that `tokenizer_config.json` names. A llama or phi3 folder
with a SentencePiece `tokenizer.model` is written as llama.cpp's converter
writes it (`_create_vocab_sentencepiece`): tokenizer model "llama", each
piece's score and type (normal, unknown, control, unused, byte), the added
tokens of `added_tokens.json` and `tokenizer_config.json`, and the special ids
and flags of gguf's own `SpecialVocab`. Other tokenizer models are an error
naming the type. Nothing from the tokenizer is executed (`tokenizer.model` is
a protobuf read by the `sentencepiece` package).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from linnet.errors import LinnetError
from linnet.hf.folder import special_token_ids, tokenizer_folder

# tokenizer.ggml.pre: the pre-tokenizer llama.cpp applies, by model type when known.
PRE_TOKENIZERS = {"llama": "llama-bpe", "qwen2": "qwen2", "qwen3": "qwen2", "gpt2": "gpt-2"}


def read_bpe(folder: Path) -> tuple[list[str], list[int], list[str]]:
    """(tokens by id, their GGUF token types, merges as `a b` strings) from `tokenizer.json`."""
    import gguf

    path = folder / "tokenizer.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise LinnetError(f"tokenizer: {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise LinnetError(f"tokenizer: {path}: not JSON: {exc}") from None
    model = data.get("model") or {}
    if model.get("type") != "BPE":
        raise LinnetError(
            f"tokenizer: {path}: a {model.get('type')!r} model; only BPE vocabularies go to "
            "GGUF (and, for llama and phi3, a SentencePiece tokenizer.model)"
        )
    by_id: dict[int, tuple[str, int]] = {}
    for token, index in (model.get("vocab") or {}).items():
        by_id[int(index)] = (str(token), int(gguf.TokenType.NORMAL))
    for added in data.get("added_tokens") or []:
        kind = gguf.TokenType.CONTROL if added.get("special") else gguf.TokenType.USER_DEFINED
        by_id[int(added["id"])] = (str(added["content"]), int(kind))
    size = max(by_id) + 1 if by_id else 0
    tokens = [by_id.get(i, (f"[PAD{i}]", int(gguf.TokenType.UNUSED)))[0] for i in range(size)]
    types = [by_id.get(i, ("", int(gguf.TokenType.UNUSED)))[1] for i in range(size)]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges") or []]
    return tokens, types, merges


# Families whose llama.cpp converter reads a SentencePiece `tokenizer.model` first.
SENTENCEPIECE_FAMILIES = ("llama", "phi3")


def read_sentencepiece(folder: Path, vocab_size: int) -> tuple[list[str], list[float], list[int]]:
    """(tokens, scores, GGUF token types) by id from `folder/tokenizer.model`, padded to
    `vocab_size`, with the added tokens of `added_tokens.json` and of
    `tokenizer_config.json`'s `added_tokens_decoder`, as the converter reads them."""
    import gguf

    try:
        from sentencepiece import SentencePieceProcessor
    except ImportError:
        raise LinnetError(
            "tokenizer: reading tokenizer.model needs the `sentencepiece` package "
            "(pip install sentencepiece==0.2.3)"
        ) from None
    path = folder / "tokenizer.model"
    processor = SentencePieceProcessor()
    try:
        processor.LoadFromFile(str(path))
    except (OSError, RuntimeError) as exc:
        raise LinnetError(f"tokenizer: {path}: not a SentencePiece model: {exc}") from None
    size = processor.vocab_size()
    if size > vocab_size:
        raise LinnetError(
            f"tokenizer: {path} has {size} pieces, more than the model's vocabulary ({vocab_size})"
        )
    kinds = gguf.TokenType
    tokens = [f"[PAD{i}]" for i in range(vocab_size)]
    scores = [-10000.0] * vocab_size
    types = [int(kinds.UNUSED)] * vocab_size
    for index in range(size):
        kind = kinds.NORMAL
        if processor.IsUnknown(index):
            kind = kinds.UNKNOWN
        elif processor.IsControl(index):
            kind = kinds.CONTROL
        elif processor.IsUnused(index):
            kind = kinds.UNUSED
        elif processor.IsByte(index):
            kind = kinds.BYTE
        tokens[index] = processor.IdToPiece(index)
        scores[index] = processor.GetScore(index)
        types[index] = int(kind)
    for text, index in _json_object(folder / "added_tokens.json").items():
        if isinstance(index, int) and 0 <= index < vocab_size:
            tokens[index], scores[index], types[index] = text, -1000.0, int(kinds.USER_DEFINED)
    decoder = _json_object(folder / "tokenizer_config.json").get("added_tokens_decoder") or {}
    for key, entry in decoder.items() if isinstance(decoder, dict) else ():
        index = int(key)
        if not 0 <= index < vocab_size or not isinstance(entry, dict):
            continue
        text = str(entry.get("content"))
        if entry.get("special") or _looks_special(text):
            types[index] = int(kinds.CONTROL)
        else:
            text = text.replace("\u2581", " ")  # the converter pre-normalises spaces
            types[index] = int(kinds.USER_DEFINED)
        tokens[index], scores[index] = text, -1000.0
    return tokens, scores, types


def _looks_special(text: str) -> bool:
    """The converter's `does_token_look_special`: added tokens that act as control tokens."""
    return (
        text in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
        or (text.startswith("<|") and text.endswith("|>"))
        or (text.startswith("<\uff5c") and text.endswith("\uff5c>"))
        or (text.startswith("<unused") and text.endswith(">"))
    )


def _json_object(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise LinnetError(f"tokenizer: {path}: {exc}") from None
    return data if isinstance(data, dict) else {}


def _add_sentencepiece(writer: Any, folder: Path, vocab_size: int) -> str | None:
    import gguf

    tokens, scores, types = read_sentencepiece(folder, vocab_size)
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    special = gguf.SpecialVocab(folder, n_vocab=len(tokens))
    # SpecialVocab maps tokenizer_config's token strings to ids through tokenizer.json or
    # config.json; a folder with neither still names them, and the pieces give their ids
    settings = _json_object(folder / "tokenizer_config.json")
    first = {token: index for index, token in reversed(list(enumerate(tokens)))}
    for role in ("bos", "eos", "unk", "pad"):
        token = settings.get(f"{role}_token")
        token = token.get("content") if isinstance(token, dict) else token
        if role not in special.special_token_ids and isinstance(token, str) and token in first:
            special.special_token_ids[role] = first[token]
    special.add_to_gguf(writer, quiet=True)
    template = special.chat_template
    return template if isinstance(template, str) else _chat_template(folder)


def add_vocabulary(writer: Any, tokenizer: Path, vocab_size: int, family: str = "") -> str | None:
    """The tokenizer metadata, the vocabulary padded to `vocab_size` (or refused if larger);
    returns the chat template it found, if any."""
    import gguf

    folder = tokenizer_folder(tokenizer)
    if family in SENTENCEPIECE_FAMILIES and (folder / "tokenizer.model").is_file():
        return _add_sentencepiece(writer, folder, vocab_size)
    tokens, types, merges = read_bpe(folder)
    if len(tokens) > vocab_size:
        raise LinnetError(
            f"tokenizer: {len(tokens)} tokens, more than the model's vocabulary ({vocab_size})"
        )
    for i in range(len(tokens), vocab_size):
        tokens.append(f"[PAD{i}]")
        types.append(int(gguf.TokenType.UNUSED))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(PRE_TOKENIZERS.get(family, "default"))
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    ids = special_token_ids(folder)
    if "pad_token_id" not in ids and "eos_token_id" in ids:
        # readers default a missing pad id to their own (Phi-3's 32000), which may lie
        # outside a smaller vocabulary; the eos token is the usual stand-in
        ids["pad_token_id"] = ids["eos_token_id"]
    for key, add in (
        ("bos_token_id", writer.add_bos_token_id),
        ("eos_token_id", writer.add_eos_token_id),
        ("pad_token_id", writer.add_pad_token_id),
    ):
        if isinstance(ids.get(key), int):
            add(ids[key])
    template = _chat_template(folder)
    if template is not None:
        writer.add_chat_template(template)
    return template


def _chat_template(folder: Path) -> str | None:
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    config = folder / "tokenizer_config.json"
    if config.is_file():
        value = json.loads(config.read_text(encoding="utf-8")).get("chat_template")
        if isinstance(value, str):
            return value
    return None
