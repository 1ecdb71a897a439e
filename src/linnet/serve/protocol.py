"""OpenAI's completions and chat completions requests: parsed, bounded, or refused with a 400.

Stage: the HTTP server's input side (`linnet.serve.server`). In: a request body
(bytes, already bounded in size) and the server's `Limits`. Out: a `Job` (the
prompts as token ids and the sampling options of every choice) or an
`ApiError`, whose `body` is OpenAI's error shape
`{"error": {"message", "type", "param", "code"}}`.

Every number a client sends is bounded here: `n`, `max_tokens`, `logprobs`,
`top_logprobs`, the count and length of stop strings, the prompt's length (it
must fit the model's cache with `max_tokens`). Fields OpenAI defines that this
server does not implement are refused when set to anything but their neutral
value, rather than silently ignored.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from linnet.serve.tokenizer import Tokenizer


@dataclass(frozen=True)
class Limits:
    """What one request may ask for."""

    max_body_bytes: int = 1 << 20
    max_n: int = 8
    max_tokens: int = 4096
    max_logprobs: int = 20
    max_stops: int = 4
    max_stop_chars: int = 200
    max_prompts: int = 16


class ApiError(Exception):
    """A client error with its HTTP status and OpenAI-shaped body."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        param: str | None = None,
        code: str | None = None,
        kind: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = {"error": {"message": message, "type": kind, "param": param, "code": code}}


@dataclass
class Job:
    """A parsed request: prompts (token ids), options per choice, how to answer."""

    chat: bool
    model: str
    prompts: list[list[int]]
    prompt_texts: list[str]
    n: int
    max_tokens: int
    temperature: float
    top_p: float
    top_k: int
    seed: int | None
    stop: list[str]
    logprobs: int | None
    echo: bool
    stream: bool
    include_usage: bool


