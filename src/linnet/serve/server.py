"""The OpenAI-compatible HTTP server: `/v1/completions`, `/v1/chat/completions`, streaming.

Stage: the outermost layer of `linnet.serve` (issue 14), on FastAPI and uvicorn.
`create_app(engine, tokenizer, ...)` builds the ASGI app; `serve(...)` runs it;
`background(server)` runs it on a thread of this process for a `with` block (the
demo, the benchmark and the tests).

Routes: `GET /health` (200, or 500 once the engine has failed), `GET /v1/models`,
`POST /v1/completions`, `POST /v1/chat/completions`, the last two also as
server-sent events (`stream: true`, with `stream_options.include_usage`).
Requests are parsed and bounded by `linnet.serve.protocol` (400 in OpenAI's
error shape; 404 for an unknown model or route). Safe by default: the CLI binds
127.0.0.1; with an API key every `/v1` route requires `Authorization: Bearer
KEY`, compared in constant time (401 otherwise); bodies are read up to
`Limits.max_body_bytes` and refused past it.

Each choice is one engine request. Its tokens become text through a
`TextStream` (never half a character), and stop strings are applied to the
text: a piece that could begin a stop string is held back until it is known
not to (`stops.split_stop`), so no stream ever shows text past a stop. A client
that disconnects, streaming or not, has its requests cancelled and their rows freed.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import socket
import threading
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI
from fastapi import Request as HttpRequest
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from linnet.errors import LinnetError
from linnet.serve.engine import Engine
from linnet.serve.protocol import ApiError, Job, Limits, parse_body, parse_job
from linnet.serve.requests import Request, TokenEvent, TokenLogprob
from linnet.serve.stops import split_stop
from linnet.serve.tokenizer import TextStream, Tokenizer
from linnet.serve.worker import EngineWorker, Ticket

_MASK = (1 << 64) - 1


@dataclass
class _Failure:
    error: BaseException


@dataclass
class ChoiceText:
    """One choice's text so far: what the stream released, what it holds back."""

    index: int
    stream: TextStream
    stops: Sequence[str]
    released: str = ""
    pending: str = ""
    tokens: int = 0
    entries: list[tuple[TokenLogprob, int]] = field(default_factory=list)
    sent_entries: int = 0
    finish_reason: str | None = None
    ticket: Ticket | None = None

    def feed(self, event: TokenEvent) -> tuple[str, list[tuple[TokenLogprob, int]]]:
        """The text and log-prob entries `event` releases; sets `finish_reason` at the end."""
        if self.finish_reason is not None:
            return "", []
        for i, token in enumerate(event.tokens):
            offset = len(self.released) + len(self.pending)
            self.pending += self.stream.push([token])
            self.tokens += 1
            if i < len(event.logprobs):
                self.entries.append((event.logprobs[i], offset))
        if event.finished:
            self.pending += self.stream.flush()
        cut, stopped = split_stop(self.pending, self.stops)
        if stopped:
            self.finish_reason = "stop"
        elif event.finished:
            cut = len(self.pending)
            self.finish_reason = event.finish_reason or "stop"
        text, self.pending = self.pending[:cut], self.pending[cut:]
        self.released += text
        limit = len(self.released)
        ready = [
            e
            for e in self.entries[self.sent_entries :]
            if e[1] < limit or (event.finished and not stopped)
        ]
        self.sent_entries += len(ready)
        return text, ready


