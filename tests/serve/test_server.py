"""The OpenAI-compatible server, driven by the official `openai` client on 127.0.0.1.

The server runs the tiny Llama example (random weights) behind a byte-level BPE
trained for the test. Greedy text equals transformers' `generate` on the same
weights, decoded by the same tokenizer; streaming adds up to the whole answer;
`n`, `stop`, `seed`, `logprobs` and `echo` do what OpenAI's API says; every
malformed or oversized request is a 400 in OpenAI's error shape, an unknown model
or route a 404, a missing or wrong API key a 401; a client that disconnects
mid-stream has its row freed; a failed engine turns `/health` to 500.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("fastapi")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from server_cases import Running, make_server, running  # noqa: E402

from linnet.serve.protocol import Limits  # noqa: E402

KEY = "test-key-123"
LIMITS = Limits(max_body_bytes=20_000, max_n=4, max_tokens=48)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    server, decoder = make_server(tmp_path_factory.mktemp("bpe"), api_key=KEY, limits=LIMITS)
    with running(server, decoder) as handle:
        yield handle


@pytest.fixture(scope="module")
def client(live: Running) -> Any:
    return openai.OpenAI(base_url=f"{live.url}/v1", api_key=KEY, max_retries=0, timeout=60)


def raw(live: Running, method: str, path: str, body: bytes | None = None,
        key: str | None = KEY) -> tuple[int, Any]:  # fmt: skip
    host, port = live.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    connection.request(method, path, body=body, headers=headers)
    response = connection.getresponse()
    data = response.read()
    connection.close()
    return response.status, json.loads(data) if data else None


def greedy_text(live: Running, ids: list[int], new_tokens: int) -> str:
    return live.tokenizer.decode(live.decoder.generate(np.array(ids), new_tokens))


def test_health_and_models(live: Running, client: Any) -> None:
    assert raw(live, "GET", "/health", key=None) == (200, {"status": "ok"})
    assert [m.id for m in client.models.list().data] == ["tiny-llama"]


def test_greedy_completion_equals_transformers_generate(live: Running, client: Any) -> None:
    prompt = "hello world, the quick"
    out = client.completions.create(model="tiny-llama", prompt=prompt, max_tokens=12,
                                    temperature=0)  # fmt: skip
    ids = live.tokenizer.encode(prompt)
    assert out.choices[0].text == greedy_text(live, ids, 12)
    assert out.choices[0].finish_reason == "length"
    assert out.usage.prompt_tokens == len(ids) and out.usage.completion_tokens == 12
    assert out.object == "text_completion" and out.model == "tiny-llama"


def test_chat_equals_transformers_generate_on_the_template(live: Running, client: Any) -> None:
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]
    out = client.chat.completions.create(model="tiny-llama", messages=messages, max_tokens=10,
                                         temperature=0)  # fmt: skip
    ids = live.tokenizer.encode_chat(messages)
    assert out.choices[0].message.content == greedy_text(live, ids, 10)
    assert out.choices[0].message.role == "assistant"
    assert out.usage.prompt_tokens == len(ids)


def test_streaming_adds_up_and_reports_usage(live: Running, client: Any) -> None:
    whole = client.completions.create(model="tiny-llama", prompt="tokens in", max_tokens=14,
                                      temperature=0)  # fmt: skip
    chunks = list(client.completions.create(model="tiny-llama", prompt="tokens in", max_tokens=14,
                  temperature=0, stream=True, stream_options={"include_usage": True}))  # fmt: skip
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole.choices[0].text
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 14
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"

    messages = [{"role": "user", "content": "shapes?"}]
    chat_whole = client.chat.completions.create(model="tiny-llama", messages=messages,
                                                max_tokens=9, temperature=0)  # fmt: skip
    parts = list(client.chat.completions.create(model="tiny-llama", messages=messages,
                 max_tokens=9, temperature=0, stream=True))  # fmt: skip
    assert parts[0].choices[0].delta.role == "assistant"
    assert (
        "".join(p.choices[0].delta.content or "" for p in parts)
        == chat_whole.choices[0].message.content
    )
    assert parts[-1].choices[0].finish_reason == "length"


def test_streaming_n_choices_with_logprobs(live: Running, client: Any) -> None:
    messages = [{"role": "user", "content": "hello"}]
    ask: dict[str, Any] = {"model": "tiny-llama", "messages": messages, "max_tokens": 7,
                           "temperature": 0.8, "seed": 5, "logprobs": True, "top_logprobs": 2}  # fmt: skip
    whole = client.chat.completions.create(n=2, **ask)
    parts = list(client.chat.completions.create(n=2, stream=True, **ask))
    for index in (0, 1):
        mine = [p.choices[0] for p in parts if p.choices and p.choices[0].index == index]
        assert "".join(c.delta.content or "" for c in mine) == whole.choices[index].message.content
        streamed = [e.logprob for c in mine if c.logprobs for e in c.logprobs.content]
        np.testing.assert_allclose(
            streamed, [e.logprob for e in whole.choices[index].logprobs.content]
        )
        assert mine[-1].finish_reason == "length"


def test_a_stalled_client_does_not_hold_the_engine(live: Running, client: Any) -> None:
    import socket

    host, port = live.url.removeprefix("http://").split(":")
    body = json.dumps({"model": "tiny-llama", "prompt": "hello", "max_tokens": 40, "stream": True})
    stalled = socket.create_connection((host, int(port)))
    stalled.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
                     f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode())  # fmt: skip
    try:  # the stalled client never reads; another request still completes
        out = client.completions.create(model="tiny-llama", prompt="tokens in", max_tokens=20,
                                        temperature=0)  # fmt: skip
        assert out.usage.completion_tokens == 20
    finally:
        stalled.close()


def test_stop_strings_are_never_returned_or_streamed(live: Running, client: Any) -> None:
    free = client.completions.create(model="tiny-llama", prompt="a typed", max_tokens=30,
                                     temperature=0).choices[0].text  # fmt: skip
    stop = free[len(free) // 2 : len(free) // 2 + 3]
    assert len(stop) == 3
    expected = free[: free.index(stop)]
    out = client.completions.create(model="tiny-llama", prompt="a typed", max_tokens=30,
                                    temperature=0, stop=[stop, "zzzz"])  # fmt: skip
    assert out.choices[0].text == expected and out.choices[0].finish_reason == "stop"
    streamed = list(client.completions.create(model="tiny-llama", prompt="a typed", max_tokens=30,
                    temperature=0, stop=stop, stream=True))  # fmt: skip
    assert "".join(c.choices[0].text for c in streamed) == expected
    assert streamed[-1].choices[0].finish_reason == "stop"


def test_n_seed_and_sampling(live: Running, client: Any) -> None:
    ask: dict[str, Any] = {"model": "tiny-llama", "prompt": "hello", "max_tokens": 10,
                           "temperature": 1.0, "top_p": 0.95, "extra_body": {"top_k": 40}}  # fmt: skip
    many = client.completions.create(n=3, seed=11, **ask)
    assert sorted(c.index for c in many.choices) == [0, 1, 2]
    assert many.usage.completion_tokens == 30
    again = client.completions.create(n=3, seed=11, **ask)
    assert [c.text for c in again.choices] == [c.text for c in many.choices]
    second = client.completions.create(n=1, seed=12, **ask)  # choice j is seeded seed + j
    assert second.choices[0].text == many.choices[1].text
    assert len({c.text for c in many.choices}) >= 2


def test_a_seeded_request_is_the_same_alone_and_among_15_concurrent(
    live: Running, client: Any
) -> None:
    ask: dict[str, Any] = {"model": "tiny-llama", "max_tokens": 16, "temperature": 0.9}
    alone = (
        client.completions.create(prompt="continuous batching", seed=1234, **ask).choices[0].text
    )
    results: dict[int, str] = {}

    def one(i: int) -> None:
        prompt = "continuous batching" if i == 0 else f"hello {'world ' * (i % 5)}{i}"
        out = client.completions.create(prompt=prompt, seed=1234 if i == 0 else i, **ask)
        results[i] = out.choices[0].text

    threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(results) == 16
    assert results[0] == alone


def test_logprobs_are_transformers_log_softmax(live: Running, client: Any) -> None:
    prompt = "hello linnet"
    out = client.completions.create(model="tiny-llama", prompt=prompt, max_tokens=5,
                                    temperature=0, logprobs=2)  # fmt: skip
    lp = out.choices[0].logprobs
    ids = live.tokenizer.encode(prompt)
    generated = live.decoder.generate(np.array(ids), 5)
    logits = torch.from_numpy(live.decoder.logits(np.array(ids + generated[:-1])))[len(ids) - 1 :]
    want = torch.log_softmax(logits, -1)
    np.testing.assert_allclose(lp.token_logprobs, [float(want[i, t]) for i, t in enumerate(generated)],
                               atol=1e-4)  # fmt: skip
    assert all(len(top) <= 2 for top in lp.top_logprobs)
    assert lp.tokens == [live.tokenizer.decode([t], skip_special_tokens=False) for t in generated]

    chat = client.chat.completions.create(model="tiny-llama", messages=[{"role": "user",
        "content": "hi"}], max_tokens=4, temperature=0, logprobs=True, top_logprobs=3)  # fmt: skip
    content = chat.choices[0].logprobs.content
    assert len(content) == 4 and all(len(c.top_logprobs) == 3 for c in content)
    assert all(c.top_logprobs[0].logprob >= c.logprob - 1e-6 for c in content)


def test_echo_prepends_the_prompt(live: Running, client: Any) -> None:
    plain = client.completions.create(model="tiny-llama", prompt="hello world", max_tokens=6,
                                      temperature=0)  # fmt: skip
    echoed = client.completions.create(model="tiny-llama", prompt="hello world", max_tokens=6,
                                       temperature=0, echo=True)  # fmt: skip
    assert echoed.choices[0].text == "hello world" + plain.choices[0].text


BAD_REQUESTS: list[tuple[str, dict[str, Any], str]] = [
    ("/v1/completions", {"temperature": 5}, "temperature"),
    ("/v1/completions", {"temperature": "hot"}, "temperature"),
    ("/v1/completions", {"top_p": 0}, "top_p"),
    ("/v1/completions", {"n": 0}, "n"),
    ("/v1/completions", {"n": 100}, "n"),
    ("/v1/completions", {"max_tokens": 0}, "max_tokens"),
    ("/v1/completions", {"max_tokens": 10_000}, "max_tokens"),
    ("/v1/completions", {"max_tokens": 40, "prompt": "hello " * 40}, "max_tokens"),
    ("/v1/completions", {"prompt": "hello " * 100}, "prompt"),
    ("/v1/completions", {"prompt": [5, 99999]}, "prompt"),
    ("/v1/completions", {"prompt": []}, "prompt"),
    ("/v1/completions", {"prompt": None}, "prompt"),
    ("/v1/completions", {"prompt": ["a"] * 40}, "prompt"),
    ("/v1/completions", {"logprobs": 50}, "logprobs"),
    ("/v1/completions", {"echo": True, "logprobs": 1}, "echo"),
    ("/v1/completions", {"stop": ["a"] * 10}, "stop"),
    ("/v1/completions", {"stop": [""]}, "stop"),
    ("/v1/completions", {"stop": "x" * 500}, "stop"),
    ("/v1/completions", {"seed": "x"}, "seed"),
    ("/v1/completions", {"stream": "yes"}, "stream"),
    ("/v1/completions", {"stream_options": {"include_usage": True}}, "stream_options"),
    ("/v1/completions", {"presence_penalty": 1.0}, "presence_penalty"),
    ("/v1/completions", {"model": None}, "model"),
    ("/v1/chat/completions", {"messages": []}, "messages"),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "wizard", "content": "x"}]},
        "messages[0].role",
    ),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ("/v1/chat/completions", {"messages": "hi"}, "messages"),
    ("/v1/chat/completions", {"top_logprobs": 2}, "top_logprobs"),
    ("/v1/chat/completions", {"logprobs": True, "top_logprobs": 99}, "top_logprobs"),
    ("/v1/chat/completions", {"max_completion_tokens": -1}, "max_completion_tokens"),
]


@pytest.mark.parametrize(("path", "change", "param"), BAD_REQUESTS)
def test_bad_requests_are_400_in_openais_shape(live: Running, path: str, change: dict[str, Any],
                                               param: str) -> None:  # fmt: skip
    body: dict[str, Any] = {"model": "tiny-llama", "max_tokens": 4}
    body |= {"prompt": "hello"} if path.endswith("/completions") and "chat" not in path else {
        "messages": [{"role": "user", "content": "hello"}]}  # fmt: skip
    body |= change
    status, data = raw(live, "POST", path, json.dumps(body).encode())
    assert status == 400, data
    assert set(data["error"]) == {"message", "type", "param", "code"}
    assert data["error"]["type"] == "invalid_request_error" and data["error"]["param"] == param


def test_malformed_and_oversized_bodies_are_400(live: Running, client: Any) -> None:
    for body in (b"{not json", b"[1, 2]", b"\xff\xfe", json.dumps({"model": "tiny-llama",
                 "prompt": "x" * 30_000}).encode()):  # fmt: skip
        status, data = raw(live, "POST", "/v1/completions", body)
        assert status == 400 and data["error"]["type"] == "invalid_request_error", data
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="tiny-llama", prompt="x", max_tokens=4, n=9)
    assert caught.value.status_code == 400


def test_unknown_model_and_route_are_404(live: Running, client: Any) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client.completions.create(model="gpt-5", prompt="x", max_tokens=2)
    assert caught.value.body["code"] == "model_not_found"
    status, data = raw(live, "GET", "/v1/nothing")
    assert status == 404 and data["error"]["type"] == "not_found_error"


def test_api_key_missing_wrong_and_right(live: Running) -> None:
    for key in (None, "wrong", KEY + "x", ""):
        wrong = openai.OpenAI(base_url=f"{live.url}/v1", api_key=key or "none", max_retries=0)
        if key is None:
            status, data = raw(live, "GET", "/v1/models", key=None)
            assert status == 401 and data["error"]["code"] == "invalid_api_key"
            continue
        with pytest.raises(openai.AuthenticationError):
            wrong.models.list()
    status, _ = raw(live, "POST", "/v1/completions", b"{}", key="wrong")
    assert status == 401  # checked before the body is read
    status, _ = raw(live, "GET", "/v1/models", key=KEY)
    assert status == 200


def test_a_disconnected_stream_frees_its_row(
    live: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = live.server.engine
    cancelled = engine.stats.cancelled
    # Each decode step takes at least 50 ms, so the 48 tokens cannot all be generated
    # before the server sees the disconnect, however fast or loaded the machine is.
    for name in ("decode", "decode_slots"):
        step = getattr(engine.decoder, name)

        def slowed(*inputs: Any, step: Any = step) -> Any:
            time.sleep(0.05)
            return step(*inputs)

        monkeypatch.setattr(engine.decoder, name, slowed)
    host, port = live.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    body = {"model": "tiny-llama", "prompt": "hello", "max_tokens": 48, "stream": True}
    connection.request("POST", "/v1/completions", body=json.dumps(body),
                       headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})  # fmt: skip
    response = connection.getresponse()
    assert response.status == 200
    assert response.read(7) == b"data: {"  # the first event has come
    connection.close()
    deadline = time.monotonic() + 30
    while engine.stats.cancelled == cancelled and time.monotonic() < deadline:
        time.sleep(0.05)
    assert engine.stats.cancelled == cancelled + 1
    assert engine.active_rows == 0


def test_a_failed_engine_turns_health_to_500(tmp_path: Path) -> None:
    server, decoder = make_server(tmp_path)

    def broken(*inputs: Any) -> Any:
        raise RuntimeError("device lost")

    server.engine.decoder.decode = broken  # type: ignore[method-assign]
    server.engine.decoder.decode_slots = broken  # type: ignore[method-assign]
    with running(server, decoder) as live:
        client = openai.OpenAI(base_url=f"{live.url}/v1", api_key="none", max_retries=0)
        with pytest.raises(openai.InternalServerError):
            client.completions.create(model="tiny-llama", prompt="hello", max_tokens=4)
        status, data = raw(live, "GET", "/health", key=None)
        assert status == 500 and "device lost" in data["error"]
        with pytest.raises(openai.InternalServerError):
            client.completions.create(model="tiny-llama", prompt="hello", max_tokens=4)
