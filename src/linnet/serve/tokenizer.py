"""Tokenizers from a model folder, chat templates, and text streamed without broken characters.

Stage: text at the edges of the serving layer (issue 14). In: a folder holding
a Hugging Face `tokenizer.json` (read by the `tokenizers` library) and, when
present, `tokenizer_config.json` (special tokens, `chat_template`) or a
`chat_template.jinja` file. Out: token ids for the engine and text for clients.

Chat templates are Jinja, rendered as transformers renders them
(`transformers.utils.chat_template_utils`): a sandboxed, immutable environment
with `trim_blocks` and `lstrip_blocks`, the `loopcontrols` extension, a `tojson`
filter that keeps non-ASCII text, and the globals `raise_exception` and
`strftime_now`; the special tokens of the config are template variables. The
sandbox matters: a template comes with a downloaded model and must not reach
Python internals. The rendered prompt is encoded without adding special tokens,
since the template writes them.

`TextStream` turns tokens into text one piece at a time. A token may end in the
middle of a UTF-8 character (byte-level BPE splits characters into bytes), and a
WordPiece continuation changes how its predecessor is spaced; so each piece is
the difference between decoding a short window of recent tokens with and
without the new ones, released only when it does not end in U+FFFD, the
replacement character of an incomplete byte sequence (the method of vLLM's
and transformers' streamers).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from linnet.errors import LinnetError

REPLACEMENT = "\ufffd"
SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token",
                "mask_token")  # fmt: skip


def _token_text(value: object) -> str | None:
    """A special token of tokenizer_config.json: a string or `{"content": ...}`."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LinnetError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise LinnetError(f"{path} must hold a JSON object")
    return data


def _template_of(config: Mapping[str, Any], folder: Path) -> str | None:
    """The default chat template: `chat_template.jinja`, else the config's (a string or a
    list of `{name, template}`, whose `default` entry is taken)."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    template = config.get("chat_template")
    if isinstance(template, str):
        return template
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        found = named.get("default")
        return found if isinstance(found, str) else None
    return None


def compile_template(source: str) -> Any:
    """A chat template compiled in transformers' sandboxed environment."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x: object, ensure_ascii: bool = False, indent: int | None = None,
               separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:  # fmt: skip
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)  # fmt: skip

    def strftime_now(format: str) -> str:
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as exc:
        raise LinnetError(f"the chat template does not parse: {exc}") from None


class Tokenizer:
    """A `tokenizers.Tokenizer` with the special tokens and chat template of its folder."""

    def __init__(self, inner: Any, config: Mapping[str, Any], template: str | None) -> None:
        self.inner = inner
        self.config = dict(config)
        self.special = {k: t for k in SPECIAL_KEYS if (t := _token_text(config.get(k)))}
        self.chat_template = template
        self._compiled = compile_template(template) if template is not None else None
        eos = self.special.get("eos_token")
        found = None if eos is None else inner.token_to_id(eos)
        self.eos_ids: frozenset[int] = frozenset() if found is None else frozenset({found})

    @classmethod
    def from_folder(cls, folder: str | os.PathLike[str]) -> Tokenizer:
        """The tokenizer of a model folder (see the module docstring)."""
        from tokenizers import Tokenizer as Inner

        root = Path(folder)
        path = root / "tokenizer.json"
        if not path.is_file():
            raise LinnetError(f"{root} has no tokenizer.json (a Hugging Face fast tokenizer)")
        try:
            inner = Inner.from_file(str(path))
        except Exception as exc:  # the Rust library raises its own exception type
            raise LinnetError(f"cannot load {path}: {exc}") from None
        # As transformers does: a file's padding and truncation settings are dropped
        # (a prompt is never padded to a fixed width, nor silently cut).
        inner.no_padding()
        inner.no_truncation()
        config_path = root / "tokenizer_config.json"
        config = _read_json(config_path) if config_path.is_file() else {}
        return cls(inner, config, _template_of(config, root))

    @property
    def vocab_size(self) -> int:
        """Every id the tokenizer can produce, added tokens included."""
        size: int = self.inner.get_vocab_size(with_added_tokens=True)
        return size

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        ids: list[int] = self.inner.encode(text, add_special_tokens=add_special_tokens).ids
        return ids

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        text: str = self.inner.decode(list(ids), skip_special_tokens=skip_special_tokens)
        return text

    def render_chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        add_generation_prompt: bool = True,
        **extra: Any,
    ) -> str:
        """The prompt text of a conversation, through the folder's chat template."""
        if self._compiled is None:
            raise LinnetError(
                "the tokenizer has no chat template (tokenizer_config.json `chat_template` "
                "or chat_template.jinja)"
            )
        import jinja2

        try:
            text: str = self._compiled.render(
                messages=list(messages),
                add_generation_prompt=add_generation_prompt,
                **self.special,
                **extra,
            )
        except jinja2.TemplateError as exc:
            raise LinnetError(f"the chat template failed: {exc}") from None
        return text

    def encode_chat(
        self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = True
    ) -> list[int]:
        """`render_chat`, encoded without adding special tokens (the template writes them)."""
        text = self.render_chat(messages, add_generation_prompt=add_generation_prompt)
        return self.encode(text, add_special_tokens=False)

    def stream(self, context: Sequence[int] = ()) -> TextStream:
        return TextStream(self, context)


class TextStream:
    """Incremental detokenisation (see the module docstring). `context`: tokens before
    the streamed ones (the prompt), which set how the first piece is spaced but are
    not part of the text."""

    WINDOW = 6
    """Context tokens kept: enough for any tokenizer's spacing rules."""

    def __init__(self, tokenizer: Tokenizer, context: Sequence[int] = ()) -> None:
        self.tokenizer = tokenizer
        self.tokens = list(context)[-self.WINDOW :]
        self.prefix = 0
        self.read = len(self.tokens)
        self.text = ""

    def push(self, tokens: Sequence[int]) -> str:
        """Add tokens; the text they complete (possibly empty while a character is split)."""
        self.tokens += tokens
        decode = self.tokenizer.decode
        before = decode(self.tokens[self.prefix : self.read])
        after = decode(self.tokens[self.prefix :])
        if len(after) <= len(before) or after.endswith(REPLACEMENT):
            return ""
        piece = after[len(before) :]
        self.prefix, self.read = self.read, len(self.tokens)
        self.text += piece
        return piece

    def flush(self) -> str:
        """The text still held back (an incomplete character at the very end shows as U+FFFD)."""
        decode = self.tokenizer.decode
        before = decode(self.tokens[self.prefix : self.read])
        after = decode(self.tokens[self.prefix :])
        piece = after[len(before) :] if after.startswith(before) else ""
        self.prefix = self.read = len(self.tokens)
        self.text += piece
        return piece
