"""A bounded load test of the server on 127.0.0.1: 64 concurrent streams, a quarter cut short.

64 clients stream greedy completions of mixed prompt lengths and token budgets
from one server (16 cache rows, so requests queue and rows are reused); every
fourth client disconnects after its first event. Checked: every remaining stream
is well formed (each event a JSON chunk, one finish reason, `[DONE]` last) and its
text equals the same request answered alone afterwards (so the disconnects and
the batching changed nothing); every cut-short request was cancelled and no row
is left busy, with Python's garbage collector off while the clients run, so a
disconnect's cleanup cannot wait for a collection (it once did, behind Starlette's
`BaseHTTPMiddleware`: about one run in ten had a cut-short request run its `LONG`
tokens to the end, uncancelled). It stops by itself (each client has a timeout). The TTFT p50/p99
and aggregate tokens/s are printed (run with `-s` to see them); they are not
asserted, since timings depend on the machine.
"""

from __future__ import annotations

import gc
import statistics
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("torch")
pytest.importorskip("transformers")

from server_cases import Running, make_server, running  # noqa: E402

CLIENTS = 64
PROMPTS = ["hello", "the quick brown fox jumps", "a typed tensor language with checked shapes",
           "tokens in", "continuous batching over the cache rows of a decoder, hello world",
           "shapes", "hello linnet, hello tensors", "text in, text out"]  # fmt: skip
MAX_SEQ = 2048
LONG = 2000
"""A cut-short request's budget. At 240 tokens (with 256 cache positions) such a request
sometimes ran to its end before the server saw its client's disconnect (the tiny model
decodes a step in milliseconds), and was then not cancelled: a disconnect has to be seen
within LONG steps of the client's first event, never within a fraction of a second."""


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    server, decoder = make_server(tmp_path_factory.mktemp("load"), rows=16, max_seq=MAX_SEQ)
    server.engine.warmup(prompt_lengths=[len(server.tokenizer.encode(p)) for p in PROMPTS])
    with running(server, decoder) as handle:
        yield handle


def ask(i: int) -> dict[str, Any]:
    """Client `i`'s request; every fourth (those that disconnect) asks for `LONG` tokens, so
    that it is still running when the server sees its client go away."""
    if i % 4 == 3:
        return {"model": "tiny-llama", "prompt": "hello", "max_tokens": LONG, "temperature": 0}
    return {"model": "tiny-llama", "prompt": PROMPTS[i % len(PROMPTS)],
            "max_tokens": 8 + (i * 7) % 23, "temperature": 0}  # fmt: skip


@pytest.mark.slow
def test_64_concurrent_streams_with_a_quarter_disconnecting(live: Running) -> None:
    results: dict[int, dict[str, Any]] = {}
    errors: list[BaseException] = []

    def client_run(i: int) -> None:
        client = openai.OpenAI(base_url=f"{live.url}/v1", api_key="none", max_retries=0,
                               timeout=120)  # fmt: skip
        start = time.perf_counter()
        first: float | None = None
        texts: list[str] = []
        reasons: list[str] = []
        try:
            stream = client.completions.create(stream=True, stream_options={"include_usage": True},
                                               **ask(i))  # fmt: skip
            usage = None
            for events, chunk in enumerate(stream, start=1):
                if chunk.usage is not None:
                    usage = chunk.usage
                for choice in chunk.choices:
                    if choice.text and first is None:
                        first = time.perf_counter()
                    texts.append(choice.text)
                    if choice.finish_reason is not None:
                        reasons.append(choice.finish_reason)
                if i % 4 == 3 and events == 1:
                    stream.close()
                    break
            results[i] = {"text": "".join(texts), "reasons": reasons, "usage": usage,
                          "ttft": None if first is None else first - start}  # fmt: skip
        except BaseException as exc:
            errors.append(exc)
        finally:
            client.close()

    engine = live.server.engine
    before = engine.stats.generated_tokens
    start = time.perf_counter()
    threads = [threading.Thread(target=client_run, args=(i,)) for i in range(CLIENTS)]
    gc.disable()
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        wall = time.perf_counter() - start
        deadline = time.monotonic() + 30
        while engine.active_rows and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        gc.enable()
    assert not errors, errors
    assert len(results) == CLIENTS
    assert engine.active_rows == 0
    assert engine.stats.cancelled == CLIENTS // 4
    generated = engine.stats.generated_tokens - before
    calls = (engine.stats.decode_calls, engine.stats.prefill_calls)

    client = openai.OpenAI(base_url=f"{live.url}/v1", api_key="none", max_retries=0)
    alone: dict[tuple[str, int], str] = {}
    for i in range(CLIENTS):
        if i % 4 == 3:
            continue
        key = (ask(i)["prompt"], ask(i)["max_tokens"])
        if key not in alone:
            alone[key] = client.completions.create(**ask(i)).choices[0].text
        result = results[i]
        assert result["reasons"] == ["length"], (i, result)
        assert result["usage"].completion_tokens == ask(i)["max_tokens"]
        assert result["text"] == alone[key], i

    ttfts = sorted(r["ttft"] for r in results.values() if r["ttft"] is not None)
    p50 = statistics.median(ttfts)
    p99 = ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))]
    print(f"\nload: {CLIENTS} streams ({CLIENTS // 4} disconnected), {generated} tokens in "
          f"{wall:.2f} s = {generated / wall:.0f} tokens/s; TTFT p50 {p50 * 1000:.0f} ms, "
          f"p99 {p99 * 1000:.0f} ms; {calls[0]} decode calls, {calls[1]} prefills")  # fmt: skip