class Server:
    """The app's state: the engine worker, the tokenizer, the served name and limits."""

    def __init__(
        self,
        engine: Engine,
        tokenizer: Tokenizer,
        *,
        model_name: str = "linnet",
        api_key: str | None = None,
        limits: Limits | None = None,
        eos: Sequence[int] | None = None,
    ) -> None:
        """`eos`: the token ids that end a request; None takes the engine's, or else the
        tokenizer's eos token."""
        self.engine = engine
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.api_key = api_key
        self.limits = limits or Limits()
        self.worker = EngineWorker(engine)
        self.created = int(time.time())
        if eos is not None:
            engine.eos = frozenset(int(t) for t in eos)
        elif not engine.eos:
            engine.eos = tokenizer.eos_ids

    # -- the pieces every route uses ---------------------------------------------------------

    def authorized(self, request: HttpRequest) -> bool:
        if self.api_key is None:
            return True
        header = request.headers.get("authorization", "")
        scheme, _, key = header.partition(" ")
        given = key.strip().encode() if scheme.lower() == "bearer" else b""
        return hmac.compare_digest(given, self.api_key.encode())

    async def read_body(self, request: HttpRequest) -> bytes:
        limit = self.limits.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise ApiError(f"the request body exceeds {limit} bytes", code="request_too_large")
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise ApiError(f"the request body exceeds {limit} bytes", code="request_too_large")
        return bytes(body)

    def start_choices(self, job: Job, sink: asyncio.Queue[Any]) -> list[ChoiceText]:
        loop = asyncio.get_running_loop()
        choices: list[ChoiceText] = []
        for p, prompt in enumerate(job.prompts):
            for j in range(job.n):
                index = p * job.n + j
                choice = ChoiceText(index, self.tokenizer.stream(prompt), job.stop)
                choices.append(choice)

                def on_token(event: TokenEvent, index: int = index) -> None:
                    loop.call_soon_threadsafe(sink.put_nowait, (index, event))

                def on_failure(error: BaseException, index: int = index) -> None:
                    loop.call_soon_threadsafe(sink.put_nowait, (index, _Failure(error)))

                seed = None if job.seed is None else (job.seed + j) & _MASK
                request = Request(
                    prompt,
                    max_new_tokens=job.max_tokens,
                    temperature=job.temperature,
                    top_k=job.top_k,
                    top_p=job.top_p,
                    seed=seed,
                    logprobs=job.logprobs,
                    on_token=on_token,
                )
                choice.ticket = self.worker.submit(request, on_failure)
        return choices

    def close(self, choices: Sequence[ChoiceText]) -> None:
        for choice in choices:
            if choice.ticket is not None:
                self.worker.cancel(choice.ticket)

    # -- response bodies ---------------------------------------------------------------------

    def token_text(self, token: int) -> str:
        return self.tokenizer.decode([token], skip_special_tokens=False)

    def logprobs_body(
        self, job: Job, entries: Sequence[tuple[TokenLogprob, int]], base: int
    ) -> Any:
        if job.logprobs is None:
            return None
        if job.chat:

            def item(token: int, logprob: float) -> dict[str, Any]:
                text = self.token_text(token)
                return {"token": text, "logprob": logprob, "bytes": list(text.encode())}

            return {"content": [item(e.token, e.logprob) | {"top_logprobs": [item(t, v) for t, v in e.top]}
                                for e, _ in entries]}  # fmt: skip
        return {
            "tokens": [self.token_text(e.token) for e, _ in entries],
            "token_logprobs": [e.logprob for e, _ in entries],
            "top_logprobs": [{self.token_text(t): v for t, v in e.top} for e, _ in entries],
            "text_offset": [base + offset for _, offset in entries],
        }

    def usage(self, job: Job, choices: Sequence[ChoiceText]) -> dict[str, int]:
        prompt = sum(len(p) for p in job.prompts)
        completion = sum(c.tokens for c in choices)
        return {"prompt_tokens": prompt, "completion_tokens": completion,
                "total_tokens": prompt + completion}  # fmt: skip

    def chunk(
        self, job: Job, ident: str, created: int, choices: list[Any], usage: Any = None
    ) -> str:
        body = {
            "id": ident,
            "object": "chat.completion.chunk" if job.chat else "text_completion",
            "created": created,
            "model": job.model,
            "choices": choices,
        }
        if job.include_usage:
            body["usage"] = usage
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"


class _EventStream(StreamingResponse):
    """A streamed response that closes its event generator however the response ends.

    When a client disconnects, Starlette cancels the task sending the stream where it
    waits: usually inside the generator (waiting for the next token), whose `finally`
    cancels the engine requests; but a send that waits (a client's full socket buffer)
    leaves the generator suspended at a `yield`, and its `finally` would run only once
    the generator is garbage collected. Closing it here runs that `finally` (which
    never waits) as soon as the response ends. (Behind `BaseHTTPMiddleware`, which
    `_RequireKey` replaced, every send waited on a channel: with the collector off,
    10 of 192 cut-short streams then ran their 2000 tokens to the end.)"""

    def __init__(self, events: AsyncGenerator[str, None]) -> None:
        super().__init__(events, media_type="text/event-stream")
        self.events = events

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.events.aclose()