def parse_body(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ApiError(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ApiError("the request body must be a JSON object")
    return data


def _number(data: Mapping[str, Any], name: str, default: float, low: float, high: float) -> float:
    value = data.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ApiError(f"`{name}` must be a number", param=name)
    if not low <= value <= high:
        raise ApiError(f"`{name}` must be between {low} and {high}, got {value}", param=name)
    return float(value)


def _integer(
    data: Mapping[str, Any], name: str, default: int | None, low: int, high: int
) -> int | None:
    value = data.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(f"`{name}` must be an integer", param=name)
    if not low <= value <= high:
        raise ApiError(f"`{name}` must be between {low} and {high}, got {value}", param=name)
    return value


def _stops(data: Mapping[str, Any], limits: Limits) -> list[str]:
    value = data.get("stop")
    if value is None:
        return []
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise ApiError("`stop` must be a non-empty string or a list of them", param="stop")
    if len(stops) > limits.max_stops:
        raise ApiError(f"`stop` holds at most {limits.max_stops} strings", param="stop")
    if any(len(s) > limits.max_stop_chars for s in stops):
        raise ApiError(
            f"a `stop` string is at most {limits.max_stop_chars} characters", param="stop"
        )
    return list(stops)


def _unsupported(data: Mapping[str, Any], neutral: Mapping[str, object]) -> None:
    for name, value in neutral.items():
        if name in data and data[name] is not None and data[name] != value:
            raise ApiError(f"`{name}` is not supported by this server", param=name)


def _completion_prompts(
    data: Mapping[str, Any], tokenizer: Tokenizer, limits: Limits
) -> tuple[list[list[int]], list[str]]:
    prompt = data.get("prompt")
    if isinstance(prompt, str):
        items: list[Any] = [prompt]
    elif (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
    ):
        items = [prompt]
    elif isinstance(prompt, list) and prompt:
        items = prompt
    else:
        raise ApiError("`prompt` must be a string, a list of strings, or token ids", param="prompt")
    if len(items) > limits.max_prompts:
        raise ApiError(f"at most {limits.max_prompts} prompts per request", param="prompt")
    ids: list[list[int]] = []
    texts: list[str] = []
    vocab = tokenizer.vocab_size
    for item in items:
        if isinstance(item, str):
            tokens = tokenizer.encode(item)
            texts.append(item)
        elif (
            isinstance(item, list)
            and item
            and all(isinstance(t, int) and not isinstance(t, bool) for t in item)
        ):
            if not all(0 <= t < vocab for t in item):
                raise ApiError(f"token ids of `prompt` must be in [0, {vocab})", param="prompt")
            tokens = list(item)
            texts.append(tokenizer.decode(tokens))
        else:
            raise ApiError(
                "`prompt` must be a string, a list of strings, or token ids", param="prompt"
            )
        if not tokens:
            raise ApiError("a prompt encodes to no tokens", param="prompt")
        ids.append(tokens)
    return ids, texts


def _message_text(message: object, index: int) -> tuple[str, str]:
    if not isinstance(message, Mapping):
        raise ApiError(f"`messages[{index}]` must be an object", param=f"messages[{index}]")
    role, content = message.get("role"), message.get("content")
    if role not in ("system", "developer", "user", "assistant", "tool"):
        raise ApiError(f"`messages[{index}].role` must be system, user or assistant, got {role!r}",
                       param=f"messages[{index}].role")  # fmt: skip
    if isinstance(content, list):
        parts = []
        for part in content:
            if not (
                isinstance(part, Mapping)
                and part.get("type") == "text"
                and isinstance(part.get("text"), str)
            ):
                raise ApiError(f"`messages[{index}].content` parts must be text parts",
                               param=f"messages[{index}].content")  # fmt: skip
            parts.append(part["text"])
        content = "".join(parts)
    if not isinstance(content, str):
        raise ApiError(
            f"`messages[{index}].content` must be a string", param=f"messages[{index}].content"
        )
    return str(role), content


def parse_job(
    data: Mapping[str, Any], *, chat: bool, model: str, tokenizer: Tokenizer, limits: Limits,
    max_seq: int,
) -> Job:  # fmt: skip
    """A `Job` from a request's JSON object, or an ApiError (see the module docstring)."""
    name = data.get("model")
    if not isinstance(name, str):
        raise ApiError("`model` is required", param="model")
    if name != model:
        raise ApiError(f"The model `{name}` does not exist", status=404, param="model",
                       code="model_not_found")  # fmt: skip
    _unsupported(data, {"presence_penalty": 0, "frequency_penalty": 0, "logit_bias": {},
                        "best_of": 1, "suffix": "", "tools": [], "response_format": {"type": "text"}})  # fmt: skip
    n = _integer(data, "n", 1, 1, limits.max_n)
    stream = data.get("stream", False)
    if not isinstance(stream, bool):
        raise ApiError("`stream` must be a boolean", param="stream")
    options = data.get("stream_options")
    include_usage = False
    if options is not None:
        if not stream:
            raise ApiError(
                "`stream_options` is only allowed with `stream: true`", param="stream_options"
            )
        if not isinstance(options, Mapping) or not isinstance(
            options.get("include_usage", False), bool
        ):
            raise ApiError(
                "`stream_options.include_usage` must be a boolean", param="stream_options"
            )
        include_usage = bool(options.get("include_usage", False))
    if chat:
        messages = data.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ApiError("`messages` must be a non-empty list", param="messages")
        if len(messages) > 256:
            raise ApiError("at most 256 messages per request", param="messages")
        conversation = [dict(zip(("role", "content"), _message_text(m, i), strict=True))
                        for i, m in enumerate(messages)]  # fmt: skip
        try:
            text = tokenizer.render_chat(conversation, add_generation_prompt=True)
        except Exception as exc:
            raise ApiError(
                f"the chat template rejects these messages: {exc}", param="messages"
            ) from None
        prompts, texts = [tokenizer.encode(text, add_special_tokens=False)], [text]
        wants = data.get("logprobs", False)
        if not isinstance(wants, bool):
            raise ApiError("`logprobs` must be a boolean", param="logprobs")
        top = _integer(data, "top_logprobs", None, 0, limits.max_logprobs)
        if top is not None and not wants:
            raise ApiError("`top_logprobs` needs `logprobs: true`", param="top_logprobs")
        logprobs = (top or 0) if wants else None
        echo = False
        budget = data.get("max_completion_tokens", data.get("max_tokens"))
        field_name = "max_completion_tokens" if "max_completion_tokens" in data else "max_tokens"
    else:
        prompts, texts = _completion_prompts(data, tokenizer, limits)
        logprobs = _integer(data, "logprobs", None, 0, limits.max_logprobs)
        echo = data.get("echo", False)
        if not isinstance(echo, bool):
            raise ApiError("`echo` must be a boolean", param="echo")
        if echo and logprobs is not None:
            raise ApiError(
                "`echo` with `logprobs` is not supported (no prompt log-probs)", param="echo"
            )
        budget = data.get("max_tokens", 16)
        field_name = "max_tokens"
    longest = max(len(p) for p in prompts)
    room = max_seq - longest + 1
    if room < 1:
        raise ApiError(f"the prompt has {longest} tokens; this model's context is {max_seq}",
                       param="messages" if chat else "prompt", code="context_length_exceeded")  # fmt: skip
    if budget is None:
        max_tokens = min(room, limits.max_tokens)
    else:
        checked = _integer({field_name: budget}, field_name, None, 1, limits.max_tokens)
        assert checked is not None
        max_tokens = checked
        if max_tokens > room:
            raise ApiError(
                f"the prompt ({longest} tokens) and `{field_name}` ({max_tokens}) exceed this "
                f"model's context of {max_seq} tokens", param=field_name,
                code="context_length_exceeded")  # fmt: skip
    seed = _integer(data, "seed", None, -(2**63), 2**64 - 1)
    top_k = _integer(data, "top_k", 0, -1, 1 << 20)
    assert n is not None and top_k is not None
    return Job(
        chat=chat,
        model=model,
        prompts=prompts,
        prompt_texts=texts,
        n=n,
        max_tokens=max_tokens,
        temperature=_number(data, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(data, "top_p", 1.0, 1e-9, 1.0),
        top_k=max(top_k, 0),
        seed=seed,
        stop=_stops(data, limits),
        logprobs=logprobs,
        echo=bool(echo),
        stream=stream,
        include_usage=include_usage,
    )
