"""A `tokenizer.json` BPE vocabulary as GGUF tokenizer metadata (`tokenizer.ggml.*`).

Stage: part of `linnet.gguf.export`. In: a tokenizer folder (or its
`tokenizer.json`) and the model's vocabulary size. Out: the tokens by id, their
types (normal, control for special added tokens, user-defined for other added
tokens, unused for the padding llama.cpp's converter adds up to the model's
vocabulary size), the merges, and the bos/eos/unk/pad ids that
`tokenizer_config.json` names. Only BPE models are read; anything else is an
error naming the model type. Nothing from the tokenizer is executed.
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
            f"tokenizer: {path}: a {model.get('type')!r} model; only BPE vocabularies go to GGUF"
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


def add_vocabulary(writer: Any, tokenizer: Path, vocab_size: int, family: str = "") -> str | None:
    """The tokenizer metadata, the vocabulary padded to `vocab_size` (or refused if larger);
    returns the chat template it found, if any."""
    import gguf

    folder = tokenizer_folder(tokenizer)
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