class _RequireKey:
    """Answers a `/v1` request without the server's API key with a 401 before any route
    runs. Plain ASGI rather than `@app.middleware("http")`, whose `BaseHTTPMiddleware`
    runs each route in a task of its own and passes every streamed chunk through a
    channel to the client's: two more task switches per token, and a stream cancelled
    in the inner task after its client has gone."""

    def __init__(self, app: ASGIApp, server: Server) -> None:
        self.app = app
        self.server = server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["path"].startswith("/v1")
            and not self.server.authorized(HttpRequest(scope))
        ):
            body = {"error": {"message": "Incorrect or missing API key: send Authorization: "
                              "Bearer KEY", "type": "invalid_request_error", "param": None,
                              "code": "invalid_api_key"}}  # fmt: skip
            await JSONResponse(body, status_code=401)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _error(error: ApiError) -> JSONResponse:
    return JSONResponse(error.body, status_code=error.status)


def _server_error(error: BaseException) -> JSONResponse:
    message = f"the engine failed: {type(error).__name__}: {error}"
    return JSONResponse({"error": {"message": message, "type": "server_error", "param": None,
                                   "code": None}}, status_code=500)  # fmt: skip


def create_app(server: Server) -> FastAPI:
    """The ASGI app of `server` (its engine worker starts and stops with the app)."""
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        server.worker.start()
        yield
        server.worker.stop()

    app = FastAPI(title="linnet.serve", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)  # fmt: skip

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: HttpRequest, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        message = f"{request.method} {request.url.path}: {exc.detail}"
        return JSONResponse({"error": {"message": message, "type": kind, "param": None,
                                       "code": None}}, status_code=exc.status_code)  # fmt: skip

    app.add_middleware(_RequireKey, server=server)

    @app.get("/health")
    async def health() -> JSONResponse:
        failed = server.worker.failed
        if failed is not None:
            return JSONResponse({"status": "error", "error": f"{type(failed).__name__}: {failed}"},
                                status_code=500)  # fmt: skip
        return JSONResponse({"status": "ok"})

    @app.get("/v1/models")
    async def models() -> JSONResponse:
        entry = {"id": server.model_name, "object": "model", "created": server.created,
                 "owned_by": "linnet"}  # fmt: skip
        return JSONResponse({"object": "list", "data": [entry]})

    async def generate(request: HttpRequest, chat: bool) -> Any:
        try:
            data = parse_body(await server.read_body(request))
            job = parse_job(data, chat=chat, model=server.model_name, tokenizer=server.tokenizer,
                            limits=server.limits, max_seq=server.engine.max_seq)  # fmt: skip
        except ApiError as error:
            return _error(error)
        if server.worker.failed is not None:
            return _server_error(server.worker.failed)
        prefix = "chatcmpl" if chat else "cmpl"
        ident = f"{prefix}-{uuid.uuid4().hex}"
        created = int(time.time())
        if job.stream:
            return _EventStream(stream(job, ident, created))
        return await complete(request, job, ident, created)

    async def complete(request: HttpRequest, job: Job, ident: str, created: int) -> JSONResponse:
        sink: asyncio.Queue[Any] = asyncio.Queue()
        choices = server.start_choices(job, sink)
        texts = {c.index: "" for c in choices}
        entries: dict[int, list[tuple[TokenLogprob, int]]] = {c.index: [] for c in choices}
        try:
            while any(c.finish_reason is None for c in choices):
                try:
                    index, event = await asyncio.wait_for(sink.get(), timeout=0.5)
                except TimeoutError:
                    if await request.is_disconnected():
                        return JSONResponse({}, status_code=499)
                    continue
                if isinstance(event, _Failure):
                    return _server_error(event.error)
                choice = choices[index]
                text, ready = choice.feed(event)
                texts[index] += text
                entries[index] += ready
                if choice.finish_reason is not None and not event.finished and choice.ticket:
                    server.worker.cancel(choice.ticket)
        finally:
            server.close([c for c in choices if c.finish_reason is None])
        body_choices = []
        for c in choices:
            prompt_text = job.prompt_texts[c.index // job.n]
            text = (prompt_text if job.echo else "") + texts[c.index]
            logprobs = server.logprobs_body(job, entries[c.index], 0)
            if job.chat:
                body_choices.append({"index": c.index, "message": {"role": "assistant",
                                     "content": text}, "logprobs": logprobs,
                                     "finish_reason": c.finish_reason})  # fmt: skip
            else:
                body_choices.append({"index": c.index, "text": text, "logprobs": logprobs,
                                     "finish_reason": c.finish_reason})  # fmt: skip
        return JSONResponse({
            "id": ident,
            "object": "chat.completion" if job.chat else "text_completion",
            "created": created,
            "model": job.model,
            "choices": body_choices,
            "usage": server.usage(job, choices),
        })  # fmt: skip

    async def stream(job: Job, ident: str, created: int) -> AsyncGenerator[str, None]:
        sink: asyncio.Queue[Any] = asyncio.Queue()
        choices = server.start_choices(job, sink)
        try:
            if job.chat:
                first = [{"index": c.index, "delta": {"role": "assistant", "content": ""},
                          "logprobs": None, "finish_reason": None} for c in choices]  # fmt: skip
                yield server.chunk(job, ident, created, first)
            elif job.echo:
                echoed = [{"index": c.index, "text": job.prompt_texts[c.index // job.n],
                           "logprobs": None, "finish_reason": None} for c in choices]  # fmt: skip
                yield server.chunk(job, ident, created, echoed)
            while any(c.finish_reason is None for c in choices):
                index, event = await sink.get()
                if isinstance(event, _Failure):
                    message = f"the engine failed: {type(event.error).__name__}: {event.error}"
                    body = {"error": {"message": message, "type": "server_error", "param": None,
                                      "code": None}}  # fmt: skip
                    yield f"data: {json.dumps(body)}\n\n"
                    return
                choice = choices[index]
                text, ready = choice.feed(event)
                if choice.finish_reason is not None and not event.finished and choice.ticket:
                    server.worker.cancel(choice.ticket)
                if not text and not ready and choice.finish_reason is None:
                    continue
                logprobs = server.logprobs_body(job, ready, 0) if ready else None
                if job.chat:
                    delta = {"content": text} if text else {}
                    part = {"index": index, "delta": delta, "logprobs": logprobs,
                            "finish_reason": choice.finish_reason}  # fmt: skip
                else:
                    part = {"index": index, "text": text, "logprobs": logprobs,
                            "finish_reason": choice.finish_reason}  # fmt: skip
                yield server.chunk(job, ident, created, [part])
            if job.include_usage:
                yield server.chunk(job, ident, created, [], server.usage(job, choices))
            yield "data: [DONE]\n\n"
        finally:
            server.close([c for c in choices if c.finish_reason is None])

    @app.post("/v1/completions")
    async def completions(request: HttpRequest) -> Any:
        return await generate(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: HttpRequest) -> Any:
        return await generate(request, chat=True)

    return app


def serve(
    server: Server, *, host: str = "127.0.0.1", port: int = 8000, sockets: Any = None
) -> None:
    """Run the app with uvicorn until interrupted (`sockets`: already bound ones)."""
    import uvicorn

    config = uvicorn.Config(create_app(server), host=host, port=port, log_level="warning",
                            timeout_keep_alive=5)  # fmt: skip
    uvicorn.Server(config).run(sockets=sockets)


@contextlib.contextmanager
def background(
    server: Server, *, host: str = "127.0.0.1", port: int = 0, timeout: float = 30.0
) -> Iterator[str]:
    """Serve `server` with uvicorn on a thread of this process while the block runs; yields
    the base URL (`http://127.0.0.1:PORT`). The socket is bound before uvicorn starts
    (`port=0`: a free port), and the server and its engine worker stop at the end."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound = sock.getsockname()[1]
    # log_config=None: uvicorn's own logging set-up goes through `logging.config.dictConfig`,
    # which closes every handler the host process has (absl's, a test runner's); embedded,
    # the host's logging is left as it is and only uvicorn's loggers get the level.
    config = uvicorn.Config(
        create_app(server), log_config=None, log_level="warning", timeout_keep_alive=5
    )
    instance = uvicorn.Server(config)
    thread = threading.Thread(target=instance.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + timeout
        while not instance.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise LinnetError(f"the server on {host}:{bound} did not start")
            time.sleep(0.02)
        yield f"http://{host}:{bound}"
    finally:
        instance.should_exit = True
        thread.join(timeout=timeout)
        sock.close()
